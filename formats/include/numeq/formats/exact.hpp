#pragma once
// Exact arithmetic, the floor under every "accumulate exactly, round once" in numeq: the exact
// value type that the rounding kernel takes (Exact, with exact products and quotients), one
// fixed-point accumulator template (FixedPoint<Words>), the IEEE 754 rule for the sign of an exact
// zero sum (ZeroSigns), and the long accumulator built from them (LongAccumulator), whose one
// rounding goes through round_and_pack. The references' exact sums, the explicit-tree evaluator's
// fused multi-term groups and the fused tensor-core step all accumulate here.

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>

#include "numeq/formats/format.hpp"
#include "numeq/formats/round_and_pack.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq {

// An exact finite non-zero value with more bits than 64: the 64 leading ones in `significand`
// (bit 63 set), `sticky` for any nonzero bit below them. Exact products and quotients arrive in
// this form and are rounded once by round_and_pack.
struct Exact {
  bool negative = false;
  int exponent = 0;  // of the leading bit
  std::uint64_t significand = 0;
  bool sticky = false;
};

constexpr std::uint64_t round_and_pack(const Cast& cast, const Exact& v, std::uint64_t random) {
  return round_and_pack(cast, v.negative, v.exponent, v.significand, v.sticky, random);
}

// magnitude * 2^exp2 (magnitude != 0) as an Exact.
NUMEQ_KERNEL Exact normalize(bool negative, uint128 magnitude, int exp2) {
  const auto high = static_cast<std::uint64_t>(magnitude >> 64);
  const auto low = static_cast<std::uint64_t>(magnitude);
  const int width = static_cast<int>(high != 0 ? 64 + std::bit_width(high) : std::bit_width(low));
  Exact e;
  e.negative = negative;
  e.exponent = exp2 + width - 1;
  if (width <= 64) {
    e.significand = low << (64 - width);
  } else {
    const int drop = width - 64;
    e.significand = static_cast<std::uint64_t>(magnitude >> drop);
    e.sticky = (low << (64 - drop)) != 0;
  }
  return e;
}

// x * y exactly (finite, non-zero operands).
NUMEQ_KERNEL Exact exact_product(const Unpacked& x, const Unpacked& y) {
  const uint128 p = static_cast<uint128>(x.significand) * y.significand;
  return normalize(x.negative != y.negative, p, x.exponent + y.exponent - 126);
}

// x / y with 64 correct leading bits and a sticky bit (finite, non-zero operands).
NUMEQ_KERNEL Exact exact_quotient(const Unpacked& x, const Unpacked& y) {
  // (Sx * 2^64) / Sy lies in (2^63, 2^65); the remainder feeds the sticky bit.
  const uint128 numerator = static_cast<uint128>(x.significand) << 64;
  const uint128 q = numerator / y.significand;
  const bool remainder = numerator % y.significand != 0;
  Exact e = normalize(x.negative != y.negative, q, x.exponent - y.exponent - 64);
  e.sticky = e.sticky || remainder;
  return e;
}

// DAZ: under Subnormals::flush_inputs / flush_both an operand below the accumulating format's
// normal range reads as a zero of its sign (x86 DAZ, CUDA --ftz=true). Any other x as it is.
inline double flush_input(double x, const Cast& cast) {
  if (!cast.flushes_inputs() || x == 0 || !std::isfinite(x)) return x;
  return std::fabs(x) < std::ldexp(1.0, cast.format.emin()) ? std::copysign(0.0, x) : x;
}

// The sign of an exact zero sum (IEEE 754-2019 s6.3), the one rule every exact sum follows:
// x + x keeps x's sign, so a sum of -0s only is -0 and of +0s only +0; a sum of zeros of both
// signs, or of non-zero terms that cancel, is +0 in every rounding direction but
// roundTowardNegative, where it is -0. The empty sum is +0.
struct ZeroSigns {
  bool nonzero = false;        // a non-zero term entered (a zero sum means they cancelled)
  bool negative_zero = false;  // a -0 term entered
  bool positive_zero = false;  // a +0 term entered

