// The models of row-wise kernels' mistakes (diagnosis.hpp). A softmax: the row's maximum never
// subtracted (exp of the raw logits: it overflows where the logits are large), and the
// exponentials or the whole computation in a narrower format than the op's (an fp16 or bf16
// intermediate); each the platform's own softmax emulation with that one choice changed, counted
// bit for bit on the failing elements. A normalisation: another eps than the op's, the usual
// ones tried, counted within the platform's bound (a kernel's own order rarely matches bit for bit).

#include "numeq/cases/diagnosis.hpp"

#include "verdict_text.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>

#include "numeq/cases/normalization.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::cases {

std::vector<Diagnosis> diagnose_softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, bool log,
                                        const SoftmaxOptions& own, const DiagnosisData& d) {
  struct Hypothesis {
    SoftmaxOptions options;
    std::string kind, words;
  };
  std::vector<Hypothesis> tries;
  for (const Format* f : {&own.compute, &formats::fp16, &formats::bf16}) {
    if (f != &own.compute && *f == own.compute) continue;
    if (own.variant != SoftmaxVariant::plain) {
      SoftmaxOptions o = own;
      o.variant = SoftmaxVariant::plain;
      o.compute = *f;
      tries.push_back({o, "missing_max_subtraction",
                       "exp of the raw logits, the row's maximum never subtracted (computed in " + std::string(f->name) +
                           "): it overflows where the logits are large"});
    }
    if (*f != own.compute) {
      SoftmaxOptions o = own;
      o.compute = *f;
      tries.push_back({o, "narrow_intermediate",
                       "the softmax computed in " + std::string(f->name) + " where the op computes in " +
                           std::string(own.compute.name) + " (its exponentials and sum rounded to " +
                           std::string(f->name) + ")"});
    }
  }
  std::vector<Diagnosis> out;
  for (const Hypothesis& h : tries) {
    Emulation e;
    try {
      e = log ? log_softmax(x, axis, d.platform, d.out, h.options) : softmax(x, axis, d.platform, d.out, h.options);
    } catch (const numeq::error&) {
      continue;  // the platform has no such path
    }
    // Bit for bit where the kernel adds in the platform's order; else within that computation's own
    // worst-case bound of the exact result (a kernel's other order in the same narrow format).
    std::size_t exact_hits = 0, bound_hits = 0;
    for (const std::size_t i : d.failing) {
      const double g = d.actual.data()[i], y = e.values.data()[i];
      if (detail::same_value(g, y)) {
        ++exact_hits;
        continue;
      }
      // Only an element the op's own computation cannot give (beyond its bound) is evidence.
      const double x = d.exact.hi.data()[i] + d.exact.lo.data()[i], B = e.bound.data()[i];
      bound_hits += std::isfinite(g) && std::isfinite(x) && std::isfinite(B) && std::abs(g - x) > d.bound.data()[i] &&
                    std::abs(g - x) <= B * (1 + 0x1p-40);
    }
    const std::size_t hits = exact_hits + bound_hits;
    if (!hits) continue;
    const double share = static_cast<double>(hits) / static_cast<double>(d.failing.size());
    out.push_back({h.kind, share,
                   std::to_string(hits) + " of the " + std::to_string(d.failing.size()) + " failing elements are " +
                       h.words,
                   // The evidence's class (diagnosis.hpp, exact_evidence): bit for bit when most
                   // failing elements are reproduced exactly.
                   std::string(static_cast<double>(exact_hits) >= kDiagnosisThreshold * static_cast<double>(d.failing.size())
                                   ? "bit for bit"
                                   : "within the platform's bound") +
                       ": the platform's softmax with that one choice changed, on every failing element: " +
                       std::to_string(exact_hits) + " bit for bit, " + std::to_string(bound_hits) +
                       " within its worst-case bound of the exact result"});
  }
  return out;
}

