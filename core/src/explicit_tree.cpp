// Explicit summation trees (plan.hpp: group and term nodes): a binary group is one rounded
// addition (add_rounded, evaluate.hpp); a group of three or more children is a fused multi-term
// node, its exact sum rounded once: formats' long accumulator (exact.hpp) holds every binary64
// value at its own bit position, so the rounding that follows is the rounding of the exact value.

#include "explicit_tree.hpp"
#include "round_value.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "numeq/core/evaluate.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/exact.hpp"

namespace numeq::core {

namespace {

// x (an exact double) rounded into cast: the evaluator's own rounding (round_value.hpp).
double round_into(double x, const Cast& cast) { return detail::round_value(x, cast); }

// The exact sum of a group's values rounded once into cast (a fused multi-term addition).
double group_sum(std::span<const double> values, const Cast& cast) {
  if (values.empty()) return round_into(0.0, cast);
  if (cast.format.is_integer()) {
    // Integer accumulators: sums of integers are exact; add_rounded refuses non-integers and
    // partial sums outside the format.
    double acc = values[0];
    round_into(acc, cast);
    for (std::size_t i = 1; i < values.size(); ++i) acc = add_rounded(acc, values[i], cast);
    return acc;
  }
  return numeq::exact_sum_rounded(values, cast);
}

// A term's value in a group of arithmetic `ar`: the input, or the product (exact, or rounded
// into product_cast under ProductMode::rounded).
double term_value(const double* a, const double* b, std::size_t k, const Arithmetic& ar) {
  if (b == nullptr) return a[k];
  const double p = a[k] * b[k];  // exact: the evaluator checked the inputs' widths
  return ar.product == ProductMode::rounded ? round_into(p, ar.product_cast) : p;
}

double group_value(const PlanNode& g, const double* a, const double* b) {
  const Arithmetic& ar = g.arithmetic;
  auto child_value = [&](const PlanNode& c) {
    return c.kind == NodeKind::term ? term_value(a, b, c.index, ar) : group_value(c, a, b);
  };
  if (g.children.size() == 2) {
    double x = child_value(g.children[0]);
    const double y = child_value(g.children[1]);
    // Two terms start an accumulator: the first is rounded into it (sequential's first value,
    // an fma chain's fma(a0, b0, +0)), the second added with one rounding.
    if (g.children[0].kind == NodeKind::term && g.children[1].kind == NodeKind::term) x = round_into(x, ar.accumulate);
    return add_rounded(x, y, ar.accumulate);
  }
  std::vector<double> values;
  values.reserve(g.children.size());
  for (const PlanNode& c : g.children) values.push_back(child_value(c));
  return group_sum(values, ar.accumulate);
}

}  // namespace

double reduce_explicit_tree(const PlanNode& node, const double* a, const double* b, std::size_t n,
                            std::optional<double> init) {
  const std::size_t terms = explicit_term_count(node);
  if (terms != n)
    throw numeq::error("plan: an explicit tree (" + std::string(to_string(node.kind)) + " node) of " +
                       std::to_string(terms) + " terms cannot reduce a range of " + std::to_string(n) +
                       " terms; its terms must number exactly the range's length");
  const Arithmetic& ar = node.arithmetic;
  const double value = node.kind == NodeKind::term ? round_into(term_value(a, b, node.index, ar), ar.accumulate)
                                                   : group_value(node, a, b);
  return init ? add_rounded(*init, value, ar.accumulate) : value;
}

}  // namespace numeq::core
