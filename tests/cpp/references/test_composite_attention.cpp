// Certified attention (references/composite.hpp, numeq::reference::attention) against the independent
// MPFR oracle (composite_oracle.hpp: keys grouped by exactly equal score, plain MPFR at 3064 bits, the
// last step rounded to odd at 3000 bits), rounded into the Cast under test by
// numeq_oracle::RoundOracle and compared bit for bit (value, NaN-ness, sign of zero).
//
// NUMEQ_SWEEP_SCALE (default 1; e.g. 0.05 under sanitizers) scales the number of random cases.

#include "numeq/references/composite.hpp"

#include <gtest/gtest.h>
#include <mpfr.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/rounding.hpp"
#include "oracle/mpfr_oracle.hpp"
#include "oracle/test_support.hpp"
#include "composite_check.hpp"
#include "composite_oracle.hpp"

namespace {

// ---------------------------------------------------------------------------------------------
// attention
// ---------------------------------------------------------------------------------------------
// huge: scales of 1e3 .. 1e5, so that scores lie thousands apart and the far keys' weights
// (e^-50000 and below) leave results a hair away from the top keys' mean of v.
Attention random_attention(std::mt19937_64& rng, const Format& f, std::size_t trial, bool huge = false) {
  Attention a;
  switch (trial % 3) {
    case 0: a.batch = {2}; break;
    case 1: a.batch = {}; break;
    default: a.batch = {1, 3}; break;
  }
  const std::size_t ds[] = {1, 2, 3, 4, 5, 8, 9, 16};
  a.d = ds[rng() % 8];
  a.lq = 1 + rng() % 5;
  a.lk = 1 + rng() % 8;
  a.dv = 1 + rng() % 3;
  const std::size_t nb = a.batches();
  const unsigned kind = static_cast<unsigned>(rng() % 6);
  const int ehi = kind == 1 ? 4 : 1;
  std::vector<double> q(nb * a.lq * a.d), k(nb * a.lk * a.d), v(nb * a.lk * a.dv);
  for (double& x : q) x = draw(rng, f, -4, ehi);
  for (double& x : k) x = draw(rng, f, -4, ehi);
  for (double& x : v) x = draw(rng, f, -6, 6);
  if (kind == 2 || kind == 3) {
    // duplicated keys (equal scores) and v on a grid with equal group means: exact results
    for (std::size_t b = 0; b < nb; ++b) {
      for (std::size_t j = 1; j < a.lk; j += 2)
        for (std::size_t t = 0; t < a.d; ++t) k[(b * a.lk + j) * a.d + t] = k[(b * a.lk + j - 1) * a.d + t];
      for (std::size_t c = 0; c < a.dv; ++c) {
        const double r = grid(rng);
        for (std::size_t j = 0; j < a.lk; ++j) {
          double val = r;
          if (kind == 2 && j % 2 == 1) {
            const double delta = grid(rng);
            val = r + delta;  // and its partner r - delta: the pair's mean is r
            v[(b * a.lk + j - 1) * a.dv + c] = r - delta;
          }
          if (kind == 3 && rng() % 4 == 0) val = grid(rng);  // break the exact case sometimes
          v[(b * a.lk + j) * a.dv + c] = val;
        }
      }
    }
  }
  if (kind == 4) {  // specials
    const std::size_t which = rng() % 3;
    std::vector<double>& target = which == 0 ? q : (which == 1 ? k : v);
    const double specials[] = {kNan, kInf, -kInf};
    target[rng() % target.size()] = specials[rng() % 3];
    if (rng() % 2 == 0) v[rng() % v.size()] = specials[rng() % 3];
  }
  a.q = xt::adapt(q, a.shape(a.lq, a.d));
  a.k = xt::adapt(k, a.shape(a.lk, a.d));
  a.v = xt::adapt(v, a.shape(a.lk, a.dv));
  const double scales[] = {0.125, 0.5, 1.0, -0.75, 0.0, 3.0, 0.1, 37.5};
  const double huge_scales[] = {1e3, 1e4, -1e4, 1e5};
  if (huge) a.scale = huge_scales[rng() % 4];
  else if (rng() % 5 < 2) a.scale = scales[rng() % 8];
  a.causal = rng() % 3 == 0;
  if (rng() % 2 == 0) {
    std::vector<double> m(nb * a.lq * a.lk);
    for (double& x : m) {
      const unsigned u = static_cast<unsigned>(rng() % 10);
      x = u < 5 ? 0.0 : (u < 7 ? -kInf : static_cast<double>(static_cast<int>(rng() % 17) - 8) / 4.0);
    }
    if (kind == 5 && rng() % 2 == 0) m[rng() % m.size()] = (rng() & 1) ? kNan : kInf;
    a.mask = xt::adapt(m, a.shape(a.lq, a.lk));
  }
  return a;
}


TEST(AttentionSweep, RandomCasesEveryCast) {
  const auto t0 = std::chrono::steady_clock::now();
  std::mt19937_64 rng(36);
  std::size_t n_cmp = 0, n_elems = 0;
  const std::size_t cases = scaled(60);
  for (const Format* f : kInputFormats)
    for (std::size_t trial = 0; trial < cases; ++trial) {
      const Attention a = random_attention(rng, *f, trial);
      const std::vector<Big> want = attention_oracle(a);
      n_cmp += check_all("attention " + std::string(f->name), want, [&](const Cast& c) { return run_attention(a, c); },
                         [&](std::size_t k) { return describe_attention(a, k); });
      n_elems += want.size();
    }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ attention   ] %zu elements, %zu comparisons in %.1f s\n", n_elems, n_cmp, secs);
}

