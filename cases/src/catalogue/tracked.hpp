#pragma once
// Running error bounds for the catalogue's composite operations (private to cases/).
//
// Every intermediate of an emulated operation travels as a Tracked pair: the value the emulation
// computed and a bound on its distance to the exact counterpart (the same step carried out in
// real arithmetic on the exact inputs). Each step rounds its result once into the compute cast
// and adds to the propagated bound the rounding it may commit. This is Wilkinson's running error
// analysis (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 2002, s3.3) with the
// propagation made rigorous for finite perturbations instead of first-order:
//   a + b:  |da| + |db|
//   a * b:  |a^| |db| + |b^| |da| + |da| |db|
//   a / b:  (|da| + |a^/b^| |db|) / (|b^| - |db|)          (infinite when |b^| <= |db|)
//   f(a):   |da| * sup |f'| over [a^ - |da|, a^ + |da|]    (mean value theorem)
// plus the rounding of the step. Rounding errors are stated for the largest magnitude the result
// may have (|r| + propagated bound), so that they also cover a device whose intermediate differs
// from the emulation's within the bound (a function within its ulp budget, another summation
// order): the bound holds for every computation the platform's model admits, not only for the
// emulated one. Sums go through core's evaluator and bound walker (one implementation).
//
// Bounds are computed in binary64 and inflated by a relative 2^-40 where they add many terms, so
// that the rounding of the bound arithmetic itself cannot make it too small.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "numeq/core/bound.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/fast_round.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/functions.hpp"