  constexpr void zero(bool negative) { (negative ? negative_zero : positive_zero) = true; }
  constexpr bool only_negative_zeros() const { return negative_zero && !positive_zero && !nonzero; }
  // Whether the exact zero sum is -0 when rounded in `rounding`.
  constexpr bool negative(Rounding rounding) const {
    if (only_negative_zeros()) return true;
    if (!nonzero && !negative_zero) return false;  // only +0 terms, or none
    return rounding == Rounding::downward;
  }
  constexpr void merge(const ZeroSigns& other) {
    nonzero = nonzero || other.nonzero;
    negative_zero = negative_zero || other.negative_zero;
    positive_zero = positive_zero || other.positive_zero;
  }
};

// A two's-complement integer of Words 64-bit words, least significant first: a Kulisch
// accumulator (Kulisch, "Computer Arithmetic and Validity", 2nd ed. 2013, ch. 8). Every term is an
// integer magnitude at a bit position; no bit is ever dropped, so rounding the result once is
// rounding the exact sum. The caller chooses what bit 0 weighs and keeps every partial sum inside
// (-2^(64 Words - 1), 2^(64 Words - 1)).
template <int Words>
class FixedPoint {
  static_assert(Words >= 3, "a term spans up to three words");

 public:
  static constexpr int words = Words;
  static constexpr int bits = 64 * Words;

  // *this += (-1)^negative * magnitude * 2^position, position >= 0.
  void add(bool negative, uint128 magnitude, int position) {
    if (magnitude == 0) return;
    const int word = position / 64;
    const int bit = position % 64;
    const auto lo = static_cast<std::uint64_t>(magnitude);
    const auto hi = static_cast<std::uint64_t>(magnitude >> 64);
    // magnitude << bit spans at most 191 bits: three words.
    const std::uint64_t part[3] = {lo << bit, bit == 0 ? hi : (hi << bit) | (lo >> (64 - bit)),
                                   bit == 0 ? 0 : hi >> (64 - bit)};
    int i = word;
    if (!negative) {
      unsigned carry = 0;
      for (int k = 0; k < 3 && i < Words; ++k, ++i) {
        const std::uint64_t x = w_[i], s = x + part[k], t = s + carry;
        carry = static_cast<unsigned>(s < x) | static_cast<unsigned>(t < s);
        w_[i] = t;
      }
      for (; carry != 0 && i < Words; ++i) carry = ++w_[i] == 0 ? 1u : 0u;
    } else {
      unsigned borrow = 0;
      for (int k = 0; k < 3 && i < Words; ++k, ++i) {
        const std::uint64_t x = w_[i], s = x - part[k], t = s - borrow;
        borrow = static_cast<unsigned>(x < part[k]) | static_cast<unsigned>(s < borrow);
        w_[i] = t;
      }
      for (; borrow != 0 && i < Words; ++i) borrow = w_[i]-- == 0 ? 1u : 0u;
    }
  }

  // *this += other.
  void add(const FixedPoint& other) {
    unsigned carry = 0;
    for (int i = 0; i < Words; ++i) {
      const std::uint64_t x = w_[i], s = x + other.w_[i], t = s + carry;
      carry = static_cast<unsigned>(s < x) | static_cast<unsigned>(t < s);
      w_[i] = t;
    }
  }

  bool is_zero() const {
    for (const std::uint64_t x : w_)
      if (x != 0) return false;
    return true;
  }
  bool is_negative() const { return (w_[Words - 1] >> 63) != 0; }

  // |value|, least significant word first.
  std::array<std::uint64_t, Words> magnitude() const {
    std::array<std::uint64_t, Words> m = w_;
    if (is_negative()) {
      unsigned carry = 1;
      for (std::uint64_t& x : m) {
        x = ~x + carry;
        carry = (carry != 0 && x == 0) ? 1u : 0u;
      }
    }
    return m;
  }

  // The value, bit 0 weighing 2^lsb_exponent, as an Exact: its sign, the exponent of its leading
  // bit, the 64 bits from there and a sticky bit for any below. Requires !is_zero().
  Exact leading(int lsb_exponent) const {
    const std::array<std::uint64_t, Words> m = magnitude();
    int top = Words - 1;
    while (m[top] == 0) --top;
    const int lead = std::countl_zero(m[top]);
    const std::uint64_t next = top > 0 ? m[top - 1] : 0;
    Exact e;
    e.negative = is_negative();
    e.exponent = top * 64 + 63 - lead + lsb_exponent;
    e.significand = lead == 0 ? m[top] : (m[top] << lead) | (next >> (64 - lead));
    bool sticky = lead == 0 ? next != 0 : (next << lead) != 0;
    for (int i = top - 2; i >= 0 && !sticky; --i) sticky = m[i] != 0;
    e.sticky = sticky;
    return e;
  }

