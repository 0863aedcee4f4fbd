#include "numeq/references/accumulator.hpp"

#include <gmp.h>

#include <bit>
#include <cmath>
#include <string>

#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"

namespace numeq {

namespace {

constexpr int register_bits = LongAccumulator::words * 64;

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

void LongAccumulator::clear() { *this = LongAccumulator{}; }

bool LongAccumulator::is_zero() const {
  for (std::uint64_t w : register_)
    if (w != 0) return false;
  return true;
}

void LongAccumulator::add_scaled(bool negative, uint128 magnitude, int exponent) {
  if (magnitude == 0) return;
  nonzero_term_ = true;
  const int position = exponent - lsb_exponent;
  const int width = magnitude >> 64 != 0 ? 128 - std::countl_zero(static_cast<std::uint64_t>(magnitude >> 64))
                                         : 64 - std::countl_zero(static_cast<std::uint64_t>(magnitude));
  // One bit of the register is the sign, 63 more are headroom for carries of 2^62 terms.
  if (position < 0 || position + width > register_bits - 64)
    throw error("long accumulator: term 2^" + std::to_string(exponent) + " * (" + std::to_string(width) +
                "-bit integer) lies outside the exact range [2^-1088, 2^1024 * 2^64); operands wider "
                "than fp32 (binary64 subnormals or huge products) are not supported");
  const int word = position / 64;
  const int bit = position % 64;
  // The term spread over three words: (magnitude << bit) has at most 191 bits.
  std::uint64_t parts[3];
  parts[0] = static_cast<std::uint64_t>(magnitude) << bit;
  parts[1] = static_cast<std::uint64_t>(magnitude >> (64 - bit));  // bit == 0: the high word
  parts[2] = bit == 0 ? 0 : static_cast<std::uint64_t>(magnitude >> 64) >> (64 - bit);
  if (bit == 0) parts[1] = static_cast<std::uint64_t>(magnitude >> 64);
  if (!negative) {
    unsigned char carry = 0;
    int i = word;
    for (int k = 0; k < 3 && i < words; ++k, ++i) {
      const std::uint64_t before = register_[i];
      const std::uint64_t sum = before + parts[k] + carry;
      carry = (sum < before || (carry && sum == before)) ? 1 : 0;
      register_[i] = sum;
    }
    for (; carry && i < words; ++i) carry = ++register_[i] == 0 ? 1 : 0;
  } else {
    unsigned char borrow = 0;
    int i = word;
    for (int k = 0; k < 3 && i < words; ++k, ++i) {
      const std::uint64_t before = register_[i];
      const std::uint64_t difference = before - parts[k] - borrow;
      borrow = (before < parts[k] || (borrow && before == parts[k])) ? 1 : 0;
      register_[i] = difference;
    }
    for (; borrow && i < words; ++i) borrow = register_[i]-- == 0 ? 1 : 0;
  }
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
    (std::signbit(x) ? negative_zero_term_ : positive_zero_term_) = true;
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
    (negative ? negative_zero_term_ : positive_zero_term_) = true;
    return;
  }
  const Scaled a = scaled(x);
  const Scaled b = scaled(y);
  add_scaled(negative, static_cast<uint128>(a.magnitude) * b.magnitude, a.exponent + b.exponent);
}

void LongAccumulator::add(const LongAccumulator& other) {
  unsigned char carry = 0;
  for (int i = 0; i < words; ++i) {
    const std::uint64_t before = register_[i];
    const std::uint64_t sum = before + other.register_[i] + carry;
    carry = (sum < before || (carry && sum == before)) ? 1 : 0;
    register_[i] = sum;
  }
  nan_ = nan_ || other.nan_;
  positive_inf_ = positive_inf_ || other.positive_inf_;
  negative_inf_ = negative_inf_ || other.negative_inf_;
  nonzero_term_ = nonzero_term_ || other.nonzero_term_;
  negative_zero_term_ = negative_zero_term_ || other.negative_zero_term_;
  positive_zero_term_ = positive_zero_term_ || other.positive_zero_term_;
}

Exact LongAccumulator::exact_value() const {
  Exact e;
  std::array<std::uint64_t, words> magnitude = register_;
  e.negative = (magnitude[words - 1] >> 63) != 0;
  if (e.negative) {  // two's complement negation
    unsigned char carry = 1;
    for (std::uint64_t& w : magnitude) {
      w = ~w + carry;
      carry = (carry && w == 0) ? 1 : 0;
    }
  }
  int top = words - 1;
  while (magnitude[top] == 0) --top;
  const int lead = std::countl_zero(magnitude[top]);
  // The 64 bits starting at the leading one, then any nonzero bit below them.
  const int lead_bit = top * 64 + 63 - lead;
  e.exponent = lead_bit + lsb_exponent;
  std::uint64_t sig = magnitude[top] << lead;
  if (lead != 0 && top > 0) sig |= magnitude[top - 1] >> (64 - lead);
  e.significand = sig;
  bool sticky = lead != 0 && top > 0 && (magnitude[top - 1] << lead) != 0;
  for (int i = top - 2; i >= 0 && !sticky; --i) sticky = magnitude[i] != 0;
  if (lead == 0 && top > 0) sticky = sticky || magnitude[top - 1] != 0;
  e.sticky = sticky;
  return e;
}

bool LongAccumulator::only_negative_zeros() const {
  return negative_zero_term_ && !positive_zero_term_ && !nonzero_term_;
}

// IEEE 754-2019 s6.3: an exact zero sum of operands of opposite signs (x + (-x), (+0) + (-0)) is
// +0 in every rounding direction but roundTowardNegative, where it is -0; x + x keeps x's sign
// (all -0: -0; all +0: +0). No terms at all: +0 (the empty sum).
bool LongAccumulator::zero_sign(const Cast& cast) const {
  if (only_negative_zeros()) return true;
  if (!nonzero_term_ && !negative_zero_term_) return false;  // only +0 terms, or none
  return cast.rounding == Rounding::downward;
}

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

std::uint64_t LongAccumulator::round(const Cast& cast, std::uint64_t random) const {
  Unpacked special;
  if (is_nan()) {
    special.cls = ValueClass::nan;
  } else if (is_infinite()) {
    special.cls = ValueClass::infinity;
    special.negative = negative_inf_;
  } else if (is_zero()) {
    special.cls = ValueClass::zero;
    special.negative = zero_sign(cast);
  } else {
    return round_exact(exact_value(), cast, random);
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

void LongAccumulator::to_mpfr(mpfr_ptr out) const {
  if (is_nan()) {
    mpfr_set_nan(out);
    return;
  }
  if (is_infinite()) {
    mpfr_set_inf(out, negative_inf_ ? -1 : 1);
    return;
  }
  if (is_zero()) {
    mpfr_set_zero(out, only_negative_zeros() ? -1 : 1);
    return;
  }
  std::array<std::uint64_t, words> magnitude = register_;
  const bool negative = (magnitude[words - 1] >> 63) != 0;
  if (negative) {
    unsigned char carry = 1;
    for (std::uint64_t& w : magnitude) {
      w = ~w + carry;
      carry = (carry && w == 0) ? 1 : 0;
    }
  }
  mpz_t z;
  mpz_init(z);
  mpz_import(z, words, -1, sizeof(std::uint64_t), 0, 0, magnitude.data());
  const std::size_t bits = mpz_sizeinbase(z, 2);
  mpfr_set_prec(out, static_cast<mpfr_prec_t>(bits < 2 ? 2 : bits));
  mpfr_set_z_2exp(out, z, lsb_exponent, MPFR_RNDN);  // exact: the precision holds every bit
  if (negative) mpfr_neg(out, out, MPFR_RNDN);
  mpz_clear(z);
}

}  // namespace numeq
