// Matmul kernels (matmul_kernels.hpp): which code runs, and the fused tensor-core chains laid out
// across output columns (the fp32 fma chains are in fp32_chain_kernels.cpp). Vector code is written with x86 intrinsics in functions compiled for
// their instruction set (gnu::target) and chosen at run time (cpu_dispatch.hpp); the
// portable code is plain C++ (std::fma). MXCSR is never touched: these kernels need its default
// (round to nearest even, no FTZ/DAZ), which is what every thread starts with.

#include "matmul_kernels.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/round_and_pack.hpp"

#include "fused_common.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NUMEQ_KERNELS_X86 1
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports at every inlined use (GCC bug 105593); nothing here is read
// uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace numeq::core {

namespace kernels {
namespace {

// ---- which code runs ----

// The CPU's instruction sets and NUMEQ_ISA are read in one place (cpu_dispatch.hpp).
int automatic_level() {
  switch (current_isa()) {
    case Isa::avx512: return avx512;
    case Isa::avx2: return avx2;
    case Isa::portable: return portable;
  }
  return portable;
}

std::atomic<int>& level() {
  static std::atomic<int> l{automatic_level()};
  return l;
}

}  // namespace

int current_level() { return level().load(std::memory_order_relaxed); }

// ---- fused tensor-core chains ----

namespace {

constexpr std::int32_t kNoEntry = -(1 << 20);  // an exponent below every candidate (no entry)
constexpr int kNoCandidate = fused_detail::no_candidate_exponent;  // where E starts
constexpr int kPanel = 16;                     // columns per pass (two vectors of 8 doubles)

}  // namespace

FusedCols fused_cols_config(const FusedStep& s) {
  FusedCols k;
  try {
    if (!detail::fused_fast_path_applies(s)) return k;
  } catch (...) {
    return k;  // an invalid step: the element-by-element path reports it
  }
  // What fused.cpp's fast path computes (fused.cpp, "the fast path") is what this kernel
  // computes; on top of its conditions, the output must be an IEEE-style float rounded toward
  // zero or to nearest even (the two roundings done in vectors here), whose finite values are
  // values of c_format (so each step's result is a valid c for the next: fast path's
  // output_within_c).
  const Format& o = s.output.format;
  const Format& cf = s.c_format;
  if (o.kind != FormatKind::floating || !o.is_signed || !o.has_zero || o.specials != Specials::ieee) return k;
  if (s.output.rounding != Rounding::nearest_even && s.output.rounding != Rounding::toward_zero) return k;
  if (o.mantissa_bits > 51 || o.emin() < -1000 || o.emax() > 1000) return k;
  if (!values_within(o, cf)) return k;
  k.step = s;
  k.n = s.n;
  k.F = s.fraction_bits;
  k.a_emin = s.a_format.emin();
  k.b_emin = s.b_format.emin();
  k.c_emin = cf.emin();
  k.a_grid = std::ldexp(1.0, 52 - s.a_format.mantissa_bits);
  k.b_grid = std::ldexp(1.0, 52 - s.b_format.mantissa_bits);
  k.c_grid = std::ldexp(1.0, 52 - cf.mantissa_bits);
  k.a_max = max_finite(s.a_format);
  k.b_max = max_finite(s.b_format);
  k.c_max = max_finite(cf);
  // ZeroTerms::fp32_emin: a zero operand (and a zero c) enters the maximum at -126 (MMA-Sim's
  // extract_significand_exponent); ZeroTerms::excluded: a product with a zero operand, and a
  // zero c, do not enter it (fused.hpp).
  const bool zeros_enter = s.zeros == ZeroTerms::fp32_emin;
  k.zero_operand = zeros_enter ? zero_operand_exponent : kNoEntry;
  k.zero_c = zeros_enter ? zero_operand_exponent : kNoEntry;
  k.floor = s.exponent_floor == no_exponent_floor ? kNoCandidate : std::max(s.exponent_floor, kNoCandidate);
  k.nearest = s.output.rounding == Rounding::nearest_even;
  k.out_m = o.mantissa_bits;
  k.out_emin = o.emin();
  k.out_emax = o.emax();
  k.zero_positive = s.zero_sign == ZeroSign::positive;
  k.zero_result = round_to_format(0.0, s.output);
  // The float-lane kernel: significand products exact in binary32 (12 + 12 bits); a term is
  // below 2^(F + 2) (|a * b| < 2^(ea + eb + 2) <= 2^(E + 2)), so `chunk` = 2^(29 - F) terms sum
  // below 2^31 in int32.
  k.narrow = s.a_format.mantissa_bits <= 11 && s.b_format.mantissa_bits <= 11;
  k.chunk = 1 << std::min(29 - k.F, 20);
  // Running values in float lanes: rounding toward zero into a format within binary32's range
  // and precision, c_format within binary32 too (every c and result is a float).
  k.compact = k.narrow && !k.nearest && values_within(o, formats::fp32) && values_within(cf, formats::fp32) && k.out_emin >= formats::fp32.emin() && k.out_emax <= formats::fp32.emax();
  k.applies = true;
  return k;
}

// fused.cpp's operand test, one value at a time: x is a finite value of its format exactly when
// |x| <= max_finite and rounding |x| to its format's grid at its encoded exponent e (the sum
// (|x| + M) - M, M = 2^(e + 52 - m), in the host's nearest-even double arithmetic) leaves it
// unchanged. Its exponent in the maximum: e = max(exponent of |x|, emin), a zero's as configured.
bool fused_exponents(const FusedCols& k, bool is_a, const double* x, std::size_t n, std::int32_t* e) {
  const int emin = is_a ? k.a_emin : k.b_emin;
  const double grid = is_a ? k.a_grid : k.b_grid, max = is_a ? k.a_max : k.b_max;
  const std::int32_t zero = k.zero_operand;
  bool ok = true;  // no early exit: one pass, branch-free
  for (std::size_t i = 0; i < n; ++i) {
    // |x| capped at max (NaN and Inf to max: then the test below fails, as beyond max does).
    const double ax = std::fabs(x[i]);
    const double y = ax <= max ? ax : max;
    // y is zero or a normal double (formats served stay within 2^-400 .. 2^400).
    const int ex = std::max(static_cast<int>(std::bit_cast<std::uint64_t>(y) >> 52) - 1023, emin);
    const double magic = std::bit_cast<double>(static_cast<std::uint64_t>(ex + 1023) << 52) * grid;
    ok &= (y + magic) - magic == ax;
    e[i] = ax == 0 ? zero : ex;
  }
  return ok;
}

namespace {

// x = s * 2^e with s = x * 2^-e exact (a value of a format of at most 11 fraction bits, e its
// encoded exponent: |s| < 2, at most 12 significant bits); a zero's s is 0 whatever e is.
float significand_of(double x, std::int32_t e) {
  if (x == 0) return 0.0f;
  return static_cast<float>(x * std::bit_cast<double>(static_cast<std::uint64_t>(1023 - e) << 52));
}

}  // namespace

void pack_b_fused(const FusedCols& k, const double* b, const std::int32_t* eb, std::size_t K, std::size_t N,
                  PackedBFused& out) {
  const std::size_t panels = (N + kPanel - 1) / kPanel;
  out.K = K;
  out.N = N;
  if (k.narrow) {
    out.significand.assign(panels * K * kPanel, 0.0f);
    out.exponent_f.assign(panels * K * kPanel, static_cast<float>(kNoEntry));
  } else {
    out.value.assign(panels * K * kPanel, 0.0);
    out.exponent.assign(panels * K * kPanel, kNoEntry);
  }
  parallel_for(panels, [&](std::size_t begin, std::size_t end) {
    for (std::size_t q = begin; q < end; ++q) {
      const std::size_t n0 = q * kPanel, nn = std::min<std::size_t>(kPanel, N - n0);
      for (std::size_t i = 0; i < K; ++i) {
        const std::size_t to = (q * K + i) * kPanel, from = i * N + n0;
        if (k.narrow) {
          for (std::size_t j = 0; j < nn; ++j) {
            out.significand[to + j] = significand_of(b[from + j], eb[from + j]);
            out.exponent_f[to + j] = static_cast<float>(eb[from + j]);
          }
        } else {
          std::copy(b + from, b + from + nn, out.value.data() + to);
          std::copy(eb + from, eb + from + nn, out.exponent.data() + to);
        }
      }
    }
  }, std::max<std::size_t>(1, (std::size_t{1} << 16) / std::max<std::size_t>(1, K * kPanel)));  // panels in parallel
}

bool fused_cols_available() { return level().load(std::memory_order_relaxed) == avx512; }

bool enabled() { return level().load(std::memory_order_relaxed) != none; }

#ifdef NUMEQ_KERNELS_X86
namespace {

#define NUMEQ_AVX512 gnu::target("avx512f,avx512dq,avx512vl,avx512bw")
// A lambda does not take its enclosing function's target: the lambdas that run vector code here
// carry it themselves (and are always inlined into that function).
#define NUMEQ_AVX512_LAMBDA __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw"), always_inline))

// One output element per lane: 16 columns of one row in two vectors of 8 doubles (h = 0, 1).
struct Lanes {
  __m512d c[2];      // the running value (each step's c)
  __mmask8 flag[2];  // elements the caller recomputes
};

// The step's constants, in registers.
struct Consts {
  __m512i abs_mask, c_emin, zero_c, scale_base, value_base, cut, exp_mask;
  __m512d out_min, out_limit, grid_out, zero_result;
  __m512i floor;
};

[[NUMEQ_AVX512]] inline Consts consts_of(const FusedCols& k) {
  Consts c;
  c.abs_mask = _mm512_set1_epi64(0x7FFFFFFFFFFFFFFFll);
  c.c_emin = _mm512_set1_epi64(k.c_emin);
  c.zero_c = _mm512_set1_epi64(k.zero_c);
  c.scale_base = _mm512_set1_epi64(k.F + 1023);
  c.value_base = _mm512_set1_epi64(1023 - k.F);
  c.cut = _mm512_set1_epi64(static_cast<long long>(~((std::uint64_t{1} << (52 - k.out_m)) - 1)));
  c.exp_mask = _mm512_set1_epi64(0x7FF0000000000000ll);
  c.out_min = _mm512_set1_pd(std::ldexp(1.0, k.out_emin));
  c.out_limit = _mm512_set1_pd(std::ldexp(1.0, k.out_emax + 1));
  c.grid_out = _mm512_set1_pd(std::ldexp(1.0, 52 - k.out_m));
  c.zero_result = _mm512_set1_pd(k.zero_result);
  c.floor = _mm512_set1_epi32(k.floor);
  return c;
}

[[NUMEQ_AVX512]] inline __m512i exponent_of(__m512i abs_bits) {
  return _mm512_sub_epi64(_mm512_srli_epi64(abs_bits, 52), _mm512_set1_epi64(1023));
}

[[NUMEQ_AVX512]] inline __m512d power_of_two(__m512i e) {
  return _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(e, _mm512_set1_epi64(1023)), 52));
}