// Score spreads of 10^4 .. 10^6 nats: results within e^-10000 .. e^-1000000 of the top group's
// mean of v (composite.hpp promises every element correctly rounded; softmax rows with such
// spreads are certified, and so must these be).
TEST(AttentionSweep, HugeScoreSpreads) {
  std::mt19937_64 rng(37);
  std::size_t n_cmp = 0;
  for (const Format* f : kInputFormats)
    for (std::size_t trial = 0; trial < scaled(8, 2); ++trial) {
      const Attention a = random_attention(rng, *f, trial, true);
      const std::vector<Big> want = attention_oracle(a);
      n_cmp += check_all("attention huge spread " + std::string(f->name), want,
                         [&](const Cast& c) { return run_attention(a, c); },
                         [&](std::size_t k) { return describe_attention(a, k); });
    }
  // The smallest case: scores 1e5 apart, v = [1, 2]: 1 + e^-100000 / (1 + e^-100000).
  Attention a;
  a.lq = 1; a.lk = 2; a.d = 2; a.dv = 1;
  a.q = xt::adapt(std::vector<double>{1.0, 0.0}, std::vector<std::size_t>{1, 2});
  a.k = xt::adapt(std::vector<double>{1.0, 0.0, 0.0, 0.0}, std::vector<std::size_t>{2, 2});
  a.v = xt::adapt(std::vector<double>{1.0, 2.0}, std::vector<std::size_t>{2, 1});
  a.scale = 1e5;
  n_cmp += check_all("attention scale 1e5", attention_oracle(a), [&](const Cast& c) { return run_attention(a, c); },
                     [&](std::size_t k) { return describe_attention(a, k); });
  std::printf("[ attention   ] huge spreads: %zu comparisons\n", n_cmp);
}

