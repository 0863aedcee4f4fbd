#pragma once
// The common cases of rounding a double, by integer arithmetic on its bits: a shortcut in front of
// the one rounding kernel (round_and_pack.hpp), taken where the answer needs none of the kernel's
// cases. round_to_format, the exact matmul's rounded results and every sequential narrow or
// toward-zero accumulation (bf16 / fp16 / fp8 accumulators, Trainium's pe_rounding alternative in
// core's plan evaluator) round through here first.
//
// Applies to a signed binary floating format of fewer than 52 fraction bits, rounding to nearest
// even or toward zero, for a finite double x in the format's normal range whose rounded value
// stays finite: the significand's low `shift` bits are rounded off (nearest even: ties to the even
// neighbour, a carry moving into the exponent as it should; toward zero: cleared, which truncates
// the magnitude of a sign-magnitude encoding). Returns false elsewhere (other modes, subnormal or
// overflowing results, specials, unsigned and integer formats), and the kernel decides. Flushing
// and saturation never concern a normal, finite result, so every Cast option agrees with the
// kernel where it applies (checked against the kernel on every decision point of every format up
// to 16 bits in test_fast_round).

#include <bit>
#include <cmath>
#include <cstdint>

#include "numeq/formats/format.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq {

class FastRound {
 public:
  FastRound() = default;  // applies to nothing: every value goes to the kernel
  explicit FastRound(const Cast& cast) {
    const Format& f = cast.format;
    applies_ = (cast.rounding == Rounding::nearest_even || cast.rounding == Rounding::toward_zero) && !f.is_integer() &&
               f.is_signed && f.mantissa_bits < 52;
    if (!applies_) return;
    nearest_ = cast.rounding == Rounding::nearest_even;
    emin_ = f.emin();
    shift_ = 52 - f.mantissa_bits;
    max_ = max_finite(f);
    bias_ = f.bias;
    mantissa_bits_ = f.mantissa_bits;
    storage_shift_ = f.storage_shift;
    sign_shift_ = f.exponent_bits + f.mantissa_bits;
  }

  bool applies() const { return applies_; }

  // The bit pattern (storage placement included, as numeq::encode gives it) of r, a value this
  // object returned: finite and in the format's normal range, so its exponent field is
  // e + bias and its fraction the double's top mantissa_bits bits.
  std::uint64_t pattern(double r) const {
    const auto bits = std::bit_cast<std::uint64_t>(r);
    const auto e = static_cast<std::uint64_t>(static_cast<int>((bits >> 52) & 0x7ff) - 1023 + bias_);
    const std::uint64_t fraction = (bits & ((std::uint64_t{1} << 52) - 1)) >> shift_;
    return ((bits >> 63) << sign_shift_ | e << mantissa_bits_ | fraction) << storage_shift_;
  }

  // x rounded, into `out`; false where the kernel must decide.
  bool operator()(double x, double& out) const {
    if (!applies_) return false;
    std::uint64_t bits = std::bit_cast<std::uint64_t>(x);
    const int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
    if (e < emin_ || e == 1024) return false;  // below the normal range, or Inf / NaN
    if (nearest_) bits += (std::uint64_t{1} << (shift_ - 1)) - 1 + ((bits >> shift_) & 1);
    bits &= ~((std::uint64_t{1} << shift_) - 1);
    const double r = std::bit_cast<double>(bits);
    if (std::abs(r) > max_) return false;
    out = r;
    return true;
  }

 private:
  bool applies_ = false;
  bool nearest_ = true;
  int emin_ = 0, shift_ = 0, bias_ = 0, mantissa_bits_ = 0, storage_shift_ = 0, sign_shift_ = 0;
  double max_ = 0;
};

}  // namespace numeq
