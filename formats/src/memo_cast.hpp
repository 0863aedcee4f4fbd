#pragma once
// Memoised casts from fp32 into narrow formats (private to array.cpp).
//
// ---- Why a table of the kernel's answers equals the kernel ----
//
// The kernel's result for an fp32 input x into a format with m <= 7 mantissa bits depends only on
// the sign, exponent and top m mantissa bits of x (its top 9 + m bits) and on where the other
// low_bits = 23 - m bits lie against the half-unit: zero, below half, exactly half, above half.
// For normal results that is exactly the (half, sticky) pair round_and_pack reads. For results
// below the format's normal range the rounding point is higher up, inside the top bits, and the
// low bits only feed the sticky bit (zero or not). The point never falls below bit low_bits as
// long as the format's smallest normal exponent is >= fp32's (-126): an fp32 subnormal's bits are
// then rounded at the same place as a normal's. So for every non-stochastic cast the kernel's
// answers for the 2^(9 + m) x 4 classes, computed once by the kernel itself from one
// representative of each class, give every fp32 input's answer: a table of at most 2^18 patterns.
// Formats without NaN are excluded (a NaN input has no answer there, only an error), and so is
// E8M0 (emin -127).
//
// The class index is ((x >> (low_bits - 1)) << 1) | ((x & (half - 1)) != 0): the top bits, then
// the half bit, then "anything below the half bit". (half bit, rest) = (0,0) zero, (0,1) below
// half, (1,0) exactly half, (1,1) above half.
//
// ---- Stochastic rounding ----
//
// round_and_pack reads `random` in one place only: round_increment's stochastic case, which
// answers "add one unit" iff frac + r >= 2^R, where R = random_bits, frac = the top R discarded
// bits and r = the top R bits of the draw. So the kernel's answer for (x, random) is one of two
// patterns: the truncated one T(x) (no increment) and the incremented one A(x); both depend only
// on the kept bits, the exponent and the sign, i.e. on x's class (top 9 + m bits, low bits zero
// or not; the second part only separates zero from subnormal and Inf from NaN). The table holds,
// per class, T = kernel(x0, random = 0) and A = kernel(x1, random = ~0, R = 64) with x0 / x1 the
// class members whose low bits are smallest / all ones:
//  - random = 0 never increments (frac + 0 < 2^R), whatever R: T is the truncation for the class.
//  - x1's discarded bits contain every other member's (bitwise), so if any member x has a nonzero
//    frac under some R, x1's discarded bits are nonzero, its 64-bit frac is nonzero, r = 2^64 - 1
//    makes frac + r >= 2^64 and the kernel increments: A is the incremented answer whenever an
//    increment can happen in the class. (Where none can, A is never selected.)
//  - Classes that never reach round_and_pack (zero, Inf, NaN, flushed subnormal inputs) do not
//    read `random`: T == A there.
// The per-element decision is then the kernel's comparison, with the discarded bits placed as
// round_and_pack places them: value = S * 2^(e - 150) with S the 24-bit significand (implicit bit
// included; fp32 subnormals: the fraction, e = 1), and the kept unit at 2^(max(e, emin + 127) -
// 127 - m), so the q = low_bits + max(0, emin + 127 - e) lowest bits of S are discarded, left
// aligned in 64 bits: D = S << (64 - q) (q <= 64) or S >> (q - 64) (the rest went to sticky, which
// stochastic rounding does not read). With M the mask of the top R bits of a 64-bit word,
// frac + r >= 2^R  <=>  (D & M) + (random & M) >= 2^64  <=>  (random & M) > ~(D & M).
// The scalar path (stochastic_pick) does exactly this in 64 bits. The AVX-512 path does it on the
// top 32 bits of D and of the draw (SplitMix64 on 8 x 64-bit lanes, vpmullq): exact when R <= 32
// (only the top 32 bits are read), and when q <= 32 (the low 32 bits of D are zero, so no carry
// comes up from them); the other lanes (R > 32 and q > 32: results far below the normal range)
// are redone by the scalar path. How it finds the top 32 bits of D: stochastic_shape below.
//
// tests/cpp/formats/test_array.cpp compares every path (AVX-512, AVX2, portable: NUMEQ_ISA)
// with the kernel on every class and on random inputs, for every rounding, overflow and subnormal
// setting and many seeds and random_bits; the opt-in exhaustive test covers all 2^32 inputs.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12's AVX-512 intrinsics self-initialise their "undefined" operands (GCC bug 105593), which
// -Wmaybe-uninitialized reports wherever they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define NUMEQ_MEMO_X86 1
#else
#define NUMEQ_MEMO_X86 0
#endif

