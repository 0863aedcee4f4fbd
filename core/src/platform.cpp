// Platforms: built-ins, the registry, JSON, split-K.

#include "numeq/core/platform.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>

#include "builtin_platforms.hpp"
#include "json_read.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::core {

namespace {

using detail::json;
using detail::Reader;

// numeq::reference::Function's names, in its order (references/functions.hpp).
constexpr std::array<std::string_view, 23> kFunctionNames{
    "exp",     "exp2",         "log",     "tanh",    "sigmoid",        "gelu",   "gelu_tanh", "silu",
    "softplus", "sqrt",        "rsqrt",   "reciprocal", "erf",         "erf_dx", "sin",       "cos",
    "tan",     "atan",         "mish",    "gelu_sigmoid", "gelu_dx",   "silu_dx", "gelu_sigmoid_dx"};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::vector<Platform>& registry() {
  static std::vector<Platform> platforms = builtin_platforms();
  return platforms;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw numeq::error(path + ": " + what); }

}  // namespace

std::span<const std::string_view> function_model_names() { return kFunctionNames; }

namespace {

std::string function_names_list() {
  std::string out;
  for (std::string_view n : kFunctionNames) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

// The checks every function model passes, wherever it comes from (built-in, JSON, register).
void check_function_model(const FunctionModel& m, const std::string& at) {
  if (std::find(kFunctionNames.begin(), kFunctionNames.end(), m.function) == kFunctionNames.end())
    fail(at + ".function", "unknown function '" + m.function + "'; valid: " + function_names_list());
  const Format& compute = format_by_name(m.compute, at + ".compute");
  if (compute.is_integer()) fail(at + ".compute", "must be a floating format, not " + m.compute);
  if (!std::isfinite(m.ulps) || m.ulps < 0) fail(at + ".ulps", "must be finite and >= 0");
  if (m.kind == FunctionModelKind::correctly_rounded && m.ulps != 0)
    fail(at + ".ulps", "must be 0 for a correctly_rounded model (use ulp_budget)");
}

void check_function_models(const std::vector<FunctionModel>& models, const std::string& path) {
  for (std::size_t i = 0; i < models.size(); ++i) {
    const std::string at = path + ".functions[" + std::to_string(i) + "]";
    check_function_model(models[i], at);
    for (std::size_t k = 0; k < i; ++k)
      if (models[k].function == models[i].function)
        fail(at + ".function", "'" + models[i].function + "' is modelled twice (also functions[" + std::to_string(k) + "])");
  }
}

}  // namespace

FunctionModel function_model(const Platform& platform, std::string_view function, std::string_view parameter) {
  if (std::find(kFunctionNames.begin(), kFunctionNames.end(), function) == kFunctionNames.end())
    throw numeq::error(std::string(parameter) + ": unknown function '" + std::string(function) +
                       "'; valid: " + function_names_list());
  for (const FunctionModel& m : platform.functions)
    if (m.function == function) return m;
  FunctionModel m;
  m.function = std::string(function);
  m.source = "no model listed for " + platform.name + ": taken as correctly rounded in fp32";
  return m;
}

Operation operation_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<Operation>, name, parameter, "operation");
}

std::vector<std::string> platform_names() {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> names;
  for (const Platform& p : registry()) names.push_back(p.name);
  return names;
}

namespace {

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

// "base[a=x, b=y]" -> base and the choices, in order. Strict: every item is assumption=value,
// no assumption twice, no empty item (a trailing comma), no bracket inside.
std::pair<std::string, AssumptionChoices> parse_variant(std::string_view name, std::string_view parameter) {
  const auto open = name.find('[');
  if (open == std::string_view::npos) return {std::string(name), {}};
  const std::string where = std::string(parameter) + ": ";
  if (name.back() != ']')
    throw numeq::error(where + "'" + std::string(name) + "' opens '[' but does not end with ']'; write name[assumption=value,...]");
  const std::string base = trim(name.substr(0, open));
  std::string_view body = name.substr(open + 1, name.size() - open - 2);
  if (body.find_first_of("[]") != std::string_view::npos)
    throw numeq::error(where + "'" + std::string(name) + "' has a bracket inside [...]; write name[assumption=value,...]");
  if (trim(body).empty())
    throw numeq::error(where + "'" + std::string(name) + "' selects nothing in [...]; write " + base + " or " + base +
                       "[assumption=value,...]");
  AssumptionChoices choices;
  while (true) {
    const auto comma = body.find(',');
    const std::string_view item = body.substr(0, comma);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || trim(item.substr(0, eq)).empty() || trim(item.substr(eq + 1)).empty())
      throw numeq::error(where + "'" + trim(item) + "' in '" + std::string(name) + "' is not assumption=value" +
                         (trim(item).empty() ? " (an empty item: a stray comma?)" : ""));
    const std::string key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    for (const auto& [k, v] : choices)
      if (k == key)
        throw numeq::error(where + "assumption '" + key + "' is given twice in '" + std::string(name) + "' (" + v +
                           " and " + value + "); give each assumption once");
    choices.emplace_back(key, value);
    if (comma == std::string_view::npos) break;
    body = body.substr(comma + 1);
  }
  return {base, choices};
}

}  // namespace