// The chains of RG rows (a, ea: row r at a + r * K) with one panel (bp, ebp), along all of K in
// steps of n products: step(NK, ar, er, len, b, eb) for each, with ar[r] and er[r] row r's
// operands at the step's start, b and eb the panel's, and NK the step length `len` as a
// compile-time constant (std::integral_constant) for the usual lengths, which get unrolled code,
// 0 for any other.
template <int RG, class T, class TE, class Step>
[[NUMEQ_AVX512, gnu::always_inline]] inline void walk_steps(std::size_t n, const T* a, const TE* ea, std::size_t K,
                                                           const T* bp, const TE* ebp, Step&& step) {
  const T* ar[RG];
  const TE* er[RG];
  for (std::size_t s0 = 0; s0 < K; s0 += n) {
    for (int r = 0; r < RG; ++r) {
      ar[r] = a + static_cast<std::size_t>(r) * K + s0;
      er[r] = ea + static_cast<std::size_t>(r) * K + s0;
    }
    const T* b = bp + s0 * kPanel;
    const TE* eb = ebp + s0 * kPanel;
    const std::size_t len = std::min(n, K - s0);
    if (len == 16) step(std::integral_constant<int, 16>{}, ar, er, len, b, eb);
    else if (len == 8) step(std::integral_constant<int, 8>{}, ar, er, len, b, eb);
    else if (len == 32) step(std::integral_constant<int, 32>{}, ar, er, len, b, eb);
    else if (len == 4) step(std::integral_constant<int, 4>{}, ar, er, len, b, eb);
    else step(std::integral_constant<int, 0>{}, ar, er, len, b, eb);
  }
}