#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq::memo {
// Internal linkage: this header belongs to array.cpp alone (ifunc clones, statics).
namespace {

struct MemoTable {
  Cast cast;                            // stochastic tables: seed 0, random_bits 64
  int low_bits = 0;                     // 23 - m: the mantissa bits below the kept ones
  std::uint32_t emin_field = 0;         // stochastic: the biased fp32 exponent of the smallest normal
  std::vector<std::uint16_t> patterns;  // deterministic: by class (top 9 + m bits) * 4 + position; + 1 pad
  std::vector<std::uint32_t> pairs;     // stochastic: by class (top 9 + m bits) * 2 + (low != 0): T | A << 16
  std::vector<double> values;           // by pattern: its value (decode_bits)
  // Every pattern the table answers is the top half of an fp32 whose value is decode_bits' (bf16):
  // the vector paths then widen pattern << 16 (exact, NaN sign kept) instead of gathering values.
  bool values_by_widening = false;
};

// Whether, for every pattern p in `answers` (those the table can give), the value the vector paths
// would gather, values[p] (decode_bits), is bit for bit the binary32 pattern p << 16 widened to
// binary64. IEEE 754 widening is exact, and the hardware's (cvtss2sd, vcvtps2pd) keeps a quiet
// NaN's sign and payload; decode_bits gives the quiet NaN of payload 0, which the canonical
// pattern widens to. True for every bf16 table; 8-bit tables (2 KiB of values) keep the gather.
template <class Answers>
bool widens_to_values(const std::vector<double>& values, const Answers& answers) {
  if (values.size() != std::size_t{1} << 16) return false;
  for (const std::uint32_t p : answers) {
    const double widened = static_cast<double>(std::bit_cast<float>((p & 0xFFFFu) << 16));
    if (std::bit_cast<std::uint64_t>(widened) != std::bit_cast<std::uint64_t>(values[p & 0xFFFFu])) return false;
  }
  return true;
}

inline bool eligible(const Format& source, const Cast& cast) {
  const Format& f = cast.format;
  return source == formats::fp32 && f.kind == FormatKind::floating && f.mantissa_bits <= 7 &&
         f.storage_bits <= 16 && f.has_nan() && f.emin() >= formats::fp32.emin();
}

inline std::size_t entries(const Cast& cast) {
  const int position_bits = cast.rounding == Rounding::stochastic ? 1 : 2;
  return std::size_t{1} << (9 + cast.format.mantissa_bits + position_bits);
}

inline std::shared_ptr<const MemoTable> table_for(const Cast& cast) {
  static std::mutex mutex;
  static std::vector<std::shared_ptr<const MemoTable>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& t : cache)
    if (t->cast.format == cast.format && t->cast.rounding == cast.rounding && t->cast.overflow == cast.overflow &&
        t->cast.subnormals == cast.subnormals)
      return t;
  auto table = std::make_shared<MemoTable>();
  table->cast = cast;
  table->low_bits = 23 - cast.format.mantissa_bits;
  table->emin_field = static_cast<std::uint32_t>(cast.format.emin() + 127);
  const std::uint32_t low_mask = (std::uint32_t{1} << table->low_bits) - 1;
  const std::size_t n = entries(cast);
  // Every format admitted has NaN, so no class answers invalid_encoding.
  if (cast.rounding == Rounding::stochastic) {
    Cast c = cast;
    c.seed = 0;
    c.random_bits = 64;
    table->cast = c;
    table->pairs.resize(n);
    for (std::size_t key = 0; key < n; ++key) {
      const std::uint32_t top = static_cast<std::uint32_t>(key >> 1) << table->low_bits;
      const bool nonzero = (key & 1) != 0;
      const std::uint64_t t = encode_bits(formats::fp32, top | (nonzero ? 1u : 0u), c, 0);
      const std::uint64_t a = encode_bits(formats::fp32, top | (nonzero ? low_mask : 0u), c, ~std::uint64_t{0});
      table->pairs[key] = static_cast<std::uint32_t>(t) | static_cast<std::uint32_t>(a) << 16;
    }
  } else {
    const std::uint32_t half = std::uint32_t{1} << (table->low_bits - 1);
    const std::uint32_t representative[4] = {0, 1, half, half + 1};
    table->patterns.resize(n + 1);  // + 1: the vector paths read 32 bits at each 16-bit entry
    for (std::size_t key = 0; key < n; ++key) {
      const std::uint32_t x = (static_cast<std::uint32_t>(key >> 2) << table->low_bits) | representative[key & 3];
      table->patterns[key] = static_cast<std::uint16_t>(encode_bits(formats::fp32, x, cast, 0));
    }
  }
  table->values.resize(std::size_t{1} << cast.format.storage_bits);
  for (std::size_t bits = 0; bits < table->values.size(); ++bits)
    table->values[bits] = decode_bits(cast.format, bits);
  // A stochastic pair holds both answers (T | A << 16); the last deterministic entry is padding.
  if (cast.rounding == Rounding::stochastic) {
    std::vector<std::uint32_t> answers;
    answers.reserve(2 * table->pairs.size());
    for (const std::uint32_t pair : table->pairs) {
      answers.push_back(pair & 0xFFFFu);
      answers.push_back(pair >> 16);
    }
    table->values_by_widening = widens_to_values(table->values, answers);
  } else {
    table->values_by_widening =
        widens_to_values(table->values, std::span<const std::uint16_t>(table->patterns.data(), n));
  }
  // A handful of casts are used in practice; the bound only guards against unbounded growth.
  if (cache.size() >= 64) cache.erase(cache.begin());
  cache.push_back(table);
  return table;
}