namespace numeq::cases::detail {

// A bound's two markers: kInf, no finite bound holds (the value may be anything); kNaN, an input
// was not finite, so no bound applies.
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Tracked {
  double value = 0;
  double bound = 0;  // |value - exact| <= bound; +Inf: no claim (overflow, division by ~0)
};

// A compute cast with the limits the running bounds ask for at every step, worked out once (per
// element they were a good part of an emulated softmax's bound arithmetic). Implicit from a Cast:
// a caller holding a plain Cast still gets every function below, its limits worked out per call.
struct Compute {
  Cast cast;
  double max = 0, min_normal = 0;
  int emin = 0, mantissa_bits = 0;
  bool nearest = true, flushes = false;
  Compute() = default;
  Compute(const Cast& c)  // NOLINT(google-explicit-constructor): see above
      : cast(c),
        max(max_finite(c.format)),
        min_normal(numeq::min_normal(c.format)),
        emin(c.format.emin()),
        mantissa_bits(c.format.mantissa_bits),
        nearest(c.rounding == Rounding::nearest_even || c.rounding == Rounding::nearest_away),
        flushes(c.flushes_outputs()),
        fast(c) {}
  operator const Cast&() const { return cast; }  // NOLINT(google-explicit-constructor)
  // x rounded into the cast (the stochastic draw of index 0, as every running step uses).
  [[gnu::always_inline]] double round(double x) const {
    if (double r; fast(x, r)) return r;
    return round_to_format_by_kernel(x, cast, 0);
  }
  FastRound fast;
};

// The spacing of f's values at magnitude a (>= 0): the ulp of the binade a lies in, the subnormal
// spacing below the smallest normal; +Inf above the largest finite value.
[[gnu::always_inline]] inline double ulp(double a, const Compute& f) {
  if (std::isnan(a)) return kNaN;
  if (a > f.max) return kInf;  // no finite spacing beyond the format (formats' binade_spacing)
  return binade_spacing(a, f.emin, f.mantissa_bits);
}
// What rounding a result into `cast` may lose, for any device result whose inputs lie within
// `spread` of the exact ones (magnitude up to |r| + 2 spread + one spacing of r).
[[gnu::always_inline]] inline double rounding_error(double r, double spread, const Compute& cast) {
  if (std::isnan(r) || std::isnan(spread)) return kNaN;
  if (!std::isfinite(r) || !std::isfinite(spread)) return kInf;
  // The largest magnitude a device's unrounded result may have: its inputs lie within `spread`
  // of the exact ones as the emulation's do, so its unrounded value lies within 2 spread of the
  // emulation's, which lies within one spacing of r.
  const double a = std::abs(r) + 2 * spread + ulp(std::abs(r), cast);
  if (a > cast.max) return kInf;
  // Nearest modes lose at most half the spacing of the binade of the result (at a power of two
  // reached from below, a quarter of it); directed, odd and stochastic rounding a whole spacing.
  double e = (cast.nearest ? 0.5 : 1.0) * ulp(a, cast);
  if (cast.flushes) e = std::max(e, cast.min_normal);
  return e;
}

// The steps below are inline: a softmax or a norm takes several per element.

// a * b where a zero factor wins over an infinite one: |a^| |db| with a^ = 0 contributes nothing.
[[gnu::always_inline]] inline double times(double a, double b) { return a == 0 || b == 0 ? 0.0 : a * b; }

// x (any double) as a value of the compute cast: the rounded value and its distance to x.
[[gnu::always_inline]] inline Tracked input(double x, const Compute& compute) {
  const double r = compute.round(x);
  if (!std::isfinite(x)) return {r, kNaN};
  if (!std::isfinite(r)) return {r, kInf};
  double d = std::abs(r - x);
  if (d != 0) d = next_up(d);  // r - x need not be exact in binary64
  return {r, d};
}
// A value exact by construction (a count n, when representable).
[[gnu::always_inline]] inline Tracked exact(double v) { return {v, 0.0}; }

[[gnu::always_inline]] inline Tracked add(Tracked a, Tracked b, const Compute& compute) {
  const double r = core::add_rounded(a.value, b.value, compute.cast);
  const double spread = a.bound + b.bound;
  return {r, (spread + rounding_error(r, spread, compute)) * (1 + 0x1p-50)};
}
[[gnu::always_inline]] inline Tracked sub(Tracked a, Tracked b, const Compute& compute) {
  return add(a, Tracked{-b.value, b.bound}, compute);
}
[[gnu::always_inline]] inline Tracked mul(Tracked a, Tracked b, const Compute& compute) {
  // Products of values of formats up to 26 significand bits are exact in binary64.
  const double r = compute.round(a.value * b.value);
  const double spread =
      (times(std::abs(a.value), b.bound) + times(std::abs(b.value), a.bound) + times(a.bound, b.bound)) * (1 + 0x1p-50);
  return {r, (spread + rounding_error(r, spread, compute)) * (1 + 0x1p-50)};
}
[[gnu::always_inline]] inline Tracked div(Tracked a, Tracked b, const Compute& compute) {
  // The binary64 quotient rounded into a format of p <= 24 bits is the correctly rounded
  // quotient: double rounding is innocuous when 53 >= 2p + 2 (S. A. Figueroa, "When is double
  // rounding innocuous?", SIGNUM Newsletter 30(3), 1995).
  const double q = a.value / b.value;
  const double r = compute.round(q);
  if (std::isnan(a.bound) || std::isnan(b.bound)) return {r, kNaN};
  const double denominator = std::abs(b.value) - b.bound;
  if (!(denominator > 0) || !std::isfinite(q)) return {r, kInf};
  const double spread = (a.bound + times(std::abs(q), b.bound)) / denominator * (1 + 0x1p-50);
  return {r, (spread + rounding_error(r, spread, compute)) * (1 + 0x1p-50)};
}

// An elementwise function as a platform computes it: correctly rounded in the model's format or
// within its ulp budget, then rounded into the operation's compute cast when that differs.
struct FunctionStep {
  reference::Function f = reference::Function::exp;
  core::FunctionModel model;
  Compute model_cast;  // the model's compute format, nearest even
  Compute compute;     // the operation's compute cast
};
FunctionStep function_step(const core::Platform& platform, reference::Function f, const Cast& compute);
// f at a tracked argument: the emulated value (the correctly rounded f(a^) of the model's format,
// then the compute cast) and its bound (budget + rounding + propagation of a's bound).
Tracked apply(const FunctionStep& step, Tracked a);
// The budget part alone: a bound on |device - f(v)| for a value r = the model-format rounding of
// f(v), any device within the model's budget.
double model_error(const core::FunctionModel& model, const Compute& model_cast, double r);
// sup |f'| on [lo, hi] (a bound; +Inf where f is not differentiable there or the bound overflows).
double derivative_bound(reference::Function f, double lo, double hi);

// A sum under a platform's plan: the terms' values reduced by core::evaluate, the bound from
// core::reduction_weights (sum_k w_k (|t^_k| + e_k) + sum_k e_k + absolute) and
// core::with_output_cast. `weights` must be reduction_weights(plan, terms.size(), false).
Tracked reduce(std::span<const Tracked> terms, const core::Plan& plan, const core::ReductionWeights& weights);

}  // namespace numeq::cases::detail