// The end of a step: S * 2^(E - F) rounded into the output format (see step_rows).
template <int RG>
[[NUMEQ_AVX512, gnu::always_inline]] inline void finish_rows(const FusedCols& k, const Consts& cs,
                                                            const __m512i (&E)[RG][2], const __m512i (&S)[RG][2],
                                                            Lanes* x) {
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __mmask8 zero = _mm512_cmpeq_epi64_mask(S[r][h], _mm512_setzero_si512());
      const __m512d v =
          _mm512_mul_pd(_mm512_cvtepi64_pd(S[r][h]),
                        _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(E[r][h], cs.value_base), 52)));
      const __m512d av = _mm512_abs_pd(v);
      __mmask8 ok = _mm512_cmp_pd_mask(av, cs.out_min, _CMP_GE_OQ);
      __m512d res;
      if (k.nearest) {
        const __m512d magic =
            _mm512_mul_pd(_mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(av), cs.exp_mask)), cs.grid_out);
        const __m512d ra = _mm512_sub_pd(_mm512_add_pd(av, magic), magic);
        ok &= _mm512_cmp_pd_mask(ra, cs.out_limit, _CMP_LT_OQ);
        res = _mm512_castsi512_pd(
            _mm512_or_si512(_mm512_castpd_si512(ra), _mm512_andnot_si512(cs.abs_mask, _mm512_castpd_si512(v))));
      } else {
        ok &= _mm512_cmp_pd_mask(av, cs.out_limit, _CMP_LT_OQ);
        res = _mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(v), cs.cut));
      }
      x[r].c[h] = _mm512_mask_mov_pd(res, zero, cs.zero_result);
      x[r].flag[h] |= static_cast<__mmask8>(~zero & ~ok);
      if (!k.zero_positive) x[r].flag[h] |= zero;
    }
}

