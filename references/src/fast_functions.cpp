// The fast path of the certified functions: enclosures in double arithmetic with proven error
// bounds (fast_functions.hpp).
//
// Error analysis conventions. u = 2^-53 is the unit roundoff of binary64 round-to-nearest: each
// +, -, *, / and sqrt returns the exact result times (1 + d), |d| <= u, for results in the normal
// range (IEEE 754-2019 s4.3, s5.4.1); a result in the subnormal range is off by at most 2^-1075
// instead. This file is compiled with -ffp-contract=off (no fused contractions) and without
// fast-math, so each operation written is one IEEE operation. Each approximation below is
// returned with a bound |y - f| <= rel |y| + abs; the proofs (first-order in u: the neglected
// products of error terms are below 2^-90 relative) are in the comment of each function, and
// `widen` doubles every bound before use (kMargin) so that second-order terms and the passage
// between bounds relative to the true and to the computed value are covered with room to spare.
// Horner evaluation of a polynomial of degree n with coefficients c_i, each rounded to double,
// errs by at most (2n + 1) u sum |c_i| |r|^i (N. Higham, "Accuracy and Stability of Numerical
// Algorithms", 2nd ed., s5.1, with one more u for the coefficients' own rounding).
//
// The enclosures are then clamped to bounds the function is known to respect strictly (tanh(x) < 1,
// silu(x) < x for x > 0, e^x > 1 for x > 0, ...) as open ends: a value such as tanh(20) or
// e^(2^-40), within 2^-40 of a representable number, then rounds by the fast path in every mode.

#include "fast_functions.hpp"

#include <array>
#include <bit>
#include <cstdint>
#include <cfloat>
#include <cmath>
#include <limits>

#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/fast_round.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq::reference::fast {

