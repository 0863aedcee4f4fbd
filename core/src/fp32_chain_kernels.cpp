// The fp32 fma chains of matmul_kernels.hpp: GotoBLAS-style blocks of chains in vector
// registers, whole along K (cuda_core.fp32) or cut into tiles added in fp32 (Trainium's PSUM), a
// tile's products added by the chain or by a pairwise tree. Vector code is written with x86
// intrinsics in functions compiled for their instruction set (gnu::target) and chosen at run time
// (matmul_kernels.cpp); the portable code is plain C++ (std::fma). MXCSR is never touched: these
// kernels need its default (round to nearest even, no FTZ/DAZ), which every thread starts with.

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "matmul_kernels.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/widen.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NUMEQ_KERNELS_X86 1
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports at every inlined use (GCC bug 105593); nothing here is read
// uninitialised (a tile has at least one row of K, so its leaves are always set).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace numeq::core::kernels {

namespace {

// ---- fp32 fma chains ----
//
// GotoBLAS's layout: b in panels of NR columns (k-major, NR floats per k), a block of rows packed
// in groups of MR rows (k-major, MR floats per k); a micro kernel keeps MR x NR accumulators in
// registers over KC steps of k, then stores them, and the next KC steps load them back. Every
// accumulator is one output element's chain, advanced by one fma per k in increasing k, so the
// blocking changes nothing but speed. Padding rows and columns (zeros) compute chains nobody reads.

constexpr std::size_t kKc = 256;  // k steps per pass: an NR x KC panel of b (32 KiB at NR = 32) stays in L1

using Micro32 = void (*)(const float* ap, const float* bp, std::size_t kc, float* c, std::size_t ldc, bool first);

// Portable: std::fma, i.e. an IEEE fused multiply-add (the fma instruction where the build has
// one, else libm's fmaf, correctly rounded too).
constexpr int kPortableMr = 4, kPortableNr = 16;
void micro_portable(const float* ap, const float* bp, std::size_t kc, float* c, std::size_t ldc, bool first) {
  float acc[kPortableMr][kPortableNr];
  for (int r = 0; r < kPortableMr; ++r)
    for (int j = 0; j < kPortableNr; ++j) acc[r][j] = first ? 0.0f : c[r * ldc + j];
  for (std::size_t k = 0; k < kc; ++k)
    for (int r = 0; r < kPortableMr; ++r) {
      const float x = ap[k * kPortableMr + r];
      for (int j = 0; j < kPortableNr; ++j) acc[r][j] = std::fma(x, bp[k * kPortableNr + j], acc[r][j]);
    }
  for (int r = 0; r < kPortableMr; ++r)
    for (int j = 0; j < kPortableNr; ++j) c[r * ldc + j] = acc[r][j];
}

#ifdef NUMEQ_KERNELS_X86
// vfmadd231ps: a*b + c with one rounding (Intel SDM, "VFMADD132PS/VFMADD213PS/VFMADD231PS":
// "performs a set of SIMD multiply-add computation ... with infinite precision intermediate
// result ... rounded ... using the rounding mode specified by MXCSR"), i.e. IEEE 754
// fusedMultiplyAdd in binary32, the operation std::fma performs on floats.
// The vector micro kernel, for one instruction set's vectors (Avx2Floats, Avx512Floats): MR rows
// x two vectors of columns (NR = 2 * width), each accumulator one output element's chain.
// The vectors are set through references: a wide vector returned by value from the generic
// template would change the ABI between instruction sets (GCC notes it). micro_vec itself has no
// target: the kernels below inline it, with their vector operations, by gnu::flatten (a target
// function may not be always-inlined into a function without that target).
template <class S, int MR>
inline void micro_vec(const float* ap, const float* bp, std::size_t kc, float* c, std::size_t ldc, bool first) {
  constexpr int W = S::width, NR = 2 * W;
  typename S::V acc0[MR], acc1[MR], b0, b1, x;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (first) {
      S::zero(acc0[r]);
      S::zero(acc1[r]);
    } else {
      S::load(acc0[r], c + r * ldc);
      S::load(acc1[r], c + r * ldc + W);
    }
  }
  for (std::size_t k = 0; k < kc; ++k) {
    S::load(b0, bp + k * NR);
    S::load(b1, bp + k * NR + W);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      S::broadcast(x, ap + k * MR + r);
      S::fmadd(acc0[r], x, b0);
      S::fmadd(acc1[r], x, b1);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    S::store(c + r * ldc, acc0[r]);
    S::store(c + r * ldc + W, acc1[r]);
  }
}