// One step of `len` products (NK of them when NK > 0, known at compile time) for RG rows at once
// (they share the loads of b). Per lane, the operations of fused.cpp's fast path (its `products`
// and `finish`) in the same order:
//   E = max(floor, max_k (ea_k + eb_k), e(c)): the exponents as integers here (fused.cpp adds
//       the bit patterns of 2^ea and 2^eb: the same sums);
//   scale = 2^(F - E); S = trunc(c * scale) + sum_k trunc((a_k * b_k) * scale): the same double
//       products and scalings, each truncated toward zero into an integer (vcvttpd2qq: "convert
//       with truncation", Intel SDM; C++'s float-to-integer conversion in fused.cpp); the sum
//       is exact in int64 in any order (|S| < 2^38);
//   the result S * 2^(E - F), exact in a double, rounded into the output format: toward zero =
//       the significand cut to m bits; nearest even = (|v| + M) - M with M = 2^(e(v) + 52 - m)
//       (the host's nearest-even double addition, MXCSR's default); both are what
//       round_and_pack gives where the result is a normal number of the output format. A result
//       outside that range (Inf, subnormal), and a zero sum under ZeroSign::ieee, flag the lane.
template <int RG, int NK>
[[NUMEQ_AVX512, gnu::always_inline]] inline void step_rows(const FusedCols& k, const Consts& cs,
                                                          const double* const* a, const std::int32_t* const* ea,
                                                          std::size_t len, const double* bp,
                                                          const std::int32_t* ebp, Lanes* x) {
  const std::size_t count = NK > 0 ? static_cast<std::size_t>(NK) : len;
  __m512i w[RG];
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r) w[r] = cs.floor;
#pragma GCC unroll 32
  for (std::size_t i = 0; i < count; ++i) {
    const __m512i eb = _mm512_loadu_si512(ebp + i * kPanel);
#pragma GCC unroll 4
    for (int r = 0; r < RG; ++r) w[r] = _mm512_max_epi32(w[r], _mm512_add_epi32(_mm512_set1_epi32(ea[r][i]), eb));
  }
  __m512d scale[RG][2];
  __m512i E[RG][2], S[RG][2];
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i cb = _mm512_and_si512(_mm512_castpd_si512(x[r].c[h]), cs.abs_mask);
      __m512i ec = _mm512_max_epi64(exponent_of(cb), cs.c_emin);
      ec = _mm512_mask_mov_epi64(ec, _mm512_cmpeq_epi64_mask(cb, _mm512_setzero_si512()), cs.zero_c);
      const __m512i wh =
          _mm512_cvtepi32_epi64(h == 0 ? _mm512_castsi512_si256(w[r]) : _mm512_extracti64x4_epi64(w[r], 1));
      E[r][h] = _mm512_max_epi64(wh, ec);
      scale[r][h] = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_sub_epi64(cs.scale_base, E[r][h]), 52));
      S[r][h] = _mm512_cvttpd_epi64(_mm512_mul_pd(x[r].c[h], scale[r][h]));
    }
#pragma GCC unroll 2
  for (std::size_t i = 0; i < count; ++i) {
    const __m512d b0 = _mm512_loadu_pd(bp + i * kPanel), b1 = _mm512_loadu_pd(bp + i * kPanel + 8);
#pragma GCC unroll 4
    for (int r = 0; r < RG; ++r) {
      const __m512d ai = _mm512_set1_pd(a[r][i]);
      const __m512d p0 = _mm512_mul_pd(ai, b0), p1 = _mm512_mul_pd(ai, b1);  // exact
      S[r][0] = _mm512_add_epi64(S[r][0], _mm512_cvttpd_epi64(_mm512_mul_pd(p0, scale[r][0])));
      S[r][1] = _mm512_add_epi64(S[r][1], _mm512_cvttpd_epi64(_mm512_mul_pd(p1, scale[r][1])));
    }
  }
  finish_rows<RG>(k, cs, E, S, x);
}

// Terms i0 .. i1-1 of a float-lane step (step_rows_narrow), summed in int32, then added to S.
template <int RG, std::size_t kMax>
[[NUMEQ_AVX512, gnu::always_inline]] inline void narrow_terms(const float* const* sa, const float* sbp,
                                                             const __m512 (&wk)[RG][kMax], const __m512 (&fe)[RG],
                                                             std::size_t i0, std::size_t i1, __m512i (&S)[RG][2]) {
  __m512i s32[RG];
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r) s32[r] = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (std::size_t i = i0; i < i1; ++i) {
    const __m512 sb = _mm512_loadu_ps(sbp + i * kPanel);
#pragma GCC unroll 4
    for (int r = 0; r < RG; ++r) {
      const __m512 p = _mm512_mul_ps(_mm512_set1_ps(sa[r][i]), sb);  // exact
      const __m512 t = _mm512_scalef_ps(p, _mm512_add_ps(wk[r][i], fe[r]));
      s32[r] = _mm512_add_epi32(s32[r], _mm512_cvttps_epi32(t));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r) {
    S[r][0] = _mm512_add_epi64(S[r][0], _mm512_cvtepi32_epi64(_mm512_castsi512_si256(s32[r])));
    S[r][1] = _mm512_add_epi64(S[r][1], _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(s32[r], 1)));
  }
}