namespace {

constexpr double u = 0x1p-53;                 // unit roundoff
constexpr double tiny = 0x1p-1074;            // smallest positive (subnormal) double
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double kMargin = 2;

// ln 2 = kLn2Hi + kLn2Lo (Cody and Waite, "Software Manual for the Elementary Functions", 1980):
// kLn2Hi is ln 2 truncated to 32 significant bits, so k * kLn2Hi is exact for |k| < 2^21;
// kLn2Lo = ln 2 - kLn2Hi rounded to nearest (relative error < 2^-53, absolute < 2^-86).
constexpr double kLn2Hi = 0x1.62e42fee00000p-1;
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
constexpr double kLn2 = 0x1.62e42fefa39efp-1;     // ln 2 rounded to nearest
constexpr double kLog2e = 0x1.71547652b82fep+0;   // 1 / ln 2 rounded to nearest
constexpr double kSqrtHalf = 0x1.6a09e667f3bcdp-1;
// 2 sqrt(2/pi) rounded to nearest (relative error 0.57 u), and 0.044715 rounded to nearest.
constexpr double kGeluK = 0x1.9884533d43651p+0;
constexpr double kGeluC = 0.044715;

// 1 / sqrt(pi) and 2 / sqrt(pi) rounded to nearest (relative error 0.13 u).
constexpr double kInvSqrtPi = 0x1.20dd750429b6dp-1;
constexpr double kTwoOverSqrtPi = 0x1.20dd750429b6dp+0;

// 1/i!, i = 0..14, each rounded to nearest (i! is exact in double for i <= 18; constant folding
// of 1.0 / i! is an IEEE division).
constexpr std::array<double, 15> kInvFactorial = [] {
  std::array<double, 15> a{};
  double f = 1;
  for (int i = 0; i < 15; ++i) {
    a[static_cast<std::size_t>(i)] = 1.0 / f;
    f *= i + 1;
  }
  return a;
}();

// 1/(2j + 1), j = 0..10: the atanh series.
constexpr std::array<double, 11> kInvOdd = [] {
  std::array<double, 11> a{};
  for (int j = 0; j < 11; ++j) a[static_cast<std::size_t>(j)] = 1.0 / (2 * j + 1);
  return a;
}();

// 1 / (2n + 1)!!, n = 0..40, by the recurrence c_n = c_(n-1) / (2n + 1) in double: relative
// error below n u.
constexpr std::array<double, 41> kInvOddFactorial2 = [] {
  std::array<double, 41> a{};
  a[0] = 1;
  for (std::size_t n = 1; n < 41; ++n) a[n] = a[n - 1] / static_cast<double>(2 * n + 1);
  return a;
}();

struct Approx {
  double y = 0;
  double rel = 0;
  double abs = 0;
  bool exact = false;
};

Approx exact(double y) { return {y, 0, 0, true}; }

Enclosure point(double y) { return {y, y, false, false}; }


Enclosure widen(const Approx& a) {
  if (a.exact) return point(a.y);
  // Rounded upward by a step of one ulp: covers the rounding of the product and the sum.
  const double e = next_up(kMargin * (a.rel * std::fabs(a.y) + a.abs));
  Enclosure r{next_down(a.y - e), next_up(a.y + e), false, false};
  r.lo_open = std::isinf(r.lo);
  r.hi_open = std::isinf(r.hi);
  return r;
}

// The true value is > bound (resp. < bound): an end beyond it moves onto it, open.
void above(Enclosure& e, double bound) {
  if (e.lo <= bound) {
    e.lo = bound;
    e.lo_open = true;
  }
}
void below(Enclosure& e, double bound) {
  if (e.hi >= bound) {
    e.hi = bound;
    e.hi_open = true;
  }
}

// x / 2 when it is exact (every normal x; a subnormal one with a zero last bit), else 0.
double exact_half_or_zero(double x) {
  const double h = x * 0.5;
  return h * 2 == x ? h : 0.0;
}

// e^r for |r| <= 0.3466, by its Taylor polynomial of degree 13. Truncation: the tail is at most
// |r|^14 / 14! e^|r| < 6e-18 < 0.11 u relative to e^r >= 0.707. Horner: 27 u sum |r|^i / i! <=
// 27 u e^0.3466 < 38.3 u, i.e. < 54.2 u relative to e^r. Total < 55 u.
double exp_poly(double r) {
  double p = kInvFactorial[13];
  for (int i = 12; i >= 0; --i) p = p * r + kInvFactorial[static_cast<std::size_t>(i)];
  return p;
}

// Powers of two scale exactly while the result stays normal; into the subnormal range ldexp
// rounds (C17 7.12.6.6), an absolute error below 2^-1075 (the bound allows two such roundings).
// (A normal 2^k is built from its bits: one exact product instead of a library call.)
double scale2(double p, int k) {
  if (k >= -1021 && k <= 1023) return p * std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52);
  return std::ldexp(p, k);
}

// x rounded to the nearest integer, ties to even, for |x| < 2^51: adding and subtracting
// 1.5 * 2^52 leaves no fraction bits (each step is one IEEE operation, -ffp-contract=off), and
// unlike std::nearbyint it does not save and restore the floating-point environment.
double nearest_integer(double x) {
  constexpr double shifter = 0x1.8p52;
  return (x + shifter) - shifter;
}

// e^x for -1000 <= x <= 709.79: rel 64 u, abs 4 tiny, y possibly +Inf when the scaled result
// overflows (callers send that to MPFR).
// Reduction: k = nearest(x / ln 2) with |x / ln 2 - x * kLog2e| < 2^-40, so |r| <= ln 2 / 2 +
// 2^-40 < 0.3466. x - k kLn2Hi is exact (k kLn2Hi is exact and, for k != 0, within a factor 2 of
// x: Sterbenz), k kLn2Lo errs by u |k kLn2Lo| + |k| 2^-86 < 2^-74, the subtraction by u |r|:
// |dr| < 0.35 u + 2^-74, a relative error below 0.36 u in e^r. With exp_poly: < 56 u, and the
// scaling by 2^k is exact (normal) or adds the subnormal absolute error.
// x - k ln 2 by Cody and Waite's two-part constant (the bound above): exp_approx's and exp_many's.
[[gnu::always_inline]] inline double exp_reduced(double x, double k) { return (x - k * kLn2Hi) - k * kLn2Lo; }

Approx exp_approx(double x) {
  const double k = nearest_integer(x * kLog2e);
  const double r = exp_reduced(x, k);
  return {scale2(exp_poly(r), static_cast<int>(k)), 64 * u, 4 * tiny};
}

