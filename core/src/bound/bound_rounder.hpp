#pragma once
// What one rounding into a cast can lose, for the bound walkers (bound.cpp, and the data-driven
// probabilistic walk of bound_probabilistic.cpp); private to numeq::core. The model is bound.cpp's
// file comment.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>

#include "numeq/core/plan.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq::core::detail {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- upward arithmetic on non-negative numbers ----
// The next double above x: formats' next_up, by its bits (the walkers call it for every rounding
// they bound, where libm's nextafter was a seventh of the probabilistic walk's time).
inline double up(double x) { return next_up(x); }
// 2^e exactly (std::ldexp(1.0, e)), by its bits where e is a binary64 exponent or subnormal one.
inline double pow2(int e) {
  if (e >= -1022 && e <= 1023) return std::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52);
  if (e >= -1074 && e < -1022) return std::bit_cast<double>(std::uint64_t{1} << (e + 1074));
  return std::ldexp(1.0, e);
}
inline double add_up(double a, double b) { return (a == 0) ? b : (b == 0) ? a : up(a + b); }
inline double mul_up(double a, double b) { return (a == 0 || b == 0) ? 0.0 : up(a * b); }
// (1 + a)(1 + b) - 1 = a + b + ab.
inline double comb(double a, double b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return add_up(add_up(a, b), mul_up(a, b));
}

// ---- one rounding into a cast ----
struct Rounder {
  double rho = 0;        // relative error bound
  double eta = 0;        // absolute error bound below the normal range (FTZ included)
  double daz = 0;        // per operand flushed by an addition under DAZ: 2^emin
  double daz_unary = 0;  // a single value flushed by the kernel under DAZ (binary64 subnormals)
  double u = 0;          // unit roundoff, for the probabilistic model
  bool random = false;   // round to nearest: a mean-independent error in the probabilistic model
  bool exact = false;    // integer accumulators
  bool finite_overflow = false;  // an overflow can give a finite value
  double threshold = kInf;       // magnitudes up to this cannot overflow
  double max = kInf;             // the format's largest finite value (kept: max_finite is not free)
};

inline Rounder rounder(const Cast& c) {
  Rounder r;
  const Format& f = c.format;
  if (f.is_integer()) {
    r.exact = true;
    return r;
  }
  const int m = f.mantissa_bits;
  r.u = pow2(-(m + 1));
  const bool nearest = c.rounding == Rounding::nearest_even || c.rounding == Rounding::nearest_away;
  r.random = nearest;
  r.rho = nearest ? r.u : 2 * r.u;
  const double spacing = f.has_zero ? pow2(f.emin() - m) : 2 * min_normal(f);
  r.eta = nearest ? spacing / 2 : spacing;
  if (c.flushes_outputs()) r.eta = std::max(r.eta, min_normal(f));
  if (c.flushes_inputs()) {
    r.daz = min_normal(f);
    r.daz_unary = pow2(-1022);
  }
  r.finite_overflow = overflows_to_max(c, false) || overflows_to_max(c, true);
  // Nearest overflows only beyond max + ulp/2; the other modes only at 2^(emax+1).
  const double mx = max_finite(f);
  r.max = mx;
  r.threshold = nearest ? mx : pow2(std::ilogb(mx) + 1);
  return r;
}

// The rounding of one value, and of an addition of `operands` values.
inline double eta_value(const Rounder& r) { return r.eta + r.daz_unary; }
inline double eta_add(const Rounder& r, std::size_t operands = 2) { return r.eta + static_cast<double>(operands) * r.daz; }

}  // namespace numeq::core::detail
