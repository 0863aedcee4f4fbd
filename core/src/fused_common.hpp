#pragma once
// What fused.cpp (the model and its exact reference step) and fused_fast.cpp (the fast path and
// the public step and chain entry points) share: the step and chain checks, whose errors both
// raise, a format's largest exponent and a step's zero result. Private to core/.

#include <cstddef>
#include <span>

#include "numeq/core/fused.hpp"

namespace numeq::core::fused_detail {

// Where the largest candidate exponent E starts when a step has no floor (or a lower one): below
// every candidate the fast paths take (their operands' exponents lie within +-400, so products'
// within +-800), so it never decides E.
inline constexpr int no_candidate_exponent = -900;

// validate(step, "step"): every error a step can have, before any arithmetic.
void check_step(const FusedStep& step);
// K products within both operands.
void check_chain_length(std::span<const double> a, std::span<const double> b, std::size_t K);
// The step's zero result of the given sign, rounded into its output cast.
double zero_result(const FusedStep& step, bool negative);

}  // namespace numeq::core::fused_detail
