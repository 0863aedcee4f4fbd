#pragma once
// Format: one constexpr descriptor for every number format numeq knows. Every operation on a
// format (decode, round-and-pack, format_info) reads these fields; there is no code path per
// format. The table of named constants below is the single source of truth, in the manner of
// ml_dtypes' one spec table per format.

#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

// The kernel (round_and_pack.hpp) and these accessors sit in every element loop: force inlining so that, in loops
// specialised on constexpr formats, the descriptor's fields fold into constants.
#if defined(__GNUC__) || defined(__clang__)
#define NUMEQ_KERNEL [[gnu::always_inline]] constexpr inline
#else
#define NUMEQ_KERNEL constexpr inline
#endif

namespace numeq {

enum class FormatKind : std::uint8_t { floating, integer };

// How a floating format spends its top exponent field and its negative zero.
enum class Specials : std::uint8_t {
  // IEEE 754: exponent field all ones is Inf (fraction 0) or NaN (fraction != 0).
  ieee,
  // "finite + NaN": no Inf; the all-ones exponent holds finite values except the one encoding
  // with every exponent and fraction bit set, which is NaN (OFP8 E4M3, OCP MX E8M0).
  fn,
  // "finite + NaN at unsigned zero": no Inf, no -0; 1000...0 is the only NaN (LLVM APFloat
  // Float8E4M3FNUZ / Float8E5M2FNUZ; ml_dtypes).
  fnuz,
  // Every encoding is a finite number: no Inf and no NaN (OCP MX FP6 and FP4, OCP MX v1.0 s5.3).
  finite,
};

struct Format {
  std::string_view name;
  FormatKind kind;
  int storage_bits;    // width of the container a bit pattern travels in: 8, 16, 32 or 64
  int exponent_bits;   // 0 for integers
  int mantissa_bits;   // explicit fraction bits; 0 for integers
  int bias;
  bool is_signed;
  bool has_zero;       // false: exponent field 0 is a normal value (E8M0 has no zero, no subnormals)
  Specials specials;
  int storage_shift;   // tf32 travels as an fp32 pattern whose 13 low bits are zero

