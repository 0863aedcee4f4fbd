// The op registry's rows (registry.hpp) and the one place an op is built from arguments by name.

#include "numeq/cases/registry.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "numeq/cases/attention.hpp"
#include "numeq/cases/normalization.hpp"
#include "numeq/cases/quantized.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/references/functions.hpp"

namespace numeq::cases {

namespace {

using Array = xt::xarray<double>;
using Params = std::map<std::string, ParamValue, std::less<>>;

// The valid names of an enum parameter: its enum's own table (names.hpp), never restated.
template <class Enum>
std::vector<std::string> names_of() {
  std::vector<std::string> out;
  for (const auto& [value, name] : enum_names<Enum>) out.emplace_back(name);
  return out;
}

ParamSpec text(std::string name, std::string default_value, std::vector<std::string> choices, std::string doc) {
  return {std::move(name), ParamType::text, std::move(default_value), std::move(choices), std::move(doc)};
}
ParamSpec integer(std::string name, std::int64_t default_value, std::string doc) {
  return {std::move(name), ParamType::integer, default_value, {}, std::move(doc)};
}
ParamSpec real(std::string name, ParamValue default_value, std::string doc) {
  return {std::move(name), ParamType::real, std::move(default_value), {}, std::move(doc)};
}
ParamSpec boolean(std::string name, bool default_value, std::string doc) {
  return {std::move(name), ParamType::boolean, default_value, {}, std::move(doc)};
}
// The format a platform computes in (any floating format's name; the factory checks it).
ParamSpec compute_param() { return text("compute", "fp32", {}, "the format the platform computes in"); }

// A catalogue row with its name, family and one-line doc; the caller fills in the rest.
OpSpec spec(std::string name, std::string family, std::string doc) {
  OpSpec s;
  s.name = std::move(name);
  s.family = std::move(family);
  s.doc = std::move(doc);
  return s;
}

InputSpec input(std::string name, std::string shape, std::vector<int> catalogue_shape, std::string doc,
                InputRole role = InputRole::values, bool required = true) {
  InputSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.required = required;
  s.role = role;
  s.catalogue_shape = std::move(catalogue_shape);
  s.doc = std::move(doc);
  return s;
}

// K = -1, the other dimensions 0, 1, 2 (InputSpec::catalogue_shape).
constexpr int K = -1;

// The input formats the floating catalogue ops are drawn in.
const std::vector<std::string> kNarrowFloats = {"fp32", "bf16", "fp16"};

std::vector<OpSpec> rows() {
  std::vector<OpSpec> r;

  {
    OpSpec s = spec("matmul", "matmul",
                    "a @ b (+ c) under the platform's matmul plan for (in_fmt, out)");
    s.inputs = {input("a", "[..., M, K]", {0, K}, "the left operand"),
                input("b", "[..., K, N]", {K, 1}, "the right operand"),
                input("c", "[N] or broadcast to the result", {}, "a bias or accumulator, values of the output format",
                      InputRole::own, false)};
    s.default_out = "fp32";
    s.catalogue = {{"fp32", "bf16", "fp16", "e4m3fn", "e4m3", "e5m2"}, "fp32", {64, 64}, {8, 8},
                   "the contraction length: a[M, K] @ b[K, N], shape (M, N)", true, nullptr, {}};
    s.bugs = {"bf16_accumulator", "dropped_k_tile", "transposed_operand", "missing_output_cast"};
    s.build = [](const OpArguments& a) {
      return matmul(a.input("a"), a.input("b"), a.optional_input("c"), a.in_fmt, a.out);
    };
    r.push_back(std::move(s));
  }
  {
    OpSpec s = spec("scaled_fp8_matmul", "matmul",
                    "(a * scale_a) @ (b * scale_b) for fp8 a and b with fp32 scales laid out per `scaling`");
    s.inputs = {input("a", "[M, K]", {0, K}, "the left fp8 operand"),
                input("b", "[K, N]", {K, 1}, "the right fp8 operand"),
                input("scale_a", "as `scaling` lays it out", {}, "a's fp32 scales", InputRole::own),
                input("scale_b", "as `scaling` lays it out", {}, "b's fp32 scales", InputRole::own)};
    s.params = {text("scaling", "per_tensor", names_of<Fp8Scaling>(), "how the scales are laid out")};
    s.default_out = "fp32";
    // e4m3 (Trainium's) beside OCP's e4m3fn: a platform with only one of the two computes the other's
    // values up to 240 with its plan (core::plan_for_values), so a port's tolerance covers both.
    s.catalogue = {{"e4m3fn", "e4m3", "e5m2"}, "fp32", {64, 64}, {8, 8},
                   "the contraction length: (a * 0.5) @ (b * 0.125), a[M, K], b[K, N], shape (M, N)", true,
                   [](const std::vector<std::size_t>&, std::size_t) {
                     return Params{{"scale_a", 0.5}, {"scale_b", 0.125}};
                   }, {}};
    s.bugs = {"dropped_k_tile", "transposed_operand", "wrong_fp8_scale", "missing_output_cast"};
    s.build = [](const OpArguments& a) {
      ScaledMatmulOptions o;
      o.scaling = fp8_scaling_by_name(a.text("scaling"), "scaling");
      o.out_fmt = std::string(a.out.format.name);
      return scaled_fp8_matmul(a.input("a"), a.input("b"), a.input("scale_a"), a.input("scale_b"), a.in_fmt, o);
    };
    r.push_back(std::move(s));
  }
  {
    OpSpec s = spec("int8_matmul", "matmul",
                    "integer a @ b (int8 / uint8 codes) accumulated in int32, exactly");
    s.inputs = {input("a", "[M, K]", {0, K}, "the left operand's codes", InputRole::codes),
                input("b", "[K, N]", {K, 1}, "the right operand's codes", InputRole::codes)};
    s.params = {text("overflow", "error", names_of<Int32Overflow>(), "a partial sum outside int32")};
    s.format_keywords = false;
    s.default_out = "int32";
    s.catalogue = {{"int8"}, "int32", {64, 64}, {8, 8},
                   "the contraction length: int8 a[M, K] @ b[K, N] into int32, shape (M, N)", true, nullptr, {}};
    // subnormal_rich values times 16 round to code 0 everywhere: a GEMM of zeros exercises nothing.
    s.catalogue.generators = {Distribution::normal,           Distribution::uniform,      Distribution::lognormal,
                              Distribution::outlier_channels, Distribution::cancellation, Distribution::near_overflow,
                              Distribution::small_integers};
    s.bugs = {"dropped_k_tile", "transposed_operand"};
    s.build = [](const OpArguments& a) {
      return integer_matmul(a.input("a"), a.input("b"),
                            by_name(enum_names<Int32Overflow>, a.text("overflow"), "overflow", "int32 overflow mode"));
    };
    r.push_back(std::move(s));
  }
  // The reductions: sum, mean, max (op.hpp, reduce).
  for (Reduction kind : {Reduction::sum, Reduction::mean, Reduction::max}) {
    OpSpec s = spec(std::string(to_string(kind)), "reduction",
                    kind == Reduction::sum ? "x summed over `axis` as the platform's sum plan for `compute` sums it"
                    : kind == Reduction::mean
                        ? "the sum over `axis` divided by its length, as numpy forms it"
                        : "the largest element along `axis` (exact; NaN propagates)");
    s.inputs = {input("x", "[..., K]", {0, K}, "the reduced array")};
    s.inputs.front().layout = true;
    s.params = {{"axis", ParamType::axes, std::int64_t{-1}, {}, "an int, a list of ints, or none: every axis"},
                compute_param()};
    if (kind == Reduction::sum) {
      s.catalogue = {kNarrowFloats, "fp32", {64}, {4}, "the summed length: x[R, K] summed over K, shape (R,)", true,
                     nullptr, {}};
      s.bugs = {"bf16_sum_accumulator", "dropped_k_tile", "missing_output_cast"};
    } else if (kind == Reduction::mean) {
      s.catalogue = {kNarrowFloats, "", {64}, {4}, "the averaged length: x[R, K] averaged over K, shape (R,)", true,
                     nullptr, {}};
      s.bugs = {"dropped_k_tile", "missing_output_cast"};
    } else {
      s.catalogue = {kNarrowFloats, "", {64}, {4}, "the length the maximum is taken over: x[R, K], shape (R,)", true,
                     nullptr, {}};
    }
    s.build = [kind](const OpArguments& a) {
      const Array& x = a.input("x");
      const Layout l = a.layout("x");
      return reduce(kind, x, a.axes("axis", x.dimension()), a.in_fmt, a.out, a.text("compute"), l.strides,
                    l.buffered);
    };
    r.push_back(std::move(s));
  }
  {
    OpSpec s = spec("sum_of_squares", "reduction",
                    "the sum of squares of x along its last axis: squares in `compute`, summed by its sum plan");
    s.default_out = "fp32";  // a kernel's row sums of squares are fp32 (RMSNorm's first step)
    s.inputs = {input("x", "[..., K]", {0, K}, "the rows")};
    s.params = {compute_param()};
    s.catalogue = {kNarrowFloats, "fp32", {64}, {4}, "the row length: x[R, K], shape (R,)", true, nullptr, {}};
    s.bugs = {"dropped_k_tile", "missing_output_cast"};
    s.build = [](const OpArguments& a) { return sum_of_squares(a.input("x"), a.in_fmt, a.out, a.text("compute")); };
    r.push_back(std::move(s));
  }
  for (bool log : {false, true}) {
    OpSpec s = spec(log ? "log_softmax" : "softmax", "normalisation",
                    log ? "log-softmax along `axis` computed in `compute`"
                        : "softmax along `axis` computed in `compute`");
    s.inputs = {input("x", "[..., K]", {0, K}, "the logits")};
    s.params = {integer("axis", -1, "the axis normalised over"),
                text("variant", "max_subtracted", names_of<SoftmaxVariant>(),
                    "plain (no max subtracted), max_subtracted, or online (blocks of `block`)"),
                integer("block", 0, "the online variant's block length"), compute_param()};
    s.catalogue = {kNarrowFloats, "", {64}, {2},
                   log ? "the row length: log-softmax of x[R, K] over K, shape (R,)"
                       : "the row length: softmax of x[R, K] over K, shape (R,)",
                   true,
                   [](const std::vector<std::size_t>&, std::size_t) {
                     return Params{{"variant", std::string("max_subtracted")}};
                   }, {}};
    s.bugs = {"softmax_without_max", "missing_output_cast"};
    if (!log) {
      s.params.push_back(boolean("reciprocal", false,
                                 "each numerator times the rounded reciprocal of the sum (NKI) instead of a division"));
    }
    s.build = [log](const OpArguments& a) {
      SoftmaxOptions o;
      o.variant = softmax_variant_by_name(a.text("variant"), "variant");
      const std::int64_t block = a.integer("block");
      if (block < 0) throw numeq::error("block: expected a length >= 0 (0: one block), got " + std::to_string(block));
      o.block = static_cast<std::size_t>(block);
      o.compute = format_by_name(a.text("compute"), "compute");
      if (!log) o.reciprocal = a.boolean("reciprocal");
      return softmax(a.input("x"), static_cast<std::ptrdiff_t>(a.integer("axis")), a.in_fmt, a.out, o, log);
    };
    r.push_back(std::move(s));
  }
  for (bool centred : {true, false}) {
    OpSpec s = spec(centred ? "layernorm" : "rmsnorm", "normalisation",
                    centred ? "layernorm over the last axis: (x - mean) / sqrt(var + eps) (* gamma) (+ beta)"
                            : "RMSNorm over the last axis: x * rsqrt(mean(x^2) + eps) (* gamma) (+ beta)");
    s.inputs = {input("x", "[..., n]", {0, K}, "the normalised rows"),
                input("gamma", "[n]", {}, "the scale (none: 1)", InputRole::own, false),
                input("beta", "[n]", {}, "the shift (none: 0)", InputRole::own, false)};
    s.params = {real("eps", centred ? 1e-5 : 1e-6, centred ? "added to the variance" : "added to mean(x^2)")};
    if (centred)
      s.params.push_back(text("variant", "two_pass", names_of<LayernormVariant>(),
                              "two_pass, welford, or bn_stats (Trainium's bn_stats / bn_aggr)"));
    s.params.push_back(compute_param());
    const double eps = centred ? 1e-5 : 1e-6;
    s.catalogue = {kNarrowFloats, "", {64}, {2}, "the normalised length: x[R, K], shape (R,)", true,
                   [centred, eps](const std::vector<std::size_t>&, std::size_t) {
                     Params p{{"eps", eps}};
                     if (centred) p.emplace("variant", std::string("two_pass"));
                     return p;
                   }, {}};
    s.bugs = centred ? std::vector<std::string>{"one_pass_variance", "missing_output_cast"}
                     : std::vector<std::string>{"missing_output_cast"};
    s.build = [centred](const OpArguments& a) {
      NormOptions o;
      if (centred) o.variant = layernorm_variant_by_name(a.text("variant"), "variant");
      o.compute = format_by_name(a.text("compute"), "compute");
      const Array& x = a.input("x");
      const Array *gamma = a.optional_input("gamma"), *beta = a.optional_input("beta");
      return centred ? layernorm(x, gamma, beta, a.real("eps"), a.in_fmt, a.out, o)
                     : rmsnorm(x, gamma, beta, a.real("eps"), a.in_fmt, a.out, o);
    };
    r.push_back(std::move(s));
  }
  {
    OpSpec s = spec("attention", "attention",
                    "scaled dot-product attention softmax(scale q k^T + mask) v, naive or flash");
    s.inputs = {input("q", "[..., Lq, d]", {0, 1, 2}, "the queries"),
                input("k", "[..., Lk, d]", {0, K, 2}, "the keys"),
                input("v", "[..., Lk, dv]", {0, K, 2}, "the values"),
                input("mask", "broadcast to [..., Lq, Lk]", {}, "additive reals (-inf excludes a key)",
                      InputRole::mask, false)};
    s.params = {boolean("causal", false, "query i sees keys j <= i"),
                real("scale", std::monostate{}, "the scores' scale (none: 1/sqrt(d))"),
                text("variant", "naive", names_of<AttentionVariant>(),
                    "naive (S, softmax, P cast to in_fmt, P V) or flash (FlashAttention-2 blocks)"),
                integer("block_rows", 64, "flash: queries per block"),
                integer("block_cols", 64, "flash: keys per block"),
                boolean("cast_p", true, "P cast to in_fmt before P V (false: kept in fp32)")};
    // Flash blocks of 64 queries (FlashAttention-2's usual tile), fewer when Lq is smaller.
    s.catalogue = {kNarrowFloats, "", {1, 64, 64}, {1, 2, 16},
                   "the key length: q[B, Lq, d], k and v [B, K, d], shape (B, Lq, d)", true,
                   [](const std::vector<std::size_t>& dims, std::size_t) {
                     return Params{{"variant", std::string("flash")},
                                   {"block_rows", static_cast<std::int64_t>(std::min<std::size_t>(64, dims[1]))}};
                   }, {}};
    s.bugs = {"flash_without_rescale", "missing_output_cast"};
    s.build = [](const OpArguments& a) {
      AttentionOptions o;
      o.variant = attention_variant_by_name(a.text("variant"), "variant");
      for (const char* p : {"block_rows", "block_cols"})
        if (a.integer(p) < 1) throw numeq::error(std::string(p) + ": expected a block length >= 1, got " +
                                                 std::to_string(a.integer(p)));
      o.block_rows = static_cast<std::size_t>(a.integer("block_rows"));
      o.block_cols = static_cast<std::size_t>(a.integer("block_cols"));
      o.cast_p = a.boolean("cast_p");
      return attention(a.input("q"), a.input("k"), a.input("v"), a.optional_input("mask"), a.boolean("causal"),
                       a.optional_real("scale"), a.in_fmt, a.out, o);
    };
    r.push_back(std::move(s));
  }
  // The elementwise functions (references/functions.hpp): one row each.
  for (const auto& [f, name] : enum_names<reference::Function>) {
    OpSpec s = spec(std::string(name), "function",
                    std::string(name) + "(x) elementwise under the platform's function model");
    s.inputs = {input("x", "any shape", {0, K}, "the arguments")};
    // Every function has a catalogue setup (each has a tolerance); arguments outside a function's
    // domain (log, sqrt, rsqrt of negatives) give NaN where the platform does too, which compares
    // as special values, not as a tolerance.
    s.catalogue = {kNarrowFloats, "", {64}, {2}, "the row width (elementwise: no reduction): x[R, K], shape (R,)",
                   false, nullptr, {}};
    s.bugs = {"missing_output_cast"};
    s.build = [f = f](const OpArguments& a) { return function(f, a.input("x"), a.in_fmt, a.out); };
    r.push_back(std::move(s));
  }
  return r;
}

template <class T>
const T& value_as(const std::map<std::string, ParamValue, std::less<>>& params, std::string_view name,
                  const char* expected) {
  const auto it = params.find(name);
  if (it == params.end()) throw numeq::error(std::string(name) + ": this op has no such parameter");
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  throw numeq::error(std::string(name) + ": expected " + expected);
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Whether `v` is a value of type `t`; an integer given for a real is turned into one.
bool take_as(ParamType t, ParamValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return true;
  switch (t) {
    case ParamType::integer: return std::holds_alternative<std::int64_t>(v);
    case ParamType::real:
      if (const auto* i = std::get_if<std::int64_t>(&v)) v = static_cast<double>(*i);
      return std::holds_alternative<double>(v);
    case ParamType::boolean: return std::holds_alternative<bool>(v);
    case ParamType::text: return std::holds_alternative<std::string>(v);
    case ParamType::axes:
      return std::holds_alternative<std::int64_t>(v) || std::holds_alternative<std::vector<std::int64_t>>(v);
  }
  return false;
}

}  // namespace

const Array& OpArguments::input(std::string_view name) const {
  const auto it = inputs.find(name);
  if (it == inputs.end()) throw numeq::error(std::string(name) + ": this input is required");
  return it->second;
}

const Array* OpArguments::optional_input(std::string_view name) const {
  const auto it = inputs.find(name);
  return it == inputs.end() ? nullptr : &it->second;
}

Layout OpArguments::layout(std::string_view name) const {
  const auto it = layouts.find(name);
  return it == layouts.end() ? Layout{} : it->second;
}

std::int64_t OpArguments::integer(std::string_view name) const {
  return value_as<std::int64_t>(params, name, "an integer");
}
double OpArguments::real(std::string_view name) const { return value_as<double>(params, name, "a real number"); }
std::optional<double> OpArguments::optional_real(std::string_view name) const {
  const auto it = params.find(name);
  if (it != params.end() && std::holds_alternative<std::monostate>(it->second)) return std::nullopt;
  return real(name);
}
bool OpArguments::boolean(std::string_view name) const { return value_as<bool>(params, name, "true or false"); }
const std::string& OpArguments::text(std::string_view name) const {
  return value_as<std::string>(params, name, "a name");
}

std::vector<std::ptrdiff_t> OpArguments::axes(std::string_view name, std::size_t ndim) const {
  const auto it = params.find(name);
  if (it == params.end()) throw numeq::error(std::string(name) + ": this op has no such parameter");
  if (const auto* one = std::get_if<std::int64_t>(&it->second)) return {static_cast<std::ptrdiff_t>(*one)};
  if (const auto* many = std::get_if<std::vector<std::int64_t>>(&it->second))
    return {many->begin(), many->end()};
  std::vector<std::ptrdiff_t> every(ndim);
  for (std::size_t d = 0; d < ndim; ++d) every[d] = static_cast<std::ptrdiff_t>(d);
  return every;
}

const std::vector<OpSpec>& op_registry() {
  static const std::vector<OpSpec> registry = rows();
  return registry;
}

const OpSpec& op_spec(std::string_view name, std::string_view parameter) {
  for (const OpSpec& s : op_registry())
    if (s.name == name) return s;
  std::vector<std::string> names;
  for (const OpSpec& s : op_registry()) names.push_back(s.name);
  throw numeq::error(std::string(parameter) + ": unknown operation '" + std::string(name) + "'; valid: " +
                     joined(names));
}

Op build_op(std::string_view name, OpArguments arguments) {
  const OpSpec& spec = op_spec(name);
  std::vector<std::string> input_names, param_names;
  for (const InputSpec& i : spec.inputs) input_names.push_back(i.name);
  for (const ParamSpec& p : spec.params) param_names.push_back(p.name);
  for (const auto& [given, values] : arguments.inputs)
    if (std::find(input_names.begin(), input_names.end(), given) == input_names.end())
      throw numeq::error(given + ": " + spec.name + " has no input of that name; its inputs: " + joined(input_names));
  for (const InputSpec& i : spec.inputs)
    if (i.required && !arguments.inputs.count(i.name))
      throw numeq::error(i.name + ": " + spec.name + " needs this input (" + i.shape + ")");
  for (auto& [given, value] : arguments.params) {
    const std::string& name_given = given;  // a structured binding is not captured by a lambda before C++20's fix
    const auto p = std::find_if(spec.params.begin(), spec.params.end(),
                                [&](const ParamSpec& s) { return s.name == name_given; });
    if (p == spec.params.end())
      throw numeq::error(given + ": " + spec.name + " has no parameter of that name; its parameters: " +
                         (param_names.empty() ? std::string("none") : joined(param_names)));
    if (!take_as(p->type, value))
      throw numeq::error(given + ": expected " + std::string(to_string(p->type)) + " for " + spec.name);
    if (const auto* t = std::get_if<std::string>(&value);
        t && !p->choices.empty() && std::find(p->choices.begin(), p->choices.end(), *t) == p->choices.end())
      throw numeq::error(given + ": unknown " + given + " '" + *t + "'; valid: " + joined(p->choices));
  }
  for (const ParamSpec& p : spec.params) arguments.params.emplace(p.name, p.default_value);
  return spec.build(arguments);
}

std::map<std::string, Array, std::less<>> catalogue_inputs(std::string_view name, std::string_view in_fmt,
                                                          const std::vector<std::size_t>& dims, std::size_t k,
                                                          Distribution distribution, std::uint64_t seed) {
  const OpSpec& spec = op_spec(name);
  if (spec.catalogue.formats.empty()) throw numeq::error("op: " + spec.name + " is not in the catalogue");
  if (dims.size() != spec.catalogue.shape.size())
    throw numeq::error("shape: " + spec.name + " takes " + std::to_string(spec.catalogue.shape.size()) +
                       " dimensions besides K (" + spec.catalogue.k_meaning + "), got " + std::to_string(dims.size()));
  const std::vector<Distribution>& allowed = spec.catalogue.generators;
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), distribution) == allowed.end()) {
    std::string valid;
    for (Distribution d : allowed) valid += (valid.empty() ? "" : ", ") + std::string(to_string(d));
    throw numeq::error("generator: " + std::string(to_string(distribution)) + " draws no meaningful " + spec.name +
                       " problem; valid for it: " + valid);
  }
  std::map<std::string, Array, std::less<>> out;
  std::uint64_t i = 0;
  for (const InputSpec& in : spec.inputs) {
    if (in.catalogue_shape.empty()) continue;
    std::vector<std::size_t> shape;
    for (int d : in.catalogue_shape) shape.push_back(d < 0 ? k : dims[static_cast<std::size_t>(d)]);
    if (in.role == InputRole::codes) {
      Array x = generate(Generator{distribution, seed + i, 16.0}, formats::fp32, shape);
      for (double& v : x) v = std::isnan(v) ? 0.0 : std::clamp(std::nearbyint(v), -128.0, 127.0);
      out.emplace(in.name, std::move(x));
    } else {
      out.emplace(in.name, generate(Generator{distribution, seed + i, 1.0}, format_by_name(in_fmt, "in_fmt"), shape));
    }
    ++i;
  }
  return out;
}

Op catalogue_op(std::string_view name, std::string_view in_fmt, std::string_view out,
                const std::vector<std::size_t>& dims, std::size_t k, Distribution distribution, std::uint64_t seed) {
  const OpSpec& spec = op_spec(name);
  OpArguments a;
  a.inputs = catalogue_inputs(name, in_fmt, dims, k, distribution, seed);
  if (spec.catalogue.params)
    for (auto& [key, value] : spec.catalogue.params(dims, k)) {
      const std::string& param = key;  // structured bindings are not captured by lambdas (clang)
      const bool is_input = std::any_of(spec.inputs.begin(), spec.inputs.end(),
                                        [&](const InputSpec& s) { return s.name == param; });
      if (is_input) {
        a.inputs.emplace(key, Array(std::get<double>(value)));  // a scalar input (scaled_fp8_matmul's scales)
      } else {
        a.params.emplace(key, std::move(value));
      }
    }
  a.in_fmt = std::string(in_fmt);
  if (spec.format_keywords) a.out = Cast{format_by_name(out, "out")};
  return build_op(name, std::move(a));
}

}  // namespace numeq::cases
