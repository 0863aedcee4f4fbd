// The models of a sum's mistakes (diagnosis.hpp, diagnose_reduction): one K tile never added, or
// added twice. Which tile and which tile size are ranked on each failing element's prefix sums,
// then tested within the platform's bound: the mistaken kernel's own order of addition is unknown,
// so the test is that the output lies within the bound of the exact sum less (plus) the tile's
// exact sum. The same test as the matmul's missing_k_tile where that one cannot replay the plan.

#include "numeq/cases/diagnosis.hpp"

#include "tile_search.hpp"
#include "verdict_text.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace numeq::cases {

std::vector<Diagnosis> diagnose_reduction(const xt::xarray<double>& terms, const DiagnosisData& d) {
  std::vector<Diagnosis> out;
  if (terms.dimension() == 0 || d.failing.empty()) return out;
  const std::size_t K = terms.shape().back();
  if (K < 2 || terms.size() / K != d.actual.size()) return out;
  const std::vector<std::size_t> sample = detail::spread_evenly(d.failing, 64);
  const std::size_t ranked = std::min<std::size_t>(sample.size(), 32);
  // Per ranked element: its error against the exact sum, and the prefix sums of its row's terms
  // (exact enough to rank; the test below uses each tile's sum afresh).
  std::vector<double> error(ranked);
  std::vector<std::vector<double>> prefix(ranked);
  for (std::size_t s = 0; s < ranked; ++s) {
    const std::size_t i = sample[s];
    error[s] = d.actual.data()[i] - (d.exact.hi.data()[i] + d.exact.lo.data()[i]);
    prefix[s].assign(K + 1, 0.0);
    for (std::size_t k = 0; k < K; ++k) prefix[s][k + 1] = prefix[s][k] + terms.data()[i * K + k];
  }
  for (const int sign : {-1, +1}) {  // -1: the tile is missing (the output lacks its sum); +1: extra
    const detail::TileGuess guess = detail::likeliest_tile(error, prefix, K, sign);
    const std::size_t best_T = guess.size, best_t = guess.index;
    if (!best_T) continue;
    const std::size_t lo = best_t * best_T, hi = std::min(K, lo + best_T);
    std::size_t hits = 0;
    for (const std::size_t i : sample) {
      double part = 0;
      for (std::size_t k = lo; k < hi; ++k) part += terms.data()[i * K + k];
      const double want = d.exact.hi.data()[i] + d.exact.lo.data()[i] + sign * part;
      const double g = d.actual.data()[i];
      hits += std::abs(g - want) <= d.bound.data()[i] + std::ldexp(std::abs(g) + std::abs(part), -50);
    }
    if (!hits) continue;
    const double share = static_cast<double>(hits) / static_cast<double>(sample.size());
    const std::string which = (hi == K ? "the last K tile" : "K tile " + std::to_string(best_t)) + " (terms " +
                              std::to_string(lo) + ".." + std::to_string(hi - 1) + " of K, tiles of " +
                              std::to_string(best_T) + ")";
    const std::string on = detail::sample_words(sample.size(), d.failing.size());
    out.push_back(Diagnosis{sign < 0 ? "missing_k_tile" : "extra_k_tile", share,
                            which + (sign < 0 ? " never added" : " added twice") + " reproduces " +
                                detail::number(100 * share, 3) + "% of the failing elements",
                            std::string("within the platform's bound: the exact sum ") + (sign < 0 ? "less" : "plus") +
                                " the tile's exact sum, on " + on});
  }
  return out;
}

}  // namespace numeq::cases