// ---- instruction sets ----

// The one dispatch point (cpu_dispatch.hpp): the CPU's widest set, lowered by NUMEQ_ISA.
using numeq::Isa;
using numeq::current_isa;

// ---- deterministic roundings: the table lookup ----

template <class Out>
[[gnu::always_inline]] inline void nearest_scalar(const std::uint32_t* in, Out* bits, double* values,
                                                  const MemoTable& table, std::size_t begin, std::size_t end) {
  const int shift = table.low_bits - 1;
  const std::uint32_t rest_mask = (std::uint32_t{1} << shift) - 1;
  const std::uint16_t* patterns = table.patterns.data();
  const double* decoded = table.values.data();
  for (std::size_t i = begin; i < end; ++i) {
    const std::uint32_t x = in[i];
    const std::uint16_t pattern = patterns[((x >> shift) << 1) | static_cast<std::uint32_t>((x & rest_mask) != 0)];
    if (bits != nullptr) bits[i] = static_cast<Out>(pattern);
    if (values != nullptr) values[i] = decoded[pattern];
  }
}

[[gnu::target_clones("arch=x86-64-v3", "default")]] inline void nearest_scalar_clones(const std::uint32_t* in, std::uint8_t* bits,
    double* values, const MemoTable& table, std::size_t begin, std::size_t end) {
  nearest_scalar(in, bits, values, table, begin, end);
}
[[gnu::target_clones("arch=x86-64-v3", "default")]] inline void nearest_scalar_clones(const std::uint32_t* in, std::uint16_t* bits,
    double* values, const MemoTable& table, std::size_t begin, std::size_t end) {
  nearest_scalar(in, bits, values, table, begin, end);
}

// ---- stochastic rounding: the pair lookup and the kernel's comparison (see the top) ----

struct StochasticSetup {
  std::uint64_t key;   // random_stream_key(seed)
  int random_bits;     // R
  std::uint64_t mask;  // the top R bits of a 64-bit word
};

inline StochasticSetup stochastic_setup(const Cast& cast) {
  const int r = cast.random_bits;
  return {random_stream_key(cast.seed), r, r == 64 ? ~std::uint64_t{0} : ~std::uint64_t{0} << (64 - r)};
}