// A float-lane step's exponent sums ea_i + eb_i per lane (wk, kept for the terms' scaling) and
// their maximum with the floor (w), for the `count` products of the step.
template <int RG, std::size_t kMax>
[[NUMEQ_AVX512, gnu::always_inline]] inline void exponent_sums(const FusedCols& k, const float* const* ea,
                                                              const float* ebp, std::size_t count,
                                                              __m512 (&wk)[RG][kMax], __m512 (&w)[RG]) {
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r) w[r] = _mm512_set1_ps(static_cast<float>(k.floor));
#pragma GCC unroll 4
  for (std::size_t i = 0; i < count; ++i) {
    const __m512 eb = _mm512_loadu_ps(ebp + i * kPanel);
#pragma GCC unroll 4
    for (int r = 0; r < RG; ++r) {
      wk[r][i] = _mm512_add_ps(_mm512_set1_ps(ea[r][i]), eb);
      w[r] = _mm512_max_ps(w[r], wk[r][i]);
    }
  }
}

// All `count` terms of a float-lane step added to S, in chunks of k.chunk terms (int32 sums that
// cannot overflow).
template <int RG, int NK, std::size_t kMax>
[[NUMEQ_AVX512, gnu::always_inline]] inline void step_terms(const FusedCols& k, const float* const* sa,
                                                           const float* sbp, const __m512 (&wk)[RG][kMax],
                                                           const __m512 (&fe)[RG], std::size_t count,
                                                           __m512i (&S)[RG][2]) {
  const auto chunk = static_cast<std::size_t>(k.chunk);
  if (NK > 0 && chunk >= count) {
    narrow_terms<RG, kMax>(sa, sbp, wk, fe, 0, count, S);  // the usual case: one chunk of a known length
  } else {
    for (std::size_t i0 = 0; i0 < count; i0 += chunk)
      narrow_terms<RG, kMax>(sa, sbp, wk, fe, i0, std::min(count, i0 + chunk), S);
  }
}

// The same step for operand formats of at most 11 fraction bits (k.narrow), in float lanes: with
// a = sa * 2^ea and b = sb * 2^eb (sa, sb the significands of significand_of, at most 12 bits),
// a * b * 2^(F - E) = (sa * sb) * 2^(ea + eb + F - E): sa * sb is exact in binary32, and
// vscalefps multiplies it by 2^(ea + eb + F - E) (Intel SDM VSCALEFPS: x * 2^floor(y), rounded
// as MXCSR says) exactly whenever the result is a normal float; otherwise the result, like the
// exact value, lies below 2^-125 and both truncate to 0. The exponent sums are small integers,
// exact as floats, and ea + eb + F - E <= F, so the term is below 2^(F + 2) <= 2^31: vcvttps2dq
// truncates it toward zero exactly, and chunks of k.chunk terms sum in int32 without overflow.
// So every term, and S, is the one the double path (and fused.cpp) computes; c's term and the
// rounding are the double path's.
template <int RG, int NK>
[[NUMEQ_AVX512, gnu::always_inline]] inline void step_rows_narrow(const FusedCols& k, const Consts& cs,
                                                                 const float* const* sa, const float* const* ea,
                                                                 std::size_t len, const float* sbp,
                                                                 const float* ebp, Lanes* x) {
  const std::size_t count = NK > 0 ? static_cast<std::size_t>(NK) : len;
  constexpr std::size_t kMax = NK > 0 ? static_cast<std::size_t>(NK) : 64;
  __m512 wk[RG][kMax];  // ea_i + eb_i per lane, kept for the terms' scaling
  __m512 w[RG];
  exponent_sums<RG, kMax>(k, ea, ebp, count, wk, w);
  __m512 fe[RG];  // F - E, as floats
  __m512i E[RG][2], S[RG][2];
  __m512d scale[RG][2];
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r) {
    const __m512i wi = _mm512_cvttps_epi32(w[r]);  // integers: exact
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i cb = _mm512_and_si512(_mm512_castpd_si512(x[r].c[h]), cs.abs_mask);
      __m512i ec = _mm512_max_epi64(exponent_of(cb), cs.c_emin);
      ec = _mm512_mask_mov_epi64(ec, _mm512_cmpeq_epi64_mask(cb, _mm512_setzero_si512()), cs.zero_c);
      const __m512i wh = _mm512_cvtepi32_epi64(h == 0 ? _mm512_castsi512_si256(wi) : _mm512_extracti64x4_epi64(wi, 1));
      E[r][h] = _mm512_max_epi64(wh, ec);
      scale[r][h] = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_sub_epi64(cs.scale_base, E[r][h]), 52));
      S[r][h] = _mm512_cvttpd_epi64(_mm512_mul_pd(x[r].c[h], scale[r][h]));
    }
    const __m512i e32 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(E[r][0])),
                                           _mm512_cvtepi64_epi32(E[r][1]), 1);
    fe[r] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(k.F), e32));
  }
  step_terms<RG, NK, kMax>(k, sa, sbp, wk, fe, count, S);
  finish_rows<RG>(k, cs, E, S, x);
}

