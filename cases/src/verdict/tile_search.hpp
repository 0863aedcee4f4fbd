#pragma once
// Which K tile a kernel lost (or added twice): the guess the matmul's and the sum's
// missing_k_tile / extra_k_tile diagnoses both test (diagnosis_matmul.cpp, diagnosis_reduction.cpp).

#include <cmath>
#include <cstddef>
#include <vector>

namespace numeq::cases::detail {

struct TileGuess {
  std::size_t size = 0;   // T: 0 when K holds no tile smaller than itself
  std::size_t index = 0;  // t: the tile [t T, min(K, (t + 1) T))
};

// The tile whose sum, times `sign` (-1: missing, +1: added twice), best matches each ranked
// element's error against the exact result: `prefix[s]` holds element s's prefix sums of its K
// terms (K + 1 values). Tiles of 128 first (NKI's partition count and CUTLASS's usual K tile),
// then 64, 32, 256, 512; ties keep the first.
inline TileGuess likeliest_tile(const std::vector<double>& error, const std::vector<std::vector<double>>& prefix,
                                std::size_t K, int sign) {
  double best_score = INFINITY;
  TileGuess best;
  for (const std::size_t T : {128u, 64u, 32u, 256u, 512u}) {
    if (T >= K) continue;
    for (std::size_t t = 0; t * T < K; ++t) {
      const std::size_t e = K < (t + 1) * T ? K : (t + 1) * T;
      double score = 0;
      for (std::size_t s = 0; s < error.size(); ++s) {
        const double part = prefix[s][e] - prefix[s][t * T];
        score += std::abs(error[s] - sign * part) / (std::abs(part) + std::abs(error[s]) + 1e-300);
      }
      if (score < best_score) best_score = score, best = {T, t};
    }
  }
  return best;
}

}  // namespace numeq::cases::detail