std::size_t option_count(const std::string& key, const std::string& value, std::size_t most,
                         std::string_view parameter) {
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.front() == '-' || v < 1 || v > most)
    throw numeq::error(std::string(parameter) + ": " + key + "=" + value + " is not an integer in 1 .. " +
                       std::to_string(most));
  return static_cast<std::size_t>(v);
}

// Plan options that any platform takes in its [...] (apart from its assumptions): split-K of its
// matmul and dot plans (with_split_k; partials in fp32 for the parallel mode, as CUTLASS's
// reduction kernel keeps them in the accumulator type).
Platform with_plan_options(Platform p, const AssumptionChoices& options, std::string_view parameter) {
  std::size_t parts = 1;
  std::string mode_text = "serial";
  bool has_mode = false;
  for (const auto& [key, value] : options) {
    if (key == "split_k") {
      parts = option_count(key, value, 65536, parameter);
    } else {
      if (value != "serial" && value != "parallel")
        throw numeq::error(std::string(parameter) + ": split_mode=" + value + " is unknown; valid: serial, parallel");
      mode_text = value;
      has_mode = true;
    }
  }
  if (has_mode && parts == 1)
    throw numeq::error(std::string(parameter) + ": split_mode=" + mode_text + " needs split_k=N (N > 1)");
  const SplitMode mode = mode_text == "parallel" ? SplitMode::parallel : SplitMode::serial;
  for (PlanEntry& e : p.plans)
    if (parts > 1 && (e.op == Operation::matmul || e.op == Operation::dot))
      e.plan = with_split_k(e.plan, parts, mode, Cast{formats::fp32});
  std::string added = "split_k=" + std::to_string(parts) + (has_mode ? ",split_mode=" + mode_text : "");
  p.name = p.name.back() == ']' ? p.name.substr(0, p.name.size() - 1) + "," + added + "]" : p.name + "[" + added + "]";
  p.aliases.clear();
  return p;
}

namespace {

// Resolved platforms by the exact name asked for: building a variant (Trainium's ~40 plans for
// every assumption choice) or copying from the registry costs tens of microseconds per call,
// which every emulation and check paid. Entries are dropped whenever the registry changes
// (register_platform bumps the generation; a name resolved before a change is not stored).
struct PlatformCache {
  std::mutex mutex;
  std::uint64_t generation = 0;
  std::unordered_map<std::string, std::shared_ptr<const Platform>> by_name;
};

PlatformCache& platform_cache() {
  static PlatformCache cache;
  return cache;
}

Platform resolve_platform(std::string_view name, std::string_view parameter);

}  // namespace

std::uint64_t platform_generation() {
  PlatformCache& c = platform_cache();
  const std::lock_guard<std::mutex> lock(c.mutex);
  return c.generation;
}

std::shared_ptr<const Platform> shared_platform(std::string_view name, std::string_view parameter) {
  PlatformCache& c = platform_cache();
  std::uint64_t generation = 0;
  {
    const std::lock_guard<std::mutex> lock(c.mutex);
    const auto it = c.by_name.find(std::string(name));
    if (it != c.by_name.end()) return it->second;
    generation = c.generation;
  }
  auto p = std::make_shared<const Platform>(resolve_platform(name, parameter));
  const std::lock_guard<std::mutex> lock(c.mutex);
  if (c.generation == generation) {
    if (c.by_name.size() >= 4096) c.by_name.clear();  // names are user input: keep the cache bounded
    c.by_name.emplace(std::string(name), p);
  }
  return p;
}

Platform platform_by_name(std::string_view name, std::string_view parameter) { return *shared_platform(name, parameter); }