template <int RG>
[[NUMEQ_AVX512]] void chain_rows_narrow(const FusedCols& k, const float* sa, const float* ea, std::size_t K,
                                        const float* sbp, const float* ebp, Lanes* x) {
  const Consts cs = consts_of(k);
  walk_steps<RG>(static_cast<std::size_t>(k.n), sa, ea, K, sbp, ebp,
                 [&](auto nk, const float* const* sr, const float* const* er, std::size_t len, const float* b,
                     const float* eb) NUMEQ_AVX512_LAMBDA {
                   step_rows_narrow<RG, decltype(nk)::value>(k, cs, sr, er, len, b, eb, x);
                 });
}

// The float-lane step with the running values in float lanes too (k.compact: outputs rounded
// toward zero into formats within binary32's, c_format within binary32): 16 elements per vector
// throughout. Per lane, the same values as step_rows_narrow:
//   e(c) from the float's exponent field (a binary32 subnormal c reads -127, raised to c_emin
//       >= -126 as the double path raises it), E and F - E as int32 / float;
//   c's term trunc(c * 2^(F - E)) by vscalefps and vcvttps2dq (|c| < 2^(E + 1): below 2^(F + 1),
//       exact, or below 2^-125 and 0 either way);
//   S (int64) converted to binary32 rounding toward zero (vcvtqq2ps {rz-sae}, Intel SDM: the
//       embedded rounding overrides MXCSR for this instruction only) = S cut to 24 significant
//       bits, then cut to m bits (cutting twice toward zero = cutting once), then scaled by
//       2^(E - F) (vscalefps: exact for a normal result). Where the exact result
//       S * 2^(E - F) lies in the output's normal range, i.e. its exponent e(S) + E - F lies in
//       [out_emin, out_emax], that is round_and_pack's toward-zero result; elsewhere the lane is
//       flagged.
template <int RG, int NK>
[[NUMEQ_AVX512, gnu::always_inline]] inline void step_rows_compact(const FusedCols& k, const float* const* sa,
                                                                  const float* const* ea, std::size_t len,
                                                                  const float* sbp, const float* ebp, __m512 (&c)[RG],
                                                                  __mmask16 (&flag)[RG]) {
  const std::size_t count = NK > 0 ? static_cast<std::size_t>(NK) : len;
  constexpr std::size_t kMax = NK > 0 ? static_cast<std::size_t>(NK) : 64;
  __m512 wk[RG][kMax];  // ea_i + eb_i per lane, kept for the terms' scaling
  __m512 w[RG];
  exponent_sums<RG, kMax>(k, ea, ebp, count, wk, w);
  const __m512i abs32 = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i E[RG], S[RG][2];
  __m512 fe[RG];
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r) {
    const __m512i cb = _mm512_and_si512(_mm512_castps_si512(c[r]), abs32);
    __m512i ec = _mm512_max_epi32(_mm512_sub_epi32(_mm512_srli_epi32(cb, 23), _mm512_set1_epi32(127)),
                                  _mm512_set1_epi32(k.c_emin));
    ec = _mm512_mask_mov_epi32(ec, _mm512_cmpeq_epi32_mask(cb, _mm512_setzero_si512()), _mm512_set1_epi32(k.zero_c));
    E[r] = _mm512_max_epi32(_mm512_cvttps_epi32(w[r]), ec);
    fe[r] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(k.F), E[r]));
    const __m512i tc = _mm512_cvttps_epi32(_mm512_scalef_ps(c[r], fe[r]));
    S[r][0] = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(tc));
    S[r][1] = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(tc, 1));
  }
  step_terms<RG, NK, kMax>(k, sa, sbp, wk, fe, count, S);
  const __m512i cut = _mm512_set1_epi32(static_cast<int>(~((std::uint32_t{1} << (23 - k.out_m)) - 1)));
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r) {
    constexpr int rz = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
    const __m512 t = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvt_roundepi64_ps(S[r][0], rz)),
                                        _mm512_cvt_roundepi64_ps(S[r][1], rz), 1);
    const __mmask16 zero = _mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_EQ_OQ);
    const __m512i ef = _mm512_sub_epi32(E[r], _mm512_set1_epi32(k.F));
    const __m512i tb = _mm512_castps_si512(t);
    const __m512i e_res =
        _mm512_add_epi32(_mm512_sub_epi32(_mm512_srli_epi32(_mm512_and_si512(tb, abs32), 23), _mm512_set1_epi32(127)), ef);
    const __mmask16 ok = _mm512_cmpge_epi32_mask(e_res, _mm512_set1_epi32(k.out_emin)) &
                         _mm512_cmple_epi32_mask(e_res, _mm512_set1_epi32(k.out_emax));
    const __m512 res = _mm512_scalef_ps(_mm512_castsi512_ps(_mm512_and_si512(tb, cut)), _mm512_cvtepi32_ps(ef));
    c[r] = _mm512_mask_mov_ps(res, zero, _mm512_set1_ps(static_cast<float>(k.zero_result)));
    flag[r] |= static_cast<__mmask16>(~zero & ~ok);
    if (!k.zero_positive) flag[r] |= zero;
  }
}