// e^t - 1 for 2^-29 <= t <= 40 (t normal, result normal).
// t < 0.3466: t q(t), q(t) = sum_{i=0}^{13} t^i / (i+1)!: positive terms, Horner error < 27 u
// relative; the tail < t^14 / 15! e^t / q < 2^-60; the last product u: < 29 u.
// t >= 0.3466: e^t (relative error eps = 64 u) minus 1 (exact below 2 by Sterbenz, else u):
// |error| <= eps e^t + u (e^t - 1), and e^t / (e^t - 1) <= 3.42 here: < 220 u.
Approx expm1_approx(double t) {
  if (t < 0.3466) {
    double q = kInvFactorial[14];
    for (int i = 12; i >= 0; --i) q = q * t + kInvFactorial[static_cast<std::size_t>(i + 1)];
    return {t * q, 32 * u, 0};
  }
  const Approx e = exp_approx(t);
  return {e.y - 1, 224 * u, 0};
}

// 2 atanh(s) = 2 s sum_j s^(2j) / (2j + 1) for |s| <= 0.17158, given s with relative error
// rel_s: w = s s errs by 2 rel_s + u; the sum (positive terms, degree 10 in w) by 21 u Horner
// plus (2 rel_s + u) times (A - 1) / A < 0.01; the tail w^11 / 23 / (1 - w) < 2^-60; times 2 s:
// rel_s + u. Total < rel_s + 23 u.
double atanh2_series(double s) {
  const double w = s * s;
  double a = kInvOdd[10];
  for (int j = 9; j >= 0; --j) a = a * w + kInvOdd[static_cast<std::size_t>(j)];
  return 2 * s * a;
}

// ln x for finite x > 0: rel 34 u.
// x = m 2^e with m in [sqrt(1/2), sqrt 2) (frexp is exact, subnormal x included); ln m =
// 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.17158: m - 1 is exact (Sterbenz), m + 1 and the
// division err by u each (rel_s = 2 u), so ln m errs by < 25 u. For e != 0, |ln m| <= ln 2 / 2
// <= |e ln 2| / 2, so |ln x| >= |e ln 2| / 2, and e * kLn2 (2 u), ln m (25 u |ln m| <= 25 u |ln x|)
// and the sum (u) give < (4 + 25 + 1) u relative.
Approx log_approx(double x) {
  if (x == 1) return exact(0.0);
  int e = 0;
  double m = std::frexp(x, &e);
  if (m < kSqrtHalf) {
    m *= 2;
    e -= 1;
  }
  const double lm = atanh2_series((m - 1) / (m + 1));
  if (e == 0) return {lm, 26 * u, 0};
  return {e * kLn2 + lm, 34 * u, 0};
}

// ln(1 + t) for t in (0, 1] given as t-hat with |t-hat - t| <= rel_t t-hat + abs_t: the
// derivative 1 / (1 + t) <= 1 and ln(1 + t) >= t / (1 + t) carry rel_t and abs_t over unchanged.
// t < 0.4142: 2 atanh(t / (2 + t)), s <= 0.17158, rel_s = 2 u: < 25 u (subnormal t: s and 2 s a
// each add at most 2^-1075 absolute). Otherwise ln(1 + t) with 1 + t in [1.414, 2] (u), ln of it
// (34 u) relative to ln(1 + t) >= 0.3466: u / 0.3466 + 34 u < 37 u. Total: rel_t + 40 u,
// abs_t + 2 tiny.
Approx log1p_approx(const Approx& t) {
  double y = 0;
  if (t.y < 0.4142) {
    y = atanh2_series(t.y / (2 + t.y));
  } else {
    y = log_approx(1 + t.y).y;
  }
  return {y, t.rel + 40 * u, t.abs + 2 * tiny};
}