// One instruction set's float vectors for micro_vec: zero, load,
// broadcast, fmadd (acc = x * b + acc, one rounding), store.
#define NUMEQ_AVX2_FMA gnu::target("avx2,fma")
struct Avx2Floats {
  using V = __m256;
  static constexpr int width = 8;
  [[NUMEQ_AVX2_FMA]] static void zero(V& v) { v = _mm256_setzero_ps(); }
  [[NUMEQ_AVX2_FMA]] static void load(V& v, const float* p) { v = _mm256_loadu_ps(p); }
  [[NUMEQ_AVX2_FMA]] static void broadcast(V& v, const float* p) { v = _mm256_broadcast_ss(p); }
  [[NUMEQ_AVX2_FMA]] static void fmadd(V& acc, const V& x, const V& b) { acc = _mm256_fmadd_ps(x, b, acc); }
  [[NUMEQ_AVX2_FMA]] static void store(float* p, const V& v) { _mm256_storeu_ps(p, v); }
};
#undef NUMEQ_AVX2_FMA

#define NUMEQ_AVX512F gnu::target("avx512f")
struct Avx512Floats {
  using V = __m512;
  static constexpr int width = 16;
  [[NUMEQ_AVX512F]] static void zero(V& v) { v = _mm512_setzero_ps(); }
  [[NUMEQ_AVX512F]] static void load(V& v, const float* p) { v = _mm512_loadu_ps(p); }
  [[NUMEQ_AVX512F]] static void broadcast(V& v, const float* p) { v = _mm512_set1_ps(*p); }
  [[NUMEQ_AVX512F]] static void fmadd(V& acc, const V& x, const V& b) { acc = _mm512_fmadd_ps(x, b, acc); }
  [[NUMEQ_AVX512F]] static void store(float* p, const V& v) { _mm512_storeu_ps(p, v); }
};
#undef NUMEQ_AVX512F

// AVX2: 6 rows x 16 columns = 12 ymm accumulators, 2 for b, 1 broadcast (16 registers).
constexpr int kAvx2Mr = 6, kAvx2Nr = 2 * Avx2Floats::width;
[[gnu::target("avx2,fma"), gnu::flatten]] void micro_avx2(const float* ap, const float* bp, std::size_t kc, float* c,
                                           std::size_t ldc, bool first) {
  micro_vec<Avx2Floats, kAvx2Mr>(ap, bp, kc, c, ldc, first);
}

// AVX-512: 12 rows x 32 columns = 24 zmm accumulators, 2 for b, broadcasts from memory.
constexpr int kAvx512Mr = 12, kAvx512Nr = 2 * Avx512Floats::width;
[[gnu::target("avx512f"), gnu::flatten]] void micro_avx512(const float* ap, const float* bp, std::size_t kc, float* c,
                                            std::size_t ldc, bool first) {
  micro_vec<Avx512Floats, kAvx512Mr>(ap, bp, kc, c, ldc, first);
}
#endif

