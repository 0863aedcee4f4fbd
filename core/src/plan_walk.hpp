#pragma once
// The plan walk's entry points that the matmul paths share with sum and dot (private to core/):
// the terms a plan reduces, the walk of a whole plan over them, the input casts and the output's
// last steps. evaluate.cpp defines them (the walk); matmul.cpp runs them on the elements its
// kernels cannot finish and checks its kernels' plans against host_fp32.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "numeq/core/plan.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::core::detail {

// Whether the cast is exactly the host's IEEE binary32 round-to-nearest-even arithmetic (no
// flushing, IEEE overflow): then the host's own float + and fmaf give the kernel's result. Inline:
// add_rounded asks it at every addition.
inline bool host_fp32(const Cast& c) {
  return c.format == formats::fp32 && c.rounding == Rounding::nearest_even && c.overflow == Overflow::ieee &&
         c.subnormals == Subnormals::keep;
}

// An input or partial value, or a product a_k b_k: what the leaves reduce.
// Whether the terms are products is stated, never inferred from b: a dot product or matmul with
// K = 0 has empty operands (null data) and is still a reduction of products.
struct Terms {
  const double* a = nullptr;
  const double* b = nullptr;  // products: the second factors
  bool products = false;      // false: the terms are the values a[k]
  double term(std::size_t k) const { return products ? a[k] * b[k] : a[k]; }  // exact (see evaluate.hpp)
};

// The plan's reduction of terms [0, n) (init: c placed first, or none), added to plan.initial when
// it has one.
double reduce_plan(const Plan& plan, const Terms& t, std::size_t n, std::optional<double> init);

// An element's last steps: c added where the plan places it last, then the output cast (random:
// the element's stochastic draw, 0 for the other roundings).
double finish(double value, std::optional<double> c, const Plan& plan, std::uint64_t random);

// Input casts (tf32 truncation and the like) applied to a copy.
std::vector<double> cast_inputs(const double* x, std::size_t n, const std::optional<Cast>& cast);

// Refuses operands whose products are not exact in binary64 (more than 53 significant bits
// between a's widest and b's widest value), naming a and b.
void check_products_exact(const double* a, std::size_t na, const double* b, std::size_t nb);

}  // namespace numeq::core::detail
