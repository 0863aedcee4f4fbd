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

}  // namespace numeq::core