// ---- pairwise tiles ----
//
// A tile's leaves (fma(a_1, b_1, a_0 * b_0) per pair of rows of K; a lone last row: a_k * b_k,
// one rounding, a float multiply of two fp32 values) summed by a binary counter: a new leaf
// merges with the stack's top while they have the same level (left + right), and at the end the
// stack is folded from its top (stack[i] + x). This is the level-by-level pairwise tree of the
// plan's tree(2) node, odd ones going up unchanged: both build perfect trees over the binary
// decomposition of the leaf count, left to right, joined from the right (the test against the
// walk checks it on every tile length up to 300). The stack (at most 64 levels of mr x nr
// floats) is the caller's.

using Pair32 = void (*)(const float* ap, const float* bp, std::size_t kc, float* c, std::size_t ldc, float* stack);
constexpr std::size_t kMaxLevels = 64;

#ifdef NUMEQ_KERNELS_X86
// A tile body of plain C++ (pair_tile and pair_chain_tile below at a level's panel shape) compiled
// for one instruction set: the compiler lays its columns out in that set's vectors. The portable
// kernel is the body itself at the portable shape.
template <Pair32 Body>
[[gnu::target("avx2,fma")]] void on_avx2(const float* ap, const float* bp, std::size_t kc, float* c, std::size_t ldc,
                                        float* stack) {
  Body(ap, bp, kc, c, ldc, stack);
}
template <Pair32 Body>
[[gnu::target("avx512f")]] void on_avx512(const float* ap, const float* bp, std::size_t kc, float* c,
                                         std::size_t ldc, float* stack) {
  Body(ap, bp, kc, c, ldc, stack);
}
#endif

// The plain C++ body (IEEE binary32 multiply, std::fma, addition: nearest even, MXCSR's default),
// for the portable kernel, and compiled for AVX2 + FMA for that level's panels (the compiler
// lays the columns out in its vectors).
// One leaf: the products of rows k and k + 1 of K summed exactly and rounded once (a_k * b_k is
// exact for the inputs these kernels serve, so fma rounds the exact sum); a lone last row: a_k * b_k.
template <int MR, int NR>
[[gnu::always_inline]] inline float pair_leaf(const float* ap, const float* bp, std::size_t k, std::size_t kc, int r,
                                              int j) {
  const float p = ap[k * MR + r] * bp[k * NR + j];
  return k + 1 < kc ? std::fma(ap[(k + 1) * MR + r], bp[(k + 1) * NR + j], p) : p;
}

template <int MR, int NR>
[[gnu::always_inline]] inline void pair_tile(const float* ap, const float* bp, std::size_t kc, float* c,
                                             std::size_t ldc, float* stack) {
  constexpr int kE = MR * NR;
  int level[kMaxLevels];
  std::size_t count = 0;
  float x[kE];
  for (std::size_t k = 0; k < kc; k += 2) {
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < NR; ++j) x[r * NR + j] = pair_leaf<MR, NR>(ap, bp, k, kc, r, j);
    int l = 0;
    for (; count > 0 && level[count - 1] == l; --count, ++l)
      for (int e = 0; e < kE; ++e) x[e] = stack[(count - 1) * kE + e] + x[e];
    std::copy(x, x + kE, stack + count * kE);
    level[count++] = l;
  }
  for (std::size_t i = count - 1; i-- > 0;)
    for (int e = 0; e < kE; ++e) x[e] = stack[i * kE + e] + x[e];
  for (int r = 0; r < MR; ++r) std::copy(x + r * NR, x + (r + 1) * NR, c + r * ldc);
}

