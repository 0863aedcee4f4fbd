// Certified composite operations (references/composite.hpp) against an independent MPFR oracle
// (composite_oracle.hpp: each definition evaluated with plain MPFR at 3064 bits, the last step
// rounded to odd at 3000 bits), rounded into the Cast under test by numeq_oracle::RoundOracle and
// compared bit for bit (value, NaN-ness, sign of zero).
//
// NUMEQ_SWEEP_SCALE (default 1; e.g. 0.05 under sanitizers) scales the number of random rows.

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
// softmax / log_softmax
// ---------------------------------------------------------------------------------------------
class SoftmaxSweep : public ::testing::TestWithParam<bool> {};

TEST_P(SoftmaxSweep, RandomRowsEveryCast) {
  const bool log = GetParam();
  const std::string name = log ? "log_softmax" : "softmax";
  const auto t0 = std::chrono::steady_clock::now();
  std::mt19937_64 rng(log ? 17 : 16);
  std::size_t n_cmp = 0, n_elems = 0;
  for (const Format* f : kInputFormats) {
    for (std::size_t len : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 11u, 16u}) {
      // rows along the last axis of {R, len}, and along axis 1 of {2, len, 3}
      const std::size_t rows = scaled(16);
      std::vector<double> data;
      for (std::size_t r = 0; r < rows; ++r) {
        const std::vector<double> row = softmax_row_input(rng, *f, len, static_cast<unsigned>(r));
        data.insert(data.end(), row.begin(), row.end());
      }
      xt::xarray<double> x = xt::adapt(data, std::vector<std::size_t>{rows, len});
      const std::vector<Big> want = softmax_oracle(x, -1, log);
      auto run = [&](const Cast& c) { return log ? reference::log_softmax(x, -1, c) : reference::softmax(x, -1, c); };
      auto describe = [&](std::size_t k) { return "row " + list(x.data() + (k / len) * len, len); };
      n_cmp += check_all(name + " " + std::string(f->name) + " len " + std::to_string(len), want, run, describe);
      n_elems += x.size();

      std::vector<double> data3;
      for (std::size_t r = 0; r < 6; ++r) {
        const std::vector<double> row = softmax_row_input(rng, *f, len, static_cast<unsigned>(r + 3));
        data3.insert(data3.end(), row.begin(), row.end());
      }
      // data3 holds rows consecutively; lay them out along axis 1 of {2, len, 3}
      xt::xarray<double> x3 = xt::zeros<double>({std::size_t{2}, len, std::size_t{3}});
      for (std::size_t r = 0; r < 6; ++r)
        for (std::size_t j = 0; j < len; ++j) x3((r / 3), j, (r % 3)) = data3[r * len + j];
      const std::vector<Big> want3 = softmax_oracle(x3, 1, log);
      for (std::ptrdiff_t axis : {std::ptrdiff_t{1}, std::ptrdiff_t{-2}}) {
        auto run3 = [&](const Cast& c) {
          return log ? reference::log_softmax(x3, axis, c) : reference::softmax(x3, axis, c);
        };
        auto describe3 = [&](std::size_t k) {
          const std::size_t a = k / (len * 3), cidx = k % 3;
          std::vector<double> row(len);
          for (std::size_t j = 0; j < len; ++j) row[j] = x3(a, j, cidx);
          return "axis-1 row " + list(row.data(), len);
        };
        n_cmp += check(name + " 3-D axis " + std::to_string(axis), want3, make(formats::bf16, Rounding::upward),
                       run3, describe3);
        n_cmp += check(name + " 3-D axis " + std::to_string(axis), want3, make(formats::fp32, Rounding::odd),
                       run3, describe3);
      }
      n_elems += x3.size();
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ %-11s ] %zu elements, %zu comparisons in %.1f s\n", name.c_str(), n_elems, n_cmp, secs);
}

INSTANTIATE_TEST_SUITE_P(All, SoftmaxSweep, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "log_softmax" : "softmax"; });

