// Strict JSON reading for plans and profiles (json_read.hpp).

#include "json_read.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <vector>

#include "numeq/core/plan.hpp"

namespace numeq::core::detail {

namespace {

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace

json parse_json(std::string_view text, const std::string& parameter) {
  // The parser itself keeps its own stack (no recursion); the callback sees every object and
  // array open and close and every key, so depth and repeated keys are refused while parsing,
  // before anything recursive walks the document.
  std::vector<std::set<std::string>> open;  // the keys seen so far in each open object (arrays: empty)
  const json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        open.emplace_back();
        if (open.size() > max_json_depth)
          throw numeq::error(parameter + ": JSON nested deeper than " + std::to_string(max_json_depth) +
                             " levels (objects and arrays), numeq's limit for plans and profiles; write explicit "
                             "trees as a group's \"tree\" text");
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open.empty() && !open.back().insert(parsed.get<std::string>()).second)
          throw numeq::error(parameter + ": key '" + parsed.get<std::string>() +
                             "' appears twice in one object (JSON readers keep either one; numeq refuses to guess)");
        break;
      case json::parse_event_t::value: break;
    }
    return true;
  };
  try {
    return json::parse(text, check);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number beyond binary64 ("1e999"): both bad input.
    throw numeq::error(parameter + ": not valid JSON: " + e.what());
  }
}

void Reader::fail(const std::string& what) const { throw numeq::error(path + ": " + what); }

Reader Reader::at(std::string_view key) const {
  if (!j.is_object()) fail("expected an object");
  const auto it = j.find(std::string(key));
  if (it == j.end()) throw numeq::error(path + "." + std::string(key) + ": missing");
  return {*it, path + "." + std::string(key)};
}

bool Reader::has(std::string_view key) const { return j.is_object() && j.contains(std::string(key)); }

Reader Reader::item(std::size_t i) const {
  if (!j.is_array()) fail("expected an array");
  return {j.at(i), path + "[" + std::to_string(i) + "]"};
}

void Reader::only(std::span<const std::string_view> keys) const {
  if (!j.is_object()) fail("expected an object");
  for (const auto& [key, value] : j.items())
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      throw numeq::error(path + "." + key + ": unknown key '" + key + "' in " + path + "; valid keys here: " +
                         join(keys));
}

std::string Reader::text() const {
  if (!j.is_string()) fail("expected a string");
  return j.get<std::string>();
}

std::uint64_t Reader::count(std::uint64_t lo, std::uint64_t hi) const {
  // Sizes without a limit of their own read as "a positive integer" (size_t holds any JSON one).
  const bool unbounded = hi == std::numeric_limits<std::size_t>::max() && lo <= 1;
  const std::string range = unbounded ? (lo == 1 ? "expected a positive integer" : "expected a non-negative integer")
                                      : "expected an integer in " + std::to_string(lo) + " .. " + std::to_string(hi);
  if (!j.is_number_integer()) fail(range);
  if (j.is_number_unsigned()) {
    const std::uint64_t v = j.get<std::uint64_t>();
    if (v < lo || v > hi) fail(range + ", got " + std::to_string(v));
    return v;
  }
  const std::int64_t v = j.get<std::int64_t>();
  if (v < 0 || static_cast<std::uint64_t>(v) < lo || static_cast<std::uint64_t>(v) > hi)
    fail(range + ", got " + std::to_string(v));
  return static_cast<std::uint64_t>(v);
}

std::int64_t Reader::integer(std::int64_t lo, std::int64_t hi) const {
  const std::string range = "expected an integer in " + std::to_string(lo) + " .. " + std::to_string(hi);
  if (!j.is_number_integer()) fail(range);
  if (j.is_number_unsigned()) {
    const std::uint64_t v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        static_cast<std::int64_t>(v) < lo || static_cast<std::int64_t>(v) > hi)
      fail(range + ", got " + std::to_string(v));
    return static_cast<std::int64_t>(v);
  }
  const std::int64_t v = j.get<std::int64_t>();
  if (v < lo || v > hi) fail(range + ", got " + std::to_string(v));
  return v;
}

bool Reader::boolean() const {
  if (!j.is_boolean()) fail("expected true or false");
  return j.get<bool>();
}

double Reader::number() const {
  if (!j.is_number()) fail("expected a number");
  return j.get<double>();
}

}  // namespace numeq::core::detail