#ifdef NUMEQ_KERNELS_X86
// AVX-512 by hand (twice the speed of the plain body compiled for it): the 24 vectors of a leaf
// stay in registers. vmulps and vfmadd231ps: IEEE binary32 multiply and fused multiply-add,
// rounded as MXCSR says (nearest even); vaddps the same for addition (Intel SDM).
[[gnu::target("avx512f")]] void pair_avx512(const float* ap, const float* bp, std::size_t kc, float* c,
                                           std::size_t ldc, float* stack) {
  constexpr int kE = kAvx512Mr * 2;  // vectors per stack entry
  int level[kMaxLevels];
  std::size_t count = 0;
  __m512 x[kE];
  for (std::size_t k = 0; k < kc; k += 2) {
    const __m512 b0 = _mm512_loadu_ps(bp + k * kAvx512Nr), b1 = _mm512_loadu_ps(bp + k * kAvx512Nr + 16);
    const bool pair = k + 1 < kc;
    const __m512 d0 = pair ? _mm512_loadu_ps(bp + (k + 1) * kAvx512Nr) : b0;
    const __m512 d1 = pair ? _mm512_loadu_ps(bp + (k + 1) * kAvx512Nr + 16) : b1;
#pragma GCC unroll 16
    for (int r = 0; r < kAvx512Mr; ++r) {
      const __m512 a0 = _mm512_set1_ps(ap[k * kAvx512Mr + r]);
      x[2 * r] = _mm512_mul_ps(a0, b0);
      x[2 * r + 1] = _mm512_mul_ps(a0, b1);
      if (pair) {
        const __m512 a1 = _mm512_set1_ps(ap[(k + 1) * kAvx512Mr + r]);
        x[2 * r] = _mm512_fmadd_ps(a1, d0, x[2 * r]);
        x[2 * r + 1] = _mm512_fmadd_ps(a1, d1, x[2 * r + 1]);
      }
    }
    int l = 0;
    for (; count > 0 && level[count - 1] == l; --count, ++l)
#pragma GCC unroll 24
      for (int e = 0; e < kE; ++e) x[e] = _mm512_add_ps(_mm512_loadu_ps(stack + ((count - 1) * kE + e) * 16), x[e]);
#pragma GCC unroll 24
    for (int e = 0; e < kE; ++e) _mm512_storeu_ps(stack + (count * kE + e) * 16, x[e]);
    level[count++] = l;
  }
  for (std::size_t i = count - 1; i-- > 0;)
#pragma GCC unroll 24
    for (int e = 0; e < kE; ++e) x[e] = _mm512_add_ps(_mm512_loadu_ps(stack + (i * kE + e) * 16), x[e]);
#pragma GCC unroll 16
  for (int r = 0; r < kAvx512Mr; ++r) {
    _mm512_storeu_ps(c + r * ldc, x[2 * r]);
    _mm512_storeu_ps(c + r * ldc + 16, x[2 * r + 1]);
  }
}
#endif

// ---- pair chains ----
//
// The pairwise tiles' leaves (pair_leaf) added in order from +0 (acc = acc + leaf, binary32 nearest even). The plain C++ body, compiled for each
// level (IEEE multiply, std::fma and addition; -ffp-contract=off keeps the addition unfused).
template <int MR, int NR>
[[gnu::always_inline]] inline void pair_chain_tile(const float* ap, const float* bp, std::size_t kc, float* c,
                                                   std::size_t ldc, float*) {
  float acc[MR * NR] = {};
  for (std::size_t k = 0; k < kc; k += 2)
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < NR; ++j) acc[r * NR + j] = acc[r * NR + j] + pair_leaf<MR, NR>(ap, bp, k, kc, r, j);
  for (int r = 0; r < MR; ++r) std::copy(acc + r * NR, acc + (r + 1) * NR, c + r * ldc);
}

struct Shape32 {
  int mr, nr;
  Micro32 micro;
  Pair32 pair;
  Pair32 pair_chain;
};

Shape32 shape32(int l) {
#ifdef NUMEQ_KERNELS_X86
  if (l == avx512)
    return {kAvx512Mr, kAvx512Nr, micro_avx512, pair_avx512, on_avx512<pair_chain_tile<kAvx512Mr, kAvx512Nr>>};
  if (l == avx2)
    return {kAvx2Mr, kAvx2Nr, micro_avx2, on_avx2<pair_tile<kAvx2Mr, kAvx2Nr>>, on_avx2<pair_chain_tile<kAvx2Mr, kAvx2Nr>>};
#endif
  (void)l;
  return {kPortableMr, kPortableNr, micro_portable, pair_tile<kPortableMr, kPortableNr>,
          pair_chain_tile<kPortableMr, kPortableNr>};
}

}  // namespace

