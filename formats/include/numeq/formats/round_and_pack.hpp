#pragma once
// The one rounding kernel. Every cast, every quantisation and (later) every emulated operation
// ends here: a sign, an exponent, a 64-bit significand and a sticky bit go in, the bit pattern of
// the target format comes out. The structure follows Berkeley SoftFloat's roundPackTo* routines:
// the mode is an argument, the exponent is clamped for subnormals before the shift, the rounding
// increment may carry into the exponent field, and overflow is judged after rounding (OFP8 rev 1.0
// s5.2: "round, then compare with the maximum").

#include <bit>
#include <cstdint>

#include "numeq/formats/format.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq {

__extension__ using uint128 = unsigned __int128;

enum class ValueClass : std::uint8_t { zero, finite, infinity, nan };

// A value of some format, taken apart. For finite values:
//   value = (-1)^negative * significand * 2^(exponent - 63), bit 63 of significand set,
// so `exponent` is the exponent of the leading bit.
struct Unpacked {
  ValueClass cls = ValueClass::zero;
  bool negative = false;
  bool subnormal = false;  // below the smallest normal of its own format (matters for DAZ)
  int exponent = 0;
  std::uint64_t significand = 0;
};

// Returned by encode_bits for NaN into a format that has no NaN (OCP MX FP6/FP4): callers turn
// it into a numeq::error naming their argument.
inline constexpr std::uint64_t invalid_encoding = ~std::uint64_t{0};

// Whether to add one unit in the last kept place. `discarded` holds the bits shifted out,
// left-aligned (bit 63 is the half-unit bit); `sticky` says nonzero bits lie below them.
// `random` supplies the stochastic draw (its top `random_bits` bits are used).
NUMEQ_KERNEL bool round_increment(Rounding mode, bool negative, bool lsb, std::uint64_t discarded,
                               bool sticky, std::uint64_t random, int random_bits) {
  const bool half = (discarded >> 63) != 0;
  const bool rest = (discarded << 1) != 0 || sticky;
  switch (mode) {
    case Rounding::nearest_even: return half && (rest || lsb);
    case Rounding::nearest_away: return half;
    case Rounding::toward_zero: return false;
    case Rounding::upward: return !negative && (half || rest);
    case Rounding::downward: return negative && (half || rest);
    // Round to odd == truncate and set the last bit when inexact == increment an even
    // truncation that was inexact (the increment never carries).
    case Rounding::odd: return !lsb && (half || rest);
    case Rounding::stochastic: {
      // Round away iff frac + r >= 2^R, with frac the top R discarded bits and r uniform in
      // [0, 2^R): P(away) = floor(frac_exact * 2^R) / 2^R.
      const int drop = 64 - random_bits;
      const std::uint64_t frac = discarded >> drop;
      const std::uint64_t r = random >> drop;
      const std::uint64_t mask = random_bits == 64 ? ~std::uint64_t{0}
                                                   : (std::uint64_t{1} << random_bits) - 1;
      return frac != 0 && r >= ((std::uint64_t{0} - frac) & mask);
    }
  }
  return false;
}

// Whether a mode sends an overflowing result to the largest finite value instead of Inf/NaN.
// IEEE 754-2019 s7.4: roundTowardZero carries no overflow to Inf, roundTowardPositive none
// for negative results, roundTowardNegative none for positive ones.
NUMEQ_KERNEL bool overflows_to_max(const Cast& cast, bool negative) {
  if (cast.overflow == Overflow::saturate || !cast.format.has_nan()) return true;
  switch (cast.rounding) {
    case Rounding::toward_zero:
    case Rounding::odd: return true;
    case Rounding::upward: return negative;
    case Rounding::downward: return !negative;
    default: return false;
  }
}