namespace {

Platform resolve_platform(std::string_view name, std::string_view parameter) {
  if (name.find('[') != std::string_view::npos) {
    auto [base, all_choices] = parse_variant(name, parameter);
    AssumptionChoices choices, plan_options;
    for (auto& c : all_choices) (c.first == "split_k" || c.first == "split_mode" ? plan_options : choices).push_back(c);
    if (!plan_options.empty()) {
      std::string rest = base;
      for (std::size_t i = 0; i < choices.size(); ++i)
        rest += (i ? "," : "[") + choices[i].first + "=" + choices[i].second + (i + 1 == choices.size() ? "]" : "");
      return with_plan_options(platform_by_name(rest, parameter), plan_options, parameter);
    }
    if (std::optional<Platform> p = builtin_variant(base, choices, parameter)) return *p;
    // Not a built-in with assumptions: a registered platform of that exact name, or an error.
    const std::lock_guard<std::mutex> lock(registry_mutex());
    for (const Platform& p : registry())
      if (p.name == name) return p;
    std::string with;
    for (const Platform& p : registry())
      if (!p.assumptions.empty()) with += (with.empty() ? "" : ", ") + p.name;
    throw numeq::error(std::string(parameter) + ": '" + base + "' takes no [assumption=value] choices; platforms "
                       "with assumptions: " + with);
  }
  const std::lock_guard<std::mutex> lock(registry_mutex());
  for (const Platform& p : registry()) {
    if (p.name == name) return p;
    if (std::find(p.aliases.begin(), p.aliases.end(), name) != p.aliases.end()) return p;
  }
  std::vector<std::string> names;
  for (const Platform& p : registry()) {
    names.push_back(p.name);
    for (const std::string& a : p.aliases) names.push_back(a);
  }
  throw numeq::error(std::string(parameter) + ": unknown platform '" + std::string(name) + "'; valid: " + join(names));
}

}  // namespace

void register_platform(const Platform& platform) {
  if (platform.name.empty()) throw numeq::error("profile.name: must not be empty");
  check_function_models(platform.functions, "profile");
  for (std::size_t i = 0; i < platform.plans.size(); ++i)
    validate(platform.plans[i].plan, "profile.plans[" + std::to_string(i) + "].plan");
  // A built-in platform (or one of its aliases) is never replaced: every later use of that name
  // in this process would silently run the loaded model instead. Load edits under a new name.
  static const std::vector<Platform> builtins = builtin_platforms();
  std::vector<std::string> names{platform.name};
  names.insert(names.end(), platform.aliases.begin(), platform.aliases.end());
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string field = i == 0 ? "profile.name" : "profile.aliases[" + std::to_string(i - 1) + "]";
    // A name with the platform string's option syntax would be registered and never found: a use of
    // "x[a=b]" reads x with option a=b (platform_by_name).
    if (names[i].find_first_of("[]") != std::string::npos)
      throw numeq::error(field + ": '" + names[i] + "' holds [ or ] (they open a platform string's options: "
                         "'name[assumption=value]' is the platform 'name' with that option); load the profile under "
                         "a name without them and give options where it is used");
    for (const Platform& b : builtins)
      if (b.name == names[i] || std::find(b.aliases.begin(), b.aliases.end(), names[i]) != b.aliases.end())
        throw numeq::error(field + ": '" + names[i] + "' is the built-in platform " + b.name +
                           (b.name == names[i] ? "" : " (an alias)") +
                           "; built-in platforms cannot be replaced: load the profile under another name");
  }
  const std::lock_guard<std::mutex> lock(registry_mutex());
  auto& r = registry();
  const auto it = std::find_if(r.begin(), r.end(), [&](const Platform& p) { return p.name == platform.name; });
  if (it != r.end()) *it = platform;
  else r.push_back(platform);
  PlatformCache& c = platform_cache();
  const std::lock_guard<std::mutex> cache_lock(c.mutex);
  ++c.generation;
  c.by_name.clear();
}

Plan plan_for(const Platform& platform, Operation op, std::string_view in_fmt, std::string_view out_fmt) {
  for (const PlanEntry& e : platform.plans)
    if (e.op == op && e.in_fmt == in_fmt && e.out_fmt == out_fmt) return e.plan;
  std::string have;
  for (const PlanEntry& e : platform.plans)
    if (e.op == op) have += (have.empty() ? "" : ", ") + e.in_fmt + " -> " + e.out_fmt;
  bool knows_input = false;
  for (const PlanEntry& e : platform.plans) knows_input = knows_input || (e.op == op && e.in_fmt == in_fmt);
  const std::string parameter = knows_input ? "out" : "in_fmt";
  throw numeq::error(parameter + ": platform " + platform.name + " has no " + std::string(to_string(op)) + " for " +
                     std::string(in_fmt) + " -> " + std::string(out_fmt) + "; it has: " +
                     (have.empty() ? std::string("no ") + std::string(to_string(op)) + " at all" : have));
}