namespace {

bool all_fp32_portable(const double* x, std::size_t n) {
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) ok &= static_cast<double>(static_cast<float>(x[i])) == x[i] || x[i] != x[i];
  return ok;
}

#ifdef NUMEQ_KERNELS_X86
// vcvtpd2ps rounds as MXCSR says (nearest even), as the scalar conversion does.
[[gnu::target("avx512f")]] bool all_fp32_avx512(const double* x, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_loadu_pd(x + i);
    const __m512d back = _mm512_cvtps_pd(_mm512_cvtpd_ps(v));
    const __mmask8 ok = _mm512_cmp_pd_mask(back, v, _CMP_EQ_OQ) | _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q);
    if (ok != 0xFF) return false;
  }
  return all_fp32_portable(x + i, n - i);
}
#endif

}  // namespace

bool all_fp32(const double* x, std::size_t n) {
#ifdef NUMEQ_KERNELS_X86
  if (current_level() == avx512) return all_fp32_avx512(x, n);
#endif
  return all_fp32_portable(x, n);
}

namespace {

// Rows [k0, k1) of b (row-major, N columns, fp32 values as doubles) into p's panels.
void pack_rows(const double* rows, std::size_t k0, std::size_t k1, PackedB32& p) {
  const std::size_t K = p.K, N = p.N, nr = p.nr, panels = (N + nr - 1) / nr;
  for (std::size_t k = k0; k < k1; ++k) {
    const double* row = rows + (k - k0) * N;
    for (std::size_t q = 0; q < panels; ++q) {
      const std::size_t n0 = q * nr, nn = std::min(nr, N - n0);
      float* to = p.data.get() + (q * K + k) * nr;
      for (std::size_t j = 0; j < nn; ++j) to[j] = static_cast<float>(row[n0 + j]);  // exact: fp32 values
      for (std::size_t j = nn; j < nr; ++j) to[j] = 0.0f;
    }
  }
}

PackedB32 packed_for(std::size_t K, std::size_t N) {
  const int l = current_level();
  PackedB32 p;
  p.level = l;
  p.K = K;
  p.N = N;
  p.nr = static_cast<std::size_t>(shape32(l).nr);
  // Uninitialised: every float is written by pack_rows (the last panel's padding columns with
  // zeros), on the threads, instead of a serial zeroing pass first.
  p.data = std::make_unique_for_overwrite<float[]>((N + p.nr - 1) / p.nr * K * p.nr);
  return p;
}

// Rows of b in parallel, each read once front to back and dealt out to the panels. Panel by
// panel instead, every panel read nr columns from each of K rows: K pages per panel, and the TLB
// misses made packing a 2048 x 512 b cost 0.8 ms where this takes 0.45.
std::size_t rows_per_task(std::size_t N) { return std::max<std::size_t>(1, (std::size_t{1} << 16) / std::max<std::size_t>(1, N)); }

}  // namespace

PackedB32 pack_b32(const double* b, std::size_t K, std::size_t N) {
  PackedB32 p = packed_for(K, N);
  parallel_for(K, [&](std::size_t begin, std::size_t end) { pack_rows(b + begin * N, begin, end, p); }, rows_per_task(N));
  return p;
}

