#pragma once
// The MPFR oracle: what a cast into a numeq format should give, computed without the code under
// test. It reads only the plain fields of a Format descriptor (exponent_bits, mantissa_bits, bias,
// is_signed, has_zero, specials, storage_shift) and derives every value itself with MPFR; it never
// calls numeq's unpack / round_and_pack / encode / decode. The only numeq code it uses is the
// random generator (random.hpp), because the stochastic draw is part of the specification of a
// stochastic cast, not of the rounding.
//
// Rounding is done on a scaled integer: x = N * 2^qe with qe the exponent of the last kept place
// (2^(max(e, emin) - m) for a format with subnormals, 2^(e - m) otherwise), then MPFR's integer
// rounding functions (mpfr_rint / mpfr_round / mpfr_trunc / mpfr_ceil / mpfr_floor) round N. That
// is rounding to precision p = m + 1 with gradual underflow at the bottom and an unbounded top
// exponent: overflow is judged afterwards, by comparing with the format's largest finite value.

#include <mpfr.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "numeq/formats/format.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq_oracle {

using numeq::Format;
using numeq::Overflow;
using numeq::Rounding;
using numeq::Specials;
using numeq::Subnormals;

__extension__ using u128 = unsigned __int128;  // GCC/Clang extension, as numeq itself uses

// What the oracle knows about a format, all derived from the descriptor's plain fields.
struct Spec {
  int e = 0;     // exponent bits
  int m = 0;     // fraction bits
  int bias = 0;
  bool is_signed = true;
  bool has_zero = true;
  Specials specials = Specials::ieee;
  int shift = 0;  // storage_shift
  int emin = 0;   // exponent of the smallest normal number
  std::uint64_t top_field = 0;
  // Largest finite magnitude = max_n * 2^max_qe, max_n with exactly m + 1 bits.
  std::uint64_t max_n = 0;
  int max_qe = 0;
  double max_finite = 0;

  explicit Spec(const Format& f)
      : e(f.exponent_bits),
        m(f.mantissa_bits),
        bias(f.bias),
        is_signed(f.is_signed),
        has_zero(f.has_zero),
        specials(f.specials),
        shift(f.storage_shift) {
    // Field 0 is the subnormal/zero binade when the format has a zero; otherwise it is normal.
    emin = (has_zero ? 1 : 0) - bias;
    top_field = (std::uint64_t{1} << e) - 1;
    const std::uint64_t all_fraction = (std::uint64_t{1} << m) - 1;
    std::uint64_t field = 0;
    std::uint64_t fraction = 0;
    switch (specials) {
      case Specials::ieee:  // top field reserved for Inf/NaN
        field = top_field - 1;
        fraction = all_fraction;
        break;
      case Specials::fn:  // only the all-ones pattern is NaN
        if (m == 0) {
          field = top_field - 1;
          fraction = 0;
        } else {
          field = top_field;
          fraction = all_fraction - 1;
        }
        break;
      case Specials::fnuz:  // NaN lives at "-0": every magnitude pattern is finite
      case Specials::finite:
        field = top_field;
        fraction = all_fraction;
        break;
    }
    max_n = (std::uint64_t{1} << m) | fraction;
    max_qe = static_cast<int>(field) - bias - m;
    max_finite = std::ldexp(static_cast<double>(max_n), max_qe);
  }

  bool has_nan() const { return specials != Specials::finite; }
  bool has_inf() const { return specials == Specials::ieee; }
  bool has_negative_zero() const { return is_signed && has_zero && specials != Specials::fnuz; }
  int pattern_bits() const { return (is_signed ? 1 : 0) + e + m; }
  std::uint64_t pattern_mask() const {
    const int b = pattern_bits();
    const std::uint64_t low = b == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << b) - 1;
    return low << shift;
  }
  int max_lead() const { return max_qe + m; }  // exponent of the leading bit of max_finite
};

inline double quiet_nan(bool negative) {
  return std::copysign(std::numeric_limits<double>::quiet_NaN(), negative ? -1.0 : 1.0);
}