Plan plan_for_values(const Platform& platform, Operation op, std::string_view in_fmt, std::string_view out_fmt,
                     std::span<const double* const> data, std::span<const std::size_t> sizes) {
  const auto has = [&](std::string_view f) {
    return std::any_of(platform.plans.begin(), platform.plans.end(), [&](const PlanEntry& e) {
      return e.op == op && e.in_fmt == f && e.out_fmt == out_fmt;
    });
  };
  const std::string_view twin = in_fmt == "e4m3fn" ? "e4m3" : in_fmt == "e4m3" ? "e4m3fn" : "";
  if (has(in_fmt) || twin.empty() || !has(twin)) return plan_for(platform, op, in_fmt, out_fmt);
  constexpr double kShared = 240.0;  // e4m3's largest finite value: every finite e4m3 value up to it is an e4m3fn one
  double largest = 0;
  for (std::size_t i = 0; i < data.size(); ++i)
    for (std::size_t j = 0; j < sizes[i]; ++j) {
      const double v = std::abs(data[i][j]);
      largest = std::isnan(v) || std::isnan(largest) ? NAN : std::max(largest, v);
    }
  if (!(largest <= kShared))
    throw numeq::error("in_fmt: platform " + platform.name + " has no " + std::string(to_string(op)) + " for " +
                       std::string(in_fmt) + " -> " + std::string(out_fmt) + "; its " + std::string(twin) +
                       " plan computes the same numbers only up to 240 (the largest finite value of e4m3), and the "
                       "operands reach " + (std::isnan(largest) ? std::string("NaN") : std::to_string(largest)));
  Plan p = plan_for(platform, op, twin, out_fmt);
  p.name += " (" + std::string(in_fmt) + " values up to 240 are " + std::string(twin) + " values)";
  return p;
}

Plan with_split_k(const Plan& plan, std::size_t parts, SplitMode mode, const Cast& partial) {
  if (parts == 0) throw numeq::error("split_k: must be a positive integer");
  Plan p = plan;
  if (mode == SplitMode::serial) {
    p.reduction = split(parts, mode, plan.output, plan.reduction);
  } else {
    p.reduction = split(parts, mode, partial, plan.reduction, sequential(Arithmetic{partial}));
  }
  p.name = plan.name + ", split-K " + std::to_string(parts) + " " + std::string(to_string(mode));
  return p;
}

std::string to_json(const Platform& platform, int indent) {
  json j{{"name", platform.name}, {"aliases", platform.aliases}, {"description", platform.description}};
  json plans = json::array();
  for (const PlanEntry& e : platform.plans)
    plans.push_back(json{{"op", to_string(e.op)}, {"in_fmt", e.in_fmt}, {"out", e.out_fmt}, {"plan", json::parse(to_json(e.plan, -1))}});
  j["plans"] = plans;
  json evidence = json::array();
  for (const Evidence& e : platform.evidence)
    evidence.push_back(json{{"parameter", e.parameter}, {"kind", to_string(e.kind)}, {"source", e.source}});
  j["evidence"] = evidence;
  json assumptions = json::array();
  for (const Assumption& a : platform.assumptions)
    assumptions.push_back(json{{"name", a.name}, {"value", a.value}, {"alternatives", a.alternatives},
                               {"meaning", a.meaning}, {"source", a.source}});
  j["assumptions"] = assumptions;
  json functions = json::array();
  for (const FunctionModel& m : platform.functions)
    functions.push_back(json{{"function", m.function}, {"model", to_string(m.kind)}, {"ulps", m.ulps},
                             {"compute", m.compute}, {"evidence", to_string(m.evidence)}, {"source", m.source}});
  j["functions"] = functions;
  return j.dump(indent);
}