// sigmoid(x) = 1 / (1 + e^-x) for finite x.
// x > 40: 1 - sigmoid(x) < e^-40 < 2^-57. x >= 0: t = e^-x (64 u, normal), 1 + t errs by
// 64 u t / (1 + t) + u <= 33 u, the reciprocal by u: < 34 u. x < -746: 0 < sigmoid(x) < e^x <
// 2^-1076. x < 0: t / (1 + t) with t = e^x (64 u, 4 tiny): 64 + 33 + 1 < 98 u, and 4 tiny + the
// quotient's own subnormal rounding.
Approx sigmoid_approx(double x) {
  if (x == 0) return exact(0.5);
  if (x > 40) return {1.0, 0x1p-56, 0};
  if (x >= 0) return {1 / (1 + exp_approx(-x).y), 36 * u, 0};
  if (x < -746) return {0.0, 0, tiny};
  const double t = exp_approx(x).y;
  return {t / (1 + t), 100 * u, 6 * tiny};
}

// Sign-symmetric bounds of a function f with f(x) in (lower, upper) strictly.
void clamp(Enclosure& e, double lower, double upper) {
  above(e, lower);
  below(e, upper);
}

std::optional<Enclosure> exp_enclosure(double x, bool base2) {
  if (x == 0) return point(1.0);
  // Beyond the double range: e^x > DBL_MAX for x > ln(DBL_MAX) = 709.7827..., 2^x for x >= 1024;
  // e^x < 2^-1076 < tiny for x < -746, 2^x < tiny for x < -1074.
  if (base2 ? x >= 1024 : x > 709.79) return Enclosure{DBL_MAX, inf, true, true};
  if (x < (base2 ? -1074.0 : -746.0)) return Enclosure{0.0, tiny, true, true};
  Approx a;
  if (base2) {
    // 2^x = 2^k e^(r ln 2), k = nearest(x), r = x - k exact (|r| <= 1/2); r * kLn2 errs by 2 u,
    // |r ln 2| <= 0.3466, so the perturbation is < 0.7 u: with exp_poly < 56 u.
    const double k = nearest_integer(x);
    const double r = x - k;
    if (r == 0) return point(std::ldexp(1.0, static_cast<int>(k)));  // 2^k, -1074 <= k <= 1023
    a = {scale2(exp_poly(r * kLn2), static_cast<int>(k)), 64 * u, 4 * tiny};
  } else {
    a = exp_approx(x);
  }
  if (!std::isfinite(a.y)) return std::nullopt;  // overflow by the last ulp: MPFR decides
  Enclosure e = widen(a);
  if (x > 0) {
    above(e, 1.0);
  } else {
    clamp(e, 0.0, 1.0);
  }
  return e;
}

std::optional<Enclosure> tanh_enclosure(double x) {
  if (x == 0) return point(x);
  const double a = std::fabs(x);
  Approx t;
  if (a < 0x1p-30) {
    t = {a, 0x1p-60, 0};  // a - a^3/3 < tanh a < a, a^2/3 < 2^-61
  } else if (a > 20) {
    t = {1.0, 0x1p-55, 0};  // 1 - tanh a = 2 / (e^2a + 1) < 2 e^-40 < 2^-55
  } else {
    // E / (E + 2), E = e^2a - 1 (2a exact): d ln(E / (E + 2)) / d ln E = 2 / (E + 2) <= 1, so E's
    // relative error (<= 224 u) carries over, plus u for E + 2 and u for the division.
    const Approx e = expm1_approx(2 * a);
    t = {e.y / (e.y + 2), e.rel + 3 * u, 0};
  }
  Enclosure r = widen(t);
  clamp(r, 0.0, std::min(1.0, a));  // 0 < tanh a < min(1, a)
  if (x < 0) r = {-r.hi, -r.lo, r.hi_open, r.lo_open};
  return r;
}

// x * s for s an approximation of a factor in (0, 1), x exact: s's relative error plus the
// product's u, s's absolute error scaled by |x| (computed with room for its own rounding) plus a
// subnormal rounding.
Approx times(double x, const Approx& s, double extra_rel) {
  return {x * s.y, s.rel + extra_rel + u, std::fabs(x) * s.abs * 2 + 2 * tiny};
}

// x * g(x) with x/2 < x g(x) < x for x > 0 and x/2 < x g(x) < 0 for x < 0 (g = sigmoid of
// something of x's sign), the bounds silu and gelu_tanh share.
void clamp_half_product(Enclosure& e, double x) {
  const double h = exact_half_or_zero(x);
  if (x > 0) {
    if (h != 0) above(e, h);
    above(e, 0.0);
    below(e, x);
  } else {
    if (h != 0) above(e, h);
    below(e, 0.0);
  }
}

