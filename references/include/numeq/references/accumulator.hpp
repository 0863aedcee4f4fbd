#pragma once
// The long accumulator: a Kulisch-style fixed-point register wide enough to hold any sum of
// binary64 values and of exact products of two values of formats up to fp32 (more precisely:
// any product whose lowest bit lies at or above 2^-1088), for at least 2^31 terms, without error.
// Accumulate exactly, round once (Kulisch, "Computer Arithmetic and Validity", 2nd ed. 2013,
// ch. 8; the quire of the posit standard is the same idea): the rounding is done by the formats
// layer's one kernel (round_and_pack), so every Cast (format, rounding, overflow, subnormals,
// stochastic draw) is available on the exact result.
//
// Layout: 34 little-endian 64-bit words, two's complement; bit j weighs 2^(j - 1088). Binary64
// spans 2^-1074 .. 2^1024, so 1024 + 1088 = 2112 bits hold any finite double and the remaining
// 63 bits of headroom absorb 2^62 maximal terms.
//
// IEEE 754 specials are tracked beside the register: a NaN term, Inf * 0, or +Inf plus -Inf make
// the result NaN; otherwise an infinite term makes it that infinity.

#include <mpfr.h>

#include <array>
#include <cstdint>

#include "numeq/formats/round_and_pack.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq {

// An unevaluated sum hi + lo with hi = the exact value rounded to nearest binary64 and lo = the
// remainder rounded to nearest: 106 significant bits, enough to measure any error of a result
// in a format up to fp32.
struct DoubleDouble {
  double hi = 0;
  double lo = 0;
};

// An exact finite non-zero value rounded into cast.format (for an unsigned format a negative
// value gives what a cast gives: NaN). The one place where exact results meet the kernel.
std::uint64_t round_exact(const Exact& value, const Cast& cast, std::uint64_t random = 0);

class LongAccumulator {
 public:
  static constexpr int words = 34;
  static constexpr int lsb_exponent = -1088;  // weight of bit 0 is 2^lsb_exponent

  void clear();

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
  bool is_zero() const;  // the finite register only (specials aside)

  // The exact result rounded once into cast.format: its bit pattern as numeq::encode gives it
  // (numeq::invalid_encoding for NaN into a format without NaN). `random` is the stochastic
  // draw. An exact zero is +0, or -0 if every term was -0 or the rounding is downward
  // (IEEE 754-2019 s6.3); the empty sum is +0.
  std::uint64_t round(const Cast& cast, std::uint64_t random = 0) const;
  // The same as a double (the value of the rounded pattern; NaN for NaN).
  double round_value(const Cast& cast, std::uint64_t random = 0) const;

  DoubleDouble to_double_double() const;
  // The exact value into `out`, whose precision is raised as needed (exact for finite values).
  void to_mpfr(mpfr_ptr out) const;

 private:
  // The exact finite value in the kernel's form: sign, exponent of the leading bit, 64 leading
  // bits and a sticky bit. Requires !is_zero().
  Exact exact_value() const;
  bool zero_sign(const Cast& cast) const;
  bool only_negative_zeros() const;

  std::array<std::uint64_t, words> register_{};
  bool nan_ = false;
  bool positive_inf_ = false;
  bool negative_inf_ = false;
  // The sign of an exact zero (zero_sign): -0 if every term was -0, +0 if every term was +0 (or
  // there were none); otherwise (zeros of both signs, or nonzero terms that cancelled) +0, or -0
  // when rounding downward.
  bool nonzero_term_ = false;
  bool negative_zero_term_ = false;
  bool positive_zero_term_ = false;
};

}  // namespace numeq
