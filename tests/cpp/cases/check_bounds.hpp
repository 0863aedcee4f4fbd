#pragma once
// Shared by the catalogue's tests: an Emulation checked element by element against an exact
// reference (numeq::reference, MPFR-certified, rounded to nearest binary64), with counts and the
// tightness of the bound (worst observed error / bound).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <xtensor/xarray.hpp>

#include "numeq/cases/emulation.hpp"

namespace numeq_test {

// NUMEQ_LONG_TESTS=1: the long variants run.
inline bool long_tests() {
  const char* v = std::getenv("NUMEQ_LONG_TESTS");
  return v != nullptr && std::string(v) == "1";
}

struct Tally {
  std::size_t checked = 0;     // elements whose bound makes a claim (finite) and was checked
  std::size_t violations = 0;  // |value - exact| > bound
  std::size_t unbounded = 0;   // bound +Inf (overflow inside a finite computation): no claim
  std::size_t agreed_special = 0;  // value and exact both NaN or the same infinity
  double worst_ratio = 0;      // max |value - exact| / bound over checked elements with bound > 0
  std::string first_violation;

  void add(const Tally& o) {
    checked += o.checked;
    violations += o.violations;
    unbounded += o.unbounded;
    agreed_special += o.agreed_special;
    worst_ratio = std::max(worst_ratio, o.worst_ratio);
    if (first_violation.empty()) first_violation = o.first_violation;
  }
};

// `exact` holds the exact results rounded to nearest binary64: the slack |exact| 2^-53 (plus the
// smallest subnormal) covers that rounding.
inline Tally check(const numeq::cases::Emulation& e, const xt::xarray<double>& exact, const xt::xarray<double>& x,
                   const std::string& label) {
  Tally t;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double v = e.values.data()[i], r = exact.data()[i], b = e.bound.data()[i];
    if (std::isnan(b)) continue;  // non-finite input: no claim
    if ((std::isnan(v) && std::isnan(r)) || (std::isinf(r) && v == r)) {
      ++t.agreed_special;
      continue;
    }
    if (std::isinf(b)) {
      ++t.unbounded;
      continue;
    }
    ++t.checked;
    const double err = std::abs(v - r);
    const double slack = std::abs(r) * 0x1p-53 + 0x1p-1074;
    if (!(err <= b + slack)) {
      ++t.violations;
      if (t.first_violation.empty()) {
        char buf[512];
        std::snprintf(buf, sizeof buf, "%s: element %zu x=%.17g value=%.17g exact=%.17g bound=%.6g", label.c_str(), i,
                      x.size() == exact.size() ? x.data()[i] : std::nan(""), v, r, b);
        t.first_violation = buf;
      }
    } else if (b > 0) {
      t.worst_ratio = std::max(t.worst_ratio, err / b);
    }
  }
  return t;
}

inline void print(const char* what, const Tally& t, double random_tightness) {
  std::printf("[ bounds ] %-34s checked %9zu  violations %zu  unbounded %zu  specials %zu  worst/bound %.3g  "
              "(random data %.3g)\n",
              what, t.checked, t.violations, t.unbounded, t.agreed_special, t.worst_ratio, random_tightness);
}

}  // namespace numeq_test
