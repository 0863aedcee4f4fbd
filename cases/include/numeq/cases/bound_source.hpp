#pragma once
// Where a bound comes from: one element's worst-case bound split by the step of the platform's
// model that commits it (the accumulation, the input casts, c, underflow, the output rounding),
// so that a verdict can say which step dominates ("accumulation fused(32 products, ...) 96%").
// The shares come from the same walk as the bound (core::reduction_weights, core::with_output_cast);
// they are stated for the worst-case bound, whose steps add up, and read as proportions of the
// probabilistic bound too.

#include <cstddef>
#include <string>
#include <vector>

#include "numeq/core/plan.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq::cases {

struct BoundShare {
  std::string step;   // e.g. "accumulation chunked(128, ...)", "output rounding into bf16 nearest_even"
  double amount = 0;  // this step's part of the worst-case bound, >= 0
};

// One dot product's element: a[k] * b[k] over k (+ c), computed by `plan` into `emulated`.
// Steps with no part (no c, nothing flushed) are left out.
std::vector<BoundShare> dot_bound_shares(const double* a, std::ptrdiff_t a_stride, const double* b,
                                         std::ptrdiff_t b_stride, std::size_t K, const double* c,
                                         const core::Plan& plan, double emulated);

// A value rounded into `out` whose computation before the cast is bounded by `bound` in all:
// the output rounding's part and the rest (the op's stages before it), for ops without their own
// bound_sources.
std::vector<BoundShare> output_rounding_shares(const Cast& out, double emulated, double bound);

// "accumulation sequential(...) 93%, output rounding into fp32 nearest_even 7%": largest first.
std::string describe(const std::vector<BoundShare>& shares);

}  // namespace numeq::cases
