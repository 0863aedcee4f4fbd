// MPFR values rounded through numeq's kernel, and outward-rounded interval arithmetic.

#include "numeq/references/mpfr_value.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <string>

#include "numeq/formats/error.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq::reference {

static_assert(ULONG_MAX >= 0xFFFFFFFFFFFFFFFFull, "round_mpfr reads 64 significand bits with mpfr_get_ui");

namespace {

// Exponents beyond these behave alike in round_and_pack: above `high` every value overflows
// (whatever the mode), below `low` every value lies entirely under the half-unit bit and only its
// sticky bit counts (the kernel's shift >= 128 branch). Clamping keeps the kernel's int
// arithmetic small for MPFR's huge exponent range.
int clamp_exponent(long e, const Format& f) {
  const long low = static_cast<long>(f.emin()) - f.mantissa_bits - 130;
  const long high = static_cast<long>(f.emin()) + (1L << f.exponent_bits) + 2;
  return static_cast<int>(std::clamp(e, low, high));
}

std::uint64_t special(ValueClass cls, bool negative, const Cast& cast) {
  Unpacked u;
  u.cls = cls;
  u.negative = negative;
  return encode_unpacked(u, cast, 0);
}

// A finite non-zero value given by its 64 leading bits (and sticky), with encode_unpacked's
// treatment of signs an unsigned format cannot hold.
std::uint64_t finite(bool negative, long exponent, std::uint64_t significand, bool sticky,
                     const Cast& cast, std::uint64_t random) {
  const Format& f = cast.format;
  if (!f.is_signed && negative) return f.nan_bits(false) << f.storage_shift;
  return round_and_pack(cast, negative, clamp_exponent(exponent, f), significand, sticky, random);
}

}  // namespace

std::uint64_t round_mpfr(mpfr_srcptr x, const Cast& cast, std::uint64_t random, Nudge nudge) {
  const bool negative = mpfr_signbit(x) != 0;
  if (mpfr_nan_p(x)) return special(ValueClass::nan, negative, cast);
  if (mpfr_zero_p(x)) {
    if (nudge == Nudge::none) return special(ValueClass::zero, negative, cast);
    // A value of the nudge's sign, below every representable magnitude: 2^low with sticky set.
    return finite(nudge == Nudge::below, LONG_MIN, std::uint64_t{1} << 63, true, cast, random);
  }
  if (mpfr_inf_p(x)) {
    if (nudge == Nudge::none) return special(ValueClass::infinity, negative, cast);
    // Finite, beyond every representable magnitude: overflows in every mode.
    return finite(negative, LONG_MAX, std::uint64_t{1} << 63, true, cast, random);
  }
  // The 64 leading bits: truncate to 64 bits (ternary != 0 <=> lower bits were non-zero), then
  // scale the magnitude into [2^63, 2^64), an integer that mpfr_get_ui returns exactly.
  thread_local Mpfr top(64);
  const int ternary = mpfr_set(top, x, MPFR_RNDZ);
  bool sticky = ternary != 0;
  long exponent = mpfr_get_exp(top) - 1;  // MPFR: x = 0.1b...b * 2^exp
  mpfr_abs(top, top, MPFR_RNDN);
  mpfr_set_exp(top, 64);
  std::uint64_t significand = mpfr_get_ui(top, MPFR_RNDZ);
  // Magnitude toward zero (below a positive value, above a negative one): with sticky set the
  // truncation is unchanged; without it the value drops below this 64-bit number.
  const bool toward_zero = (nudge == Nudge::below && !negative) || (nudge == Nudge::above && negative);
  if (nudge != Nudge::none) {
    if (toward_zero && !sticky) {
      significand -= 1;
      if ((significand >> 63) == 0) {  // was a power of two: all ones one binade lower
        significand = ~std::uint64_t{0};
        exponent -= 1;
      }
    }
    sticky = true;
  }
  return finite(negative, exponent, significand, sticky, cast, random);
}

void Interval::set(double x) {
  lo.open = mpfr_set_d(lo.value, x, MPFR_RNDD) != 0;
  hi.open = mpfr_set_d(hi.value, x, MPFR_RNDU) != 0;
}

void Interval::set_si(long x) {
  lo.open = mpfr_set_si(lo.value, x, MPFR_RNDD) != 0;
  hi.open = mpfr_set_si(hi.value, x, MPFR_RNDU) != 0;
}

bool Interval::is_point() const {
  return !lo.open && !hi.open && mpfr_equal_p(lo.value, hi.value);
}