  // ---- derived properties (all constexpr) ----
  [[gnu::always_inline]] constexpr bool is_integer() const { return kind == FormatKind::integer; }
  // Bits that carry information: sign + exponent + fraction (6 for e3m2fn, 19 for tf32).
  [[gnu::always_inline]] constexpr int bits() const {
    return is_integer() ? storage_bits : (is_signed ? 1 : 0) + exponent_bits + mantissa_bits;
  }
  [[gnu::always_inline]] constexpr int precision() const { return mantissa_bits + 1; }  // p, implicit bit included
  // Exponent field of the smallest normal number: 1 when field 0 holds zero and subnormals.
  [[gnu::always_inline]] constexpr int min_normal_field() const { return has_zero ? 1 : 0; }
  [[gnu::always_inline]] constexpr int emin() const { return min_normal_field() - bias; }  // exponent of min normal
  [[gnu::always_inline]] constexpr std::uint64_t magnitude_mask() const {
    return (std::uint64_t{1} << (exponent_bits + mantissa_bits)) - 1;
  }
  [[gnu::always_inline]] constexpr std::uint64_t sign_bit() const {
    return is_signed ? std::uint64_t{1} << (exponent_bits + mantissa_bits) : 0;
  }
  [[gnu::always_inline]] constexpr bool has_inf() const { return specials == Specials::ieee; }
  [[gnu::always_inline]] constexpr bool has_nan() const { return specials != Specials::finite; }
  [[gnu::always_inline]] constexpr bool has_negative_zero() const {
    return is_signed && has_zero && specials != Specials::fnuz;
  }
  // Largest finite magnitude as a packed (sign-less) bit pattern.
  [[gnu::always_inline]] constexpr std::uint64_t max_finite_magnitude() const {
    switch (specials) {
      case Specials::ieee: return ((magnitude_mask() >> mantissa_bits) - 1) << mantissa_bits |
                                  ((std::uint64_t{1} << mantissa_bits) - 1);
      case Specials::fn: return magnitude_mask() - 1;
      case Specials::fnuz:
      case Specials::finite: return magnitude_mask();
    }
    return 0;
  }
  // The canonical NaN numeq produces (quiet NaN for IEEE formats), sign kept where it can be.
  [[gnu::always_inline]] constexpr std::uint64_t nan_bits(bool negative) const {
    const std::uint64_t s = negative ? sign_bit() : 0;
    switch (specials) {
      case Specials::ieee:
        return s | (magnitude_mask() >> mantissa_bits << mantissa_bits) |
               (std::uint64_t{1} << (mantissa_bits - 1));
      case Specials::fn: return s | magnitude_mask();
      case Specials::fnuz: return std::uint64_t{1} << (exponent_bits + mantissa_bits);
      case Specials::finite: return 0;
    }
    return 0;
  }
  [[gnu::always_inline]] constexpr std::uint64_t inf_bits(bool negative) const {
    return (negative ? sign_bit() : 0) | (magnitude_mask() >> mantissa_bits << mantissa_bits);
  }
  // Integer range (integer formats only).
  [[gnu::always_inline]] constexpr std::int64_t int_min() const {
    return is_signed ? -(std::int64_t{1} << (storage_bits - 1)) : 0;
  }
  [[gnu::always_inline]] constexpr std::int64_t int_max() const {
    return is_signed ? (std::int64_t{1} << (storage_bits - 1)) - 1
                     : (std::int64_t{1} << storage_bits) - 1;
  }
  // Exponent of the largest finite value, floor(log2(max_finite)): emin()'s counterpart (an
  // integer format's: of int_max()).
  [[gnu::always_inline]] constexpr int emax() const {
    if (is_integer()) return static_cast<int>(std::bit_width(static_cast<std::uint64_t>(int_max()))) - 1;
    return static_cast<int>(max_finite_magnitude() >> mantissa_bits) - bias;
  }
  // Two formats are the same when their whole spec is: a Format built by hand that borrows a
  // table name ("fp32") but differs in a field is not that format. Written out and inline, the
  // numbers before the name: add_rounded asks it per addition (a defaulted comparison was an
  // out-of-line call there, +20% on a layernorm emulation).
  [[gnu::always_inline]] constexpr bool operator==(const Format& o) const {
    return mantissa_bits == o.mantissa_bits && exponent_bits == o.exponent_bits && bias == o.bias &&
           storage_bits == o.storage_bits && kind == o.kind && is_signed == o.is_signed &&
           has_zero == o.has_zero && specials == o.specials && storage_shift == o.storage_shift &&
           name == o.name;
  }
};

namespace formats {
//                        name        kind                  store e   m   bias  signed zero   specials         shift
inline constexpr Format fp64{"fp64", FormatKind::floating, 64, 11, 52, 1023, true, true, Specials::ieee, 0};
inline constexpr Format fp32{"fp32", FormatKind::floating, 32, 8, 23, 127, true, true, Specials::ieee, 0};
// NVIDIA TF32: fp32's exponent with 10 fraction bits, carried in an fp32 register (PTX ISA, .tf32).
inline constexpr Format tf32{"tf32", FormatKind::floating, 32, 8, 10, 127, true, true, Specials::ieee, 13};
inline constexpr Format bf16{"bf16", FormatKind::floating, 16, 8, 7, 127, true, true, Specials::ieee, 0};
inline constexpr Format fp16{"fp16", FormatKind::floating, 16, 5, 10, 15, true, true, Specials::ieee, 0};
// OCP OFP8 rev 1.0 s5: E4M3 has no Inf, S.1111.111 is NaN, max 448.
inline constexpr Format e4m3fn{"e4m3fn", FormatKind::floating, 8, 4, 3, 7, true, true, Specials::fn, 0};
// IEEE-like E4M3 (Trainium 1/2 float8_e4m3; ml_dtypes float8_e4m3): S.1111.000 is Inf, max 240.
inline constexpr Format e4m3{"e4m3", FormatKind::floating, 8, 4, 3, 7, true, true, Specials::ieee, 0};
inline constexpr Format e4m3fnuz{"e4m3fnuz", FormatKind::floating, 8, 4, 3, 8, true, true, Specials::fnuz, 0};
inline constexpr Format e5m2{"e5m2", FormatKind::floating, 8, 5, 2, 15, true, true, Specials::ieee, 0};
inline constexpr Format e5m2fnuz{"e5m2fnuz", FormatKind::floating, 8, 5, 2, 16, true, true, Specials::fnuz, 0};
// OCP MX v1.0 s5.4 scale: unsigned, exponent only, 0xFF is NaN, no zero: 2^-127 .. 2^127.
inline constexpr Format e8m0fnu{"e8m0fnu", FormatKind::floating, 8, 8, 0, 127, false, false, Specials::fn, 0};
// OCP MX v1.0 s5.3 element types: no Inf, no NaN; stored one per byte in the low bits (ml_dtypes).
inline constexpr Format e3m2fn{"e3m2fn", FormatKind::floating, 8, 3, 2, 3, true, true, Specials::finite, 0};
inline constexpr Format e2m3fn{"e2m3fn", FormatKind::floating, 8, 2, 3, 1, true, true, Specials::finite, 0};
inline constexpr Format e2m1fn{"e2m1fn", FormatKind::floating, 8, 2, 1, 1, true, true, Specials::finite, 0};
inline constexpr Format int8{"int8", FormatKind::integer, 8, 0, 0, 0, true, true, Specials::finite, 0};
inline constexpr Format uint8{"uint8", FormatKind::integer, 8, 0, 0, 0, false, true, Specials::finite, 0};
inline constexpr Format int32{"int32", FormatKind::integer, 32, 0, 0, 0, true, true, Specials::finite, 0};

inline constexpr std::array<const Format*, 17> all{
    &fp64,  &fp32,     &tf32,     &bf16,   &fp16,   &e4m3fn, &e4m3,  &e4m3fnuz, &e5m2,
    &e5m2fnuz, &e8m0fnu, &e3m2fn, &e2m3fn, &e2m1fn, &int8,   &uint8, &int32};

// Accumulator formats: the internal sums of platforms, which plans accumulate in and print, but
// which no array is stored in (so they are not in `all`, the formats of values and arrays).
//
// NVIDIA's fp32 accumulator cut to 13 fraction bits ("f32_e8m13"): fp32's exponent range, 13
// fraction bits, stored in the top 22 bits of an fp32 pattern (as tf32 is in the top 19), so every
// value is an fp32 value. [code] MMA-Sim nv.py / arithmetic.py (output_type "f32_e8m13": truncate
// to 13 fraction bits after normalising); [paper] Khattak & Mikaitis (H100, Ada fp8 with fp32
// output); [measured] the H100 e4m3/e5m2 fp32 vectors (a 23-bit output instead: 3585 and 4159 of
// 5000). nvidia::e8m13 (core/fused.hpp) is this format.
inline constexpr Format e8m13{"e8m13", FormatKind::floating, 32, 8, 13, 127, true, true, Specials::ieee, 10};
// Accumulators wider than fp32 (fp32's exponent range, more fraction bits): the alternatives of
// Trainium's undocumented accumulator_bits assumption (core/trainium.hpp: the in-array accumulator
// is assumed, not documented, to be fp32). Values fit in binary64; patterns travel in 64 bits.
inline constexpr Format e8m24{"e8m24", FormatKind::floating, 64, 8, 24, 127, true, true, Specials::ieee, 0};
inline constexpr Format e8m25{"e8m25", FormatKind::floating, 64, 8, 25, 127, true, true, Specials::ieee, 0};
inline constexpr Format e8m26{"e8m26", FormatKind::floating, 64, 8, 26, 127, true, true, Specials::ieee, 0};
inline constexpr Format e8m27{"e8m27", FormatKind::floating, 64, 8, 27, 127, true, true, Specials::ieee, 0};
inline constexpr Format e8m31{"e8m31", FormatKind::floating, 64, 8, 31, 127, true, true, Specials::ieee, 0};
inline constexpr std::array<const Format*, 5> wide_accumulators{&e8m24, &e8m25, &e8m26, &e8m27, &e8m31};
inline constexpr std::array<const Format*, 6> accumulators{&e8m13, &e8m24, &e8m25, &e8m26, &e8m27, &e8m31};
}  // namespace formats

// Every format numeq supports, in table order.
std::span<const Format* const> all_formats();
// Look a format up by name; throws numeq::error naming `parameter` and listing the valid names.
const Format& format_by_name(std::string_view name, std::string_view parameter = "fmt");
std::string format_names();             // "fp64, fp32, ..." for error messages
std::string format_names(FormatKind kind);  // the floating (or integer) ones only
// A format of `all` or of `accumulators` by name (what a plan may name: plan.hpp); throws
// numeq::error naming `parameter` and listing both.
const Format& plan_format_by_name(std::string_view name, std::string_view parameter = "format");

// Values of a floating format as doubles (every one is exact in binary64).
namespace detail {
// 2^e for e in [-1074, 1023], from its binary64 bits (these limits are asked for per element in
// the running-bound and verdict loops, where a libm ldexp call would cost more than the work).
[[gnu::always_inline]] constexpr double pow2(int e) {
  return e >= -1022 ? std::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52)
                    : std::bit_cast<double>(std::uint64_t{1} << (e + 1074));
}
}  // namespace detail