[[gnu::always_inline]] inline std::uint16_t stochastic_pick(const MemoTable& table, const StochasticSetup& s,
                                                            std::uint32_t x, std::uint64_t random) {
  const int low_bits = table.low_bits;
  const std::uint32_t low_mask = (std::uint32_t{1} << low_bits) - 1;
  const std::uint32_t entry =
      table.pairs[((x >> low_bits) << 1) | static_cast<std::uint32_t>((x & low_mask) != 0)];
  const std::uint32_t field = (x >> 23) & 0xFF;
  const std::uint64_t significand = (x & 0x7FFFFF) | (field != 0 ? 0x800000u : 0u);
  const std::uint32_t e = std::max<std::uint32_t>(field, 1);
  const int q = low_bits + static_cast<int>(table.emin_field > e ? table.emin_field - e : 0);
  const std::uint64_t discarded = q <= 64 ? significand << (64 - q) : q < 128 ? significand >> (q - 64) : 0;
  const bool away = (random & s.mask) > ~(discarded & s.mask);
  // A shift, not a branch: `away` is a coin flip the branch predictor cannot learn.
  return static_cast<std::uint16_t>(entry >> (static_cast<unsigned>(away) << 4));
}

template <class Out>
[[gnu::always_inline]] inline void stochastic_scalar(const std::uint32_t* in, Out* bits, double* values,
                                                     const MemoTable& table, const StochasticSetup& s,
                                                     std::size_t begin, std::size_t end) {
  const double* decoded = table.values.data();
  for (std::size_t i = begin; i < end; ++i) {
    const std::uint16_t pattern = stochastic_pick(table, s, in[i], random_bits_at(s.key, i));
    if (bits != nullptr) bits[i] = static_cast<Out>(pattern);
    if (values != nullptr) values[i] = decoded[pattern];
  }
}

[[gnu::target_clones("arch=x86-64-v3", "default")]] inline void stochastic_scalar_clones(const std::uint32_t* in,
    std::uint8_t* bits, double* values, const MemoTable& table, const StochasticSetup& s, std::size_t begin,
    std::size_t end) {
  stochastic_scalar(in, bits, values, table, s, begin, end);
}
[[gnu::target_clones("arch=x86-64-v3", "default")]] inline void stochastic_scalar_clones(const std::uint32_t* in,
    std::uint16_t* bits, double* values, const MemoTable& table, const StochasticSetup& s, std::size_t begin,
    std::size_t end) {
  stochastic_scalar(in, bits, values, table, s, begin, end);
}

#if NUMEQ_MEMO_X86

// Where a vector path puts values (null: none) and how it makes them from patterns: widened from
// p << 16 where the table allows it (MemoTable::values_by_widening), else gathered from its
// decoded values.
struct ValueOutput {
  double* values;
  const double* decoded;
  bool widen;
  ValueOutput(double* out, const MemoTable& table)
      : values(out), decoded(table.values.data()), widen(table.values_by_widening) {}
};

// ---- AVX2: 8 lanes, deterministic roundings ----

template <class Out>
[[gnu::target("avx2")]] inline void nearest_avx2(const std::uint32_t* in, Out* bits, double* values,
                                                 const MemoTable& table, std::size_t begin, std::size_t end) {
  const __m128i shift = _mm_cvtsi32_si128(table.low_bits - 1);
  const __m256i rest_mask = _mm256_set1_epi32(static_cast<int>((std::uint32_t{1} << (table.low_bits - 1)) - 1));
  const __m256i zero = _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i pattern_mask = _mm256_set1_epi32(sizeof(Out) == 1 ? 0xFF : 0xFFFF);
  const int* patterns = reinterpret_cast<const int*>(table.patterns.data());
  const ValueOutput out(values, table);
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    __m256i key = _mm256_srl_epi32(x, shift);
    key = _mm256_add_epi32(key, key);
    // (x & rest_mask) != 0 as 0 / 1: 1 + (-1 where zero).
    const __m256i rest_zero = _mm256_cmpeq_epi32(_mm256_and_si256(x, rest_mask), zero);
    key = _mm256_add_epi32(key, _mm256_add_epi32(one, rest_zero));
    // 32 bits read at each 16-bit entry (scale 2); the low 16 are the pattern.
    const __m256i p = _mm256_and_si256(_mm256_i32gather_epi32(patterns, key, 2), pattern_mask);
    const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    if (bits != nullptr) {
      if constexpr (sizeof(Out) == 1)
        _mm_storel_epi64(reinterpret_cast<__m128i*>(bits + i), _mm_packus_epi16(words, words));
      else
        _mm_storeu_si128(reinterpret_cast<__m128i*>(bits + i), words);
    }
    if (values != nullptr && out.widen) {
      const __m256 top = _mm256_castsi256_ps(_mm256_slli_epi32(p, 16));
      _mm256_storeu_pd(values + i, _mm256_cvtps_pd(_mm256_castps256_ps128(top)));
      _mm256_storeu_pd(values + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(top, 1)));
    } else if (values != nullptr) {
      _mm256_storeu_pd(values + i, _mm256_i32gather_pd(out.decoded, _mm256_castsi256_si128(p), 8));
      _mm256_storeu_pd(values + i + 4, _mm256_i32gather_pd(out.decoded, _mm256_extracti128_si256(p, 1), 8));
    }
  }
  nearest_scalar(in, bits, values, table, i, end);
}