TEST(Softmax, ExactAndExtremeRows) {
  // Exact results (every mode, stochastic included, must give them unrounded), ties next to tiny
  // terms, underflow far beyond every format, the overflow of log_softmax.
  const std::vector<std::vector<double>> rows = {
      {3.25, 3.25, 3.25, 3.25},
      {7.0, -kInf, 7.0, 7.0, -kInf, 7.0},
      {-kInf, -2.5, -kInf},
      {5.0, 5.0, -1e4},
      {0.0, 0.0, 0.0, -1e4},
      {1.0, -1e4, -1e4, 1.0},
      {0.0, -1e4},
      {0.0, -10.0, -12.0, -16.5, -17.0, -1e4, -kInf, -9.75},
      {0.0, -88.5, -95.0, -100.0, -103.25, -1e4, -104.0, -87.0},
      {1e30, -1e30, 1e30, 0.0, 3e38, 3.3e38, -3e38, 3.3e38},
      {0.0, -70000.0, -65504.0, -65519.0, -65521.0, -65520.0, -65536.0, -448.0},
      {2.0, -1000.0, -1e6, 1.0, -240.0, -464.0, -480.0, -449.0},
  };
  std::size_t n = 0;
  for (const std::vector<double>& row0 : rows) {
    std::vector<double> row(row0.size());
    for (std::size_t j = 0; j < row.size(); ++j) row[j] = static_cast<double>(static_cast<float>(row0[j]));
    xt::xarray<double> x = xt::adapt(row, std::vector<std::size_t>{row.size()});
    for (bool log : {false, true}) {
      const std::vector<Big> want = softmax_oracle(x, 0, log);
      auto run = [&](const Cast& c) { return log ? reference::log_softmax(x, 0, c) : reference::softmax(x, 0, c); };
      auto describe = [&](std::size_t) { return "row " + list(row.data(), row.size()); };
      n += check_all(log ? "log_softmax" : "softmax", want, run, describe);
    }
  }
  // Spot values written out by hand.
  for (Rounding r : numeq_test::kModes) {
    const Cast c = make(formats::bf16, r, Overflow::ieee, Subnormals::keep, 64);
    const xt::xarray<double> x = {3.25, 3.25, 3.25, 3.25};
    const xt::xarray<double> s = reference::softmax(x, -1, c);
    for (double v : s) EXPECT_TRUE(same_value(v, 0.25)) << cast_name(c);
    const xt::xarray<double> one = {-kInf, -2.5, -kInf};
    const xt::xarray<double> ls = reference::log_softmax(one, 0, c);
    EXPECT_TRUE(same_value(ls(1), 0.0)) << cast_name(c) << " " << ls(1);
    EXPECT_TRUE(same_value(ls(0), -kInf)) << cast_name(c);
  }
  const xt::xarray<double> tie = {5.0, 5.0, -1e4};
  EXPECT_EQ(reference::softmax(tie, 0, make(formats::fp32, Rounding::downward))(0), 0.5 - 0x1p-25);
  EXPECT_EQ(reference::softmax(tie, 0, make(formats::fp32, Rounding::upward))(0), 0.5);
  EXPECT_EQ(reference::softmax(tie, 0, make(formats::fp32, Rounding::upward))(2), 0x1p-149);
  std::printf("softmax exact and extreme rows: %zu comparisons\n", n);
}

// ---------------------------------------------------------------------------------------------
// layernorm / rmsnorm
// ---------------------------------------------------------------------------------------------

class NormSweep : public ::testing::TestWithParam<bool> {};