namespace {

// Rows [k0, k1) of one block (its first row is row `first` of b) into p's panels: bf16 and fp32
// patterns directly (every pattern is a value, NaNs included; bf16 is the high half of fp32's),
// other types widened a few rows at a time into a buffer that stays in cache. Returns the first
// element (C order within b) widen refuses, or K * N.
std::size_t pack_block_rows(const RowBlock& block, std::size_t first, std::size_t k0, std::size_t k1, PackedB32& p) {
  const std::size_t K = p.K, N = p.N, nr = p.nr, panels = (N + nr - 1) / nr;
  const std::string_view name = block.type.format ? block.type.format->name : std::string_view{};
  if (name == "fp32" || name == "bf16") {
    for (std::size_t k = k0; k < k1; ++k)
      for (std::size_t q = 0; q < panels; ++q) {
        const std::size_t n0 = q * nr, nn = std::min(nr, N - n0), at = (k - first) * N + n0;
        float* to = p.data.get() + (q * K + k) * nr;
        if (name == "fp32") {
          std::memcpy(to, static_cast<const float*>(block.data) + at, nn * sizeof(float));
        } else {
          const std::uint16_t* from = static_cast<const std::uint16_t*>(block.data) + at;
          for (std::size_t j = 0; j < nn; ++j) to[j] = std::bit_cast<float>(std::uint32_t{from[j]} << 16);
        }
        for (std::size_t j = nn; j < nr; ++j) to[j] = 0.0f;
      }
    return K * N;
  }
  const std::size_t bytes = block.type.format ? static_cast<std::size_t>(block.type.format->storage_bits / 8)
                                              : static_cast<std::size_t>(block.type.bytes);
  const std::size_t step = std::max<std::size_t>(1, 4096 / std::max<std::size_t>(1, N));
  std::vector<double> rows(step * N);
  for (std::size_t r0 = k0; r0 < k1; r0 += step) {
    const std::size_t r1 = std::min(k1, r0 + step);
    const WidenReport r =
        widen(static_cast<const char*>(block.data) + (r0 - first) * N * bytes, (r1 - r0) * N, block.type, rows.data());
    if (r.first() < (r1 - r0) * N) return r0 * N + r.first();
    pack_rows(rows.data(), r0, r1, p);
  }
  return K * N;
}

}  // namespace

PackedB32 pack_b32(std::span<const RowBlock> b, std::size_t N, std::size_t& bad) {
  std::vector<std::size_t> starts{0};  // starts[i]: b's row where block i begins
  for (const RowBlock& block : b) starts.push_back(starts.back() + block.rows);
  const std::size_t K = starts.back();
  PackedB32 p = packed_for(K, N);
  std::atomic<std::size_t> first_bad{K * N};
  parallel_for(K, [&](std::size_t begin, std::size_t end) {
    std::size_t i = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
    for (std::size_t k = begin; k < end; ++i) {
      const std::size_t stop = std::min(end, starts[i + 1]);
      const std::size_t at = pack_block_rows(b[i], starts[i], k, stop, p);
      if (at < K * N) {
        std::size_t seen = first_bad.load();
        while (at < seen && !first_bad.compare_exchange_weak(seen, at)) {}
        return;
      }
      k = stop;
    }
  }, rows_per_task(N));
  bad = first_bad.load();
  return p;
}

std::size_t fp32_row_group() { return static_cast<std::size_t>(shape32(current_level()).mr); }