// The next binary64 value above x (std::nextafter(x, +Inf)), by its bits; NaN and +Inf come back
// unchanged, +-0 gives the smallest subnormal. The bound arithmetic steps outward per element,
// where libm's nextafter costs more than the work it guards. next_down: the one below.
[[gnu::always_inline]] constexpr double next_up(double x) {
  if (!(x < std::numeric_limits<double>::infinity())) return x;  // NaN, +Inf
  if (x == 0) return std::numeric_limits<double>::denorm_min();
  const auto bits = std::bit_cast<std::uint64_t>(x);
  return std::bit_cast<double>(x > 0 ? bits + 1 : bits - 1);
}
[[gnu::always_inline]] constexpr double next_down(double x) { return -next_up(-x); }

[[gnu::always_inline]] constexpr double max_finite(const Format& f) {
  if (f.is_integer()) return static_cast<double>(f.int_max());
  // (2^m + fraction) 2^(field - bias - m): an integer below 2^53 times a power of two, exact.
  const std::uint64_t mag = f.max_finite_magnitude();
  const int field = static_cast<int>(mag >> f.mantissa_bits);
  const std::uint64_t fraction_mask = (std::uint64_t{1} << f.mantissa_bits) - 1;
  const std::uint64_t significand = (std::uint64_t{1} << f.mantissa_bits) | (mag & fraction_mask);
  return static_cast<double>(significand) * detail::pow2(field - f.bias - f.mantissa_bits);
}
[[gnu::always_inline]] constexpr double min_normal(const Format& f) { return f.is_integer() ? 1.0 : detail::pow2(f.emin()); }
// == min_normal when the format has no subnormals.
[[gnu::always_inline]] constexpr double min_subnormal(const Format& f) {
  if (f.is_integer()) return 1.0;
  return f.has_zero ? detail::pow2(f.emin() - f.mantissa_bits) : min_normal(f);
}
// Whether every finite value of floating format x is a value of floating format y (so a value of x
// passes into y exactly): a spacing no finer (m_x <= m_y), a smallest subnormal step no smaller
// (emin_x - m_x >= emin_y - m_y) and a largest value no larger. Signs and zeros are the caller's.
[[gnu::always_inline]] constexpr bool values_within(const Format& x, const Format& y) {
  return x.mantissa_bits <= y.mantissa_bits && x.emin() - x.mantissa_bits >= y.emin() - y.mantissa_bits &&
         max_finite(x) <= max_finite(y);
}
// The spacing of a floating format's values in the binade of a (a finite double >= 0): 2^(e - m),
// e the exponent of a's binade, or the format's emin below its smallest normal (the subnormal
// spacing). emin and mantissa_bits are the format's, passed so that per-element loops keep them in
// registers. Above the largest finite value the top binade's spacing just continues; the two
// callers decide what lies there: cases::UlpOf (errors measured in ulps of a result) clamps to
// max_finite first, the running bounds' ulp (cases/src/catalogue/tracked.hpp) answers +Inf, no finite
// spacing.
[[gnu::always_inline]] constexpr double binade_spacing(double a, int emin, int mantissa_bits) {
  const int field = static_cast<int>(std::bit_cast<std::uint64_t>(a) >> 52) - 1023;
  return detail::pow2((field < emin ? emin : field) - mantissa_bits);
}

}  // namespace numeq