TEST(Attention, ExactCausalSpecialAndSpreadCases) {
  std::size_t n = 0;
  auto run_case = [&](Attention a, const std::string& what) {
    const std::vector<Big> want = attention_oracle(a);
    n += check_all(what, want, [&](const Cast& c) { return run_attention(a, c); },
                   [&](std::size_t k) { return describe_attention(a, k); });
    return a;
  };
  // Constant v columns: exactly that constant, every mode.
  {
    Attention a;
    a.lq = 3; a.lk = 5; a.d = 3; a.dv = 2;
    a.q = xt::xarray<double>{{0.5, -1.25, 2.0}, {1.0, 1.0, -0.375}, {3.0, 0.0, 0.25}};
    a.k = xt::xarray<double>{{1.0, 2.0, 3.0}, {-1.0, 0.5, 0.25}, {0.0, 0.0, 1.0}, {2.0, -2.0, 0.5}, {0.125, 4.0, -1.0}};
    a.v = xt::xarray<double>({{static_cast<double>(0.1f), -7.0}, {static_cast<double>(0.1f), -7.0},
                               {static_cast<double>(0.1f), -7.0}, {static_cast<double>(0.1f), -7.0},
                               {static_cast<double>(0.1f), -7.0}});
    run_case(a, "constant v");
    for (Rounding r : numeq_test::kModes) {
      const xt::xarray<double> got = run_attention(a, make(formats::fp32, r, Overflow::ieee, Subnormals::keep, 64));
      for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_TRUE(same_value(got(i, 0), static_cast<double>(0.1f))) << numeq::to_string(r);
        EXPECT_TRUE(same_value(got(i, 1), -7.0)) << numeq::to_string(r);
      }
    }
  }
  // Equal-score groups with equal means; a zero mean (+0); causal with Lq < Lk (top-left).
  {
    Attention a;
    a.lq = 2; a.lk = 4; a.d = 2; a.dv = 3;
    a.q = xt::xarray<double>{{1.0, 0.0}, {0.0, 1.0}};
    a.k = xt::xarray<double>{{1.0, 0.0}, {1.0, 0.0}, {0.0, 1.0}, {5.0, 5.0}};
    a.v = xt::xarray<double>{{1.0, 1.5, 5.0}, {3.0, -1.5, 5.0}, {2.0, 0.0, 5.0}, {kNan, kInf, -kInf}};
    a.causal = true;
    run_case(a, "groups causal");
    a.causal = false;
    xt::xarray<double> m = {{0.0, 0.0, 0.0, -kInf}, {0.0, 0.0, 0.0, -kInf}};
    a.mask = m;
    run_case(a, "groups masked");
    for (Rounding r : numeq_test::kModes) {
      const xt::xarray<double> got = run_attention(a, make(formats::bf16, r, Overflow::ieee, Subnormals::keep, 64));
      EXPECT_TRUE(same_value(got(0, 0), 2.0)) << numeq::to_string(r);
      EXPECT_TRUE(same_value(got(0, 1), 0.0)) << numeq::to_string(r) << " " << got(0, 1);
      EXPECT_TRUE(same_value(got(0, 2), 5.0)) << numeq::to_string(r);
    }
    a.scale = 2.5;
    run_case(a, "groups masked scale");
  }
  // Scores 1e4 apart: the result is a hair off v of the top keys.
  {
    Attention a;
    a.lq = 3; a.lk = 4; a.d = 2; a.dv = 3;
    a.q = xt::xarray<double>{{100.0, 0.0}, {0.0, 0.0}, {30.0, -30.0}};
    a.k = xt::xarray<double>{{100.0, 0.0}, {0.0, 1.0}, {100.0, 0.0}, {-100.0, 50.0}};
    a.v = xt::xarray<double>{{1.0, 0.5, -2.0}, {5.0, 0.5, -3.0}, {1.0, 0.5, -2.0}, {-8.0, 0.25, 7.0}};
    run_case(a, "spread");
    a.scale = 1.0;
    run_case(a, "spread scale 1");
    EXPECT_EQ(run_attention(a, make(formats::fp32, Rounding::upward))(0, 0), 1.0 + 0x1p-23);
    EXPECT_EQ(run_attention(a, make(formats::fp32, Rounding::downward))(0, 0), 1.0);
    EXPECT_EQ(run_attention(a, make(formats::fp32, Rounding::downward))(0, 1), 0.5 - 0x1p-25);
    a.scale = 1e-3;
    run_case(a, "spread scale 1e-3");
  }
  // Specials: excluded keys are never read; NaN / Inf in q, in taking-part k, in the mask.
  {
    Attention a;
    a.lq = 4; a.lk = 4; a.d = 2; a.dv = 3;
    a.q = xt::xarray<double>{{1.0, 0.5}, {0.25, -1.0}, {kNan, 0.0}, {kInf, 0.0}};
    a.k = xt::xarray<double>{{1.0, 1.0}, {0.5, -0.5}, {kNan, kInf}, {2.0, 1.0}};
    a.v = xt::xarray<double>{{1.0, kInf, 2.0}, {2.0, -kInf, kNan}, {kNan, kNan, kNan}, {4.0, kInf, 1.0}};
    a.mask = xt::xarray<double>({{0.0, 0.0, -kInf, 0.0}, {0.0, 0.0, -kInf, 0.25}, {0.0, 0.0, -kInf, 0.0},
                                 {0.0, 0.0, -kInf, 0.0}});
    run_case(a, "specials");
    const xt::xarray<double> got = run_attention(a, make(formats::fp32));
    EXPECT_TRUE(std::isfinite(got(0, 0)) && std::isfinite(got(1, 0)));
    EXPECT_TRUE(std::isnan(got(0, 1)) && std::isnan(got(0, 2)) && std::isnan(got(2, 0)) && std::isnan(got(3, 0)));
    a.mask = xt::xarray<double>({{-kInf, -kInf, -kInf, -kInf}, {0.0, kNan, -kInf, 0.0}, {0.0, kInf, -kInf, 0.0},
                                 {0.0, -kInf, -kInf, 1.0}});
    a.q = xt::xarray<double>{{1.0, 0.5}, {1.0, 0.5}, {1.0, 0.5}, {1.0, 0.5}};
    run_case(a, "mask specials");
    const xt::xarray<double> g2 = run_attention(a, make(formats::fp32));
    EXPECT_TRUE(std::isnan(g2(0, 0)) && std::isnan(g2(1, 0)) && std::isnan(g2(2, 0)) && std::isfinite(g2(3, 0)));
  }
  // Overflow into fp16 and e4m3fn.
  {
    Attention a;
    a.lq = 2; a.lk = 3; a.d = 2; a.dv = 3;
    a.q = xt::xarray<double>{{1.0, 0.5}, {0.25, -1.0}};
    a.k = xt::xarray<double>{{1.0, 1.0}, {0.5, -0.5}, {2.0, 1.0}};
    a.v = xt::xarray<double>{{1e5, -3e5, 60000.0}, {2e5, -1e5, 65504.0}, {7e4, -7e4, 65504.0}};
    run_case(a, "overflow");
  }
  std::printf("attention cases: %zu comparisons\n", n);
}