template <int RG>
[[NUMEQ_AVX512]] void chain_rows_compact(const FusedCols& k, const float* sa, const float* ea, std::size_t K,
                                         const float* sbp, const float* ebp, Lanes* x) {
  // The running values as floats (exact: values of c_format; a c that is not is flagged already).
  __m512 c[RG];
  __mmask16 flag[RG];
  for (int r = 0; r < RG; ++r) {
    c[r] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(x[r].c[0])), _mm512_cvtpd_ps(x[r].c[1]), 1);
    flag[r] = static_cast<__mmask16>(x[r].flag[0] | (x[r].flag[1] << 8));
  }
  walk_steps<RG>(static_cast<std::size_t>(k.n), sa, ea, K, sbp, ebp,
                 [&](auto nk, const float* const* sr, const float* const* er, std::size_t len, const float* b,
                     const float* eb) NUMEQ_AVX512_LAMBDA {
                   step_rows_compact<RG, decltype(nk)::value>(k, sr, er, len, b, eb, c, flag);
                 });
  for (int r = 0; r < RG; ++r) {
    x[r].c[0] = _mm512_cvtps_pd(_mm512_castps512_ps256(c[r]));  // exact
    x[r].c[1] = _mm512_cvtps_pd(_mm512_extractf32x8_ps(c[r], 1));
    x[r].flag[0] = static_cast<__mmask8>(flag[r]);
    x[r].flag[1] = static_cast<__mmask8>(flag[r] >> 8);
  }
}

// The chains of RG rows (a, ea: row r at a + r * K) with one panel, along all of K.
template <int RG>
[[NUMEQ_AVX512]] void chain_rows(const FusedCols& k, const double* a, const std::int32_t* ea, std::size_t K,
                                 const double* bp, const std::int32_t* ebp, Lanes* x) {
  const Consts cs = consts_of(k);
  walk_steps<RG>(static_cast<std::size_t>(k.n), a, ea, K, bp, ebp,
                 [&](auto nk, const double* const* ar, const std::int32_t* const* er, std::size_t len,
                     const double* b, const std::int32_t* eb) NUMEQ_AVX512_LAMBDA {
                   step_rows<RG, decltype(nk)::value>(k, cs, ar, er, len, b, eb, x);
                 });
}