// Where x g(x) (silu, gelu_tanh, gelu) needs no approximation of g: above `hi` it is x within
// `rel_hi` relative, below `lo` it is within `abs_lo` of 0. Each function states why its own hold.
struct SaturatedTails {
  double hi;
  double rel_hi;
  double lo;
  double abs_lo;
};

// The enclosure of x g(x): exact at 0, the tails above, middle() between; then clamp_half_product.
template <class Middle>
Enclosure x_times_g_enclosure(double x, const SaturatedTails& tails, Middle&& middle) {
  if (x == 0) return point(x);
  const Approx a = x > tails.hi   ? Approx{x, tails.rel_hi, 0}
                   : x < tails.lo ? Approx{0.0, 0, tails.abs_lo}
                                  : middle();
  Enclosure e = widen(a);
  clamp_half_product(e, x);
  return e;
}

std::optional<Enclosure> silu_enclosure(double x) {
  // No upper tail. Below -746: |silu x| < |x| e^x, increasing in x for x < -1: at most
  // 746 e^-746 < 2^-1066.
  constexpr SaturatedTails tails{std::numeric_limits<double>::infinity(), 0, -746, 0x1p-1066};
  return x_times_g_enclosure(x, tails, [x] { return times(x, sigmoid_approx(x), 0); });
}

std::optional<Enclosure> gelu_tanh_enclosure(double x) {
  // Above 30: z = 2 sqrt(2/pi) (x + c x^3) > 1974, 1 - sigmoid(z) < e^-1974. Below -30:
  // |x sigmoid(z)| < |x| e^z with z < -1.59 (|x| + 0.0447 |x|^3), far below 2^-1074.
  constexpr SaturatedTails tails{30, 0x1p-60, -30, tiny};
  return x_times_g_enclosure(x, tails, [x] {
    // z: x^3 (2 u), c (u), c x^3 (u), x + c x^3 (same signs: u), K (0.57 u), K * () (u): < 7 u
    // relative (an underflow of x^3 for |x| < 2^-358 changes z by < 2^-700 relative). A
    // perturbation dz moves ln sigmoid by |dz| (1 - sigmoid) <= |dz| for z < 0 and by at most
    // 8 u z e^-z e^|dz| < 3 u for z >= 0 (1 - sigmoid(w) < e^-w, |dz| < 2^-37).
    const double z = kGeluK * (x + kGeluC * (x * x * x));
    const double rel_z = z < 0 ? 9 * u * -z : 4 * u;
    return times(x, sigmoid_approx(z), rel_z);
  });
}

std::optional<Enclosure> softplus_enclosure(double x) {
  Approx a;
  if (x > 40) {
    a = {x, 0x1p-62, 0};  // 0 < softplus x - x = ln(1 + e^-x) < e^-40 < 2^-57 < 2^-62 x
  } else if (x >= 0) {
    // x + ln(1 + e^-x): two non-negative terms, the sum adds u.
    const Approx l = log1p_approx(exp_approx(-x));
    a = {x + l.y, l.rel + u, l.abs};
  } else if (x < -746) {
    a = {0.0, 0, tiny};  // 0 < ln(1 + e^x) < e^x < 2^-1076
  } else {
    a = log1p_approx(exp_approx(x));
  }
  Enclosure e = widen(a);
  above(e, std::max(x, 0.0));  // softplus x > max(x, 0)
  return e;
}

std::optional<Enclosure> log_enclosure(double x) {
  const Approx a = log_approx(x);
  if (a.exact) return point(a.y);
  Enclosure e = widen(a);
  // ln x < x - 1 for x != 1, and x - 1 is exact for x in [1/2, 2] (Sterbenz).
  if (x >= 0.5 && x <= 2) below(e, x - 1);
  if (x > 1) above(e, 0.0);
  if (x < 1) below(e, 0.0);
  return e;
}

// x = m 2^e, m in [1/2, 2), e even.
double even_split(double x, int& e) {
  double m = std::frexp(x, &e);
  if (e % 2 != 0) {
    m *= 2;
    e -= 1;
  }
  return m;
}

