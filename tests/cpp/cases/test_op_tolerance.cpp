// The catalogue object's tolerance() (cases/op.hpp): the covering (rtol, atol) pair covers every
// bound and is the exact optimum of its total allowance (against a brute-force evaluation at every
// crossing), raises atol where rounding falls short, and is the same on any thread count.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xview.hpp>

#include "numeq/cases/generators.hpp"
#include "numeq/cases/op.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/parallel.hpp"
#include "op_test_support.hpp"

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
namespace reference = numeq::reference;
using numeq::Cast;
using Array = xt::xarray<double>;
namespace fmts = numeq::formats;
using numeq_test::generate;


// The covering (rtol, atol) pair covers every bound, and its total allowance is no larger than
// either one-parameter form's.
TEST(Op, ToleranceCoversEveryBound) {
  const Array x = generate(cases::Distribution::cancellation, 13, fmts::bf16, {64, 256});
  const Array y = generate(cases::Distribution::normal, 14, fmts::bf16, {256, 64});
  const cases::Op op = cases::matmul(x, y, nullptr, "bf16", Cast{fmts::bf16});
  const core::Platform p = core::platform_by_name("nvidia.h100");
  const cases::Emulation e = op.emulate(p, {});
  const Array ref = op.reference();
  const cases::Tolerance t = cases::tolerance(e.bound, ref, fmts::bf16);
  double total = 0, total_atol = 0, total_rtol = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double r = std::abs(ref.data()[i]), b = e.bound.data()[i];
    EXPECT_LE(b, t.atol + t.rtol * r) << i;
    EXPECT_LE(b, t.max_abs);
    EXPECT_LE(b / cases::ulp_of(ref.data()[i], fmts::bf16), t.max_ulps * (1 + 1e-12));
    total += t.atol + t.rtol * r;
    total_atol += t.atol_only;
    total_rtol += t.rtol_only * r;
  }
  EXPECT_LE(total, total_atol * (1 + 1e-9));
  if (std::isfinite(t.rtol_only)) {
    EXPECT_LE(total, total_rtol * (1 + 1e-9));
  }
  EXPECT_GT(t.max_abs, 0);
}

// The (rtol, atol) fit against a brute-force optimum: the total allowance
// f(rtol) = N max(0, max_i b_i - rtol r_i) + rtol sum_i r_i, convex and piecewise linear, evaluated
// in long double at rtol = 0 and at every crossing of two lines (b_i - b_j) / (r_i - r_j) and of a
// line with 0 (b_i / r_i): its least value is the optimum. Also no worse than the ternary search
// numeq used before (kept here as written then).
namespace {

struct Fit {
  std::vector<long double> b, r;  // the elements taking part (finite bound and reference)
  long double total(long double rtol, long double atol) const {
    long double s = 0;
    for (const long double x : r) s += atol + rtol * x;
    return s;
  }
  long double at(long double rtol) const {
    long double a = 0;
    for (std::size_t i = 0; i < b.size(); ++i) a = std::max(a, b[i] - rtol * r[i]);
    return a;
  }
  long double optimum() const {
    std::vector<long double> candidates{0};
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (r[i] > 0) candidates.push_back(b[i] / r[i]);
      for (std::size_t j = 0; j < b.size(); ++j)
        if (r[i] != r[j]) candidates.push_back((b[i] - b[j]) / (r[i] - r[j]));
    }
    long double best = std::numeric_limits<long double>::infinity();
    for (const long double c : candidates)
      if (c >= 0) best = std::min(best, total(c, at(c)));
    return best;
  }
  long double ternary() const {  // the search numeq used before the exact fit
    const auto atol_at = [&](double rt) {
      double a = 0;
      for (std::size_t i = 0; i < b.size(); ++i) a = std::max(a, static_cast<double>(b[i]) - rt * static_cast<double>(r[i]));
      return a;
    };
    double sum_r = 0, hi = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      sum_r += static_cast<double>(r[i]);
      if (r[i] > 0) hi = std::max(hi, static_cast<double>(b[i] / r[i]));
    }
    const double N = static_cast<double>(b.size());
    const auto f = [&](double rt) { return N * atol_at(rt) + rt * sum_r; };
    double lo = 0;
    for (int it = 0; it < 100 && hi - lo > 1e-6 * hi; ++it) {
      const double m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
      if (f(m1) <= f(m2)) hi = m2;
      else lo = m1;
    }
    return f(0) <= f(hi) ? total(0, atol_at(0)) : total(hi, atol_at(hi));
  }
};

}  // namespace

