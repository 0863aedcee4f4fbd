// Where one element's bound comes from (bound_source.hpp): the steps of the walk that gives it.

#include "numeq/cases/bound_source.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "numeq/core/bound.hpp"

namespace numeq::cases {

namespace {

std::string cast_name(const Cast& c) {
  return std::string(c.format.name) + " " + std::string(to_string(c.rounding));
}

}  // namespace

std::vector<BoundShare> dot_bound_shares(const double* a, std::ptrdiff_t a_stride, const double* b,
                                         std::ptrdiff_t b_stride, std::size_t K, const double* c,
                                         const core::Plan& plan, double emulated) {
  // The walk's weights (core::reduction_weights, the same the bound uses): the bound before the
  // output cast is sum_k term[k] |a_k b_k| + sum_k (a_term[k] |a_k| + b_term[k] |b_k|)
  // + init |c| + absolute; the output cast adds its own rounding (core::with_output_cast).
  const core::ReductionWeights w = core::reduction_weights(plan, K, c != nullptr);
  double accumulation = 0, inputs = 0;
  for (std::size_t k = 0; k < K; ++k) {
    const double x = std::fabs(a[static_cast<std::ptrdiff_t>(k) * a_stride]);
    const double y = std::fabs(b[static_cast<std::ptrdiff_t>(k) * b_stride]);
    accumulation += w.term[k] * x * y;
    if (!w.a_term.empty()) inputs += w.a_term[k] * x;
    if (!w.b_term.empty()) inputs += w.b_term[k] * y;
  }
  const double init = c ? w.init * std::fabs(*c) : 0.0;
  const double pre = accumulation + inputs + init + w.absolute;
  std::vector<BoundShare> shares;
  shares.push_back({"accumulation " + core::to_string(plan.reduction), accumulation});
  if (inputs > 0) shares.push_back({"input casts and subnormal operands", inputs});
  if (init > 0) shares.push_back({"the addition of c", init});
  if (w.absolute > 0) shares.push_back({"underflow and flushed values", w.absolute});
  const double total = core::with_output_cast(plan.output, emulated, pre);
  if (std::isfinite(total)) shares.push_back({"output rounding into " + cast_name(plan.output), std::max(0.0, total - pre)});
  return shares;
}

std::vector<BoundShare> output_rounding_shares(const Cast& out, double emulated, double bound) {
  // The cast's own error on a value that lands on `emulated` (nothing before it: a bound of 0).
  const double cast = std::min(bound, core::with_output_cast(out, emulated, 0.0));
  if (!(std::isfinite(bound) && std::isfinite(cast))) return {};
  return {{"output rounding into " + cast_name(out), cast}, {"the op's stages before the output cast", bound - cast}};
}

std::string describe(const std::vector<BoundShare>& shares) {
  double total = 0;
  for (const BoundShare& s : shares) total += s.amount;
  if (!(total > 0) || !std::isfinite(total)) return "";
  std::vector<BoundShare> sorted = shares;
  std::stable_sort(sorted.begin(), sorted.end(), [](const BoundShare& x, const BoundShare& y) { return x.amount > y.amount; });
  std::string text;
  for (const BoundShare& s : sorted) {
    if (s.amount <= 0) continue;
    const double percent = 100.0 * s.amount / total;
    // Whole percents; "<1%" for a step that commits almost nothing (it still has a part).
    const std::string share = percent < 1 ? "<1" : std::to_string(static_cast<int>(std::lround(percent)));
    if (!text.empty()) text += ", ";
    text += s.step + " " + share + "%";
  }
  return text;
}

}  // namespace numeq::cases