// sqrt and rsqrt for finite x > 0. s = sqrt(m) is correctly rounded (IEEE 754 s5.4.1) and
// m - s^2 is exactly representable, so fma(-s, s, m) is that residual exactly: zero iff s is the
// exact root; otherwise its sign says on which side of s the root lies (within half an ulp).
// Scaling by 2^(e/2) is exact (the roots of doubles are normal).
Enclosure sqrt_enclosure(double x, bool reciprocal) {
  int e = 0;
  const double m = even_split(x, e);
  const double s = std::sqrt(m);
  const double residual = std::fma(-s, s, m);
  if (!reciprocal) {
    if (residual == 0) return point(std::ldexp(s, e / 2));
    if (residual > 0) return {std::ldexp(s, e / 2), std::ldexp(next_up(s), e / 2), true, false};
    return {std::ldexp(next_down(s), e / 2), std::ldexp(s, e / 2), false, true};
  }
  // 1 / s: s errs by < u relative, the division by u: < 2 u (+ u^2).
  const double y = 1 / s;
  if (residual == 0 && std::fma(-y, s, 1.0) == 0) return point(std::ldexp(y, -e / 2));
  return widen({std::ldexp(y, -e / 2), 2.01 * u, 0});
}

std::optional<Enclosure> reciprocal_enclosure(double x) {
  // Kept to where 1 / x is normal and the division residual exact.
  const double a = std::fabs(x);
  if (a < 0x1p-1020 || a > 0x1p1020) return std::nullopt;
  const double y = 1 / x;  // correctly rounded: 1/x within half an ulp
  if (std::fma(-y, x, 1.0) == 0) return point(y);
  return Enclosure{next_down(y), next_up(y), false, false};
}

// gelu(x) = x/2 erfc(-x / sqrt 2), t = |x| / sqrt 2 computed as |x| kInvSqrt2 (relative error
// d_t < 2 u).
//
// e^-t^2 = e^(-x^2 / 2) from x directly: x^2 = h + l exactly (h = x x, l = fma(x, x, -h)), and
// e^(-h/2) (64 u) times (1 - l/2) (|l/2| <= u h/2; the dropped (l/2)^2 / 2 and the two roundings:
// 2 u): rel 66 u, abs 5 tiny (a subnormal result).
//
// erf(t) for t <= 2: (2 / sqrt pi) e^-t^2 S(t), S(t) = t P(2 t^2), P(w) = sum_n w^n / (2n + 1)!!
// (Abramowitz and Stegun 7.1.6; DLMF 7.6.2), positive terms. Truncated after n = 40: the tail is
// below 8^41 / 83!! / (1 - 8/85) < 2^-80 of P >= 1. Horner on positive terms: 81 u, the
// coefficients 40 u, w = 2 t t (u) moves P by at most its log-derivative w P'/P <= 5 times u.
// At t-hat instead of t: d ln S / d ln t = 2 t^2 + t erf'(t) / erf(t) <= 9, times d_t: 18 u. The
// products and 2 / sqrt pi: 4 u. With e^-t^2: < 220 u.
//
// erfc(t) for t > 1: (e^-t^2 / sqrt pi) g(t), g(t) = 1/(t + (1/2)/(t + 1/(t + (3/2)/(t + ...))))
// (Laplace's continued fraction, DLMF 7.9.2, valid for t > 0). Its truncations at depths n and
// n + 1 bracket g: the value is a monotone function of the innermost tail, which truncation sets
// to 0 at depth n and to a_(n+1) / t at depth n + 1, while the true tail lies strictly between
// (it is a_(n+1) / (t + a positive tail)). Evaluated bottom-up, each level t + a_k / d keeps the
// relative error of d and adds 2 u (positive terms): (2n + 1) u per truncation. At t-hat: the
// log-derivative t g'/g of g = sqrt(pi) e^(t^2) erfc(t) lies in (-1, 0), times d_t: 2 u.
// The depth 12 + 340 / t^2 makes the bracket narrower than 2^-56 (checked against MPFR at
// t = 1, 1.5, 2, 3, 5, 10, 20; the bracket itself is rigorous at any depth).
Approx erf_series(double t, const Approx& ex) {
  const double w = 2 * t * t;
  double p = kInvOddFactorial2[40];
  for (int n = 39; n >= 0; --n) p = p * w + kInvOddFactorial2[static_cast<std::size_t>(n)];
  return {kTwoOverSqrtPi * ex.y * (t * p), 220 * u, 0};
}