// ---------------------------------------------------------------------------------------------
// long rows, enclosures with radii, row subsets (the fast path of attention_fast.cpp)
// ---------------------------------------------------------------------------------------------

reference::AttentionParameters parameters_of(const Attention& a) {
  reference::AttentionParameters p;
  p.scale = a.scale;
  p.causal = a.causal;
  p.mask = a.mask ? &*a.mask : nullptr;
  return p;
}

// Rows as long as real attention's (d = 64, hundreds of keys) in a narrow input format: the fast
// path's compensated sums over many terms, against the oracle in every cast.
Attention long_attention(std::mt19937_64& rng, const Format& f, std::size_t lk, bool causal, bool with_mask) {
  Attention a;
  a.batch = {2};
  a.lq = 3;
  a.lk = lk;
  a.d = 64;
  a.dv = 5;
  std::normal_distribution<double> normal(0.0, 1.0);
  auto fill = [&](std::size_t rows, std::size_t cols, double scale) {
    std::vector<double> x(a.batches() * rows * cols);
    for (double& e : x) e = round_to_format(scale * normal(rng), Cast{f});
    return xt::xarray<double>(xt::adapt(x, a.shape(rows, cols)));
  };
  a.q = fill(a.lq, a.d, 1.0);
  a.k = fill(a.lk, a.d, 1.0);
  a.v = fill(a.lk, a.dv, 3.0);
  a.causal = causal;
  if (with_mask) {
    std::vector<double> m(a.batches() * a.lq * a.lk);
    for (double& x : m) x = rng() % 7 == 0 ? -kInf : static_cast<double>(static_cast<int>(rng() % 9) - 4) / 8.0;
    a.mask = xt::xarray<double>(xt::adapt(m, a.shape(a.lq, a.lk)));
  }
  return a;
}

TEST(AttentionLongRows, EveryCastAgainstTheOracle) {
  std::mt19937_64 rng(64);
  std::size_t n = 0;
  for (const Format* f : kInputFormats)
    for (const std::size_t lk : {std::size_t{96}, std::size_t{300}})
      for (const bool causal : {false, true}) {
        const Attention a = long_attention(rng, *f, lk, causal, lk == 300);
        n += check_all("long attention " + std::string(f->name), attention_oracle(a),
                       [&](const Cast& c) { return run_attention(a, c); },
                       [&](std::size_t k) { return describe_attention(a, k); });
      }
  EXPECT_GT(n, 0u);
}