[[NUMEQ_AVX512]] void rows_avx512(const FusedCols& k, const double* a, const std::int32_t* ea, std::size_t rows,
                                  const PackedBFused& b, const double* c0, std::size_t ldc, double* out,
                                  std::size_t ldo, std::uint8_t* flags) {
  constexpr int RG = 4;
  const std::size_t K = b.K, N = b.N, panels = (N + kPanel - 1) / kPanel;
  const __m512i c_emin = _mm512_set1_epi64(k.c_emin);
  const __m512d c_grid = _mm512_set1_pd(k.c_grid);
  const __m512d c_max = _mm512_set1_pd(k.c_max);
  // The float-lane kernel reads a's significands and exponents as floats (this block's rows).
  std::vector<float> sa, eaf;
  if (k.narrow) {
    sa.resize(rows * K);
    eaf.resize(rows * K);
    for (std::size_t i = 0; i < rows * K; ++i) {
      sa[i] = significand_of(a[i], ea[i]);
      eaf[i] = static_cast<float>(ea[i]);
    }
  }
  for (std::size_t q = 0; q < panels; ++q) {
    const std::size_t n0 = q * kPanel, nn = std::min<std::size_t>(kPanel, N - n0);
    const double* bp = k.narrow ? nullptr : b.value.data() + q * K * kPanel;
    const std::int32_t* ebp = k.narrow ? nullptr : b.exponent.data() + q * K * kPanel;
    // Lanes past N (h = 1 or the last panel's tail) hold chains nobody reads.
    __mmask8 lanes[2];
    std::size_t lo[2], cnt[2];
    for (int h = 0; h < 2; ++h) {
      lo[h] = std::min<std::size_t>(nn, 8 * static_cast<std::size_t>(h));
      cnt[h] = std::min<std::size_t>(8, nn - lo[h]);
      lanes[h] = static_cast<__mmask8>((1u << cnt[h]) - 1);
    }
    for (std::size_t r0 = 0; r0 < rows; r0 += RG) {
      const std::size_t rg = std::min<std::size_t>(RG, rows - r0);
      Lanes x[RG];
      for (std::size_t r = 0; r < rg; ++r)
        for (int h = 0; h < 2; ++h) {
          x[r].c[h] = c0 ? _mm512_maskz_loadu_pd(lanes[h], c0 + (r0 + r) * ldc + n0 + lo[h]) : _mm512_setzero_pd();
          // The initial c must be a finite value of c_format (fused.cpp: the c test in `finish`).
          const __m512d ac = _mm512_abs_pd(x[r].c[h]);
          const __m512i ec = _mm512_max_epi64(exponent_of(_mm512_castpd_si512(ac)), c_emin);
          const __m512d magic = _mm512_mul_pd(power_of_two(ec), c_grid);
          const __mmask8 on_grid =
              _mm512_cmp_pd_mask(_mm512_sub_pd(_mm512_add_pd(ac, magic), magic), ac, _CMP_EQ_OQ);
          const __mmask8 in_range = _mm512_cmp_pd_mask(ac, c_max, _CMP_LE_OQ);
          x[r].flag[h] = static_cast<__mmask8>(~(on_grid & in_range));
        }
      const auto chains = [&](auto rows_now) NUMEQ_AVX512_LAMBDA {
        constexpr int R = decltype(rows_now)::value;
        if (k.narrow) {
          const float* sr = sa.data() + r0 * K;
          const float* er = eaf.data() + r0 * K;
          const float* sbp = b.significand.data() + q * K * kPanel;
          const float* ebf = b.exponent_f.data() + q * K * kPanel;
          if (k.compact) chain_rows_compact<R>(k, sr, er, K, sbp, ebf, x);
          else chain_rows_narrow<R>(k, sr, er, K, sbp, ebf, x);
        } else {
          chain_rows<R>(k, a + r0 * K, ea + r0 * K, K, bp, ebp, x);
        }
      };
      if (rg == 4) chains(std::integral_constant<int, 4>{});
      else if (rg == 3) chains(std::integral_constant<int, 3>{});
      else if (rg == 2) chains(std::integral_constant<int, 2>{});
      else chains(std::integral_constant<int, 1>{});
      for (std::size_t r = 0; r < rg; ++r)
        for (int h = 0; h < 2; ++h) {
          _mm512_mask_storeu_pd(out + (r0 + r) * ldo + n0 + lo[h], lanes[h], x[r].c[h]);
          for (std::size_t j = 0; j < cnt[h]; ++j) flags[(r0 + r) * N + n0 + lo[h] + j] = (x[r].flag[h] >> j) & 1;
        }
    }
  }
}

}  // namespace
#undef NUMEQ_AVX512
#undef NUMEQ_AVX512_LAMBDA
#endif

void fused_cols_rows(const FusedCols& k, const double* a, const std::int32_t* ea, std::size_t rows,
                     const PackedBFused& b, const double* c0, std::size_t ldc, double* out, std::size_t ldo,
                     std::uint8_t* flags) {
#ifdef NUMEQ_KERNELS_X86
  if (fused_cols_available()) {
    rows_avx512(k, a, ea, rows, b, c0, ldc, out, ldo, flags);
    return;
  }
#endif
  // No kernel here: every element to the caller's walk.
  (void)k, (void)a, (void)ea, (void)c0, (void)ldc, (void)out, (void)ldo;
  std::fill(flags, flags + rows * b.N, std::uint8_t{1});
}

}  // namespace kernels

namespace detail {

bool set_matmul_kernel(KernelChoice which) {
  if (!available(which)) return false;  // the CPU lacks the instructions (cpu_dispatch.hpp)
  int l = kernels::none;
  switch (which) {
    case KernelChoice::automatic: l = kernels::automatic_level(); break;
    case KernelChoice::none: l = kernels::none; break;
    case KernelChoice::portable: l = kernels::portable; break;
    case KernelChoice::avx2: l = kernels::avx2; break;
    case KernelChoice::avx512: l = kernels::avx512; break;
  }
  kernels::level().store(l, std::memory_order_relaxed);
  return true;
}

}  // namespace detail
}  // namespace numeq::core
