#pragma once
// Fused steps that keep every bit (fused_exact.cpp): private to numeq_core; fused.cpp tries it
// before its general path.

#include <cstddef>
#include <optional>

#include "numeq/core/fused.hpp"

namespace numeq::core::detail {

// The value of a step whose F keeps every bit of every term (nothing is cut at alignment: the
// step is the exact sum c + sum_i a_i b_i rounded once into step.output; Trainium's fused PE
// column), computed in binary64 where that is exact; nullopt where the step is not such a step,
// or the inputs are not the simple case: then the general path decides (and reports the errors).
std::optional<double> exact_step(const double* a, const double* b, std::size_t n, double c, const FusedStep& step);

}  // namespace numeq::core::detail