// |exact - mid| <= radius for every element of attention_enclosed (NaN and infinities exactly the
// oracle's, radius 0), and the radius tight: at most `tight` times the batch's largest |v| (on
// scores of a few units, the fast path's radius is about 2^-45 of it; scores thousands apart carry
// their own rounding, u |delta|, into the weights) or half an ulp of binary64 (the MPFR loop's).
void check_enclosed(const Attention& a, const std::string& what, std::size_t& checked, double tight) {
  const reference::EnclosedValues e = reference::attention_enclosed(a.q, a.k, a.v, parameters_of(a));
  const std::vector<Big> want = attention_oracle(a);
  ASSERT_EQ(e.mid.size(), want.size()) << what;
  ASSERT_EQ(e.radius.size(), want.size()) << what;
  Big diff;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double mid = e.mid.data()[i], radius = e.radius[i];
    const mpfr_srcptr exact = want[i].v;
    ++checked;
    if (mpfr_nan_p(exact)) {
      EXPECT_TRUE(std::isnan(mid) && radius == 0) << what << " element " << i << ": " << describe_attention(a, i);
      continue;
    }
    if (mpfr_inf_p(exact)) {
      EXPECT_TRUE(std::isinf(mid) && (mid > 0) == (mpfr_sgn(exact) > 0) && radius == 0) << what << " element " << i;
      continue;
    }
    mpfr_sub_d(diff.v, exact, mid, MPFR_RNDN);  // exact at the oracle's precision
    mpfr_abs(diff.v, diff.v, MPFR_RNDN);
    EXPECT_LE(mpfr_cmp_d(diff.v, radius), 0) << what << " element " << i << ": mid " << mid << " radius " << radius
                                             << " exact " << mpfr_get_d(exact, MPFR_RNDN) << "; "
                                             << describe_attention(a, i);
    const std::size_t row = i / a.dv, b = row / a.lq, c = i % a.dv;
    double v_max = 0;
    for (std::size_t j = 0; j < a.lk; ++j) v_max = std::max(v_max, std::fabs(a.v.data()[(b * a.lk + j) * a.dv + c]));
    EXPECT_LE(radius, tight * v_max + 0x1p-52 * std::fabs(mid) + 0x1p-1066) << what << " element " << i;
  }
}

TEST(AttentionEnclosed, EveryElementWithinItsRadius) {
  std::mt19937_64 rng(65);
  std::size_t checked = 0;
  for (const Format* f : kInputFormats) {
    for (std::size_t trial = 0; trial < scaled(40); ++trial)
      check_enclosed(random_attention(rng, *f, trial, trial % 5 == 4), "random " + std::string(f->name), checked, 0x1p-24);
    check_enclosed(long_attention(rng, *f, 200, false, true), "long " + std::string(f->name), checked, 0x1p-40);
    check_enclosed(long_attention(rng, *f, 200, true, false), "long causal " + std::string(f->name), checked, 0x1p-40);
  }
  EXPECT_GT(checked, 180u);  // the long cases alone hold 180 elements
}

// The fast path decides the enclosed elements: its midpoints are rarely the correctly rounded
// binary64 values, so a fast path that never ran would leave them all equal.
TEST(AttentionEnclosed, TheFastPathTakesPart) {
  std::mt19937_64 rng(66);
  const Attention a = long_attention(rng, formats::bf16, 256, false, false);
  const reference::EnclosedValues e = reference::attention_enclosed(a.q, a.k, a.v, parameters_of(a));
  const xt::xarray<double> certified = run_attention(a, make(formats::fp64));
  std::size_t differ = 0;
  for (std::size_t i = 0; i < certified.size(); ++i) differ += same_value(e.mid.data()[i], certified.data()[i]) ? 0 : 1;
  EXPECT_GT(differ, certified.size() / 4);
}

// attention(..., rows) gives exactly those rows of the full result, in the order asked.
TEST(AttentionRows, ASubsetOfRowsEqualsTheFullResultsRows) {
  std::mt19937_64 rng(67);
  for (const bool causal : {false, true}) {
    const Attention a = long_attention(rng, formats::bf16, 40, causal, !causal);
    for (const Format* out : {&formats::fp32, &formats::bf16, &formats::fp64}) {
      const Cast cast = make(*out);
      const xt::xarray<double> full = run_attention(a, cast);
      const std::vector<std::size_t> rows = {5, 0, 3, 3};
      const xt::xarray<double> part = reference::attention(a.q, a.k, a.v, parameters_of(a), cast, rows);
      ASSERT_EQ(part.shape()[0], rows.size());
      ASSERT_EQ(part.shape()[1], a.dv);
      for (std::size_t r = 0; r < rows.size(); ++r)
        for (std::size_t c = 0; c < a.dv; ++c)
          EXPECT_TRUE(same_value(part(r, c), full.data()[rows[r] * a.dv + c])) << "row " << rows[r] << " col " << c;
    }
    try {
      (void)reference::attention(a.q, a.k, a.v, parameters_of(a), make(formats::fp32), std::vector<std::size_t>{6});
      ADD_FAILURE() << "row 6 of 6 accepted";
    } catch (const numeq::error& err) {
      EXPECT_NE(std::string(err.what()).find("rows: row 6"), std::string::npos) << err.what();
    }
  }
}

[[maybe_unused]] ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new CountReport("test_composite_attention"));

}  // namespace