double laplace_cf(double t, int depth) {
  double d = t;
  for (int k = depth; k >= 1; --k) d = t + (0.5 * k) / d;
  return 1 / d;
}

Approx erfc_cf(double t, const Approx& ex) {
  const int n = 12 + static_cast<int>(340 / (t * t));
  const double a = laplace_cf(t, n);
  const double b = laplace_cf(t, n + 1);
  const double g = 0.5 * (a + b);
  // Half the bracket, each end's (2n + 3) u (with the midpoint's rounding), t-hat (2 u), e^-t^2
  // (66 u), 1 / sqrt pi and two products (3 u).
  const double rel = std::fabs(a - b) / (2 * g) + (2 * n + 4) * u + 71 * u;
  return {kInvSqrtPi * ex.y * g, rel, ex.abs};
}

std::optional<Enclosure> gelu_enclosure(double x) {
  // Above 8.5: t > 6.01, erfc(t) < e^-t^2 / (t sqrt pi) < 2^-55.5, gelu = x (1 - erfc(t) / 2).
  // Below -38.7: |gelu x| < |x|/2 e^-t^2 / (t sqrt pi) = e^(-x^2/2) / sqrt(2 pi) < e^-748 < 2^-1079.
  constexpr SaturatedTails tails{8.5, 0x1p-56, -38.7, tiny};
  return x_times_g_enclosure(x, tails, [x] {
    const double h = x * x;
    const double l = std::fma(x, x, -h);
    const Approx ex{exp_approx(-0.5 * h).y * (1 - 0.5 * l), 66 * u, 5 * tiny};
    const double t = std::fabs(x) * kSqrtHalf;
    const double half = x * 0.5;  // exact unless x is subnormal (then within tiny / 2)
    if (x > 0) {
      // 1 + erf(t) = 2 - erfc(t): positive terms, or erfc(t) <= erfc(2) < 0.0047 subtracted.
      // (For |x| < 2^-900, erf(t)'s own subnormal roundings are below 2^-1070, far below u of
      // the sum >= 1.)
      double gsum = 0;
      double rel = 0;
      if (t <= 2) {
        const Approx e = erf_series(t, ex);
        gsum = 1 + e.y;
        rel = e.rel + u;
      } else {
        const Approx c = erfc_cf(t, ex);
        gsum = 2 - c.y;
        rel = c.rel * 0.003 + u;
      }
      return Approx{half * gsum, rel + u, 2 * tiny};
    } else if (t <= 1) {
      // erfc(t) = 1 - erf(t), erf(t) <= erf(1) < 0.8428, 1 - erf(t) >= 0.1572: the error of erf
      // grows by at most 0.8428 / 0.1572 < 5.37.
      const Approx e = erf_series(t, ex);
      return Approx{half * (1 - e.y), e.rel * 5.37 + 2 * u, 2 * tiny};
    } else {
      const Approx c = erfc_cf(t, ex);
      return Approx{half * c.y, c.rel + u, std::fabs(x) * c.abs + 2 * tiny};
    }
  });
}

// One end of an enclosure rounded through numeq's kernel. An open end is rounded as the value an
// infinitesimal inside it (as round_mpfr does for MPFR's open ends): its magnitude moves toward
// zero by less than any representable step, which a set sticky bit below a one-smaller 64-bit
// significand expresses.
std::uint64_t round_end(double d, bool open, bool lower, const Cast& out, std::uint64_t random) {
  // An open zero end is an infinitesimal of the inner side's sign: 2^-1200 with sticky set lies
  // below the half unit of every format suits() admits (emin >= -1022), so only its sticky bit
  // and sign count, as in round_mpfr. An infinite end is always open: a finite value beyond every
  // such format (2^1100), which overflows in every mode.
  if (open && d == 0) return round_and_pack(out, !lower, -1200, std::uint64_t{1} << 63, true, random);
  if (std::isinf(d)) return round_and_pack(out, d < 0, 1100, std::uint64_t{1} << 63, true, random);
  const Unpacked p = unpack_double(d);
  if (p.cls == ValueClass::zero) return encode_unpacked(p, out, random);
  // A double's exponent and significand, not a subnormal input: DAZ does not apply (a result).
  int exponent = p.exponent;
  std::uint64_t significand = p.significand;
  if (open && lower == p.negative) {  // inside means toward zero
    significand -= 1;
    if ((significand >> 63) == 0) {  // was a power of two: all ones one binade lower
      significand = ~std::uint64_t{0};
      exponent -= 1;
    }
  }
  return round_and_pack(out, p.negative, exponent, significand, open, random);
}

}  // namespace