namespace ia {

namespace {

using Unary = int (*)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t);

void increasing(Interval& r, const Interval& a, Unary f) {
  r.lo.open = (f(r.lo.value, a.lo.value, MPFR_RNDD) != 0) || a.lo.open;
  r.hi.open = (f(r.hi.value, a.hi.value, MPFR_RNDU) != 0) || a.hi.open;
}

void decreasing(Interval& r, const Interval& a, Unary f) {
  r.lo.open = (f(r.lo.value, a.hi.value, MPFR_RNDD) != 0) || a.hi.open;
  r.hi.open = (f(r.hi.value, a.lo.value, MPFR_RNDU) != 0) || a.lo.open;
}

bool closed_zero(const Bound& b) { return !b.open && mpfr_zero_p(b.value); }

// Per-thread corner temporaries for mul/div.
struct Corners {
  std::array<Mpfr, 4> v;
  std::array<int, 4> ternary{};
  std::array<bool, 4> attained{};
};

enum class Op : std::uint8_t { mul, div };

// r.lo = min, r.hi = max over the four corners a_i (op) b_j.
void corners(Interval& r, const Interval& a, const Interval& b, Op op) {
  thread_local Corners c;
  const Bound* as[2] = {&a.lo, &a.hi};
  const Bound* bs[2] = {&b.lo, &b.hi};
  const mpfr_prec_t p = std::max(mpfr_get_prec(r.lo.value), mpfr_get_prec(r.hi.value));
  for (int end = 0; end < 2; ++end) {  // 0: lower end, 1: upper end
    const mpfr_rnd_t rnd = end == 0 ? MPFR_RNDD : MPFR_RNDU;
    int best = -1;
    for (int k = 0; k < 4; ++k) {
      const Bound& x = *as[k / 2];
      const Bound& y = *bs[k % 2];
      Mpfr& v = c.v[static_cast<std::size_t>(k)];
      v.set_precision(p);
      int t = 0;
      bool attained = !x.open && !y.open;
      if (op == Op::mul) {
        // A closed zero factor makes the product zero along a whole edge (0 * Inf included: an
        // infinite end here is always an open one, i.e. a finite value).
        if (closed_zero(x) || closed_zero(y)) {
          mpfr_set_zero(v, (mpfr_signbit(x.value) != 0) != (mpfr_signbit(y.value) != 0) ? -1 : 1);
          attained = true;
        } else {
          t = mpfr_mul(v, x.value, y.value, rnd);
        }
      } else {
        if (closed_zero(x)) attained = true;
        t = mpfr_div(v, x.value, y.value, rnd);
      }
      if (mpfr_nan_p(v)) {  // Inf * 0 or Inf / Inf from open ends: no bound on this side
        mpfr_set_inf(v, end == 0 ? -1 : 1);
        t = end == 0 ? -1 : 1;
        attained = false;
      }
      c.ternary[static_cast<std::size_t>(k)] = t;
      c.attained[static_cast<std::size_t>(k)] = attained && t == 0;
      if (best < 0) {
        best = k;
        continue;
      }
      const int cmp = mpfr_cmp(v, c.v[static_cast<std::size_t>(best)]);
      if ((end == 0 ? cmp < 0 : cmp > 0)) best = k;
    }
    // Closed iff some corner reaching the extreme value does so exactly and is attained.
    const Mpfr& extreme = c.v[static_cast<std::size_t>(best)];
    bool closed = false;
    for (std::size_t k = 0; k < 4; ++k)
      if (c.attained[k] && mpfr_equal_p(c.v[k], extreme)) closed = true;
    Bound& out = end == 0 ? r.lo : r.hi;
    mpfr_set(out.value, extreme, rnd);
    // mpfr_set into the (same or larger) precision is exact: the corner was computed at p.
    out.open = !closed;
  }
}

bool contains_zero(const Interval& a) {
  return mpfr_sgn(a.lo.value.get()) <= 0 && mpfr_sgn(a.hi.value.get()) >= 0;
}

}  // namespace

void neg(Interval& r, const Interval& a) {
  r.lo.open = (mpfr_neg(r.lo.value, a.hi.value, MPFR_RNDD) != 0) || a.hi.open;
  r.hi.open = (mpfr_neg(r.hi.value, a.lo.value, MPFR_RNDU) != 0) || a.lo.open;
}

void add(Interval& r, const Interval& a, const Interval& b) {
  r.lo.open = (mpfr_add(r.lo.value, a.lo.value, b.lo.value, MPFR_RNDD) != 0) || a.lo.open || b.lo.open;
  r.hi.open = (mpfr_add(r.hi.value, a.hi.value, b.hi.value, MPFR_RNDU) != 0) || a.hi.open || b.hi.open;
}

