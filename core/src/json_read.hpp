#pragma once
// Reading plan and profile JSON strictly (plan_json.cpp, platform.cpp): every error names the
// field by its path. Nothing is coerced: an unknown or repeated key, a number out of its field's
// range (never cut to 32 bits), a float where an integer belongs, nesting deeper than
// max_json_depth (plan.hpp) are all refused, so a typo never falls back to a default.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "numeq/formats/error.hpp"

namespace numeq::core::detail {

using nlohmann::json;

// The JSON document in text; numeq::error naming `parameter` when it is not valid JSON, nests
// deeper than max_json_depth, or repeats a key within one object.
json parse_json(std::string_view text, const std::string& parameter);

// A JSON value and its path ("plan.reduction.children[1]").
struct Reader {
  const json& j;
  std::string path;

  [[noreturn]] void fail(const std::string& what) const;
  // The member `key` (numeq::error "<path>.<key>: missing" without it).
  Reader at(std::string_view key) const;
  bool has(std::string_view key) const;
  // Element i of an array.
  Reader item(std::size_t i) const;
  // An object whose keys are all among `keys`; an error names the first other key, its path and
  // the valid keys.
  void only(std::span<const std::string_view> keys) const;
  void only(std::initializer_list<std::string_view> keys) const {
    only(std::span<const std::string_view>(keys.begin(), keys.size()));
  }
  std::string text() const;
  // An integer (JSON number without fraction or exponent) in [lo, hi]; the error names the range.
  std::uint64_t count(std::uint64_t lo, std::uint64_t hi) const;
  std::int64_t integer(std::int64_t lo, std::int64_t hi) const;
  bool boolean() const;
  double number() const;
  // A name checked by a formats parser (which lists the valid choices): its error, re-rooted here.
  template <class F>
  auto named(F&& parse) const {
    const std::string s = text();
    try {
      return parse(s);
    } catch (const numeq::error& e) {
      std::string message = e.what();
      const auto colon = message.find(": ");
      fail(colon == std::string::npos ? message : message.substr(colon + 2));
    }
  }
};

}  // namespace numeq::core::detail