TEST(Op, ToleranceFitIsTheExactOptimum) {
  std::mt19937_64 rng(20261204);
  const auto uniform = [&] { return std::ldexp(static_cast<double>(rng() >> 11), -53); };
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::size_t fitted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t n = trial < 50 ? 1 : trial >= 2980 ? 150 : 1 + rng() % 24;  // 150: many pruning rounds
    const int kind = trial % 5;  // 0: spread values; 1: a coarse grid (ties, zeros); 2: all bounds 0;
                                 // 3: with excluded elements; 4: bound proportional to |ref| plus noise
    Array bound = xt::zeros<double>({n}), ref = xt::zeros<double>({n});
    for (std::size_t i = 0; i < n; ++i) {
      double r = std::ldexp(uniform(), -static_cast<int>(rng() % 20)), b = std::ldexp(uniform(), -static_cast<int>(rng() % 20));
      if (kind == 1) r = static_cast<double>(rng() % 4) / 2, b = static_cast<double>(rng() % 4) / 4;
      if (kind == 2) b = 0;
      if (kind == 4) b = r * 0x1p-8 + uniform() * 0x1p-12;
      if (trial >= 2980) b = std::sqrt(r) * 0x1p-8;  // every point a hull vertex: many steps to the edge
      if (kind == 3 && rng() % 4 == 0) (rng() % 2 ? b : r) = rng() % 2 ? inf : nan;
      bound(i) = b;
      ref(i) = rng() % 2 ? -r : r;
    }
    const cases::Tolerance t = cases::tolerance(bound, ref, fmts::fp32);
    Fit fit;
    double max_abs = 0, max_ulps = 0, rtol_only = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double b = bound(i), r = std::abs(ref(i));
      if (!std::isfinite(b) || !std::isfinite(r)) continue;
      fit.b.push_back(b);
      fit.r.push_back(r);
      EXPECT_LE(b, t.atol + t.rtol * r) << "trial " << trial << " element " << i;  // covers, in binary64
      max_abs = std::max(max_abs, b);
      max_ulps = std::max(max_ulps, b / cases::ulp_of(ref(i), fmts::fp32));
      rtol_only = std::max(rtol_only, b == 0 ? 0.0 : (r == 0 ? inf : b / r));
    }
    EXPECT_EQ(t.max_abs, max_abs);
    EXPECT_EQ(t.atol_only, max_abs);
    EXPECT_EQ(t.max_ulps, max_ulps);
    EXPECT_EQ(t.rtol_only, rtol_only);
    if (fit.b.empty()) {
      EXPECT_EQ(t.rtol, 0);
      EXPECT_EQ(t.atol, 0);
      continue;
    }
    ++fitted;
    EXPECT_GE(t.rtol, 0);
    EXPECT_GE(t.atol, 0);
    if (t.rtol > 0) {
      // atol as the fit defines it, by the plain search: the largest b_i - rtol r_i in binary64,
      // raised an ulp at a time until atol + rtol r_i >= b_i everywhere.
      double want = 0;
      for (std::size_t k = 0; k < fit.b.size(); ++k)
        want = std::max(want, static_cast<double>(fit.b[k]) - t.rtol * static_cast<double>(fit.r[k]));
      for (bool covered = false; !covered; ) {
        covered = true;
        for (std::size_t k = 0; k < fit.b.size(); ++k)
          covered = covered && !(want + t.rtol * static_cast<double>(fit.r[k]) < static_cast<double>(fit.b[k]));
        if (!covered) want = std::nextafter(want, inf);
      }
      EXPECT_EQ(t.atol, want) << "trial " << trial << " at rtol " << t.rtol;
    }
    const long double got = fit.total(t.rtol, t.atol), best = fit.optimum();
    // Equal to the optimum but for binary64 roundings: of rtol (a rounded slope), and of atol
    // (the largest b_i - rtol r_i, each rounded twice, then raised until it covers), an ulp or
    // two of each, counted in ulps of the largest bound and of rtol.
    const auto ulp = [](double x) { return std::nextafter(x, std::numeric_limits<double>::infinity()) - x; };
    long double sum_r = 0;
    for (const long double r : fit.r) sum_r += r;
    const long double slack = 4 * (static_cast<long double>(fit.b.size()) * ulp(max_abs) + sum_r * ulp(t.rtol));
    EXPECT_LE(got, best + slack) << "trial " << trial << ": rtol " << t.rtol << " atol " << t.atol << "; "
                                 << static_cast<double>((got - best) / best) << " above the optimum";
    EXPECT_GE(got, best - slack) << "trial " << trial;
    EXPECT_LE(got, fit.ternary() + slack) << "trial " << trial;
  }
  EXPECT_GT(fitted, 2500u);
}

