#pragma once
// One value rounded into a cast, and an operand read under a cast's DAZ, for the plan evaluator
// and the explicit trees (private).

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "numeq/formats/error.hpp"
#include "numeq/formats/fast_round.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq::core::detail {

// The integer shortcut of nearest-even and toward-zero rounding (numeq/formats/fast_round.hpp):
// every sequential narrow accumulation (bf16 / fp16 / fp8 accumulators) and every toward-zero one
// (Trainium's pe_rounding alternative) rounds through it first.
using FastRound = numeq::FastRound;

inline bool round_fast(double x, const Cast& cast, double& out) { return FastRound(cast)(x, out); }

// x rounded into cast (an exact double in, its rounded value out; NaN stays NaN), through numeq's
// one rounding kernel. Integer formats take integers only (the accumulators of int8 GEMMs) and
// refuse what does not fit.
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