// ---- AVX-512: 16 lanes ----

// The memo keys of 16 fp32 patterns, as the tables are built (MemoTable): 2 (x >> shift), plus one
// where x has a bit of below_mask set.
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq"), gnu::always_inline]] inline __m512i memo_keys_avx512(
    __m512i x, __m128i shift, __m512i below_mask) {
  const __m512i twice = _mm512_slli_epi32(_mm512_srl_epi32(x, shift), 1);
  return _mm512_mask_or_epi32(twice, _mm512_test_epi32_mask(x, below_mask), twice, _mm512_set1_epi32(1));
}

// Patterns p (the low 16 bits of each lane; the high 16 may hold a neighbouring entry) stored as
// bits and / or values.
template <class Out>
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq"), gnu::always_inline]] inline void store_patterns_avx512(
    Out* bits, const ValueOutput& out, std::size_t i, __m512i p) {
  double* const values = out.values;
  if (bits != nullptr) {
    if constexpr (sizeof(Out) == 1)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bits + i), _mm512_cvtepi32_epi8(p));
    else
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits + i), _mm512_cvtepi32_epi16(p));
  }
  if (values != nullptr && out.widen) {
    const __m512 top = _mm512_castsi512_ps(_mm512_slli_epi32(p, 16));
    _mm512_storeu_pd(values + i, _mm512_cvtps_pd(_mm512_castps512_ps256(top)));
    _mm512_storeu_pd(values + i + 8, _mm512_cvtps_pd(_mm512_extractf32x8_ps(top, 1)));
  } else if (values != nullptr) {
    const __m512i index = _mm512_and_si512(p, _mm512_set1_epi32(sizeof(Out) == 1 ? 0xFF : 0xFFFF));
    _mm512_storeu_pd(values + i, _mm512_i32gather_pd(_mm512_castsi512_si256(index), out.decoded, 8));
    _mm512_storeu_pd(values + i + 8, _mm512_i32gather_pd(_mm512_extracti64x4_epi64(index, 1), out.decoded, 8));
  }
}

template <class Out>
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq")]] inline void nearest_avx512(
    const std::uint32_t* in, Out* bits, double* values, const MemoTable& table, std::size_t begin, std::size_t end) {
  const __m128i shift = _mm_cvtsi32_si128(table.low_bits - 1);
  const __m512i rest_mask = _mm512_set1_epi32(static_cast<int>((std::uint32_t{1} << (table.low_bits - 1)) - 1));
  const void* patterns = table.patterns.data();
  const ValueOutput out(values, table);
  std::size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512i x = _mm512_loadu_si512(in + i);
    const __m512i key = memo_keys_avx512(x, shift, rest_mask);
    // 32 bits read at each 16-bit entry (scale 2); the low 16 are the pattern.
    store_patterns_avx512(bits, out, i, _mm512_i32gather_epi32(key, patterns, 2));
  }
  nearest_scalar(in, bits, values, table, i, end);
}

// The two shapes of target the vector path handles (the scalar path handles any):
//  - wide range (emin == fp32's, bf16): no result lies below the normal range, so q = low_bits
//    for every input (fp32 subnormals too: e = 1 = emin + 127) and the top 32 bits of D are x's
//    low bits shifted to the top: x << (32 - low_bits).
//  - narrow range (8-bit formats): fp32 subnormal inputs have q = low_bits + emin + 126 >= 56
//    discarded bits, so none of S reaches the top 32 bits of D whatever its bit 23: S may take
//    the implicit bit unconditionally, and e = 0 may stand for e = 1 (one more discarded bit, still
//    >= 56).
enum class StochasticShape { wide_range, narrow_range, other };

