// The bound of a matmul (bound.hpp): per element, the walk's weights applied to |a| and |b|
// through a blocked matmul of non-negative matrices.

#include "numeq/core/bound.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xbroadcast.hpp>

#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/round_and_pack.hpp"

#include "bound_probabilistic.hpp"
#include "bound_rounder.hpp"
#include "bound_walk.hpp"
#include "shapes.hpp"

namespace numeq::core::bound_detail {

using namespace detail;  // shapes.hpp

namespace {

// ---- the bound's matmul: C = X Y for non-negative X [M, K], Y [K, N] (row-major) ----
//
// Register-blocked: MR rows times NR columns of C stay in registers over a block of KC of K;
// Y is packed in strips of NR columns (zero-padded), X in panels of MR rows (zero-padded). The
// same source is compiled for AVX-512, AVX2 and the baseline and chosen at run time (results
// differ only within the inflation the caller applies: every order of a non-negative sum is
// covered by it).
constexpr std::size_t kKC = 256, kMB = 64;
// K beyond this is summed in chunks (matmul_bound_of_kind); a multiple of kKC.
constexpr std::size_t kChunkK = std::size_t{1} << 16;
static_assert(kChunkK % kKC == 0);

// GCC/Clang vector extensions: the micro-kernel states its registers explicitly (the
// auto-vectoriser spills a [4][16] accumulator array to the stack).
typedef double V2 __attribute__((vector_size(16)));
typedef double V4 __attribute__((vector_size(32)));
typedef double V8 __attribute__((vector_size(64)));

// C[MR x NR] += A panel (MR x kc, k-major) * B strip (kc x NR), NR = NV vectors of V.
template <class V, std::size_t MR, std::size_t NV>
[[gnu::always_inline]] inline void micro(const double* __restrict ap, const double* __restrict bp, std::size_t kc,
                                         double* __restrict c, std::size_t ldc) {
  constexpr std::size_t L = sizeof(V) / sizeof(double), NR = NV * L;
  V acc[MR][NV];
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t v = 0; v < NV; ++v) acc[r][v] = V{};
  for (std::size_t k = 0; k < kc; ++k) {
    V b[NV];
    for (std::size_t v = 0; v < NV; ++v) std::memcpy(&b[v], bp + k * NR + v * L, sizeof(V));
    for (std::size_t r = 0; r < MR; ++r) {
      const double a = ap[k * MR + r];
      for (std::size_t v = 0; v < NV; ++v) acc[r][v] += b[v] * a;
    }
  }
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t v = 0; v < NV; ++v) {
      V cur;
      std::memcpy(&cur, c + r * ldc + v * L, sizeof(V));
      cur += acc[r][v];
      std::memcpy(c + r * ldc + v * L, &cur, sizeof(V));
    }
}

// Rows [0, rows) of C (ldc = N padded to NR) from X rows (length K) and Y packed in strips of
// K x NR; apack holds ceil(kMB / MR) panels of kKC x MR.
template <class V, std::size_t MR, std::size_t NV>
[[gnu::always_inline]] inline void block_rows(const double* X, std::size_t K, const double* Yp, std::size_t strips,
                                              double* C, std::size_t ldc, std::size_t rows, double* apack) {
  constexpr std::size_t NR = NV * (sizeof(V) / sizeof(double));
  const std::size_t panels = (rows + MR - 1) / MR;
  for (std::size_t k0 = 0; k0 < K; k0 += kKC) {
    const std::size_t kc = std::min(kKC, K - k0);
    for (std::size_t p = 0; p < panels; ++p)
      for (std::size_t k = 0; k < kc; ++k)
        for (std::size_t r = 0; r < MR; ++r) {
          const std::size_t row = p * MR + r;
          apack[(p * kKC + k) * MR + r] = row < rows ? X[row * K + k0 + k] : 0.0;
        }
    for (std::size_t s = 0; s < strips; ++s)
      for (std::size_t p = 0; p < panels; ++p)
        micro<V, MR, NV>(apack + p * kKC * MR, Yp + (s * K + k0) * NR, kc, C + p * MR * ldc + s * NR, ldc);
  }
}

[[gnu::target("avx512f")]] void block_rows_avx512(const double* X, std::size_t K, const double* Yp,
                                                  std::size_t strips, double* C, std::size_t ldc, std::size_t rows,
                                                  double* apack) {
  block_rows<V8, 8, 2>(X, K, Yp, strips, C, ldc, rows, apack);
}
[[gnu::target("avx2")]] void block_rows_avx2(const double* X, std::size_t K, const double* Yp, std::size_t strips,
                                             double* C, std::size_t ldc, std::size_t rows, double* apack) {
  block_rows<V4, 4, 2>(X, K, Yp, strips, C, ldc, rows, apack);
}
void block_rows_portable(const double* X, std::size_t K, const double* Yp, std::size_t strips, double* C,
                         std::size_t ldc, std::size_t rows, double* apack) {
  block_rows<V2, 4, 2>(X, K, Yp, strips, C, ldc, rows, apack);
}