NUMEQ_KERNEL std::uint64_t overflow_bits(const Cast& cast, bool negative) {
  const Format& f = cast.format;
  const std::uint64_t sign = negative ? f.sign_bit() : 0;
  if (overflows_to_max(cast, negative)) return sign | f.max_finite_magnitude();
  return f.has_inf() ? f.inf_bits(negative) : f.nan_bits(negative);
}

// Round (-1)^negative * significand * 2^(exponent - 63) (+ sticky below bit 0) into
// cast.format and return its bit pattern (storage placement included). significand must have
// bit 63 set. This routine only rounds finite non-zero values of a signed or unsigned magnitude;
// encode_bits below handles zeros, Inf, NaN and input flushing.
NUMEQ_KERNEL std::uint64_t round_and_pack(const Cast& cast, bool negative, int exponent,
                                       std::uint64_t significand, bool sticky,
                                       std::uint64_t random) {
  const Format& f = cast.format;
  const int m = f.mantissa_bits;
  const int emin = f.emin();
  // Below the normal range the last kept place stays at 2^(emin - m): gradual underflow.
  const int target_exponent = exponent < emin ? emin : exponent;
  const int shift = 63 - m + (target_exponent - exponent);  // >= 11: m <= 52
  std::uint64_t kept = 0;
  std::uint64_t discarded = 0;
  if (shift < 64) {
    kept = significand >> shift;
    discarded = significand << (64 - shift);
  } else if (shift == 64) {
    discarded = significand;
  } else if (shift < 128) {
    discarded = significand >> (shift - 64);
    sticky = sticky || (significand << (128 - shift)) != 0;
  } else {
    sticky = true;  // significand != 0 lies entirely below the half-unit bit
  }
  kept += round_increment(cast.rounding, negative, (kept & 1) != 0, discarded, sticky, random,
                          cast.random_bits)
              ? 1
              : 0;
  // Pack: the implicit bit of `kept` adds one to the exponent field, and a rounding carry out of
  // the significand moves it up by one more (SoftFloat's packToF32 idiom). kept == 0 is zero, or
  // for E8M0 (no zero) its smallest value 2^-127, which is encoding 0.
  std::uint64_t magnitude = 0;
  if (kept != 0) {
    magnitude = (static_cast<std::uint64_t>(target_exponent - emin + f.min_normal_field() - 1)
                 << m) + kept;
  }
  if (magnitude > f.max_finite_magnitude()) return overflow_bits(cast, negative) << f.storage_shift;
  if (cast.flushes_outputs() && f.has_zero && magnitude < (std::uint64_t{1} << m)) magnitude = 0;
  const bool signed_result = negative && (magnitude != 0 || f.has_negative_zero());
  return ((signed_result ? f.sign_bit() : 0) | magnitude) << f.storage_shift;
}

// Take a bit pattern of floating format f apart. Bits outside the pattern are ignored.
NUMEQ_KERNEL Unpacked unpack(const Format& f, std::uint64_t bits) {
  Unpacked u;
  bits >>= f.storage_shift;
  const int m = f.mantissa_bits;
  const std::uint64_t magnitude = bits & f.magnitude_mask();
  u.negative = (bits & f.sign_bit()) != 0;
  const std::uint64_t field = magnitude >> m;
  const std::uint64_t fraction = magnitude & ((std::uint64_t{1} << m) - 1);
  const std::uint64_t top_field = f.magnitude_mask() >> m;
  switch (f.specials) {
    case Specials::ieee:
      if (field == top_field) {
        u.cls = fraction != 0 ? ValueClass::nan : ValueClass::infinity;
        return u;
      }
      break;
    case Specials::fn:
      if (magnitude == f.magnitude_mask()) {
        u.cls = ValueClass::nan;
        return u;
      }
      break;
    case Specials::fnuz:
      if (u.negative && magnitude == 0) {
        u.cls = ValueClass::nan;
        u.negative = false;
        return u;
      }
      break;
    case Specials::finite: break;
  }
  if (field == 0 && f.has_zero) {
    if (fraction == 0) {
      u.cls = ValueClass::zero;
      return u;
    }
    const int top = static_cast<int>(std::bit_width(fraction)) - 1;
    u.cls = ValueClass::finite;
    u.subnormal = true;
    u.exponent = f.emin() - m + top;
    u.significand = fraction << (63 - top);
    return u;
  }
  u.cls = ValueClass::finite;
  u.exponent = static_cast<int>(field) - f.bias;
  u.significand = ((std::uint64_t{1} << m) | fraction) << (63 - m);
  return u;
}