Platform platform_from_json(std::string_view body, std::string_view parameter) {
  const std::string path(parameter);
  const json j = detail::parse_json(body, path);
  const Reader r{j, path};
  if (!j.is_object()) r.fail("expected a JSON object");
  r.only({"name", "aliases", "description", "plans", "evidence", "assumptions", "functions"});
  Platform p;
  p.name = r.at("name").text();
  if (p.name.empty()) r.at("name").fail("must not be empty");
  // Reads an optional array member, one element at a time.
  const auto each = [&](const Reader& owner, std::string_view key, const auto& read) {
    if (!owner.has(key)) return;
    const Reader list = owner.at(key);
    if (!list.j.is_array()) list.fail("expected an array");
    for (std::size_t i = 0; i < list.j.size(); ++i) read(list.item(i));
  };
  each(r, "aliases", [&](const Reader& a) { p.aliases.push_back(a.text()); });
  if (r.has("description")) p.description = r.at("description").text();
  if (!r.at("plans").j.is_array()) r.at("plans").fail("expected an array");
  each(r, "plans", [&](const Reader& e) {
    e.only({"op", "in_fmt", "out", "plan"});
    PlanEntry entry;
    entry.op = operation_by_name(e.at("op").text(), e.at("op").path);
    entry.in_fmt = e.at("in_fmt").text();
    format_by_name(entry.in_fmt, e.at("in_fmt").path);
    entry.out_fmt = e.at("out").text();
    format_by_name(entry.out_fmt, e.at("out").path);
    entry.plan = plan_from_json(e.at("plan").j.dump(), e.at("plan").path);
    p.plans.push_back(std::move(entry));
  });
  each(r, "evidence", [&](const Reader& e) {
    e.only({"parameter", "kind", "source"});
    Evidence ev;
    ev.parameter = e.at("parameter").text();
    ev.kind = e.at("kind").named([](const std::string& s) { return by_name(enum_names<EvidenceKind>, s, "kind", "evidence kind"); });
    ev.source = e.at("source").text();
    p.evidence.push_back(std::move(ev));
  });
  each(r, "assumptions", [&](const Reader& e) {
    e.only({"name", "value", "alternatives", "meaning", "source"});
    Assumption a;
    a.name = e.at("name").text();
    a.value = e.at("value").text();
    const Reader alternatives = e.at("alternatives");
    if (!alternatives.j.is_array() || alternatives.j.empty()) alternatives.fail("expected a non-empty array of strings");
    for (std::size_t k = 0; k < alternatives.j.size(); ++k) a.alternatives.push_back(alternatives.item(k).text());
    if (std::find(a.alternatives.begin(), a.alternatives.end(), a.value) == a.alternatives.end())
      e.at("value").fail("'" + a.value + "' is not one of its alternatives");
    if (e.has("meaning")) a.meaning = e.at("meaning").text();
    if (e.has("source")) a.source = e.at("source").text();
    p.assumptions.push_back(std::move(a));
  });
  each(r, "functions", [&](const Reader& e) {
    e.only({"function", "model", "ulps", "compute", "evidence", "source"});
    FunctionModel m;
    m.function = e.at("function").text();
    m.kind = e.at("model").named(
        [](const std::string& s) { return by_name(enum_names<FunctionModelKind>, s, "model", "function model"); });
    if (e.has("ulps")) m.ulps = e.at("ulps").number();
    else if (m.kind == FunctionModelKind::ulp_budget) e.at("ulps");  // "missing": an ulp_budget model needs its budget
    if (e.has("compute")) m.compute = e.at("compute").text();
    if (e.has("evidence")) {
      m.evidence = e.at("evidence").named(
          [](const std::string& s) { return by_name(enum_names<EvidenceKind>, s, "evidence", "evidence kind"); });
    }
    if (e.has("source")) m.source = e.at("source").text();
    check_function_model(m, e.path);
    p.functions.push_back(std::move(m));
  });
  check_function_models(p.functions, path);
  return p;
}

std::string evidence_report(const Platform& platform) {
  std::string out;
  for (const Evidence& e : platform.evidence)
    out += std::string(to_string(e.kind)) + "  " + e.parameter + "  " + e.source + "\n";
  for (const FunctionModel& m : platform.functions) {
    std::string what = m.kind == FunctionModelKind::correctly_rounded
                           ? "correctly rounded in " + m.compute
                           : "within " + [&] {
                               std::ostringstream o;
                               o << m.ulps;  // 2, 2.52: the shortest form that reads back
                               return o.str();
                             }() + " ulps of correctly rounded " + m.compute;
    out += std::string(to_string(m.evidence)) + "  function " + m.function + ": " + what + "  " + m.source + "\n";
  }
  if (!platform.assumptions.empty()) {
    out += "assumptions in force (select others with " + platform.name.substr(0, platform.name.find('[')) +
           "[name=value,...]):\n";
    for (const Assumption& a : platform.assumptions) {
      std::string alternatives;
      for (const std::string& v : a.alternatives) alternatives += (alternatives.empty() ? "" : ", ") + v;
      out += "assumption  " + a.name + " = " + a.value + "  (alternatives: " + alternatives + ")  " + a.meaning + "\n";
    }
  }
  return out;
}

}  // namespace numeq::core