// Owns MPFR temporaries; one per thread (MPFR variables are not shared across threads).
class Mpfr {
 public:
  Mpfr() {
    mpfr_init2(x_, 64);
    mpfr_init2(n_, 64);
    mpfr_init2(r_, 64);
    mpfr_init2(f_, 64);
  }
  ~Mpfr() {
    mpfr_clear(x_);
    mpfr_clear(n_);
    mpfr_clear(r_);
    mpfr_clear(f_);
  }
  Mpfr(const Mpfr&) = delete;
  Mpfr& operator=(const Mpfr&) = delete;

  mpfr_t x_, n_, r_, f_;
};

// Value of bit pattern `bits` (storage placement included) of floating format f. Bits outside the
// pattern are ignored. Computed with MPFR from sign, exponent field and fraction.
inline double decode_oracle(const Spec& s, std::uint64_t bits) {
  bits >>= s.shift;
  const std::uint64_t fraction = bits & ((std::uint64_t{1} << s.m) - 1);
  const std::uint64_t field = (bits >> s.m) & s.top_field;
  const bool negative = s.is_signed && ((bits >> (s.m + s.e)) & 1) != 0;
  const bool all_ones = field == s.top_field && fraction == (std::uint64_t{1} << s.m) - 1;
  switch (s.specials) {
    case Specials::ieee:
      if (field == s.top_field)
        return fraction == 0 ? (negative ? -HUGE_VAL : HUGE_VAL) : quiet_nan(negative);
      break;
    case Specials::fn:
      if (all_ones) return quiet_nan(negative);
      break;
    case Specials::fnuz:
      if (negative && field == 0 && fraction == 0) return quiet_nan(false);
      break;
    case Specials::finite: break;
  }
  std::uint64_t significand = 0;
  long exponent = 0;  // value = significand * 2^exponent
  if (field == 0 && s.has_zero) {
    significand = fraction;  // zero or subnormal: 0.fraction * 2^emin
    exponent = s.emin - s.m;
  } else {
    significand = (std::uint64_t{1} << s.m) | fraction;
    exponent = static_cast<long>(field) - s.bias - s.m;
  }
  mpfr_t v;
  mpfr_init2(v, 64);
  mpfr_set_ui_2exp(v, significand, exponent, MPFR_RNDN);  // exact: 64 bits hold any significand
  if (negative) mpfr_neg(v, v, MPFR_RNDN);
  const double d = mpfr_get_d(v, MPFR_RNDN);  // exact: every format here fits in binary64
  mpfr_clear(v);
  return d;
}

inline double decode_oracle(const Format& f, std::uint64_t bits) {
  return decode_oracle(Spec(f), bits);
}

// What a cast must produce: a value (NaN for NaN results, sign bit = the NaN's sign), or a throw.
struct Expected {
  bool throws = false;
  double value = 0;
};

// The part of a cast that needs MPFR: the input classified and, if finite and non-zero, rounded
// by `mode` to an integer multiple n of 2^qe (before any overflow / flush / zero policy).
struct Rounded {
  enum class In : std::uint8_t { nan, inf, zero, finite } in = In::zero;
  bool negative = false;
  Rounding mode = Rounding::nearest_even;
  std::uint64_t n = 0;
  int qe = 0;
};

class RoundOracle {
 public:
  explicit RoundOracle(const Format& f) : s_(f) {}
  const Spec& spec() const { return s_; }

  // Round x (any double) with `mode`. `random` is the 64-bit draw for this element and R the
  // number of its top bits used (stochastic mode only).
  Rounded round(double x, Rounding mode, std::uint64_t random = 0, int R = 32) {
    mpfr_set_prec(m_.x_, 64);
    mpfr_set_d(m_.x_, x, MPFR_RNDN);  // exact: 64 >= 53 bits
    Rounded r = round_value(m_.x_, mode, random, R);
    r.negative = std::signbit(x);  // MPFR does not promise to keep the sign of a NaN
    return r;
  }

