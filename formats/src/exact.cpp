// The long accumulator's out-of-line parts and the exactly rounded sum (exact.hpp).

#include "numeq/formats/exact.hpp"

#include <bit>
#include <cmath>
#include <string>

#include "numeq/formats/error.hpp"

namespace numeq {

namespace {

// A finite non-zero double as odd-or-small integer * 2^exponent (trailing zeros removed, so that
// binary64 subnormals, whose lowest bit is 2^-1074, land inside the register).
struct Scaled {
  bool negative;
  std::uint64_t magnitude;
  int exponent;
};

Scaled scaled(double x) {
  const Unpacked u = unpack_double(x);
  const int zeros = std::countr_zero(u.significand);
  return {u.negative, u.significand >> zeros, u.exponent - 63 + zeros};
}

}  // namespace

std::uint64_t round_exact(const Exact& e, const Cast& cast, std::uint64_t random) {
  // A format without negative values (E8M0) holds no negative result: the case analysis of
  // encode_unpacked decides, as for a cast.
  if (!cast.format.is_signed && e.negative) {
    Unpacked u;
    u.cls = ValueClass::finite;
    u.negative = true;
    u.exponent = e.exponent;
    u.significand = e.significand;
    return encode_unpacked(u, cast, random);
  }
  return round_and_pack(cast, e, random);
}

void LongAccumulator::add_scaled(bool negative, uint128 magnitude, int exponent) {
  if (magnitude == 0) return;
  zeros_.nonzero = true;
  const int position = exponent - lsb_exponent;
  const int width = magnitude >> 64 != 0 ? 128 - std::countl_zero(static_cast<std::uint64_t>(magnitude >> 64))
                                         : 64 - std::countl_zero(static_cast<std::uint64_t>(magnitude));
  // One bit of the register is the sign, 63 more are headroom for carries of 2^62 terms.
  if (position < 0 || position + width > FixedPoint<words>::bits - 64)
    throw error("long accumulator: term 2^" + std::to_string(exponent) + " * (" + std::to_string(width) +
                "-bit integer) lies outside the exact range [2^-1088, 2^1024 * 2^64); operands wider "
                "than fp32 (binary64 subnormals or huge products) are not supported");
  register_.add(negative, magnitude, position);
}

void LongAccumulator::add(double x) {
  if (std::isnan(x)) {
    nan_ = true;
    return;
  }
  if (std::isinf(x)) {
    (x > 0 ? positive_inf_ : negative_inf_) = true;
    return;
  }
  if (x == 0) {
    zeros_.zero(std::signbit(x));
    return;
  }
  const Scaled s = scaled(x);
  add_scaled(s.negative, s.magnitude, s.exponent);
}

void LongAccumulator::add_product(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) {
    nan_ = true;
    return;
  }
  const bool negative = std::signbit(x) != std::signbit(y);
  if (std::isinf(x) || std::isinf(y)) {
    if (x == 0 || y == 0) nan_ = true;  // Inf * 0 (IEEE 754-2019 s7.2)
    else (negative ? negative_inf_ : positive_inf_) = true;
    return;
  }
  if (x == 0 || y == 0) {
    zeros_.zero(negative);
    return;
  }
  const Scaled a = scaled(x);
  const Scaled b = scaled(y);
  add_scaled(negative, static_cast<uint128>(a.magnitude) * b.magnitude, a.exponent + b.exponent);
}

void LongAccumulator::add(const LongAccumulator& other) {
  register_.add(other.register_);
  nan_ = nan_ || other.nan_;
  positive_inf_ = positive_inf_ || other.positive_inf_;
  negative_inf_ = negative_inf_ || other.negative_inf_;
  zeros_.merge(other.zeros_);
}

std::uint64_t LongAccumulator::round(const Cast& cast, std::uint64_t random) const {
  Unpacked special;
  if (is_nan()) {
    special.cls = ValueClass::nan;
  } else if (is_infinite()) {
    special.cls = ValueClass::infinity;
    special.negative = negative_inf_;
  } else if (is_zero()) {
    special.cls = ValueClass::zero;
    special.negative = zeros_.negative(cast.rounding);
  } else {
    return round_exact(register_.leading(lsb_exponent), cast, random);
  }
  return encode_unpacked(special, cast, random);
}

double LongAccumulator::round_value(const Cast& cast, std::uint64_t random) const {
  const std::uint64_t bits = round(cast, random);
  if (bits == invalid_encoding) return std::nan("");
  return decode_bits(cast.format, bits);
}

DoubleDouble LongAccumulator::to_double_double() const {
  const Cast nearest{formats::fp64};
  DoubleDouble d;
  d.hi = round_value(nearest);
  if (!std::isfinite(d.hi) || is_nan() || is_infinite()) return d;
  LongAccumulator rest = *this;
  rest.add(-d.hi);
  d.lo = rest.round_value(nearest);
  return d;
}

double exact_sum_rounded(std::span<const double> values, const Cast& cast) {
  LongAccumulator sum;
  for (const double x : values) sum.add(flush_input(x, cast));
  return sum.round_value(cast);
}

}  // namespace numeq