std::vector<Diagnosis> diagnose_norm(const xt::xarray<double>& x, const reference::NormParameters& own, bool centred,
                                     const NormOptions& options, const DiagnosisData& d) {
  std::vector<Diagnosis> out;
  std::optional<Diagnosis> best;
  // The rows holding failures (at most 16, spread evenly), each normalised alone: the part of the
  // op every hypothesis is emulated on.
  const std::size_t n = x.shape().back();
  std::vector<std::size_t> rows;
  for (const std::size_t i : d.failing)
    if (rows.empty() || rows.back() != i / n) rows.push_back(i / n);
  rows = detail::spread_evenly(rows, 16);
  xt::xarray<double> part(std::vector<std::size_t>{rows.size(), n});
  for (std::size_t r = 0; r < rows.size(); ++r) std::copy_n(x.data() + rows[r] * n, n, part.data() + r * n);
  std::vector<std::pair<std::size_t, std::size_t>> at;  // (flat in the op, flat in the part) of the failures there
  for (const std::size_t i : d.failing) {
    const auto r = std::lower_bound(rows.begin(), rows.end(), i / n);
    if (r != rows.end() && *r == i / n) at.emplace_back(i, static_cast<std::size_t>(r - rows.begin()) * n + i % n);
  }
  // How many failing elements the normalisation with parameters `p` explains (-1: the platform
  // has no such path). Only an element the op's own parameters cannot give (beyond its bound of the
  // exact result) is evidence; it is explained when it lies within the bound of the other value.
  const auto explained = [&](const reference::NormParameters& p) -> std::ptrdiff_t {
    Emulation e;
    try {
      e = centred ? layernorm(part, p, d.platform, d.out, options) : rmsnorm(part, p, d.platform, d.out, options);
    } catch (const numeq::error&) {
      return -1;
    }
    std::ptrdiff_t hits = 0;
    for (const auto& [i, j] : at) {
      const double g = d.actual.data()[i], y = e.values.data()[j];
      const double x = d.exact.hi.data()[i] + d.exact.lo.data()[i], B = d.bound.data()[i];
      hits += detail::same_value(g, y) || (std::abs(g - x) > B && std::abs(g - y) <= 2 * B);
    }
    return hits;
  };
  // The unbiased variance (divided by n - 1, as torch.var and numpy's ddof=1 give it): for a
  // layernorm, gamma (x - mean) / sqrt(var n / (n - 1) + eps) + beta is the op's own formula with
  // gamma * s and eps * s^2, s = sqrt((n - 1) / n): emulated so, no second formula.
  if (centred && n > 1) {
    const double s2 = static_cast<double>(n - 1) / static_cast<double>(n);
    const xt::xarray<double> gamma = own.gamma ? xt::xarray<double>(*own.gamma * std::sqrt(s2))
                                               : xt::xarray<double>(xt::ones<double>({n}) * std::sqrt(s2));
    reference::NormParameters p = own;
    p.gamma = &gamma;
    p.eps = own.eps * s2;
    const std::ptrdiff_t hits = explained(p);
    const double share = at.empty() || hits <= 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(at.size());
    if (share > 0)
      out.push_back({"unbiased_variance", share,
                     std::to_string(hits) + " of the " + std::to_string(at.size()) + " failing elements of the " +
                         std::to_string(rows.size()) + " rows examined are the layernorm with the unbiased variance "
                         "(divided by n - 1 = " + std::to_string(n - 1) + ", not n = " + std::to_string(n) +
                         ": torch.var's default, numpy's ddof=1)",
                     "within the platform's bound: its emulation with the variance times n / (n - 1), on the failing "
                     "elements of " + std::to_string(rows.size()) + " failing rows"});
  }
  for (const double eps : {0.0, 1e-12, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1}) {
    if (eps == own.eps) continue;
    reference::NormParameters p = own;
    p.eps = eps;
    const std::ptrdiff_t hits = explained(p);
    if (hits < 0) continue;
    const double share = at.empty() ? 0.0 : static_cast<double>(hits) / static_cast<double>(at.size());
    if (hits && (!best || share > best->explains))
      best = Diagnosis{"wrong_eps", share,
                       std::to_string(hits) + " of the " + std::to_string(at.size()) + " failing elements of the " +
                           std::to_string(rows.size()) + " rows examined are the " +
                           (centred ? "layernorm" : "rmsnorm") + " with eps = " + detail::number(eps, 3) +
                           " where the op's eps is " + detail::number(own.eps, 3),
                       "within the platform's bound: its emulation with that eps, on the failing elements of " +
                           std::to_string(rows.size()) + " failing rows"};
  }
  // eps added outside the square root: (x - mean) / (sqrt(var) + eps), or x / (rms + eps): the
  // rows' statistics in binary64 (far below any bound), each failing element within twice its bound.
  if (own.eps > 0) {
    std::size_t hits = 0;
    for (const auto& [i, j] : at) {
      const double* row = part.data() + j / n * n;
      double mean = 0, spread = 0;
      if (centred)
        for (std::size_t c = 0; c < n; ++c) mean += row[c] / static_cast<double>(n);
      for (std::size_t c = 0; c < n; ++c) spread += (row[c] - mean) * (row[c] - mean) / static_cast<double>(n);
      const std::size_t c = j % n;
      double y = (row[c] - mean) / (std::sqrt(spread) + own.eps);
      if (own.gamma) y *= own.gamma->data()[c];
      if (own.beta) y += own.beta->data()[c];
      const double g = d.actual.data()[i], B = d.bound.data()[i];
      const double x = d.exact.hi.data()[i] + d.exact.lo.data()[i];
      hits += std::abs(g - x) > B && std::abs(g - y) <= 2 * B + std::ldexp(std::abs(y), -40);
    }
    const double share = at.empty() ? 0.0 : static_cast<double>(hits) / static_cast<double>(at.size());
    if (hits && (!best || share > best->explains))
      best = Diagnosis{"wrong_eps", share,
                       std::to_string(hits) + " of the " + std::to_string(at.size()) + " failing elements of the " +
                           std::to_string(rows.size()) + " rows examined are the " + (centred ? "layernorm" : "rmsnorm") +
                           " with eps = " + detail::number(own.eps, 3) + " added outside the square root (" +
                           (centred ? "(x - mean) / (sqrt(var) + eps)" : "x / (rms + eps)") + ")",
                       "within the platform's bound: the rows' statistics in binary64, on the failing elements of " +
                           std::to_string(rows.size()) + " failing rows"};
  }
  if (best) out.push_back(std::move(*best));
  return out;
}

}  // namespace numeq::cases