inline StochasticShape stochastic_shape(const MemoTable& table) {
  if (table.emin_field == 1) return StochasticShape::wide_range;
  if (table.low_bits + static_cast<int>(table.emin_field) - 1 >= 56) return StochasticShape::narrow_range;
  return StochasticShape::other;
}

template <class Out, bool WideRange>
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq")]] inline void stochastic_avx512(
    const std::uint32_t* in, Out* bits, double* values, const MemoTable& table, const StochasticSetup& s,
    std::size_t begin, std::size_t end) {
  const int low_bits = table.low_bits;
  const __m128i key_shift = _mm_cvtsi32_si128(low_bits);
  const __m128i top_shift = _mm_cvtsi32_si128(32 - low_bits);
  const __m512i low_mask = _mm512_set1_epi32(static_cast<int>((std::uint32_t{1} << low_bits) - 1));
  const __m512i zero = _mm512_setzero_si512();
  const __m512i fraction_mask = _mm512_set1_epi32(0x7FFFFF);
  const __m512i implicit_bit = _mm512_set1_epi32(0x800000);
  const __m512i field_mask = _mm512_set1_epi32(0xFF);
  const __m512i emin_field = _mm512_set1_epi32(static_cast<int>(table.emin_field));
  const __m512i left_base = _mm512_set1_epi32(32 - low_bits);  // 32 - q = left_base - d
  // The top 32 bits of the mask of the top R bits.
  const __m512i mask = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(s.mask >> 32)));
  const bool wide = !WideRange && s.random_bits > 32;
  // The high 32 bits of each 64-bit lane: the odd 32-bit lanes of a, then of b.
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  // SplitMix64 states key + (i + 1) * gamma of elements i .. i + 7 and i + 8 .. i + 15.
  const std::uint64_t first = s.key + (static_cast<std::uint64_t>(begin) + 1) * splitmix64_gamma;
  const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  __m512i state0 = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(first)),
                                    _mm512_mullo_epi64(lane, _mm512_set1_epi64(static_cast<long long>(splitmix64_gamma))));
  __m512i state1 = _mm512_add_epi64(state0, _mm512_set1_epi64(static_cast<long long>(8 * splitmix64_gamma)));
  const __m512i step = _mm512_set1_epi64(static_cast<long long>(16 * splitmix64_gamma));
  const std::uint32_t* pairs = table.pairs.data();
  const ValueOutput out(values, table);
  std::size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512i x = _mm512_loadu_si512(in + i);
    const __m512i key = memo_keys_avx512(x, key_shift, low_mask);
    const __m512i entry = _mm512_i32gather_epi32(key, pairs, 4);
    // The top 32 bits of D (see stochastic_shape).
    __m512i top;
    __m512i d = zero;
    if constexpr (WideRange) {
      top = _mm512_sll_epi32(x, top_shift);
    } else {
      // S = fraction | implicit bit (ternarylogic 0xEA: (a & b) | c), d = max(0, emin_field - e):
      // S << (32 - q) when q <= 32, S >> (q - 32) otherwise (counts outside 0..31 shift all out).
      const __m512i significand = _mm512_ternarylogic_epi32(x, fraction_mask, implicit_bit, 0xEA);
      d = _mm512_max_epi32(_mm512_sub_epi32(emin_field, _mm512_and_si512(_mm512_srli_epi32(x, 23), field_mask)), zero);
      top = _mm512_or_si512(_mm512_sllv_epi32(significand, _mm512_sub_epi32(left_base, d)),
                            _mm512_srlv_epi32(significand, _mm512_sub_epi32(d, left_base)));
    }
    // SplitMix64's mix up to its last step; the last (z ^ z >> 31) on the high halves alone:
    // its high 32 bits are hi ^ hi >> 31.
    __m512i z0 = _mm512_xor_si512(state0, _mm512_srli_epi64(state0, 30));
    __m512i z1 = _mm512_xor_si512(state1, _mm512_srli_epi64(state1, 30));
    const __m512i c1 = _mm512_set1_epi64(static_cast<long long>(0xBF58476D1CE4E5B9ull));
    const __m512i c2 = _mm512_set1_epi64(static_cast<long long>(0x94D049BB133111EBull));
    z0 = _mm512_mullo_epi64(z0, c1);
    z1 = _mm512_mullo_epi64(z1, c1);
    z0 = _mm512_xor_si512(z0, _mm512_srli_epi64(z0, 27));
    z1 = _mm512_xor_si512(z1, _mm512_srli_epi64(z1, 27));
    z0 = _mm512_mullo_epi64(z0, c2);
    z1 = _mm512_mullo_epi64(z1, c2);
    state0 = _mm512_add_epi64(state0, step);
    state1 = _mm512_add_epi64(state1, step);
    __m512i random = _mm512_permutex2var_epi32(z0, odd, z1);
    random = _mm512_xor_si512(random, _mm512_srli_epi32(random, 31));
    // (random & M) > ~(D & M), on the top 32 bits (ternarylogic 0x3F: ~(a & b)).
    const __m512i not_d = _mm512_ternarylogic_epi32(top, mask, mask, 0x3F);
    const __mmask16 away = _mm512_cmpgt_epu32_mask(_mm512_and_si512(random, mask), not_d);
    store_patterns_avx512(bits, out, i, _mm512_mask_srli_epi32(entry, away, entry, 16));
    if (wide) {
      // R > 32: lanes with q > 32 may have discarded bits in the low half; the scalar comparison.
      for (__mmask16 slow = _mm512_cmpgt_epi32_mask(d, left_base); slow != 0; slow &= static_cast<__mmask16>(slow - 1)) {
        const std::size_t j = i + static_cast<std::size_t>(__builtin_ctz(slow));
        const std::uint16_t pattern = stochastic_pick(table, s, in[j], random_bits_at(s.key, j));
        if (bits != nullptr) bits[j] = static_cast<Out>(pattern);
        if (values != nullptr) values[j] = out.decoded[pattern];
      }
    }
  }
  stochastic_scalar(in, bits, values, table, s, i, end);
}

