#pragma once
// One value rounded into a cast, for the plan evaluator and the explicit trees (private).

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "numeq/formats/error.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq::core::detail {

// x rounded into cast (an exact double in, its rounded value out; NaN stays NaN), through numeq's
// one rounding kernel. Integer formats take integers only (the accumulators of int8 GEMMs) and
// refuse what does not fit.
// x rounded to nearest even or toward zero into a binary floating format of fewer than 52
// fraction bits, where x is a finite double in the format's normal range and the result stays
// finite: the significand's low bits rounded with integer arithmetic (nearest even: ties to the
// even neighbour, a carry moving into the exponent as it should; toward zero: the low bits
// cleared, which truncates the magnitude of a sign-magnitude encoding). False where it does not
// apply; the kernel decides those (other modes, subnormal or overflowing results, specials,
// unsigned formats). Every sequential narrow accumulation (bf16 / fp16 / fp8 accumulators) and
// every toward-zero one (Trainium's pe_rounding alternative) rounds through here.
struct FastRound {
  bool applies = false;  // a signed binary floating format of < 52 fraction bits, one of the two modes
  bool nearest = true;
  int emin = 0, shift = 0;
  double max = 0;

  explicit FastRound(const Cast& cast) {
    const Format& f = cast.format;
    applies = (cast.rounding == Rounding::nearest_even || cast.rounding == Rounding::toward_zero) &&
              !f.is_integer() && f.is_signed && f.mantissa_bits < 52;
    if (!applies) return;
    nearest = cast.rounding == Rounding::nearest_even;
    emin = f.emin();
    shift = 52 - f.mantissa_bits;
    max = decode_bits(f, f.max_finite_magnitude());
  }

  bool operator()(double x, double& out) const {
    if (!applies) return false;
    std::uint64_t bits = std::bit_cast<std::uint64_t>(x);
    const int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
    if (e < emin || e == 1024) return false;  // below the normal range, or Inf / NaN
    if (nearest) bits += (std::uint64_t{1} << (shift - 1)) - 1 + ((bits >> shift) & 1);
    bits &= ~((std::uint64_t{1} << shift) - 1);
    const double r = std::bit_cast<double>(bits);
    if (std::abs(r) > max) return false;
    out = r;
    return true;
  }
};

inline bool round_fast(double x, const Cast& cast, double& out) {
  return (cast.rounding == Rounding::nearest_even || cast.rounding == Rounding::toward_zero) && FastRound(cast)(x, out);
}

inline double round_value(double x, const Cast& cast, std::uint64_t random = 0) {
  if (double r; round_fast(x, cast, r)) return r;
  if (cast.format.is_integer()) {
    if (!std::isfinite(x) || x != std::floor(x) || x < static_cast<double>(cast.format.int_min()) ||
        x > static_cast<double>(cast.format.int_max()))
      throw numeq::error("plan: " + std::to_string(x) + " does not fit the integer format " +
                         std::string(cast.format.name));
    return x;
  }
  const std::uint64_t bits = encode_unpacked(unpack_double(x), cast, random);
  if (bits == invalid_encoding) return std::numeric_limits<double>::quiet_NaN();
  return decode_bits(cast.format, bits);
}

}  // namespace numeq::core::detail
