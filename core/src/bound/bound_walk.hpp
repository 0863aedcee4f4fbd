#pragma once
// The bound walker's result for a plan (private to core/): Walk, the per-term weights and
// constants of bound.hpp's model, and the steps every public bound shares (bound_walk.cpp).
// bound.cpp (sums, dots, the public entry points) and bound_matmul.cpp (matmul) use them.

#include <cmath>
#include <cstddef>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/core/bound.hpp"
#include "numeq/core/plan.hpp"
#include "bound_rounder.hpp"

namespace numeq::core::bound_detail {

using detail::kInf;
using detail::up;

struct Walk {
  std::vector<double> W, Ca, Cb;  // Ca, Cb empty when all zero (or for sums)
  double init = 0;
  double absolute = 0;
  double failure = 0;
  std::size_t random_products = 0;  // probabilistic: products of (1 + delta) the union bound counts
  double u_max = 0;
  bool data_walk = false;           // probabilistic: bound_probabilistic.cpp's walk applies too
  bool products = false;
  // Overflow: whether a cast before the output can turn an overflow into a finite value, and
  // the magnitude below which nothing in the plan overflows.
  bool finite_overflow = false;
  double threshold = kInf;
  // Input casts: the magnitude an input may have before its cast can saturate (kInf: none).
  double input_threshold_a = kInf, input_threshold_b = kInf;
  double initial = 0;  // |plan.initial|
  OutputCastBound output{Cast{}};  // plan.output's share, its figures worked out once per walk
};

// The plan's weights for n terms (with an initial value c: with_init; products of two operands:
// products), at options' kind and lambda.
Walk walk(const Plan& plan, std::size_t n, bool with_init, bool products, const BoundOptions& options);
// options with a failure probability turned into the lambda that reaches it (probabilistic).
BoundOptions resolved(const Plan& plan, std::size_t n, bool with_init, bool products, const BoundOptions& options);
// x (K roundings of non-negative terms in binary64) made an upper bound of the exact value.
// (Inline, as finish below: the matmul bound takes them per element.)
inline double inflate(double x, std::size_t K) {
  if (!(x < kInf)) return x;
  const double factor = 1 + static_cast<double>(K + 8) * 0x1p-52;
  return up(up(x * factor) + static_cast<double>(2 * K + 4) * 0x1p-1074);
}
void check_emulated(const xt::xarray<double>& emulated, const std::vector<std::size_t>& shape);
// One element's final bound from its pre-cast bound: non-finite inputs give NaN, an emulated
// value that is not finite +Inf, intermediate overflow that may have been absorbed +Inf.
inline double finish(const Walk& w, double emulated, double pre, double magnitude, bool nonfinite_input,
                     bool input_overflow) {
  if (nonfinite_input) return detail::kNaN;
  if (!std::isfinite(emulated)) return kInf;
  if (input_overflow) return kInf;
  if (w.finite_overflow && !(magnitude <= w.threshold)) return kInf;
  return w.output(emulated, pre);
}
// No terms, no c and no initial value: the exact result is 0 (bound.cpp).
bool nothing_reduced(std::size_t K, const xt::xarray<double>* c, const Plan& plan);
// The bound of a matmul at one kind (bound_matmul.cpp).
xt::xarray<double> matmul_bound_of_kind(const xt::xarray<double>& a, const xt::xarray<double>& b,
                                        const xt::xarray<double>* c, const Plan& plan,
                                        const xt::xarray<double>& emulated, const BoundOptions& options);

}  // namespace numeq::core::bound_detail
