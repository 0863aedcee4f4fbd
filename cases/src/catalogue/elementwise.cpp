// Elementwise functions under a platform's function model (elementwise.hpp), and the running
// error bounds every composite operation of the catalogue is built from (tracked.hpp).

#include "numeq/cases/elementwise.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "numeq/core/evaluate.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "tracked.hpp"

namespace numeq::cases {

namespace detail {

namespace {

// Relative inflation of bounds computed in binary64 from many terms (see tracked.hpp).
constexpr double kSafety = 1.0 + 0x1p-40;

}  // namespace

double derivative_bound(reference::Function f, double lo, double hi) {
  using F = reference::Function;
  double d = kInf;
  switch (f) {
    case F::exp: d = std::exp(hi); break;                          // increasing
    case F::exp2: d = 0.6931471805599454 * std::exp2(hi); break;   // ln 2 * 2^hi, increasing
    case F::log: d = lo > 0 ? 1 / lo : kInf; break;                // 1/x, decreasing on x > 0
    case F::sqrt: d = lo > 0 ? 0.5 / std::sqrt(lo) : kInf; break;
    case F::rsqrt: d = lo > 0 ? 0.5 / (lo * std::sqrt(lo)) : kInf; break;
    case F::reciprocal: {
      const double m = std::min(std::abs(lo), std::abs(hi));
      d = (lo > 0 || hi < 0) ? 1 / (m * m) : kInf;
      break;
    }
    // Global Lipschitz constants: sup |f'| over the real line.
    case F::tanh: d = 1; break;        // sech^2 <= 1
    case F::sigmoid: d = 0.25; break;  // s(1 - s) <= 1/4
    case F::softplus: d = 1; break;    // sigmoid <= 1
    case F::silu: d = 1.1; break;      // max of s(x)(1 + x(1 - s(x))) is 1.0998 (x = 2.40)
    case F::gelu: d = 1.13; break;     // max of Phi(x) + x phi(x) is 1.1289 (x = sqrt 2)
    case F::gelu_tanh: d = 1.15; break;  // the tanh form's derivative stays within 0.2% of gelu's
    case F::erf: d = 1.13; break;        // 2/sqrt(pi) = 1.1284 (x = 0)
    case F::erf_dx: d = 0.97; break;     // 2/sqrt(pi) sqrt 2 e^-1/2 = 0.9679 (x = 1/sqrt 2)
    case F::sin:
    case F::cos:
    case F::atan: d = 1; break;
    case F::tan: break;                  // unbounded near its poles: no bound propagated
    case F::mish: d = 1.09; break;       // max of mish' is 1.0885 (x = 1.2)
    case F::gelu_sigmoid: d = 1.1; break;  // silu'(1.702 x), whose max is 1.0998
    case F::gelu_dx: d = 0.8; break;     // max |phi(x) (2 - x^2)| is 2 phi(0) = 0.7979
    case F::silu_dx: d = 0.51; break;    // max |silu''| is 1/2 (x = 0)
    case F::gelu_sigmoid_dx: d = 0.86; break;  // 1.702 / 2 = 0.851 (x = 0)
  }
  return std::isnan(d) ? kInf : d * (1 + 0x1p-40);
}

double model_error(const core::FunctionModel& model, const Compute& model_cast, double r) {
  if (std::isnan(r)) return kNaN;
  if (!std::isfinite(r)) return kInf;
  const Compute& f = model_cast;
  const double n = model.kind == core::FunctionModelKind::ulp_budget ? model.ulps : 0.0;
  // The largest magnitude a device within the budget may return, and the spacing there.
  const double reach = std::abs(r) + n * ulp(std::abs(r), f);
  if (reach > f.max) return kInf;
  return (0.5 + n) * ulp(reach, f);
}

FunctionStep function_step(const core::Platform& platform, reference::Function f, const Cast& compute) {
  FunctionStep s;
  s.f = f;
  s.model = core::function_model(platform, reference::function_name(f));
  s.model_cast = Cast{format_by_name(s.model.compute, "platform.functions.compute")};
  s.compute = compute;
  return s;
}

Tracked apply(const FunctionStep& step, Tracked a) {
  const double r_model =
      decode(reference::evaluate_bits(step.f, a.value, step.model_cast.cast), step.model_cast.cast.format);
  double bound = model_error(step.model, step.model_cast, r_model);
  double r = r_model;
  if (!(step.model_cast.cast == step.compute.cast)) {
    r = round_to_format(r_model, step.compute.cast);
    bound += rounding_error(r, bound, step.compute);
  }
  if (std::isnan(a.bound)) return {r, kNaN};
  if (a.bound > 0) bound += times(a.bound, derivative_bound(step.f, a.value - a.bound, a.value + a.bound));
  if (std::isnan(bound) || !std::isfinite(r)) bound = kInf;
  return {r, bound};
}

Tracked reduce(std::span<const Tracked> terms, const core::Plan& plan, const core::ReductionWeights& weights) {
  std::vector<double> values(terms.size());
  for (std::size_t k = 0; k < terms.size(); ++k) values[k] = terms[k].value;
  const double s = core::evaluate(values, {}, std::nullopt, plan);
  double pre = weights.absolute;
  for (std::size_t k = 0; k < terms.size(); ++k) {
    const Tracked& t = terms[k];
    if (std::isnan(t.bound)) return {s, kNaN};
    pre += times(weights.term[k], std::abs(t.value) + t.bound) + t.bound;
  }
  pre *= kSafety;
  if (!std::isfinite(s) || !std::isfinite(pre)) return {s, kInf};
  return {s, core::with_output_cast(plan.output, s, pre)};
}

}  // namespace detail

Emulation function(reference::Function f, const xt::xarray<double>& x, const core::Platform& platform, const Cast& out) {
  validate(out, "out");
  detail::FunctionStep step = detail::function_step(platform, f, Cast{});
  step.compute = step.model_cast;  // no second rounding: the output cast follows
  Emulation result;
  result.values = xt::xarray<double>::from_shape(x.shape());
  result.bound = xt::xarray<double>::from_shape(x.shape());
  const double* in = x.data();
  double* values = result.values.data();
  double* bounds = result.bound.data();
  const core::OutputCastBound out_bound(out);
  parallel_for(
      x.size(),
      [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) {
          const detail::Tracked xc = detail::input(in[i], step.model_cast);
          // The correctly rounded f at the compute-format argument, the model's budget on top,
          // the input conversion propagated through f (tracked.hpp).
          const detail::Tracked r = detail::apply(step, xc);
          const double v = round_to_format(r.value, out, i);
          values[i] = v;
          if (!std::isfinite(in[i]) || std::isnan(v)) bounds[i] = std::numeric_limits<double>::quiet_NaN();
          else if (!std::isfinite(r.value) || !std::isfinite(r.bound)) bounds[i] = std::numeric_limits<double>::infinity();
          else bounds[i] = out_bound(v, r.bound);
        }
      },
      1024);
  return result;
}

}  // namespace numeq::cases