// Where b - rtol r, rounded, falls short once rtol r is added back (fl(fl(b - p) + p) < b, for
// about one point in 1,500), atol is raised to the next double: two-point fits (a zero reference
// and one above it, so that rtol is their slope) until twenty such cases, each against the plain
// search (the largest b_i - rtol r_i, raised an ulp at a time until everything is covered).
TEST(Op, ToleranceRaisesAtolWhereRoundingFallsShort) {
  std::mt19937_64 rng(11);
  const auto uniform = [&] { return std::ldexp(static_cast<double>(rng() >> 11), -53); };
  int raised = 0;
  for (int trial = 0; trial < 400000 && raised < 20; ++trial) {
    Array bound = xt::zeros<double>({2}), ref = xt::zeros<double>({2});
    // b_0 above b_1 / 2: rtol r_1 below b_1 / 2, so that b_1 - rtol r_1 is no exact difference.
    bound(1) = 0.5 + uniform() / 2;
    bound(0) = bound(1) * (0.5 + uniform() / 2);
    ref(1) = std::ldexp(0.5 + uniform() / 2, -static_cast<int>(rng() % 8));
    const cases::Tolerance t = cases::tolerance(bound, ref, fmts::fp32);
    ASSERT_GT(t.rtol, 0) << "trial " << trial;
    double want = std::max(0.0, std::max(bound(0), bound(1) - t.rtol * ref(1)));
    const double first = want;
    while (want + t.rtol * ref(0) < bound(0) || want + t.rtol * ref(1) < bound(1))
      want = std::nextafter(want, std::numeric_limits<double>::infinity());
    raised += want != first;
    ASSERT_EQ(t.atol, want) << "trial " << trial;
  }
  EXPECT_EQ(raised, 20);
}

// The fit's passes run on threads (the first over fixed blocks merged in order, the others over
// slices merged by value and index): on arrays of many blocks, with ties, zeros and excluded
// elements, every figure equals the one-thread fit's, and the fit covers every bound.
TEST(Op, ToleranceIsTheSameOnAnyThreadCount) {
  std::mt19937_64 rng(4);
  const auto uniform = [&] { return std::ldexp(static_cast<double>(rng() >> 11), -53); };
  for (int kind = 0; kind < 3; ++kind) {
    const std::size_t n = 300001;
    Array bound = xt::zeros<double>({n}), ref = xt::zeros<double>({n});
    for (std::size_t i = 0; i < n; ++i) {
      double r = std::ldexp(uniform(), -static_cast<int>(rng() % 20)), b = r * 0x1p-8 + uniform() * 0x1p-12;
      if (kind == 1) r = static_cast<double>(rng() % 4) / 2, b = static_cast<double>(rng() % 4) / 4;
      if (kind == 2 && rng() % 7 == 0) b = std::numeric_limits<double>::infinity();
      bound(i) = b;
      ref(i) = rng() % 2 ? -r : r;
    }
    numeq::set_num_threads(1);
    const cases::Tolerance one = cases::tolerance(bound, ref, fmts::bf16);
    for (int threads : {2, 3, 5}) {
      numeq::set_num_threads(threads);
      const cases::Tolerance t = cases::tolerance(bound, ref, fmts::bf16);
      EXPECT_EQ(t.max_abs, one.max_abs) << kind << " " << threads;
      EXPECT_EQ(t.max_ulps, one.max_ulps) << kind << " " << threads;
      EXPECT_EQ(t.rtol_only, one.rtol_only) << kind << " " << threads;
      EXPECT_EQ(t.rtol, one.rtol) << kind << " " << threads;
      EXPECT_EQ(t.atol, one.atol) << kind << " " << threads;
    }
    std::size_t uncovered = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (std::isfinite(bound(i)) && bound(i) > one.atol + one.rtol * std::abs(ref(i))) ++uncovered;
    EXPECT_EQ(uncovered, 0u) << kind;
    if (kind == 0) {
      EXPECT_GT(one.rtol, 0);  // a real fit, not atol alone
    }
  }
  numeq::set_num_threads(0);
}

}  // namespace
