#pragma once
// The fast path of certified attention (attention.cpp), in double arithmetic with a proven error
// bound, as softmax's (softmax.cpp): per query row, compensated dot products (TwoProduct by fma
// and TwoSum, Ogita, Rump and Oishi, "Accurate sum and dot product", SIAM J. Sci. Comput. 26(6),
// 2005) give the scores q_i . k_j and the weighted sums sum_j e_j v[j, c], each with a bound
// derived in attention_fast.cpp; a vectorised exp with a proven bound gives e_j = e^(s_j - s_ref)
// to within a relative rho, and Sum2 encloses their sum. Every output element gets an enclosure [lo, hi] of its exact value, which decide()
// (composite_rows.hpp) turns into the rounded result (Ziv's test), an enclosed result, or leaves
// pending for the MPFR loop. Internal to references/.

#include <cstddef>
#include <vector>

#include <xtensor/xarray.hpp>

#include "composite_rows.hpp"

namespace numeq::reference::rows {

// What one attention call's rows share: the keys transposed per batch (the score loop runs over
// keys, contiguous), and per batch which keys and value columns are finite, their largest
// magnitudes and smallest non-zero ones (the products' underflow test).
class AttentionFastPath {
 public:
  AttentionFastPath(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                    const AttentionParameters& parameters, const Cast& out, bool enclosed);

  // Whether the fast path runs at all (NUMEQ_FUNCTIONS=mpfr and outputs it cannot decide: no).
  bool enabled() const { return enabled_; }
  // Whether key j of batch b has only finite entries; whether value column c of batch b has.
  bool key_finite(std::size_t b, std::size_t j) const { return key_finite_[b * lk_ + j] != 0; }
  bool column_finite(std::size_t b, std::size_t c) const { return column_finite_[b * dv_ + c] != 0; }

  // Decides what it can of `pending` (output indices base + c of row `row_index`, flat over batch
  // and query); the rest stay. keys: the keys that take part (ascending, non-empty, all finite,
  // q's row finite).
  void decide_row(std::size_t row_index, std::size_t base, const std::vector<std::size_t>& keys,
                  std::vector<std::size_t>& pending, const RowOutput& row) const;

 private:
  const double* q_;
  const double* v_;
  const double* mask_;
  std::size_t lq_, d_, lk_, dv_;
  DoubleInterval scale_;
  bool enabled_ = false;
  std::vector<double> key_t_;             // [b][c][j]: k transposed per batch
  std::vector<unsigned char> key_finite_;  // [b][j]
  std::vector<unsigned char> column_finite_;  // [b][c]
  std::vector<double> column_max_;        // [b][c]: max |v[j, c]| over the batch's keys
  std::vector<double> key_min_;           // [b]: the smallest non-zero |k| (inf: none)
  std::vector<double> value_min_;         // [b]: the smallest non-zero |v| (inf: none)
};

}  // namespace numeq::reference::rows