  // The same for a value held by MPFR at any precision (exact sums, function values).
  Rounded round_value(mpfr_srcptr x, Rounding mode, std::uint64_t random = 0, int R = 32) {
    Rounded r;
    r.mode = mode;
    r.negative = mpfr_signbit(x) != 0;
    if (mpfr_nan_p(x)) {
      r.in = Rounded::In::nan;
      return r;
    }
    if (mpfr_inf_p(x)) {
      r.in = Rounded::In::inf;
      return r;
    }
    if (mpfr_zero_p(x)) {
      r.in = Rounded::In::zero;
      return r;
    }
    r.in = Rounded::In::finite;
    // Every temporary holds x's bits exactly (the scaled value, its integer part, the remainder).
    const mpfr_prec_t prec = std::max<mpfr_prec_t>(64, mpfr_get_prec(x));
    mpfr_set_prec(m_.n_, prec);
    mpfr_set_prec(m_.r_, prec);
    mpfr_set_prec(m_.f_, prec);
    // MPFR writes x = 0.1xxx * 2^exp, so the leading bit is 2^(exp - 1).
    const long lead = mpfr_get_exp(x) - 1;
    const long place = (s_.has_zero ? std::max<long>(lead, s_.emin) : lead) - s_.m;
    r.qe = static_cast<int>(place);
    mpfr_mul_2si(m_.n_, x, -place, MPFR_RNDN);  // exact: a power-of-two scaling
    mpfr_ptr n = m_.n_;
    mpfr_ptr out = m_.r_;
    const long away = r.negative ? -1 : 1;  // one unit away from zero, signed
    switch (mode) {
      case Rounding::nearest_even: mpfr_rint(out, n, MPFR_RNDN); break;  // ties to even
      case Rounding::nearest_away: mpfr_round(out, n); break;            // ties away from zero
      case Rounding::toward_zero: mpfr_trunc(out, n); break;
      case Rounding::upward: mpfr_ceil(out, n); break;
      case Rounding::downward: mpfr_floor(out, n); break;
      case Rounding::odd: {
        mpfr_trunc(out, n);
        if (!mpfr_equal_p(out, n)) {
          mpfr_abs(m_.f_, out, MPFR_RNDN);
          if ((mpfr_get_ui(m_.f_, MPFR_RNDN) & 1) == 0) mpfr_add_si(out, out, away, MPFR_RNDN);
        }
        break;
      }
      case Rounding::stochastic: {
        mpfr_trunc(out, n);
        mpfr_sub(m_.f_, n, out, MPFR_RNDN);  // exact: the discarded part of x
        mpfr_abs(m_.f_, m_.f_, MPFR_RNDN);   // frac in [0, 1), in units of the last place
        mpfr_mul_2si(m_.f_, m_.f_, R, MPFR_RNDN);
        const u128 frac_bits = mpfr_get_ui(m_.f_, MPFR_RNDZ);  // floor(frac * 2^R)
        const u128 draw = random >> (64 - R);                   // top R bits
        if (frac_bits + draw >= (u128{1} << R))
          mpfr_add_si(out, out, away, MPFR_RNDN);
        break;
      }
    }
    mpfr_abs(out, out, MPFR_RNDN);
    r.n = mpfr_get_ui(out, MPFR_RNDN);  // exact: at most 2^(m + 1) <= 2^53
    return r;
  }