void fp32_fma_rows(const double* a, std::size_t rows, const PackedB32& b, float* out, std::size_t ldo,
                   const Fp32Tiling& tiling, std::size_t row_step, std::size_t k_step) {
  const Shape32 s = shape32(b.level);  // the kernel the panels were cut for
  const auto mr = static_cast<std::size_t>(s.mr), nr = static_cast<std::size_t>(s.nr);
  const std::size_t K = b.K, N = b.N;
  const std::size_t groups = (rows + mr - 1) / mr, panels = (N + nr - 1) / nr, ldc = panels * nr;
  // Scratch kept per thread between calls (the pool's threads live on): a Trainium PSUM chain is
  // one call of a few row groups, and fresh zeroed megabytes each time cost page faults.
  thread_local std::vector<float> ap, psum, tile, sbuf, stack;
  ap.resize(std::max(ap.size(), groups * mr * K));
  if (row_step == 0) row_step = K;
  // Written in order, group by group (k-major, mr rows per k): reads are then mr streams along
  // the rows of a row-major a, or consecutive values of a transposed one.
  for (std::size_t g = 0; g < groups; ++g) {
    const std::size_t in_group = std::min(mr, rows - g * mr);
    for (std::size_t k = 0; k < K; ++k) {
      float* to = ap.data() + (g * K + k) * mr;
      const double* from = a + g * mr * row_step + k * k_step;
      for (std::size_t i = 0; i < in_group; ++i) to[i] = static_cast<float>(from[i * row_step]);
      for (std::size_t i = in_group; i < mr; ++i) to[i] = 0.0f;  // padding rows: zero chains nobody reads
    }
  }
  const std::size_t cells = groups * mr * ldc;
  const std::size_t T = tiling.tile == 0 || tiling.tile > K ? K : tiling.tile, G = tiling.group;
  // psum: the current group's sum of tiles (or the whole sum); tile: a later tile of the group;
  // sbuf: the sum of the groups (with G). Padding rows and columns hold chains nobody reads.
  // Each is written whole before it is read (a tile's first k pass or leaf stores its chains).
  const bool grouped = G != 0 && T < K;
  const auto at_least = [](std::vector<float>& v, std::size_t n) { v.resize(std::max(v.size(), n)); };
  at_least(psum, cells);
  at_least(tile, T < K ? cells : 0);
  at_least(sbuf, grouped ? cells : 0);
  at_least(stack, tiling.pairwise ? kMaxLevels * mr * nr : 0);
  const auto add_into = [cells](std::vector<float>& sum, const std::vector<float>& x) {
    for (std::size_t i = 0; i < cells; ++i) sum[i] = sum[i] + x[i];  // binary32, nearest even
  };
  for (std::size_t t0 = 0, ti = 0; t0 < K; t0 += T, ++ti) {
    const std::size_t t1 = std::min(K, t0 + T), in_group = G != 0 ? ti % G : ti;
    float* to = in_group == 0 ? psum.data() : tile.data();
    if (tiling.pairwise || tiling.pair_chain) {
      const Pair32 leaves = tiling.pairwise ? s.pair : s.pair_chain;
      for (std::size_t q = 0; q < panels; ++q)
        for (std::size_t g = 0; g < groups; ++g)
          leaves(ap.data() + (g * K + t0) * mr, b.data.get() + (q * K + t0) * nr, t1 - t0, to + g * mr * ldc + q * nr,
                 ldc, stack.data());
    } else {
      for (std::size_t k0 = t0; k0 < t1; k0 += kKc) {
        const std::size_t kc = std::min(kKc, t1 - k0);
        for (std::size_t q = 0; q < panels; ++q)
          for (std::size_t g = 0; g < groups; ++g)
            s.micro(ap.data() + (g * K + k0) * mr, b.data.get() + (q * K + k0) * nr, kc, to + g * mr * ldc + q * nr,
                    ldc, k0 == t0);
      }
    }
    if (in_group != 0) add_into(psum, tile);
    if (grouped && (in_group + 1 == G || t1 == K)) {
      if (ti / G == 0) sbuf.swap(psum);
      else add_into(sbuf, psum);
    }
  }
  const std::vector<float>& acc = grouped ? sbuf : psum;
  for (std::size_t r = 0; r < rows; ++r) std::copy(acc.data() + r * ldc, acc.data() + r * ldc + N, out + r * ldo);
  // Kept up to 16 MiB each: a huge K must not pin its scratch for the process's life.
  constexpr std::size_t kKept = std::size_t{1} << 22;
  for (std::vector<float>* v : {&ap, &psum, &tile, &sbuf})
    if (v->capacity() > kKept) {
      v->clear();
      v->shrink_to_fit();
    }
}

}  // namespace numeq::core::kernels