void sub(Interval& r, const Interval& a, const Interval& b) {
  r.lo.open = (mpfr_sub(r.lo.value, a.lo.value, b.hi.value, MPFR_RNDD) != 0) || a.lo.open || b.hi.open;
  r.hi.open = (mpfr_sub(r.hi.value, a.hi.value, b.lo.value, MPFR_RNDU) != 0) || a.hi.open || b.lo.open;
}

void mul(Interval& r, const Interval& a, const Interval& b) { corners(r, a, b, Op::mul); }

void div(Interval& r, const Interval& a, const Interval& b) {
  if (contains_zero(b)) throw numeq::error("interval division: the divisor contains zero");
  corners(r, a, b, Op::div);
}

void recip(Interval& r, const Interval& a) {
  if (contains_zero(a)) throw numeq::error("interval reciprocal: the interval contains zero");
  // 1/x decreases on each side of zero.
  r.lo.open = (mpfr_ui_div(r.lo.value, 1, a.hi.value, MPFR_RNDD) != 0) || a.hi.open;
  r.hi.open = (mpfr_ui_div(r.hi.value, 1, a.lo.value, MPFR_RNDU) != 0) || a.lo.open;
}

void scale(Interval& r, const Interval& a, unsigned long num, unsigned long den) {
  // x -> x * num and x -> x / den both increase, so rounding each step down (up) keeps a lower
  // (upper) bound.
  int t = mpfr_mul_ui(r.lo.value, a.lo.value, num, MPFR_RNDD);
  int u = mpfr_div_ui(r.lo.value, r.lo.value, den, MPFR_RNDD);
  r.lo.open = t != 0 || u != 0 || a.lo.open;
  t = mpfr_mul_ui(r.hi.value, a.hi.value, num, MPFR_RNDU);
  u = mpfr_div_ui(r.hi.value, r.hi.value, den, MPFR_RNDU);
  r.hi.open = t != 0 || u != 0 || a.hi.open;
}

void mul_2si(Interval& r, const Interval& a, long e) {
  r.lo.open = (mpfr_mul_2si(r.lo.value, a.lo.value, e, MPFR_RNDD) != 0) || a.lo.open;
  r.hi.open = (mpfr_mul_2si(r.hi.value, a.hi.value, e, MPFR_RNDU) != 0) || a.hi.open;
}

void exp(Interval& r, const Interval& a) { increasing(r, a, mpfr_exp); }
void exp2(Interval& r, const Interval& a) { increasing(r, a, mpfr_exp2); }
void expm1(Interval& r, const Interval& a) { increasing(r, a, mpfr_expm1); }
void log(Interval& r, const Interval& a) { increasing(r, a, mpfr_log); }
void log1p(Interval& r, const Interval& a) { increasing(r, a, mpfr_log1p); }
void tanh(Interval& r, const Interval& a) { increasing(r, a, mpfr_tanh); }
void erf(Interval& r, const Interval& a) { increasing(r, a, mpfr_erf); }
void atan(Interval& r, const Interval& a) { increasing(r, a, mpfr_atan); }

namespace {

void at_point(Interval& r, const Interval& a, Unary f, const char* name) {
  if (!a.is_point())
    throw numeq::error(std::string("reference: interval ") + name + " takes an exactly known argument");
  r.lo.open = f(r.lo.value, a.lo.value, MPFR_RNDD) != 0;
  r.hi.open = f(r.hi.value, a.hi.value, MPFR_RNDU) != 0;
}

}  // namespace

void sin(Interval& r, const Interval& a) { at_point(r, a, mpfr_sin, "sin"); }
void cos(Interval& r, const Interval& a) { at_point(r, a, mpfr_cos, "cos"); }
void tan(Interval& r, const Interval& a) { at_point(r, a, mpfr_tan, "tan"); }

void sqrt(Interval& r, const Interval& a) { increasing(r, a, mpfr_sqrt); }
void erfc(Interval& r, const Interval& a) { decreasing(r, a, mpfr_erfc); }
void rec_sqrt(Interval& r, const Interval& a) { decreasing(r, a, mpfr_rec_sqrt); }

void pi(Interval& r) {
  r.lo.open = mpfr_const_pi(r.lo.value, MPFR_RNDD) != 0;
  r.hi.open = mpfr_const_pi(r.hi.value, MPFR_RNDU) != 0;
}

}  // namespace ia

}  // namespace numeq::reference