struct BlockKernel {
  std::size_t mr, nr;
  void (*run)(const double*, std::size_t, const double*, std::size_t, double*, std::size_t, std::size_t, double*);
};
BlockKernel block_kernel() {
  // The CPU's instruction sets and NUMEQ_ISA are read in one place (cpu_dispatch.hpp).
  switch (current_isa()) {
    case Isa::avx512: return {8, 16, block_rows_avx512};
    case Isa::avx2: return {4, 8, block_rows_avx2};
    case Isa::portable: break;
  }
  return {4, 4, block_rows_portable};
}

}  // namespace

xt::xarray<double> matmul_bound_of_kind(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                                const Plan& plan, const xt::xarray<double>& emulated, const BoundOptions& options) {
  const MatmulLayout layout = matmul_layout(a, b, c);
  const std::size_t M = layout.M, K = layout.K, N = layout.N;
  const std::vector<std::size_t>& shape = layout.shape;
  check_emulated(emulated, shape);
  const xt::xarray<double>& fc = layout.fc;
  const BatchOperands& operands = layout.operands;
  const std::vector<std::size_t>& a_of = operands.a_of;
  const std::vector<std::size_t>& b_of = operands.b_of;
  const std::size_t matrices = a_of.size();
  const Walk w = walk(plan, K, c != nullptr, true, options);
  xt::xarray<double> result = xt::xarray<double>::from_shape(shape);
  if (result.size() == 0) return result;
  if (K == 0) {
    // No products (a [.., M, 0] @ b [.., 0, N]): only c, initial and the plan's constant part
    // remain; the operand sums below would index rows and columns of empty matrices.
    for (std::size_t i = 0; i < result.size(); ++i) {
      if (nothing_reduced(K, c, plan)) {
        result.data()[i] = std::fabs(emulated.data()[i]);
        continue;
      }
      double pre = w.absolute, cm = 0;
      bool nonfinite = false;
      if (c) {
        cm = std::fabs(fc.data()[i]);
        nonfinite = !std::isfinite(cm);
        pre = add_up(pre, mul_up(w.init, cm));
      }
      const double magnitude = w.finite_overflow ? add_up(add_up(pre, cm), w.initial) : 0.0;
      result.data()[i] = finish(w, emulated.data()[i], pre, magnitude, nonfinite, false);
    }
    return result;
  }
  const std::size_t a_matrices = M * K == 0 ? 0 : a.size() / (M * K);
  const std::size_t b_matrices = K * N == 0 ? 0 : b.size() / (K * N);
  // Per row of a and per column of b: sum_k Ca_k |a_mk| and sum_k Cb_k |b_kn| (inflated), the
  // largest input (input-cast overflow) and whether all are finite.
  std::vector<double> row_term(a_matrices * M, 0.0), col_term(b_matrices * N, 0.0);
  std::vector<char> row_bad(a_matrices * M, 0), col_bad(b_matrices * N, 0), row_over(a_matrices * M, 0),
      col_over(b_matrices * N, 0);
  parallel_for(a_matrices * M, [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      const double* x = a.data() + r * K;
      double s = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const double v = std::fabs(x[k]);
        if (!std::isfinite(v)) row_bad[r] = 1;
        if (v > w.input_threshold_a) row_over[r] = 1;
        if (!w.Ca.empty()) s += w.Ca[k] * v;
      }
      row_term[r] = inflate(s, K);
    }
  }, 256);
  parallel_for(b_matrices * N, [&](std::size_t begin, std::size_t end) {
    for (std::size_t q = begin; q < end; ++q) {
      const std::size_t s_idx = q / N, nn = q % N;
      const double* y = b.data() + s_idx * K * N + nn;
      double s = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const double v = std::fabs(y[k * N]);
        if (!std::isfinite(v)) col_bad[q] = 1;
        if (v > w.input_threshold_b) col_over[q] = 1;
        if (!w.Cb.empty()) s += w.Cb[k] * v;
      }
      col_term[q] = inflate(s, K);
    }
  }, 256);
  // The matmul of |a| diag(W) and |b|; non-finite inputs are read as 0 there (their elements
  // get NaN below). The magnitude sum |a||b| is needed only for the overflow check; with every
  // weight positive it is at most the weighted sum divided by the smallest weight.
  const double w_min = K == 0 ? 0.0 : *std::min_element(w.W.begin(), w.W.end());
  const bool need_magnitude = w.finite_overflow && !(w_min > 0);
  const BlockKernel kernel = block_kernel();
  const std::size_t kNR = kernel.nr, kMR = kernel.mr;
  const std::size_t strips = (N + kNR - 1) / kNR, ldc = strips * kNR;
  // Long K goes in chunks of kChunkK (a multiple of kKC, so each block's sums keep the order one
  // pass gives, bit for bit): the packed |b| and each block's rows hold one chunk, the blocks'
  // sums C stay for the next chunk. A dot product of K = 2^26 then holds its inputs and a few
  // megabytes, not its |b| padded to a panel of kNR columns and kMB rows of weighted |a|.
  const std::size_t chunk = std::min(K, kChunkK), chunks = (K + chunk - 1) / chunk;
  const std::size_t row_blocks = (M + kMB - 1) / kMB;
  // A block holds at most kMB rows, and never more than a has; its sums C are written in whole
  // panels of kMR rows (block_rows), so they hold rows_held rounded up to kMR.
  const std::size_t rows_held = std::min(kMB, M);
  const std::size_t c_rows = (rows_held + kMR - 1) / kMR * kMR;
  const std::size_t tasks = matrices * row_blocks;
  // Sums kept across chunks (only when there are several: one chunk sums each block at once).
  std::vector<double> kept_C(chunks > 1 ? tasks * c_rows * ldc : 0, 0.0);
  std::vector<double> kept_Cm(chunks > 1 && need_magnitude ? kept_C.size() : 0, 0.0);
  std::vector<double> packed(b_matrices * strips * chunk * kNR, 0.0);
  std::vector<double> packed_unit(need_magnitude ? packed.size() : 0, 0.0);
  for (std::size_t piece = 0; piece < chunks; ++piece) {
    const std::size_t k0 = piece * chunk, kc = std::min(chunk, K - k0);
    const bool last = piece + 1 == chunks;
    parallel_for(b_matrices * strips, [&](std::size_t begin, std::size_t end) {
      for (std::size_t q = begin; q < end; ++q) {
        const std::size_t s_idx = q / strips, s = q % strips;
        double* out = packed.data() + q * kc * kNR;
        for (std::size_t k = 0; k < kc; ++k)
          for (std::size_t j = 0; j < kNR; ++j) {
            const std::size_t col = s * kNR + j;
            if (col >= N) continue;
            const double v = std::fabs(b.data()[s_idx * K * N + (k0 + k) * N + col]);
            out[k * kNR + j] = std::isfinite(v) ? v : 0.0;
          }
        if (need_magnitude) std::copy(out, out + kc * kNR, packed_unit.data() + q * kc * kNR);
      }
    }, 16);
    parallel_for(tasks, [&](std::size_t begin, std::size_t end) {
      std::vector<double> X(rows_held * kc), local_C(chunks > 1 ? 0 : c_rows * ldc), local_Cm,
          apack(((kMB + kMR - 1) / kMR) * kKC * kMR);
      std::vector<double> Xu;
      if (need_magnitude) {
        local_Cm.resize(chunks > 1 ? 0 : c_rows * ldc);
        Xu.resize(rows_held * kc);
      }
      for (std::size_t task = begin; task < end; ++task) {
        const std::size_t t = task / row_blocks, m0 = (task % row_blocks) * kMB;
        const std::size_t rows = std::min(kMB, M - m0);
        const double* arows = a.data() + (a_of[t] * M + m0) * K;
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t k = 0; k < kc; ++k) {
            const double v = std::fabs(arows[r * K + k0 + k]);
            const double fv = std::isfinite(v) ? v : 0.0;
            X[r * kc + k] = w.W[k0 + k] * fv;  // rounded to nearest: inside the inflation's K + 8
            if (need_magnitude) Xu[r * kc + k] = fv;
          }
        double* C = chunks > 1 ? kept_C.data() + task * c_rows * ldc : local_C.data();
        double* Cm = need_magnitude ? (chunks > 1 ? kept_Cm.data() + task * c_rows * ldc : local_Cm.data()) : nullptr;
        if (chunks == 1) {
          std::fill(C, C + c_rows * ldc, 0.0);
          if (Cm) std::fill(Cm, Cm + c_rows * ldc, 0.0);
        }
        kernel.run(X.data(), kc, packed.data() + b_of[t] * strips * kc * kNR, strips, C, ldc, rows, apack.data());
        if (need_magnitude)
          kernel.run(Xu.data(), kc, packed_unit.data() + b_of[t] * strips * kc * kNR, strips, Cm, ldc, rows,
                     apack.data());
        if (!last) continue;
        for (std::size_t r = 0; r < rows; ++r) {
          const std::size_t ra = a_of[t] * M + m0 + r;
          for (std::size_t n = 0; n < N; ++n) {
            const std::size_t qb = b_of[t] * N + n;
            const std::size_t i = (t * M + m0 + r) * N + n;
            double pre = add_up(add_up(inflate(C[r * ldc + n], K), row_term[ra]), add_up(col_term[qb], w.absolute));
            bool nonfinite = row_bad[ra] || col_bad[qb];
            double cm = 0;
            if (c) {
              cm = std::fabs(fc.data()[i]);
              nonfinite = nonfinite || !std::isfinite(cm);
              pre = add_up(pre, mul_up(w.init, cm));
            }
            double magnitude = 0;
            if (w.finite_overflow) {
              const double sum_abs = need_magnitude ? inflate(Cm[r * ldc + n], K) : up(pre / w_min);
              magnitude = add_up(add_up(add_up(sum_abs, pre), cm), w.initial);
            }
            result.data()[i] =
                finish(w, emulated.data()[i], pre, magnitude, nonfinite, row_over[ra] || col_over[qb]);
          }
        }
      }
    }, 1);
  }
  return result;
}

}  // namespace numeq::core::bound_detail
