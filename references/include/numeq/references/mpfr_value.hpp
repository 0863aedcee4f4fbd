#pragma once
// MPFR values in numeq: an owning wrapper for mpfr_t, the rounding of an MPFR value into a numeq
// Cast through numeq's one kernel (round_and_pack), and closed intervals with outward rounding.
//
// Why intervals: a certified function value is found by Ziv's strategy (A. Ziv, "Fast evaluation
// of elementary mathematical functions with correctly rounded last bit", ACM TOMS 17(3), 1991):
// enclose the true value in [lo, hi] at some working precision; when lo and hi round to the same
// pattern, every number in between does too (every numeq rounding mode is monotone), so that
// pattern is the correctly rounded result; otherwise raise the precision and try again.
//
// Each endpoint also records whether it is *open*: the true value lies strictly inside it. MPFR
// reports exactness through its ternary value (MPFR manual s4.5 "Rounding Modes": zero iff the
// returned value is exact), so an endpoint is open when any rounding on its path was inexact, or
// when it came from an open endpoint through a strictly monotone operation. Openness matters where
// the true value sits an astronomically small distance from a representable number: tanh(100) is
// below 1 by about 2^-288, gelu(1e4) below 1e4 by e^-5e7; an interval [1 - 2^-p, 1] can never
// separate "1" from "just below 1" at any precision, but [1 - 2^-p, 1) does: its upper end rounds
// like 1 minus an infinitesimal. Overflow and underflow of MPFR's own exponent range come out the
// same way: MPFR's directed roundings return the largest finite value or +-Inf, zero or the
// smallest positive value, always with a non-zero ternary, so such an endpoint is open and is
// rounded as "huge but finite" or "tiny but not zero".

#include <mpfr.h>

#include <cstdint>

#include "numeq/formats/rounding.hpp"

namespace numeq::reference {

// An owning, move-only mpfr_t (MPFR manual s5.1: every mpfr_init2 needs its mpfr_clear).
class Mpfr {
 public:
  explicit Mpfr(mpfr_prec_t precision = 64) { mpfr_init2(v_, precision); }
  ~Mpfr() { mpfr_clear(v_); }
  Mpfr(const Mpfr&) = delete;
  Mpfr& operator=(const Mpfr&) = delete;
  // A moved-from value stays valid (NaN at the minimum precision): mpfr_swap exchanges the
  // contents without copying limbs.
  Mpfr(Mpfr&& other) noexcept {
    mpfr_init2(v_, MPFR_PREC_MIN);
    mpfr_swap(v_, other.v_);
  }
  Mpfr& operator=(Mpfr&& other) noexcept {
    mpfr_swap(v_, other.v_);
    return *this;
  }

  mpfr_ptr get() { return v_; }
  mpfr_srcptr get() const { return v_; }
  operator mpfr_ptr() { return v_; }             // NOLINT: lets an Mpfr go straight into mpfr_*
  operator mpfr_srcptr() const { return v_; }    // NOLINT
  mpfr_prec_t precision() const { return mpfr_get_prec(v_); }
  // Changes the precision; the value becomes NaN (mpfr_set_prec), memory is reused when it fits.
  void set_precision(mpfr_prec_t p) { mpfr_set_prec(v_, p); }

 private:
  mpfr_t v_;
};

// Where the value to round lies relative to the MPFR number given: on it, or an infinitesimal
// amount below or above it (an open interval endpoint). An infinitesimal below +0 is a negative
// number smaller in magnitude than anything representable; an infinitesimal below +Inf is a
// finite number larger than anything representable.
enum class Nudge : std::uint8_t { none, below, above };

// The bit pattern of x (any precision) rounded into cast.format, through numeq::round_and_pack:
// x is taken apart into sign, exponent of its leading bit, its top 64 significand bits and a
// sticky bit (any lower non-zero bit), which is all the kernel looks at. Zeros, infinities and
// NaN go through numeq::encode_unpacked exactly as casts do (NaN into a format without NaN gives
// numeq::invalid_encoding). Flushing of inputs (DAZ) does not apply: x is a result, not an input.
// `random` is the stochastic draw for this element.
std::uint64_t round_mpfr(mpfr_srcptr x, const numeq::Cast& cast, std::uint64_t random,
                         Nudge nudge = Nudge::none);

// One end of an interval: a value and whether the true value is strictly inside it.
struct Bound {
  Mpfr value;
  bool open = false;
};

// A closed (or half-open, see above) interval [lo, hi] at a working precision. Operations below
// round lower ends with MPFR_RNDD and upper ends with MPFR_RNDU. The result argument must not be
// one of the operands (an interval is two MPFR numbers; writing one end would change an operand
// before its other end is read).
struct Interval {
  Bound lo;
  Bound hi;

  explicit Interval(mpfr_prec_t precision = 64) : lo{Mpfr(precision)}, hi{Mpfr(precision)} {}
  void set_precision(mpfr_prec_t p) {
    lo.value.set_precision(p);
    hi.value.set_precision(p);
    lo.open = hi.open = false;
  }
  // The interval around x (a point when the precision holds x, as 53 bits or more always do).
  void set(double x);
  void set_si(long x);
  // Whether both ends are closed and equal (an exactly known value).
  bool is_point() const;
};

// Outward-rounded interval operations (namespace ia: "interval arithmetic").
namespace ia {

void neg(Interval& r, const Interval& a);
void add(Interval& r, const Interval& a, const Interval& b);
void sub(Interval& r, const Interval& a, const Interval& b);
// Products and quotients of intervals of any signs: the extremes of a*b (a/b) over the box are
// among its four corners; a corner whose factors are open ends is not attained, unless a closed
// zero factor makes the product zero along the whole edge.
void mul(Interval& r, const Interval& a, const Interval& b);
// b must not contain zero (numeq::error otherwise).
void div(Interval& r, const Interval& a, const Interval& b);
void recip(Interval& r, const Interval& a);  // 1/a, a not containing zero
// a * num / den for positive integers num, den (exact rational scaling, e.g. 0.044715).
void scale(Interval& r, const Interval& a, unsigned long num, unsigned long den);
void mul_2si(Interval& r, const Interval& a, long e);  // a * 2^e (exact unless out of range)
// Increasing functions.
void exp(Interval& r, const Interval& a);
void exp2(Interval& r, const Interval& a);
void expm1(Interval& r, const Interval& a);
void log(Interval& r, const Interval& a);     // a > 0
void log1p(Interval& r, const Interval& a);   // a > -1
void tanh(Interval& r, const Interval& a);
void erf(Interval& r, const Interval& a);
void atan(Interval& r, const Interval& a);
void sqrt(Interval& r, const Interval& a);    // a >= 0
// Decreasing functions.
void erfc(Interval& r, const Interval& a);
void rec_sqrt(Interval& r, const Interval& a);  // a > 0
// Functions that are not monotone, at an exactly known argument (a.is_point(); numeq::error
// otherwise): each end is the function rounded outward at that point.
void sin(Interval& r, const Interval& a);
void cos(Interval& r, const Interval& a);
void tan(Interval& r, const Interval& a);
// Constants.
void pi(Interval& r);

}  // namespace ia

}  // namespace numeq::reference