TEST_P(NormSweep, RandomRowsEveryCast) {
  const bool rms = GetParam();
  const std::string name = rms ? "rmsnorm" : "layernorm";
  const auto t0 = std::chrono::steady_clock::now();
  std::mt19937_64 rng(rms ? 27 : 26);
  std::size_t n_cmp = 0, n_elems = 0;
  const double eps_values[] = {0.0, 1e-5, 1e-6, 0.75, 0x1p-60, 1e-300};
  std::size_t trial = 0;
  for (const Format* f : kInputFormats) {
    for (std::size_t len : {1u, 2u, 3u, 5u, 8u, 9u, 16u}) {
      for (int affine = 0; affine < 3; ++affine, ++trial) {
        const std::size_t rows = scaled(14);
        std::vector<double> data;
        for (std::size_t r = 0; r < rows; ++r) {
          const std::vector<double> row = norm_row_input(rng, *f, len, static_cast<unsigned>(r + trial));
          data.insert(data.end(), row.begin(), row.end());
        }
        // 2-D or 3-D: normalised over the last axis either way
        const std::vector<std::size_t> shape =
            rows % 2 == 0 ? std::vector<std::size_t>{2, rows / 2, len} : std::vector<std::size_t>{rows, len};
        xt::xarray<double> x = xt::adapt(data, shape);
        std::vector<double> gamma(len), beta(len);
        for (double& g : gamma) g = draw(rng, *f, -3, 2);
        for (double& b : beta) b = draw(rng, *f, -4, 1);
        if (trial % 4 == 3) {  // special parameters: zeros, infinities, NaN
          gamma[rng() % len] = (rng() & 1) ? -0.0 : 0.0;
          gamma[rng() % len] = (rng() & 1) ? kInf : -kInf;
          beta[rng() % len] = (rng() & 1) ? -0.0 : 0.0;
          if (rng() % 2 == 0) beta[rng() % len] = (rng() & 1) ? kInf : -kInf;
          if (rng() % 3 == 0) gamma[rng() % len] = kNan;
        }
        const double eps = eps_values[trial % 6];
        Norm p;
        p.eps = eps;
        p.rms = rms;
        if (affine >= 1) p.gamma = &gamma;
        if (affine >= 2) p.beta = &beta;
        const std::vector<Big> want = norm_oracle(x, p);
        const xt::xarray<double> gx = xt::adapt(gamma, std::vector<std::size_t>{len});
        const xt::xarray<double> bx = xt::adapt(beta, std::vector<std::size_t>{len});
        reference::NormParameters np;
        np.eps = eps;
        np.gamma = affine >= 1 ? &gx : nullptr;
        np.beta = affine >= 2 ? &bx : nullptr;
        auto run = [&](const Cast& c) { return rms ? reference::rmsnorm(x, np, c) : reference::layernorm(x, np, c); };
        auto describe = [&](std::size_t k) {
          std::string s = "row " + list(x.data() + (k / len) * len, len) + " eps " + numeq_oracle::describe(eps);
          if (affine >= 1) s += " gamma " + list(gamma.data(), len);
          if (affine >= 2) s += " beta " + list(beta.data(), len);
          return s;
        };
        n_cmp += check_all(name + " " + std::string(f->name) + " len " + std::to_string(len), want, run, describe);
        n_elems += x.size();
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ %-11s ] %zu elements, %zu comparisons in %.1f s\n", name.c_str(), n_elems, n_cmp, secs);
}

INSTANTIATE_TEST_SUITE_P(All, NormSweep, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "rmsnorm" : "layernorm"; });

xt::xarray<double> vector_array(const std::vector<double>& v) {
  xt::xarray<double> a = xt::zeros<double>({v.size()});
  for (std::size_t i = 0; i < v.size(); ++i) a(i) = v[i];
  return a;
}

TEST(Norm, ExactResultsAndSpecials) {
  struct Case {
    std::vector<double> x, gamma, beta;
    double eps;
    bool rms;
    std::vector<double> want;  // empty: oracle only
  };
  const std::vector<Case> cases = {
      {{-1.0, 1.0}, {}, {}, 0.0, false, {-1.0, 1.0}},
      {{3.5, -0.125}, {}, {}, 0.0, false, {1.0, -1.0}},
      {{0.0, 0.0, 3.0}, {}, {}, 2.0, false, {-0.5, -0.5, 1.0}},
      {{0, 0, 0, 0, 0.75, 0, 0, 0, 0}, {}, {}, 0.0, true, {0, 0, 0, 0, 3.0, 0, 0, 0, 0}},
      {{0, 0, 0, 0, 0.75, 0, 0, 0, 0}, {.5, .5, .5, .5, .5, .5, .5, .5, .5}, {.25, .25, .25, .25, .25, .25, .25, .25, .25},
       0.0, true, {.25, .25, .25, .25, 1.75, .25, .25, .25, .25}},
      {{2.0, -2.0, 2.0, 2.0}, {}, {}, 0.0, true, {1.0, -1.0, 1.0, 1.0}},
      {{-1.0, 1.0}, {}, {1.0, -1.0}, 0.0, false, {0.0, 0.0}},
      {{2.5, 2.5, 2.5}, {}, {}, 0.0, false, {kNan, kNan, kNan}},
      {{0.0, -0.0}, {}, {}, 0.0, true, {kNan, kNan}},
      {{2.5, 2.5}, {}, {}, 1e-5, false, {0.0, 0.0}},
      {{1.0, 2.0, 3.0}, {1.0, kInf, 1.0}, {}, 0.0, false, {}},
      {{1.0, 2.0, 3.0}, {kInf, 1.0, -kInf}, {}, 0.0, false, {-kInf, 0.0, -kInf}},
      {{1.0, 2.0, 3.0}, {kInf, 1.0, kInf}, {-kInf, 2.0, kInf}, 0.0, false, {-kInf, 2.0, kInf}},
      {{1.0, 2.0, 3.0}, {-kInf, -3.0, 1.0}, {-kInf, -0.0, kNan}, 0.0, false, {kNan, -0.0, kNan}},
      {{1.0, 2.0, 3.0}, {kNan, -3.0, 2.0}, {0.0, 0.0, -kInf}, 0.0, false, {kNan, 0.0, -kInf}},
      {{1.0, 2.0, 3.0}, {1.0, -3.0, 1.0}, {}, 0.0, false, {}},
      {{-0.0, 3.0, 0.0, 4.0}, {2.0, 1.0, -2.0, 1.0}, {}, 0.0, true, {}},
      {{-0.0, 2.0, 0.0, -0.0}, {2.0, 1.0, -2.0, 1.0}, {}, 0.0, true, {-0.0, 2.0, -0.0, -0.0}},
      {{-0.0, 3.0}, {2.0, 1.0}, {-0.0, 0.0}, 0.0, true, {}},
      {{-0.0, -0.0}, {}, {}, 1e-5, false, {0.0, 0.0}},
      {{-0.0, -0.0}, {-1.0, 2.0}, {}, 1e-5, false, {-0.0, 0.0}},
      {{-0.0, 0.0, -0.0}, {}, {}, 1e-5, false, {-0.0, 0.0, -0.0}},
      {{-0.0, -0.0, -0.0}, {2.0, -1.0, 1.0}, {-0.0, -0.0, 0.5}, 0.25, false, {0.0, -0.0, 0.5}},
      {{-0.0, 3.0}, {2.0, 1.0}, {0.0, 0.0}, 0.0, true, {}},
      {{1.0, kNan, 2.0}, {}, {}, 1e-5, false, {kNan, kNan, kNan}},
      {{kInf, 1.0}, {}, {}, 1e-5, true, {kNan, kNan}},
      {{1.0, 2.0, 3.0, 5.0}, {1e5, -7e4, 6e4, 65504.0}, {0.0, -100.0, 0.5, 1e4}, 1e-5, false, {}},
      {{-4.0, 0.5, 0.25, 8.0}, {1e5, -7e4, 6e4, 65504.0}, {0.0, -100.0, 0.5, 1e4}, 1e-5, true, {}},
  };
  std::size_t n = 0;
  for (const Case& k : cases) {
    const std::size_t len = k.x.size();
    xt::xarray<double> x = xt::adapt(k.x, std::vector<std::size_t>{len});
    const xt::xarray<double> gx = vector_array(k.gamma);
    const xt::xarray<double> bx = vector_array(k.beta);
    Norm p;
    p.eps = k.eps;
    p.rms = k.rms;
    p.gamma = k.gamma.empty() ? nullptr : &k.gamma;
    p.beta = k.beta.empty() ? nullptr : &k.beta;
    reference::NormParameters np;
    np.eps = k.eps;
    np.gamma = k.gamma.empty() ? nullptr : &gx;
    np.beta = k.beta.empty() ? nullptr : &bx;
    const std::vector<Big> want = norm_oracle(x, p);
    auto run = [&](const Cast& c) { return k.rms ? reference::rmsnorm(x, np, c) : reference::layernorm(x, np, c); };
    auto describe = [&](std::size_t) {
      return std::string(k.rms ? "rmsnorm " : "layernorm ") + list(k.x.data(), len) + " gamma " +
             list(k.gamma.data(), k.gamma.size()) + " beta " + list(k.beta.data(), k.beta.size()) + " eps " +
             numeq_oracle::describe(k.eps);
    };
    n += check_all("norm case", want, run, describe);
    if (!k.want.empty())
      for (Rounding r : numeq_test::kModes) {
        const Cast c = make(formats::fp32, r, Overflow::ieee, Subnormals::keep, 64);
        const xt::xarray<double> got = run(c);
        for (std::size_t i = 0; i < len; ++i)
          EXPECT_TRUE(same_value(got(i), static_cast<double>(static_cast<float>(k.want[i])))
                      || (!std::isfinite(k.want[i]) && same_value(got(i), k.want[i])))
              << describe(i) << " " << cast_name(c) << " element " << i << " got " << numeq_oracle::describe(got(i));
      }
  }
  std::printf("norm exact and special cases: %zu comparisons\n", n);
}

// ---------------------------------------------------------------------------------------------
// Long rows, many rows (split over threads), other output formats
// ---------------------------------------------------------------------------------------------
std::vector<Cast> few_casts() {
  return {make(formats::bf16, Rounding::nearest_even), make(formats::fp32, Rounding::downward),
          make(formats::fp16, Rounding::odd),
          make(formats::bf16, Rounding::stochastic, Overflow::ieee, Subnormals::keep, 16)};
}

TEST(Composite, LongRowsAndManyRows) {
  std::mt19937_64 rng(91);
  std::size_t n = 0;
  const std::vector<std::vector<std::size_t>> shapes = {{2, scaled(1024, 64)}, {scaled(600, 40), 8}, {3, 257}};
  for (const std::vector<std::size_t>& shape : shapes) {
    std::vector<double> data(shape[0] * shape[1]);
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = i % 97 == 5 ? -kInf : draw(rng, formats::bf16, -3, 3);
    const xt::xarray<double> x = xt::adapt(data, shape);
    const std::size_t len = shape[1];
    auto describe = [&](std::size_t k) { return "row " + std::to_string(k / len) + " of length " + std::to_string(len); };
    for (bool log : {false, true}) {
      const std::vector<Big> want = softmax_oracle(x, -1, log);
      for (const Cast& c : few_casts())
        n += check(log ? "long log_softmax" : "long softmax", want, c,
                   [&](const Cast& cc) { return log ? reference::log_softmax(x, -1, cc) : reference::softmax(x, -1, cc); },
                   describe);
    }
    std::vector<double> finite = data;
    for (double& v : finite)
      if (std::isinf(v)) v = 0.5;
    const xt::xarray<double> xf = xt::adapt(finite, shape);
    std::vector<double> gamma(len);
    for (double& g : gamma) g = draw(rng, formats::bf16, -2, 2);
    const xt::xarray<double> gx = vector_array(gamma);
    for (bool rms : {false, true}) {
      Norm p;
      p.eps = 1e-5;
      p.rms = rms;
      p.gamma = &gamma;
      reference::NormParameters np;
      np.eps = 1e-5;
      np.gamma = &gx;
      const std::vector<Big> want = norm_oracle(xf, p);
      for (const Cast& c : few_casts())
        n += check(rms ? "long rmsnorm" : "long layernorm", want, c,
                   [&](const Cast& cc) { return rms ? reference::rmsnorm(xf, np, cc) : reference::layernorm(xf, np, cc); },
                   describe);
    }
  }
  // attention: many batches, and one long key sequence
  for (int which = 0; which < 2; ++which) {
    Attention a;
    a.batch = which == 0 ? std::vector<std::size_t>{scaled(64, 8)} : std::vector<std::size_t>{};
    a.lq = which == 0 ? 3 : 4;
    a.lk = which == 0 ? 5 : scaled(300, 40);
    a.d = 8;
    a.dv = 2;
    const std::size_t nb = a.batches();
    std::vector<double> q(nb * a.lq * a.d), k(nb * a.lk * a.d), v(nb * a.lk * a.dv);
    for (double& x : q) x = draw(rng, formats::bf16, -3, 1);
    for (double& x : k) x = draw(rng, formats::bf16, -3, 1);
    for (double& x : v) x = draw(rng, formats::bf16, -3, 3);
    a.q = xt::adapt(q, a.shape(a.lq, a.d));
    a.k = xt::adapt(k, a.shape(a.lk, a.d));
    a.v = xt::adapt(v, a.shape(a.lk, a.dv));
    a.causal = which == 1;
    const std::vector<Big> want = attention_oracle(a);
    for (const Cast& c : few_casts())
      n += check("attention batches/long", want, c, [&](const Cast& cc) { return run_attention(a, cc); },
                 [&](std::size_t kk) { return describe_attention(a, kk); });
  }
  std::printf("long rows and many rows: %zu comparisons\n", n);
}

TEST(Composite, OtherOutputFormats) {
  // Formats besides the sweep's: every mode and both overflow policies. Formats without NaN only
  // get inputs without NaN results.
  std::mt19937_64 rng(93);
  std::size_t n = 0;
  std::vector<double> data(12 * 6);
  for (double& v : data) v = draw(rng, formats::fp16, -3, 4);
  const xt::xarray<double> x = xt::adapt(data, std::vector<std::size_t>{12, 6});
  std::vector<double> gamma(6);
  for (double& g : gamma) g = draw(rng, formats::fp16, -1, 3);
  const xt::xarray<double> gx = vector_array(gamma);
  Norm p;
  p.eps = 1e-6;
  p.gamma = &gamma;
  reference::NormParameters np;
  np.eps = 1e-6;
  np.gamma = &gx;
  const std::vector<Big> sm = softmax_oracle(x, -1, false), lsm = softmax_oracle(x, -1, true), ln = norm_oracle(x, p);
  for (const Format* f : {&formats::tf32, &formats::e5m2, &formats::e4m3, &formats::e4m3fnuz, &formats::e5m2fnuz,
                          &formats::e3m2fn, &formats::e2m3fn, &formats::e2m1fn, &formats::e8m0fnu}) {
    for (Rounding r : kDeterministic)
      for (Overflow o : {Overflow::ieee, Overflow::saturate}) {
        const Cast c = make(*f, r, o);
        auto describe = [&](std::size_t k) { return "row " + list(x.data() + (k / 6) * 6, 6); };
        n += check("softmax", sm, c, [&](const Cast& cc) { return reference::softmax(x, -1, cc); }, describe);
        if (f->is_signed) {  // negative results: NaN in e8m0fnu
          n += check("log_softmax", lsm, c, [&](const Cast& cc) { return reference::log_softmax(x, -1, cc); }, describe);
          n += check("layernorm", ln, c, [&](const Cast& cc) { return reference::layernorm(x, np, cc); }, describe);
        }
      }
  }
  std::printf("other output formats: %zu comparisons\n", n);
}

// ---------------------------------------------------------------------------------------------
// Threads, stochastic stream, errors
// ---------------------------------------------------------------------------------------------
TEST(Composite, StochasticIndependentOfThreadCount) {
  std::mt19937_64 rng(5);
  std::vector<double> data(40 * 16);
  for (double& v : data) v = draw(rng, formats::fp32, -4, 3);
  const xt::xarray<double> x = xt::adapt(data, std::vector<std::size_t>{40, 16});
  const Cast c = make(formats::bf16, Rounding::stochastic, Overflow::ieee, Subnormals::keep, 64);
  reference::NormParameters np;
  np.eps = 1e-5;
  const std::function<xt::xarray<double>()> ops[] = {
      [&] { return reference::softmax(x, -1, c); }, [&] { return reference::log_softmax(x, 0, c); },
      [&] { return reference::layernorm(x, np, c); }, [&] { return reference::rmsnorm(x, np, c); }};
  for (const auto& op : ops) {
    numeq::set_num_threads(1);
    const xt::xarray<double> one = op();
    numeq::set_num_threads(3);
    const xt::xarray<double> three = op();
    numeq::set_num_threads(0);
    ASSERT_EQ(one.size(), three.size());
    for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same_value(one.data()[i], three.data()[i])) << i;
  }
}