bool suits(const Cast& out) {
  const Format& f = out.format;
  const int looked_at = f.precision() + (out.rounding == Rounding::stochastic ? out.random_bits : 0);
  // The exponent range check keeps round_end's stand-ins for infinitesimals and for values beyond
  // every format valid (every format with at most 40 bits has a far narrower range than this).
  return f.is_signed && looked_at <= 40 && f.emin() >= -1022 && f.emin() + (1 << f.exponent_bits) < 1100;
}

// exp_approx over many arguments in [-700, 700] (fast_functions.hpp): the same reduction and
// polynomial, so the same bound, with 2^k built from its bits for every k (|k| <= 1010: normal)
// so that the loop has no branch and vectorises. k comes from the shifter's low bits: adding
// 1.5 * 2^52 leaves k in the significand's low bits as a two's-complement integer.
NUMEQ_X86_64_V3_CLONE void exp_many(const double* x, std::size_t n, double* y) {
  constexpr double shifter = 0x1.8p52;
  for (std::size_t i = 0; i < n; ++i) {
    const double t = x[i] * kLog2e + shifter;
    const double k = t - shifter;
    const double r = exp_reduced(x[i], k);
    const auto k_bits = std::bit_cast<std::uint64_t>(t) - std::bit_cast<std::uint64_t>(shifter);
    y[i] = exp_poly(r) * std::bit_cast<double>((k_bits + 1023) << 52);
  }
}

std::optional<Enclosure> enclose(Function f, double x) {
  switch (f) {
    case Function::exp: return exp_enclosure(x, false);
    case Function::exp2: return exp_enclosure(x, true);
    case Function::log: return log_enclosure(x);
    case Function::tanh: return tanh_enclosure(x);
    case Function::sigmoid: {
      if (x == 0) return point(0.5);
      Enclosure e = widen(sigmoid_approx(x));
      if (x > 0) {
        clamp(e, 0.5, 1.0);
      } else {
        clamp(e, 0.0, 0.5);
      }
      return e;
    }
    case Function::silu: return silu_enclosure(x);
    case Function::gelu_tanh: return gelu_tanh_enclosure(x);
    case Function::softplus: return softplus_enclosure(x);
    case Function::sqrt: return sqrt_enclosure(x, false);
    case Function::rsqrt: return sqrt_enclosure(x, true);
    case Function::reciprocal: return reciprocal_enclosure(x);
    case Function::gelu: return gelu_enclosure(x);
    // No fast enclosure (yet): the MPFR loop decides these.
    case Function::erf:
    case Function::erf_dx:
    case Function::sin:
    case Function::cos:
    case Function::tan:
    case Function::atan:
    case Function::mish:
    case Function::gelu_sigmoid:
    case Function::gelu_dx:
    case Function::silu_dx:
    case Function::gelu_sigmoid_dx: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> round_enclosure(const Enclosure& e, const Cast& out, std::uint64_t random) {
  // Closed ends in the format's normal range, rounded to nearest even or toward zero: FastRound
  // rounds each as the kernel would (a closed end is rounded as the value it is).
  if (!e.lo_open && !e.hi_open) {
    const FastRound fast(out);
    if (double lo = 0, hi = 0; fast(e.lo, lo) && fast(e.hi, hi)) {
      if (lo != hi) return std::nullopt;
      return fast.pattern(lo);
    }
  }
  const std::uint64_t lo = round_end(e.lo, e.lo_open, true, out, random);
  const std::uint64_t hi = round_end(e.hi, e.hi_open, false, out, random);
  if (lo != hi) return std::nullopt;
  return lo;
}

}  // namespace numeq::reference::fast