 private:
  std::array<std::uint64_t, Words> w_{};
};

// An exact finite non-zero value rounded into cast.format, through the one kernel (for an
// unsigned format a negative value gives what a cast gives: NaN).
std::uint64_t round_exact(const Exact& value, const Cast& cast, std::uint64_t random = 0);

// An unevaluated sum hi + lo with hi = the exact value rounded to nearest binary64 and lo = the
// remainder rounded to nearest: 106 significant bits, enough to measure any error of a result
// in a format up to fp32.
struct DoubleDouble {
  double hi = 0;
  double lo = 0;
};

// The long accumulator: a FixedPoint wide enough to hold any sum of binary64 values and of exact
// products of two values of formats up to fp32 (more precisely: any product whose lowest bit lies
// at or above 2^-1088), for up to 2^62 terms, without error; IEEE 754 specials and the signs of
// zero terms tracked beside it. Every Cast (format, rounding, overflow, subnormals, stochastic
// draw) is available on the exact result.
//
// Layout: 34 words; bit j weighs 2^(j - 1088). Binary64 spans 2^-1074 .. 2^1024, so
// 1024 + 1088 = 2112 bits hold any finite double, one bit is the sign and the remaining 63 bits
// of headroom absorb 2^62 maximal terms. A NaN term, Inf * 0, or +Inf plus -Inf make the result
// NaN; otherwise an infinite term makes it that infinity.
class LongAccumulator {
 public:
  static constexpr int words = 34;
  static constexpr int lsb_exponent = -1088;  // weight of bit 0 is 2^lsb_exponent

  void clear() { *this = LongAccumulator{}; }

  // x exactly (any double: finite, infinite or NaN).
  void add(double x);
  // x * y exactly. Throws numeq::error if the product has bits below 2^-1088 or above the
  // register (only possible for operands wider than fp32, e.g. binary64 subnormals).
  void add_product(double x, double y);
  // An exact integer multiple of a power of two: (-1)^negative * magnitude * 2^exponent, with
  // exponent >= lsb_exponent. The building block of add and add_product, public so that
  // callers who already hold decomposed operands avoid unpacking twice.
  void add_scaled(bool negative, uint128 magnitude, int exponent);
  // Another accumulator's sum (exact), specials included.
  void add(const LongAccumulator& other);

  bool is_nan() const { return nan_ || (positive_inf_ && negative_inf_); }
  bool is_infinite() const { return !is_nan() && (positive_inf_ || negative_inf_); }
  bool is_negative_infinity() const { return is_infinite() && negative_inf_; }
  bool is_zero() const { return register_.is_zero(); }  // the finite register only (specials aside)
  // An exact zero sum made of -0 terms only (the sign it has in every rounding direction).
  bool only_negative_zeros() const { return zeros_.only_negative_zeros(); }

  // The exact result rounded once into cast.format: its bit pattern as numeq::encode gives it
  // (numeq::invalid_encoding for NaN into a format without NaN). `random` is the stochastic
  // draw. An exact zero is signed by ZeroSigns; the empty sum is +0.
  std::uint64_t round(const Cast& cast, std::uint64_t random = 0) const;
  // The same as a double (the value of the rounded pattern; NaN for NaN).
  double round_value(const Cast& cast, std::uint64_t random = 0) const;

  DoubleDouble to_double_double() const;
  // |finite register|, least significant word first, bit 0 weighing 2^lsb_exponent, and its sign.
  std::array<std::uint64_t, words> magnitude() const { return register_.magnitude(); }
  bool is_negative() const { return register_.is_negative(); }

 private:
  FixedPoint<words> register_;
  bool nan_ = false;
  bool positive_inf_ = false;
  bool negative_inf_ = false;
  ZeroSigns zeros_;
};

// The sum of `values` (any doubles), each read through the cast's DAZ rule (flush_input), exact,
// rounded once into cast.format, as a double (NaN for NaN, or for a negative value into a format
// without a sign).
double exact_sum_rounded(std::span<const double> values, const Cast& cast);

}  // namespace numeq