  // The overflow / subnormal / zero / special-value policy, in plain code. `input_subnormal`
  // says x is subnormal in its own (source) format, which is what DAZ looks at.
  Expected finish(const Rounded& r, Overflow overflow, Subnormals subnormals,
                  bool input_subnormal) const {
    const bool flush_in =
        subnormals == Subnormals::flush_inputs || subnormals == Subnormals::flush_both;
    const bool flush_out =
        subnormals == Subnormals::flush_outputs || subnormals == Subnormals::flush_both;
    const bool neg = r.negative;
    Expected out;
    switch (r.in) {
      case Rounded::In::nan:
        if (!s_.has_nan()) out.throws = true;
        else out.value = quiet_nan(neg);
        return out;
      case Rounded::In::inf:
        if (!s_.is_signed && neg) return nan_result(neg);
        if (overflow == Overflow::saturate || !s_.has_nan()) return finite(neg, s_.max_finite);
        if (s_.has_inf()) return finite(neg, HUGE_VAL);
        return nan_result(neg);
      case Rounded::In::zero: return zero_result(neg);
      case Rounded::In::finite: break;
    }
    if (input_subnormal && flush_in) return zero_result(neg);
    if (!s_.is_signed && neg) return nan_result(neg);
    if (r.n == 0) return zero_result(neg);  // rounded to zero on the subnormal grid
    int lead = r.qe + static_cast<int>(std::bit_width(r.n)) - 1;
    double magnitude = 0;
    // No zero and no subnormals (E8M0): everything below the smallest value becomes it.
    if (!s_.has_zero && lead < s_.emin) return finite(neg, std::ldexp(1.0, s_.emin));
    bool over = lead > s_.max_lead();
    if (lead == s_.max_lead()) {
      magnitude = std::ldexp(static_cast<double>(r.n), r.qe);  // finite: lead <= 1023
      over = magnitude > s_.max_finite;
    }
    if (over) {
      const bool to_max = overflow == Overflow::saturate || !s_.has_nan() ||
                          r.mode == Rounding::toward_zero || r.mode == Rounding::odd ||
                          (r.mode == Rounding::upward && neg) ||
                          (r.mode == Rounding::downward && !neg);
      if (to_max) return finite(neg, s_.max_finite);
      if (s_.has_inf()) return finite(neg, HUGE_VAL);
      return nan_result(neg);
    }
    if (flush_out && s_.has_zero && lead < s_.emin) return zero_result(neg);
    return finite(neg, std::ldexp(static_cast<double>(r.n), r.qe));
  }

  // The whole cast of a double (or of an fp32 value widened to double: then pass
  // input_subnormal for fp32) under `cast`, element `index` of the stochastic stream.
  Expected cast(double x, const numeq::Cast& cast, std::uint64_t index, bool input_subnormal) {
    const std::uint64_t random =
        cast.rounding == Rounding::stochastic
            ? numeq::random_bits_at(numeq::random_stream_key(cast.seed), index)
            : 0;
    return finish(round(x, cast.rounding, random, cast.random_bits), cast.overflow,
                  cast.subnormals, input_subnormal);
  }

  // A value held by MPFR (never an input to flush: DAZ applies to inputs of casts only).
  Expected cast_value(mpfr_srcptr x, const numeq::Cast& cast, std::uint64_t index = 0) {
    const std::uint64_t random =
        cast.rounding == Rounding::stochastic
            ? numeq::random_bits_at(numeq::random_stream_key(cast.seed), index)
            : 0;
    return finish(round_value(x, cast.rounding, random, cast.random_bits), cast.overflow,
                  cast.subnormals, false);
  }

 private:
  Expected finite(bool neg, double magnitude) const {
    Expected e;
    e.value = neg ? -magnitude : magnitude;
    return e;
  }
  Expected nan_result(bool neg) const {
    Expected e;
    e.value = quiet_nan(neg);
    return e;
  }
  Expected zero_result(bool neg) const {
    if (!s_.has_zero) return nan_result(neg);  // E8M0 has no zero
    return finite(neg && s_.has_negative_zero(), 0.0);
  }

  Spec s_;
  Mpfr m_;
};

// One-shot convenience (slow: builds the oracle each call). x is a double input, so DAZ looks at
// binary64 subnormals.
inline Expected round_oracle(double x, const numeq::Cast& cast, std::uint64_t index = 0) {
  RoundOracle o(cast.format);
  return o.cast(x, cast, index, std::fpclassify(x) == FP_SUBNORMAL);
}

// An fp32 value (as its bit pattern) cast by `cast`: DAZ looks at fp32 subnormals.
inline Expected round_oracle_fp32(std::uint32_t bits, const numeq::Cast& cast,
                                  std::uint64_t index = 0) {
  RoundOracle o(cast.format);
  const float f = std::bit_cast<float>(bits);
  return o.cast(static_cast<double>(f), cast, index, std::fpclassify(f) == FP_SUBNORMAL);
}

// Same value, NaN == NaN, and zeros told apart by sign.
inline bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

inline std::string hex(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}

inline std::string describe(double x) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.17g (%a)", x, x);
  return buf;
}

}  // namespace numeq_oracle