// A double taken apart (binary64 is a Format like any other).
NUMEQ_KERNEL Unpacked unpack_double(double x) {
  return unpack(formats::fp64, std::bit_cast<std::uint64_t>(x));
}

// Encode a value, given as an Unpacked, into cast.format: the full IEEE / OFP8 case analysis
// around round_and_pack. `random` is the stochastic draw for this element.
NUMEQ_KERNEL std::uint64_t encode_unpacked(const Unpacked& u, const Cast& cast, std::uint64_t random) {
  const Format& f = cast.format;
  // An unsigned format (E8M0) holds no negative value and, without a zero, no zero either.
  const bool unrepresentable_sign = !f.is_signed && u.negative && u.cls != ValueClass::nan;
  switch (u.cls) {
    case ValueClass::nan:
      return f.has_nan() ? f.nan_bits(u.negative) << f.storage_shift : invalid_encoding;
    case ValueClass::infinity:
      if (unrepresentable_sign) return f.nan_bits(false) << f.storage_shift;
      if (cast.overflow == Overflow::saturate || !f.has_nan())
        return ((u.negative ? f.sign_bit() : 0) | f.max_finite_magnitude()) << f.storage_shift;
      return (f.has_inf() ? f.inf_bits(u.negative) : f.nan_bits(u.negative)) << f.storage_shift;
    case ValueClass::zero:
      break;
    case ValueClass::finite:
      if (unrepresentable_sign) return f.nan_bits(false) << f.storage_shift;
      if (!(u.subnormal && cast.flushes_inputs()))
        return round_and_pack(cast, u.negative, u.exponent, u.significand, false, random);
      break;
  }
  // Zero (or an input flushed to zero).
  if (!f.has_zero) return f.nan_bits(false) << f.storage_shift;
  return ((u.negative && f.has_negative_zero()) ? f.sign_bit() : 0) << f.storage_shift;
}

// Encode a bit pattern of format `source` into cast.format.
NUMEQ_KERNEL std::uint64_t encode_bits(const Format& source, std::uint64_t bits, const Cast& cast,
                                    std::uint64_t random) {
  return encode_unpacked(unpack(source, bits), cast, random);
}

// Value of a floating-format bit pattern as a double (exact for every supported format).
NUMEQ_KERNEL double decode_bits(const Format& f, std::uint64_t bits) {
  // binary64 itself: the pattern is the double. (Other 64-bit containers hold wider accumulators.)
  if (f.storage_bits == 64 && f.exponent_bits == 11 && f.mantissa_bits == 52) return std::bit_cast<double>(bits);
  const Unpacked u = unpack(f, bits);
  const std::uint64_t sign = u.negative ? std::uint64_t{1} << 63 : 0;
  switch (u.cls) {
    case ValueClass::zero: return std::bit_cast<double>(sign);
    case ValueClass::infinity: return std::bit_cast<double>(sign | 0x7FF0000000000000ull);
    case ValueClass::nan: return std::bit_cast<double>(sign | 0x7FF8000000000000ull);
    case ValueClass::finite: break;
  }
  // Every exponent of a format narrower than fp64 is a normal binary64 exponent.
  return std::bit_cast<double>(sign | static_cast<std::uint64_t>(u.exponent + 1023) << 52 |
                               (u.significand << 1) >> 12);
}

}  // namespace numeq
