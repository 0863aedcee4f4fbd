#pragma once
// Intervals of doubles rounded outward, for the fast paths of the composite operations
// (softmax.cpp, norms.cpp): every operation returns an interval that holds the exact result of
// the operation on any points of its operands. Each end is the nearest-rounded result where an
// error-free transformation shows it exact (TwoSum for sums, an fma residual for products,
// quotients and roots), else its neighbour outward (a nearest-rounded result is within half an
// ulp of the exact one, so the neighbour bounds it). Overflow makes an end infinite; callers
// treat a non-finite end as "no fast enclosure". Internal to references/.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>

#include "numeq/formats/format.hpp"

namespace numeq::reference::rows {

struct DoubleInterval {
  double lo = 0;
  double hi = 0;

  static DoubleInterval point(double x) { return {x, x}; }
  bool finite() const { return std::isfinite(lo) && std::isfinite(hi); }
  bool is_point() const { return lo == hi; }
  // Whether zero may lie inside (then the sign of the result is not settled here).
  bool holds_zero() const { return lo <= 0 && hi >= 0; }
};

namespace interval_detail {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Below this magnitude an fma residual may itself round (its exact value can lie under the
// subnormal spacing), so "residual zero" no longer proves a product or quotient exact.
inline constexpr double kResidualFloor = 0x1p-960;

// An end of the exact value r = s + (exact error sign) * tiny: s itself if the error is zero,
// else s's neighbour toward the error when it points outward (`upper`: up), else s.
[[gnu::always_inline]] inline double outward(double s, int error_sign, bool upper) {
  if (error_sign == 0) return s;
  if ((error_sign > 0) != upper) return s;
  return (upper ? next_up(s) : next_down(s));
}
[[gnu::always_inline]] inline int sign_of(double e) { return (e > 0) - (e < 0); }

// a + b rounded toward the side `upper` names (TwoSum: exact error, overflow aside).
[[gnu::always_inline]] inline double sum_bound(double a, double b, bool upper) {
  const double s = a + b;
  if (!std::isfinite(s)) return s;
  const double bv = s - a, av = s - bv;
  return outward(s, sign_of((a - av) + (b - bv)), upper);
}

// a * b rounded toward `upper`: the fma residual gives the error's sign where it is exact; below
// the floor, the neighbour outward regardless (always a bound).
[[gnu::always_inline]] inline double product_bound(double a, double b, bool upper) {
  const double p = a * b;
  if (!std::isfinite(p) || p == 0) {
    if (p == 0 && a != 0 && b != 0) return upper ? (std::signbit(p) ? -0.0 : std::numeric_limits<double>::denorm_min())
                                                 : (std::signbit(p) ? -std::numeric_limits<double>::denorm_min() : 0.0);
    return p;
  }
  if (std::fabs(p) < kResidualFloor) return (upper ? next_up(p) : next_down(p));
  return outward(p, sign_of(std::fma(a, b, -p)), upper);
}

// a / b (b != 0) rounded toward `upper`: a - q b = r exactly (for |q| above the floor), and the
// exact quotient is q + r / b.
[[gnu::always_inline]] inline double quotient_bound(double a, double b, bool upper) {
  const double q = a / b;
  if (!std::isfinite(q)) return q;
  if (q == 0 && a == 0) return q;
  if (std::fabs(q) < kResidualFloor || std::fabs(a) < kResidualFloor) return (upper ? next_up(q) : next_down(q));
  const double r = std::fma(-q, b, a);
  return outward(q, sign_of(r) * (b > 0 ? 1 : -1), upper);
}

// sqrt(a), a >= 0, rounded toward `upper`: a - s^2 exactly (a normal) gives the side.
[[gnu::always_inline]] inline double root_bound(double a, bool upper) {
  const double s = std::sqrt(a);
  if (a == 0 || !std::isfinite(s)) return s;
  if (a < kResidualFloor) return (upper ? next_up(s) : next_down(s));
  return outward(s, sign_of(std::fma(-s, s, a)), upper);
}

}  // namespace interval_detail

[[gnu::always_inline]] inline DoubleInterval operator+(const DoubleInterval& a, const DoubleInterval& b) {
  return {interval_detail::sum_bound(a.lo, b.lo, false), interval_detail::sum_bound(a.hi, b.hi, true)};
}
[[gnu::always_inline]] inline DoubleInterval operator-(const DoubleInterval& a, const DoubleInterval& b) {
  return {interval_detail::sum_bound(a.lo, -b.hi, false), interval_detail::sum_bound(a.hi, -b.lo, true)};
}
[[gnu::always_inline]] inline DoubleInterval operator*(const DoubleInterval& a, const DoubleInterval& b) {
  using interval_detail::product_bound;
  if (a.is_point() && b.is_point()) return {product_bound(a.lo, b.lo, false), product_bound(a.lo, b.lo, true)};
  // Times a point (gamma): its sign says which end goes where.
  if (b.is_point()) {
    if (b.lo >= 0) return {product_bound(a.lo, b.lo, false), product_bound(a.hi, b.lo, true)};
    return {product_bound(a.hi, b.lo, false), product_bound(a.lo, b.lo, true)};
  }
  const double ends[2][2] = {{a.lo, b.lo}, {a.hi, b.hi}};
  double lo = interval_detail::kInfinity, hi = -interval_detail::kInfinity;
  for (const double x : {ends[0][0], ends[1][0]})
    for (const double y : {ends[0][1], ends[1][1]}) {
      lo = std::min(lo, product_bound(x, y, false));
      hi = std::max(hi, product_bound(x, y, true));
    }
  return {lo, hi};
}
// a / b for b not holding zero.
[[gnu::always_inline]] inline DoubleInterval operator/(const DoubleInterval& a, const DoubleInterval& b) {
  using interval_detail::quotient_bound;
  // Over a positive divisor (softmax's sums, the norms' roots) only two quotients matter.
  if (b.lo > 0) {
    if (a.lo >= 0) return {quotient_bound(a.lo, b.hi, false), quotient_bound(a.hi, b.lo, true)};
    if (a.hi <= 0) return {quotient_bound(a.lo, b.lo, false), quotient_bound(a.hi, b.hi, true)};
    return {quotient_bound(a.lo, b.lo, false), quotient_bound(a.hi, b.lo, true)};
  }
  double lo = interval_detail::kInfinity, hi = -interval_detail::kInfinity;
  for (const double x : {a.lo, a.hi})
    for (const double y : {b.lo, b.hi}) {
      lo = std::min(lo, quotient_bound(x, y, false));
      hi = std::max(hi, quotient_bound(x, y, true));
    }
  return {lo, hi};
}
// sqrt of an interval with lo >= 0.
[[gnu::always_inline]] inline DoubleInterval sqrt(const DoubleInterval& a) {
  return {interval_detail::root_bound(a.lo, false), interval_detail::root_bound(a.hi, true)};
}
// a^2 (one operand read twice: the square of an interval holding zero starts at 0).
[[gnu::always_inline]] inline DoubleInterval square(const DoubleInterval& a) {
  using interval_detail::product_bound;
  const double small = a.holds_zero() ? 0.0 : std::min(std::fabs(a.lo), std::fabs(a.hi));
  const double large = std::max(std::fabs(a.lo), std::fabs(a.hi));
  return {small == 0 ? 0.0 : product_bound(small, small, false), product_bound(large, large, true)};
}

// An enclosure of a sum of doubles (terms, or exact products of two doubles), by Sum2 / Dot2 of
// Ogita, Rump and Oishi ("Accurate sum and dot product", SIAM J. Sci. Comput. 26(6), 2005,
// Propositions 4.5 and 5.5): TwoSum (and an fma for products) carries each operation's error
// exactly, the errors are added in double, and res = fl(s + c) satisfies
// |res - S| <= u |S| + gamma_n^2 sum |terms| with u = 2^-53, gamma_k = k u / (1 - k u). For
// n <= 2^26 terms gamma_n^2 < 2^-53.9, and |S| <= |res| + |res - S| gives
// |res - S| < 2^-52 |res| + 2^-53 sum |terms|; sum |terms| is at most its double sum times
// (1 + 2^-25) (n - 1 roundings of relative error u each). TwoSum is exact at every magnitude
// (sums of subnormals are exact); a product's fma residual is exact only for products above the
// residual floor, so a smaller non-zero product leaves the sum without an enclosure. Where every
// error is zero, res is S exactly.
class Sum2 {
 public:
  void add(double x) {
    add_exact(x);
    magnitude_ += std::fabs(x);
  }
  void add_product(double a, double b) {
    const double p = a * b;
    if (p != 0 && std::fabs(p) < interval_detail::kResidualFloor) usable_ = false;
    if (p == 0 && a != 0 && b != 0) usable_ = false;  // underflowed to zero
    const double e = std::fma(a, b, -p);
    add_exact(p);
    if (e != 0) {
      exact_ = false;
      c_ += e;
    }
    magnitude_ += std::fabs(p);
  }
  // nullopt: more than 2^26 terms, an overflow, or a product too small for its residual.
  std::optional<DoubleInterval> enclosure() const {
    if (!usable_ || terms_ > (std::size_t{1} << 26)) return std::nullopt;
    const double res = s_ + c_;
    if (!std::isfinite(res) || !std::isfinite(magnitude_)) return std::nullopt;
    if (exact_) return DoubleInterval::point(res);
    if (magnitude_ < 0x1p-900) return std::nullopt;  // the bound below would underflow
    using interval_detail::kInfinity;
    const double e = next_up((0x1p-52 * std::fabs(res) + 0x1p-53 * magnitude_ * (1 + 0x1p-25)) * (1 + 0x1p-50));
    return DoubleInterval{next_down(res - e), next_up(res + e)};
  }

 private:
  void add_exact(double x) {
    ++terms_;
    const double t = s_ + x;
    const double bv = t - s_, av = t - bv;
    const double err = (s_ - av) + (x - bv);
    if (err != 0) {
      exact_ = false;
      c_ += err;
    }
    s_ = t;
  }
  double s_ = 0, c_ = 0, magnitude_ = 0;
  std::size_t terms_ = 0;
  bool exact_ = true, usable_ = true;
};

}  // namespace numeq::reference::rows
