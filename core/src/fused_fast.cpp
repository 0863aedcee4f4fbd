// The fused step's fast path (fused.hpp): the common case computed in vector lanes without the
// wide integer, bit for bit the general path's result, with the kernel chosen at run time; and
// the public step and chain entry points, which send what the fast path does not take to the
// general path (fused.cpp).

#include "numeq/core/fused.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/exact.hpp"

#include "fused_common.hpp"
#include "fused_exact.hpp"

namespace numeq::core {

using namespace fused_detail;

// ---- the fast path --------------------------------------------------------------------------
//
// The common case computed without the wide integer, with results identical to the general path
// (detail::fused_step_reference) bit for bit. Why each part is exact, for a step that qualifies
// (make_config below) and whose operands are finite values of their formats (checked per step):
//  * Each operand's encoded exponent e(x) (a subnormal at its format's emin; a zero at -126 under
//    ZeroTerms::fp32_emin) is read as z(x) = 2^e(x): the exponent field of max(|x|, 2^emin), or
//    2^-126 for a zero. A product's candidate 2^(ea + eb) is the pattern of z(a) plus that of
//    z(b) less the bias (exponents within +-800: no field overflows), and the largest candidate
//    2^E is the largest such pattern: patterns of non-negative doubles order as their values.
//  * A product a * b is exact in binary64 (at most 24 + 24 significant bits; no underflow: every
//    non-zero operand is at least 2^-400), and |a * b| < 2^(ea + eb + 2) <= 2^(E + 2)
//    (significands below 2 each); |c| < 2^(E + 1).
//  * x * 2^(F - E) is exact (a power-of-two scaling, 2^(F - E) a normal double) unless it falls
//    below 2^-1022, and then the true value is below 1 and both cut to 0. So the aligned term
//    trunc(x * 2^(F - E)) is exactly the general path's (M >> r) with its sign: truncation toward
//    zero of a sign-magnitude value. With F <= 29 it lies below 2^31 in magnitude (the int32 or
//    int64 conversion truncates toward zero, as C++ requires) and the sum of at most 64 products
//    and c below 2^38 (int64: exact in any order).
//  * The sum S * 2^(E - F) is then normalised and rounded exactly as the general path does:
//    numeq::normalize, the OverflowRule::infinity test, numeq::round_and_pack, decode.
// Steps the fast path hands to the general path (which also throws the errors): an operand that
// is NaN, Inf or not a value of its format, and a zero sum under ZeroSign::ieee (its sign depends
// on the terms). The operand check accepts exactly the values round_to_format leaves unchanged:
// |x| <= max_finite and x a multiple of 2^(e(x) - m) (operand() below), tested by rounding
// y = min(|x|, max_finite) to its grid: ((y + M) - M) with M = 2^(e(y) + 52 - m) (y < 2^(e(y) + 1)
// <= M / 2^50, so the sum's spacing is that grid's), and comparing with |x|.
//
// The vector code uses GCC/Clang vector extensions, one body for every width: 2 lanes (SSE2,
// NEON: the portable build), 4 (AVX2) and 8 (AVX-512), each in a function compiled for its
// instruction set and chosen at run time. It uses no vector comparisons: GCC lowers those for the
// instruction set of the function they are written in (the default one for these shared helpers)
// before inlining, i.e. lane by lane; zero tests are bit operations instead.

namespace {
namespace fast {

template <int N> struct Vec {
  using d [[gnu::vector_size(8 * N)]] = double;
  using u [[gnu::vector_size(8 * N)]] = std::uint64_t;
  using l [[gnu::vector_size(8 * N)]] = std::int64_t;
  using i32 [[gnu::vector_size(4 * N)]] = std::int32_t;
};

constexpr int kMaxProducts = 64;  // n
constexpr int kMaxF = 29;         // aligned terms below 2^31
constexpr int kExponentLimit = 400;
constexpr std::uint64_t kAbsMask = 0x7FFFFFFFFFFFFFFFull;
constexpr std::uint64_t kExpMask = 0x7FF0000000000000ull;
constexpr double kZeroPower = numeq::detail::pow2(zero_operand_exponent);  // where a zero operand is read
constexpr std::uint64_t kZeroPowerBits = std::bit_cast<std::uint64_t>(kZeroPower);
constexpr double kNoCandidate = numeq::detail::pow2(no_candidate_exponent);

// What the fast path needs to know about one operand format.
struct Limits {
  double min_normal = 0;  // 2^emin
  double grid = 0;        // 2^(52 - m): 2^e * grid is the number that rounds to 2^(e - m)
  double max_finite = 0;
  bool zero_blend = false;  // a zero's exponent (-126) differs from emin's
};

struct Config {
  Limits a, b, c;
  int n = 0;
  int F = 0;
  bool zeros_enter = true;       // ZeroTerms::fp32_emin
  std::uint64_t c_min_normal_bits = 0;   // bits of 2^emin of c_format
  std::uint64_t zero_candidate_bits = 0;  // a zero c's candidate: 2^-126 (fp32_emin) or none
  std::uint64_t scale_base = 0;  // bits of 2^(F - E) = scale_base - bits of 2^E
  Cast output;
  int emax_out = 0;
  bool overflow_infinity = true;
  bool zero_positive = true;
  double zero_result = 0, plus_inf_result = 0, minus_inf_result = 0;
  std::uint64_t candidate_floor = 0;  // bits of max(2^exponent_floor, kNoCandidate): where E starts
  bool output_within_c = false;  // every finite value of the output format is a value of c_format
};

bool limits_for(const Format& f, int max_mantissa, bool zeros_enter, Limits& l) {
  if (f.is_integer() || !f.has_zero || !f.is_signed || f.mantissa_bits > max_mantissa) return false;
  if (f.emin() - f.mantissa_bits < -kExponentLimit || f.emax() > kExponentLimit) return false;
  l.min_normal = std::ldexp(1.0, f.emin());
  l.grid = std::ldexp(1.0, 52 - f.mantissa_bits);
  l.max_finite = max_finite(f);
  l.zero_blend = zeros_enter && f.emin() != zero_operand_exponent;
  return true;
}

// The fast path's choices depend on the spec only: a format built by hand under another name
// (Format::operator== compares names too) takes the same path as the table's.
constexpr bool same_format(const Format& x, const Format& y) {
  return x.kind == y.kind && x.storage_bits == y.storage_bits && x.exponent_bits == y.exponent_bits &&
         x.mantissa_bits == y.mantissa_bits && x.bias == y.bias && x.is_signed == y.is_signed &&
         x.has_zero == y.has_zero && x.specials == y.specials && x.storage_shift == y.storage_shift;
}

constexpr bool same_cast(const Cast& x, const Cast& y) {
  return same_format(x.format, y.format) && x.rounding == y.rounding && x.overflow == y.overflow &&
         x.subnormals == y.subnormals && x.seed == y.seed && x.random_bits == y.random_bits;
}

// The step's parameters as the fast path reads them; false when it does not serve them. The
// step has passed check_step.
bool make_config(const FusedStep& step, Config& k) {
  if (step.alignment != Alignment::truncate || step.max_exponent != MaxExponent::encoded) return false;
  if (step.n > kMaxProducts || step.fraction_bits > kMaxF) return false;
  if (step.exponent_floor != no_exponent_floor &&
      (step.exponent_floor < -kExponentLimit || step.exponent_floor > kExponentLimit))
    return false;
  k.zeros_enter = step.zeros == ZeroTerms::fp32_emin;
  if (!limits_for(step.a_format, 23, k.zeros_enter, k.a) ||
      !limits_for(step.b_format, 23, k.zeros_enter, k.b) ||
      !limits_for(step.c_format, 50, k.zeros_enter, k.c))
    return false;
  k.n = step.n;
  k.F = step.fraction_bits;
  const double floor_power = step.exponent_floor == no_exponent_floor ? 0.0 : std::ldexp(1.0, step.exponent_floor);
  k.c_min_normal_bits = std::bit_cast<std::uint64_t>(k.c.min_normal);
  k.candidate_floor = std::bit_cast<std::uint64_t>(floor_power > kNoCandidate ? floor_power : kNoCandidate);
  k.zero_candidate_bits = k.zeros_enter ? kZeroPowerBits : 0;
  k.scale_base = static_cast<std::uint64_t>(k.F + 2046) << 52;
  k.output = step.output;
  k.emax_out = step.output.format.emax();
  k.overflow_infinity = step.overflow == OverflowRule::infinity;
  k.zero_positive = step.zero_sign == ZeroSign::positive;
  k.zero_result = zero_result(step, false);
  k.plus_inf_result = round_to_format(std::numeric_limits<double>::infinity(), step.output);
  k.minus_inf_result = round_to_format(-std::numeric_limits<double>::infinity(), step.output);
  // Finite output values are c_format values when c_format's grid is as fine (fraction bits and
  // smallest subnormal) and its range as wide: a value M * 2^(e - m_out) is then a multiple of
  // c_format's spacing at e, and no larger than its max_finite.
  const Format& o = step.output.format;
  const Format& cf = step.c_format;
  k.output_within_c = o.kind == FormatKind::floating && o.is_signed && o.has_zero && values_within(o, cf);
  return true;
}

// The helpers below are always inlined into the chain functions at the end; they take vectors
// by reference and return them through references (wide vectors by value would differ in ABI
// with and without AVX, which GCC notes).

template <class V> [[gnu::always_inline]] inline void max_into(V& acc, const V& x) { acc = x > acc ? x : acc; }
template <class V> [[gnu::always_inline]] inline void min_into(V& acc, const V& x) { acc = x < acc ? x : acc; }

// A lane-wise reduction by halving: fold(lo, hi) folds the upper half of the lanes into the lower
// half (memcpy of the halves: no shuffle builtins needed) until one lane is left. Lanes<M> is the
// vector type of M lanes (LongLanes or BitLanes).
template <int N> using LongLanes = typename Vec<N>::l;
template <int N> using BitLanes = typename Vec<N>::u;

template <int N, template <int> class Lanes, class Fold>
[[gnu::always_inline]] inline auto reduce_halves(const Lanes<N>& x, Fold fold) {
  if constexpr (N == 1) {
    return x[0];
  } else {
    Lanes<N / 2> lo, hi;
    std::memcpy(&lo, &x, sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&x) + sizeof lo, sizeof hi);
    fold(lo, hi);
    return reduce_halves<N / 2, Lanes>(lo, fold);
  }
}

template <int N> [[gnu::always_inline]] inline std::int64_t hsum(const LongLanes<N>& x) {
  return reduce_halves<N, LongLanes>(x, [](auto& lo, const auto& hi) __attribute__((always_inline)) { lo += hi; });
}

template <int N> [[gnu::always_inline]] inline std::uint64_t hor(const BitLanes<N>& x) {
  return reduce_halves<N, BitLanes>(x, [](auto& lo, const auto& hi) __attribute__((always_inline)) { lo |= hi; });
}

// The largest of powers of two (bit patterns of non-negative doubles): AVX-512 compares the
// patterns as integers (vpmaxuq), narrower vectors as doubles (no 64-bit integer maximum there).
template <int N>
[[gnu::always_inline]] inline void max_candidates(typename Vec<N>::u& acc, const typename Vec<N>::u& w) {
  if constexpr (N == 8) {
    max_into(acc, w);
  } else {
    using D = typename Vec<N>::d;
    D t = (D)(acc);
    max_into(t, (D)(w));
    acc = (typename Vec<N>::u)(t);
  }
}

template <int N> [[gnu::always_inline]] inline std::uint64_t largest_candidate(const BitLanes<N>& x) {
  return reduce_halves<N, BitLanes>(x, [](auto& lo, const auto& hi) __attribute__((always_inline)) {
    max_candidates<static_cast<int>(sizeof lo / sizeof(std::uint64_t))>(lo, hi);
  });
}

// zero = all ones in the lanes where the non-negative pattern x is zero (+0.0), else zero.
template <int N>
[[gnu::always_inline]] inline void zero_lanes(const typename Vec<N>::u& x, typename Vec<N>::u& zero) {
  zero = typename Vec<N>::u{} - ((x - 1) >> 63);
}

// The chain's running value (each step's c): the double and its bit pattern, both at hand.
struct Acc {
  double value;
  std::uint64_t bits;
  bool checked;  // known to be a finite value of c_format
  static Acc of(double x, bool checked = false) { return {x, std::bit_cast<std::uint64_t>(x), checked}; }
};

// What a step gathers over its product vectors.
template <int N> struct Gather {
  typename Vec<N>::u bad{};  // nonzero: some operand is off its grid, beyond max_finite, NaN or Inf
  typename Vec<N>::u wmax{};  // the largest candidate 2^(ea + eb) (its pattern)
};

// An operand format's limits in every lane, made once per chain (kept in registers).
template <int N> struct LaneLimits {
  typename Vec<N>::d min_normal, grid, max_finite;
  bool zero_blend;
  explicit LaneLimits(const Limits& l)
      : min_normal(typename Vec<N>::d{} + l.min_normal), grid(typename Vec<N>::d{} + l.grid),
        max_finite(typename Vec<N>::d{} + l.max_finite), zero_blend(l.zero_blend) {}
};

template <int N> struct OperandLimits {
  LaneLimits<N> a, b;
  explicit OperandLimits(const Config& k) : a(k.a), b(k.b) {}
};

// One operand vector: its exponent power z = 2^e(x), and the value test into bad: with
// y = min(|x|, max_finite) (max_finite for NaN), ((y + M) - M) - |x| with M = 2^(e(y) + 52 - m)
// is +0 exactly when |x| <= max_finite lies on its grid; otherwise (y rounded to its grid differs
// from |x|, or y = max_finite < |x|, or |x| is NaN or Inf) it is non-zero or NaN.
template <int N>
[[gnu::always_inline]] inline void operand(const typename Vec<N>::d& x, const LaneLimits<N>& l,
                                           typename Vec<N>::u& bad, typename Vec<N>::u& z) {
  using D = typename Vec<N>::d;
  using U = typename Vec<N>::u;
  const U ab = (U)(x) & kAbsMask;
  const D ax = (D)(ab);
  D y = l.max_finite;
  min_into(y, ax);
  D m = l.min_normal;
  max_into(m, y);
  z = (U)(m) & kExpMask;
  const D magic = (D)(z) * l.grid;
  bad |= (U)(((y + magic) - magic) - ax);
  if (l.zero_blend) {
    U zero;
    zero_lanes<N>(ab, zero);
    z = (z & ~zero) | (zero & kZeroPowerBits);
  }
}

// Products [0, N) of x, y: their candidates into g, the exact products into p. `lanes`: all ones
// in the lanes that hold a product (a short step's padding lanes are zeros and stay out of the
// maximum).
template <int N, bool Masked>
[[gnu::always_inline]] inline void products(const Config& k, const OperandLimits<N>& lim, const typename Vec<N>::d& x,
                                            const typename Vec<N>::d& y, const typename Vec<N>::u& lanes,
                                            Gather<N>& g, typename Vec<N>::d& p) {
  using U = typename Vec<N>::u;
  U za, zb;
  operand<N>(x, lim.a, g.bad, za);
  operand<N>(y, lim.b, g.bad, zb);
  p = x * y;
  U w = za + zb - (std::uint64_t{1023} << 52);  // 2^(ea + eb): the exponent fields add
  if (!k.zeros_enter) {
    U zero;
    zero_lanes<N>((U)(p) & kAbsMask, zero);
    w &= ~zero;
  }
  if constexpr (Masked) w &= lanes;
  max_candidates<N>(g.wmax, w);
}

// The rest of a step once its products are in: c, E, the aligned sum and the rounding. Returns
// false when the general path must compute the step. `Out` is the output cast when it is one of
// the usual ones (the rounding kernel then folds its constants), nullptr for any other.
template <int N, int NV, const Cast* Out>
[[gnu::always_inline]] inline bool finish(const Config& k, const typename Vec<N>::d (&P)[NV], int count,
                                          const Gather<N>& g, Acc& acc_c) {
  const double c = acc_c.value;
  using L = typename Vec<N>::l;
  using I = typename Vec<N>::i32;
  const Cast& cast = Out != nullptr ? *Out : k.output;
  if (hor<N>(g.bad) != 0) return false;
  // The products' largest candidate, with the floor. kNoCandidate stands in when nothing else
  // enters the maximum (all products zero under ZeroTerms::excluded, c zero): it lies below every
  // real candidate (>= 2^-800) and keeps 2^(F - E) finite; every term is then zero.
  const std::uint64_t wl = largest_candidate<N>(g.wmax);
  const std::uint64_t wp_bits = wl > k.candidate_floor ? wl : k.candidate_floor;
  // c: a finite value of c_format (the operands' test, one lane; known when c is a finite result
  // of the step before and the output's values are values of c_format), and its exponent power.
  const std::uint64_t cb = acc_c.bits & kAbsMask;
  std::uint64_t zc = (cb > k.c_min_normal_bits ? cb : k.c_min_normal_bits) & kExpMask;
  if (!acc_c.checked) {
    const double ac = std::bit_cast<double>(cb);
    const double magic = std::bit_cast<double>(zc) * k.c.grid;
    if (!(((ac + magic) - magic) - ac == 0) || !(ac <= k.c.max_finite)) return false;
  }
  if (cb == 0) zc = k.zero_candidate_bits;
  const std::uint64_t e_bits = wp_bits > zc ? wp_bits : zc;
  // The aligned terms trunc(p * 2^(F - E)), summed.
  const double scale = std::bit_cast<double>(k.scale_base - e_bits);
  L acc{};
  for (int v = 0; v < count; ++v) {
    if constexpr (N == 8) {
      acc += __builtin_convertvector(P[v] * scale, L);  // AVX-512DQ converts to int64 directly
    } else {
      acc += __builtin_convertvector(__builtin_convertvector(P[v] * scale, I), L);
    }
  }
  const std::int64_t S = hsum<N>(acc) + static_cast<std::int32_t>(c * scale);
  if (S == 0) {
    if (!k.zero_positive) return false;
    acc_c = Acc::of(k.zero_result, true);  // a zero: a value of every c_format
    return true;
  }
  const bool negative = S < 0;
  const std::uint64_t magnitude =
      negative ? std::uint64_t{0} - static_cast<std::uint64_t>(S) : static_cast<std::uint64_t>(S);
  const int E = static_cast<int>(e_bits >> 52) - 1023;
  const Exact exact = normalize(negative, magnitude, E - k.F);
  if (k.overflow_infinity && exact.exponent > k.emax_out) {
    acc_c = Acc::of(negative ? k.minus_inf_result : k.plus_inf_result);
    return true;
  }
  const std::uint64_t bits =
      round_and_pack(cast, exact.negative, exact.exponent, exact.significand, exact.sticky, 0);
  // Decoding (not rounding: every value of the output format is a double). A pattern with an
  // exponent field strictly between 0 and all ones is a normal number in every kind of format:
  // the double with the same sign and fraction and the rebiased exponent (decode_bits' value).
  // Zeros, subnormals and the top field (Inf, NaN, fn's largest binade) take decode_bits.
  const Format& f = cast.format;
  const std::uint64_t pattern = bits >> f.storage_shift;
  const int m = f.mantissa_bits;
  const std::uint64_t top = (std::uint64_t{1} << f.exponent_bits) - 1;
  const std::uint64_t field = (pattern >> m) & top;
  if (field != 0 && field != top) {
    const std::uint64_t fraction = pattern & ((std::uint64_t{1} << m) - 1);
    const std::uint64_t sign = (pattern >> (m + f.exponent_bits)) & 1;
    const auto exponent = static_cast<std::uint64_t>(static_cast<std::int64_t>(field) - f.bias + 1023);
    acc_c.bits = sign << 63 | exponent << 52 | fraction << (52 - m);
    acc_c.value = std::bit_cast<double>(acc_c.bits);
    acc_c.checked = k.output_within_c;
  } else {
    acc_c = Acc::of(decode_bits(f, bits));
  }
  return true;
}

// A full step: n = N * NV products.
template <int N, int NV, const Cast* Out>
[[gnu::always_inline]] inline bool full_step(const Config& k, const OperandLimits<N>& lim, const double* a,
                                             const double* b, Acc& c) {
  using D = typename Vec<N>::d;
  Gather<N> g;
  D P[NV];
  for (int v = 0; v < NV; ++v) {
    D x, y;
    std::memcpy(&x, a + v * N, sizeof x);
    std::memcpy(&y, b + v * N, sizeof y);
    products<N, false>(k, lim, x, y, typename Vec<N>::u{}, g, P[v]);
  }
  return finish<N, NV, Out>(k, P, NV, g, c);
}

// A step of any len <= 64 products, through zero-padded copies.
template <int N, const Cast* Out>
[[gnu::always_inline]] inline bool short_step(const Config& k, const OperandLimits<N>& lim, const double* a,
                                              const double* b, std::size_t len, Acc& c) {
  using D = typename Vec<N>::d;
  using U = typename Vec<N>::u;
  constexpr int NV = kMaxProducts / N;
  const int count = static_cast<int>((len + N - 1) / N);
  const auto padded = static_cast<std::size_t>(count * N);
  double xa[kMaxProducts], xb[kMaxProducts];
  std::uint64_t lane[kMaxProducts];
  std::copy(a, a + len, xa);
  std::copy(b, b + len, xb);
  std::fill(xa + len, xa + padded, 0.0);
  std::fill(xb + len, xb + padded, 0.0);
  std::fill(lane, lane + len, ~std::uint64_t{0});
  std::fill(lane + len, lane + padded, std::uint64_t{0});
  Gather<N> g;
  D P[NV];
  for (int v = 0; v < count; ++v) {
    D x, y;
    U m;
    std::memcpy(&x, xa + v * N, sizeof x);
    std::memcpy(&y, xb + v * N, sizeof y);
    std::memcpy(&m, lane + v * N, sizeof m);
    products<N, true>(k, lim, x, y, m, g, P[v]);
  }
  return finish<N, NV, Out>(k, P, count, g, c);
}

thread_local std::uint64_t general_steps = 0;

[[gnu::noinline]] double general_step(std::span<const double> a, std::span<const double> b, double c,
                                      const FusedStep& s) {
  ++general_steps;
  return detail::fused_step_reference(a, b, c, s);
}

// The chain: steps of k.n products, each output the next step's c; a step the fast path does not
// take goes to the general path.
template <int N, int NV, const Cast* Out>
[[gnu::always_inline]] inline double chain_full(const Config& k, const FusedStep& s, const double* a,
                                                const double* b, std::size_t K, double c0) {
  constexpr std::size_t n = N * NV;
  const OperandLimits<N> lim(k);
  Acc c = Acc::of(c0);
  std::size_t i = 0;
  for (; i + n <= K; i += n)
    if (!full_step<N, NV, Out>(k, lim, a + i, b + i, c))
      c = Acc::of(general_step({a + i, n}, {b + i, n}, c.value, s));
  if (i < K && !short_step<N, Out>(k, lim, a + i, b + i, K - i, c))
    c = Acc::of(general_step({a + i, K - i}, {b + i, K - i}, c.value, s));
  return c.value;
}

template <int N, const Cast* Out>
[[gnu::always_inline]] inline double chain_n(const Config& k, const FusedStep& s, const double* a,
                                             const double* b, std::size_t K, double c) {
  constexpr int H = N < 4 ? N : 4;  // n = 4 in vectors of at most 4 lanes
  switch (k.n) {
    case 4: return chain_full<H, 4 / H, Out>(k, s, a, b, K, c);
    case 8: if constexpr (8 % N == 0) return chain_full<N, 8 / N, Out>(k, s, a, b, K, c); break;
    case 16: if constexpr (16 % N == 0) return chain_full<N, 16 / N, Out>(k, s, a, b, K, c); break;
    case 32: if constexpr (32 % N == 0) return chain_full<N, 32 / N, Out>(k, s, a, b, K, c); break;
    default: break;
  }
  const auto n = static_cast<std::size_t>(k.n);
  const OperandLimits<N> lim(k);
  Acc acc = Acc::of(c);
  for (std::size_t i = 0; i < K; i += n) {
    const std::size_t len = std::min(n, K - i);
    if (!short_step<N, Out>(k, lim, a + i, b + i, len, acc))
      acc = Acc::of(general_step({a + i, len}, {b + i, len}, acc.value, s));
  }
  return acc.value;
}

// The usual output casts get their own code (constants folded into the rounding kernel).
template <int N>
[[gnu::always_inline]] inline double chain_any(const Config& k, const FusedStep& s, const double* a,
                                               const double* b, std::size_t K, double c) {
  if (same_cast(k.output, nvidia::detail::rz32)) return chain_n<N, &nvidia::detail::rz32>(k, s, a, b, K, c);
  if (same_cast(k.output, nvidia::detail::rz_e8m13)) return chain_n<N, &nvidia::detail::rz_e8m13>(k, s, a, b, K, c);
  if (same_cast(k.output, nvidia::detail::rn16)) return chain_n<N, &nvidia::detail::rn16>(k, s, a, b, K, c);
  return chain_n<N, nullptr>(k, s, a, b, K, c);
}

using ChainFn = double (*)(const Config&, const FusedStep&, const double*, const double*, std::size_t, double);

double chain_portable(const Config& k, const FusedStep& s, const double* a, const double* b, std::size_t K,
                      double c) {
  return chain_any<2>(k, s, a, b, K, c);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NUMEQ_FUSED_X86 1
[[gnu::target("avx2")]] double chain_avx2(const Config& k, const FusedStep& s, const double* a,
                                          const double* b, std::size_t K, double c) {
  return chain_any<4>(k, s, a, b, K, c);
}
[[gnu::target("avx512f,avx512dq,avx512vl,avx512bw")]] double chain_avx512(const Config& k, const FusedStep& s,
                                                                          const double* a, const double* b,
                                                                          std::size_t K, double c) {
  return chain_any<8>(k, s, a, b, K, c);
}
#endif

ChainFn automatic_kernel() {
#ifdef NUMEQ_FUSED_X86
  const Isa isa = current_isa();
  if (isa >= Isa::avx512) return chain_avx512;
  if (isa >= Isa::avx2) return chain_avx2;
#endif
  return chain_portable;
}

// nullptr: every step on the general path.
std::atomic<ChainFn>& kernel() {
  static std::atomic<ChainFn> k{automatic_kernel()};
  return k;
}

}  // namespace fast
}  // namespace

namespace detail {

bool set_fused_kernel(KernelChoice which) {
  if (!available(which)) return false;  // the CPU lacks the instructions (cpu_dispatch.hpp)
  fast::ChainFn f = nullptr;
  switch (which) {
    case KernelChoice::automatic: f = fast::automatic_kernel(); break;
    case KernelChoice::none: f = nullptr; break;
    case KernelChoice::portable: f = fast::chain_portable; break;
    case KernelChoice::avx2:
#ifdef NUMEQ_FUSED_X86
      f = fast::chain_avx2;
#endif
      break;
    case KernelChoice::avx512:
#ifdef NUMEQ_FUSED_X86
      f = fast::chain_avx512;
#endif
      break;
  }
  fast::kernel().store(f, std::memory_order_relaxed);
  return true;
}

std::uint64_t fused_general_steps() { return fast::general_steps; }

bool fused_fast_path_applies(const FusedStep& step) {
  check_step(step);
  fast::Config k;
  return fast::make_config(step, k);
}

}  // namespace detail

namespace {

// The fast path's reading of a step, after check_step (which throws its errors), kept per thread
// for the last two steps seen (a GEMM calls fused_chain once per output element with one step;
// h100_mma_sync_fp8_f16 alternates two). A step is recognised by its bytes: equal bytes are equal
// fields (a miss only costs a recomputation). nullptr: the fast path does not serve the step.
const fast::Config* fast_config(const FusedStep& step) {
  struct Entry {
    alignas(FusedStep) unsigned char key[sizeof(FusedStep)];
    fast::Config k;
    bool applies = false;
    bool filled = false;
  };
  thread_local Entry cache[2];
  for (Entry& e : cache)
    if (e.filled && std::memcmp(e.key, &step, sizeof(FusedStep)) == 0) return e.applies ? &e.k : nullptr;
  check_step(step);
  cache[1] = cache[0];
  Entry& e = cache[0];
  e.filled = false;
  e.applies = fast::make_config(step, e.k);
  std::memcpy(e.key, &step, sizeof(FusedStep));
  e.filled = true;
  return e.applies ? &e.k : nullptr;
}

}  // namespace

double fused_step(std::span<const double> a, std::span<const double> b, double c,
                  const FusedStep& step) {
  const fast::ChainFn f = fast::kernel().load(std::memory_order_relaxed);
  // The size checks and every error stay with the general path.
  if (f == nullptr || a.empty() || a.size() != b.size() || a.size() > static_cast<std::size_t>(step.n))
    return detail::fused_step_reference(a, b, c, step);
  const fast::Config* k = fast_config(step);
  if (k == nullptr) {
    if (const std::optional<double> r = detail::exact_step(a.data(), b.data(), a.size(), c, step)) return *r;
    return detail::fused_step_reference(a, b, c, step);
  }
  return f(*k, step, a.data(), b.data(), a.size(), c);
}

double fused_chain(std::span<const double> a, std::span<const double> b, double c, std::size_t K,
                   const FusedStep& step) {
  const fast::ChainFn f = fast::kernel().load(std::memory_order_relaxed);
  if (f == nullptr || K == 0) return detail::fused_chain_reference(a, b, c, K, step);
  const fast::Config* k = fast_config(step);
  check_chain_length(a, b, K);
  if (k == nullptr) {
    // Steps that keep every bit (fused_exact.hpp), each on its own; the general path for the rest.
    const auto n = static_cast<std::size_t>(step.n);
    double acc = c;
    for (std::size_t s0 = 0; s0 < K; s0 += n) {
      const std::size_t len = std::min(n, K - s0);
      const std::optional<double> r = detail::exact_step(a.data() + s0, b.data() + s0, len, acc, step);
      acc = r ? *r : detail::fused_step_reference(a.subspan(s0, len), b.subspan(s0, len), acc, step);
    }
    return acc;
  }
  return f(*k, step, a.data(), b.data(), K, c);
}

double fused_chain(std::span<const double> a, std::span<const double> b, double c,
                   const FusedStep& step) {
  if (a.size() != b.size())
    throw error("b: has " + std::to_string(b.size()) + " elements, a has " +
                std::to_string(a.size()));
  return fused_chain(a, b, c, a.size(), step);
}

}  // namespace numeq::core