TEST(Composite, Errors) {
  const xt::xarray<double> x = {{1.0, 2.0}, {kNan, 1.0}};
  const Cast no_nan = make(formats::e2m1fn);
  numeq_test::expect_error_mentioning([&] { reference::softmax(x, -1, no_nan); }, "element 2");
  const xt::xarray<double> c = {{1.0, 2.0}, {3.0, 3.0}};
  reference::NormParameters np;
  numeq_test::expect_error_mentioning([&] { reference::layernorm(c, np, no_nan); }, "element 2");
  // Finite results into e2m1fn are fine.
  EXPECT_EQ(reference::softmax(xt::xarray<double>{0.0, 0.0}, 0, no_nan)(0), 0.5);
  // out must be a floating format
  EXPECT_THROW(reference::softmax(c, -1, make(formats::int8)), numeq::error);
  EXPECT_THROW(reference::attention(c, c, c, reference::AttentionParameters{}, make(formats::int8)), numeq::error);
  // shapes and axes
  EXPECT_THROW(reference::softmax(c, 2, make(formats::fp32)), numeq::error);
  EXPECT_THROW(reference::log_softmax(c, -3, make(formats::fp32)), numeq::error);
  const xt::xarray<double> g3 = {1.0, 2.0, 3.0};
  np.gamma = &g3;
  EXPECT_THROW(reference::layernorm(c, np, make(formats::fp32)), numeq::error);
  np.gamma = nullptr;
  np.beta = &g3;
  EXPECT_THROW(reference::rmsnorm(c, np, make(formats::fp32)), numeq::error);
  const xt::xarray<double> q = xt::ones<double>({2, 4});
  const xt::xarray<double> k = xt::ones<double>({5, 4});
  const xt::xarray<double> v = xt::ones<double>({5, 3});
  reference::AttentionParameters ap;
  EXPECT_THROW(reference::attention(q, xt::xarray<double>(xt::ones<double>({5, 3})), v, ap, make(formats::fp32)),
               numeq::error);
  EXPECT_THROW(reference::attention(q, k, xt::xarray<double>(xt::ones<double>({4, 3})), ap, make(formats::fp32)),
               numeq::error);
  const xt::xarray<double> bad_mask = xt::zeros<double>({2, 4});
  ap.mask = &bad_mask;
  EXPECT_THROW(reference::attention(q, k, v, ap, make(formats::fp32)), numeq::error);
}

[[maybe_unused]] ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new CountReport("test_composite"));

}  // namespace
