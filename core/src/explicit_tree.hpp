#pragma once
// Evaluation of explicit summation trees (plan nodes `group` and `term`, plan.hpp): the one entry
// the evaluator's node walk (evaluate.cpp, reduce_node) calls for them.

#include <cstddef>
#include <optional>
#include <span>

#include "numeq/core/plan.hpp"

namespace numeq::core {

// The tree's value over the n terms of a range: the values a[0 .. n) (b null) or the products
// a[k] * b[k] (exact in binary64: the evaluator checks the inputs first); init, when given, is
// added last in the tree's outermost arithmetic. numeq::error "plan: ..." when the tree does not
// cover exactly n terms.
double reduce_explicit_tree(const PlanNode& node, const double* a, const double* b, std::size_t n,
                            std::optional<double> init);

// The exact sum of `values` rounded once into cast: a fused multi-term addition. IEEE 754
// conventions as add_rounded (evaluate.hpp) keeps them for two operands: NaN in, or +Inf meeting
// -Inf, gives NaN; an exact zero sum is +0 (-0 when rounding downward), a sum of zeros -0 only
// when every zero is -0 (or any is and the rounding is downward); inputs flushed first under
// Subnormals::flush_inputs / flush_both. Integer formats add exactly and refuse overflow.
double exact_sum_rounded(std::span<const double> values, const Cast& cast);

}  // namespace numeq::core