#endif  // NUMEQ_MEMO_X86

// Elements [begin, end) of a contiguous fp32 array through the table, on the given instruction set.
// Every kernel is written over the width of the bits it stores: one byte a value for formats of
// at most 8 bits, two otherwise; at_width hands each kernel its own.
inline void cast_range(const MemoTable& table, const Cast& cast, Isa isa, const std::uint32_t* in, void* bits_out,
                       double* values, std::size_t begin, std::size_t end) {
  const auto at_width = [&](auto&& kernel) {
    if (cast.format.storage_bits <= 8)
      kernel(static_cast<std::uint8_t*>(bits_out));
    else
      kernel(static_cast<std::uint16_t*>(bits_out));
  };
  if (cast.rounding == Rounding::stochastic) {
    const StochasticSetup s = stochastic_setup(cast);
#if NUMEQ_MEMO_X86
    if (isa == Isa::avx512 && stochastic_shape(table) != StochasticShape::other) {
      const bool wide_range = stochastic_shape(table) == StochasticShape::wide_range;
      at_width([&](auto* bits) {
        using Out = std::remove_pointer_t<decltype(bits)>;
        if (wide_range)
          stochastic_avx512<Out, true>(in, bits, values, table, s, begin, end);
        else
          stochastic_avx512<Out, false>(in, bits, values, table, s, begin, end);
      });
      return;
    }
#endif
    at_width([&](auto* bits) { stochastic_scalar_clones(in, bits, values, table, s, begin, end); });
    return;
  }
#if NUMEQ_MEMO_X86
  if (isa == Isa::avx512) {
    at_width([&](auto* bits) { nearest_avx512(in, bits, values, table, begin, end); });
    return;
  }
  if (isa == Isa::avx2) {
    at_width([&](auto* bits) { nearest_avx2(in, bits, values, table, begin, end); });
    return;
  }
#endif
  at_width([&](auto* bits) { nearest_scalar_clones(in, bits, values, table, begin, end); });
}

}  // namespace
}  // namespace numeq::memo

#if NUMEQ_MEMO_X86
#pragma GCC diagnostic pop
#endif
