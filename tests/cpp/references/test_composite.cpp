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
#include "composite_oracle.hpp"

namespace {

// ---------------------------------------------------------------------------------------------
// Casts and comparison
// ---------------------------------------------------------------------------------------------
Cast make(const Format& f, Rounding r = Rounding::nearest_even, Overflow o = Overflow::ieee,
          Subnormals s = Subnormals::keep, int random_bits = 32, std::uint64_t seed = 2024) {
  Cast c;
  c.format = f;
  c.rounding = r;
  c.overflow = o;
  c.subnormals = s;
  c.seed = seed;
  c.random_bits = random_bits;
  return c;
}

const Rounding kDeterministic[] = {Rounding::nearest_even, Rounding::nearest_away, Rounding::toward_zero,
                                   Rounding::upward,       Rounding::downward,     Rounding::odd};

// Every deterministic mode (ieee/keep), saturation and FTZ for some, and stochastic rounding with
// draws of 1, 32 and 64 bits (element i uses draw i of the seed's stream, composite.hpp).
std::vector<Cast> sweep_casts() {
  std::vector<Cast> out;
  for (const Format* f : {&formats::fp32, &formats::bf16, &formats::fp16, &formats::e4m3fn}) {
    for (Rounding r : kDeterministic) out.push_back(make(*f, r));
    for (Rounding r : {Rounding::nearest_even, Rounding::upward, Rounding::downward})
      out.push_back(make(*f, r, Overflow::saturate));
    for (Rounding r : {Rounding::nearest_even, Rounding::toward_zero, Rounding::upward})
      out.push_back(make(*f, r, Overflow::ieee, Subnormals::flush_outputs));
    for (int bits : {1, 32, 64}) out.push_back(make(*f, Rounding::stochastic, Overflow::ieee, Subnormals::keep, bits));
  }
  out.push_back(make(formats::fp64));
  out.push_back(make(formats::fp64, Rounding::downward));
  return out;
}

std::string cast_name(const Cast& c) {
  return std::string(c.format.name) + "/" + std::string(numeq::to_string(c.rounding)) + "/" +
         std::string(numeq::to_string(c.overflow)) + "/" + std::string(numeq::to_string(c.subnormals)) +
         (c.rounding == Rounding::stochastic ? "/R" + std::to_string(c.random_bits) : "");
}

std::string list(const double* p, std::size_t n) {
  std::ostringstream s;
  s.precision(17);
  s << "[";
  for (std::size_t i = 0; i < n; ++i) s << (i ? ", " : "") << p[i];
  s << "]";
  return s.str();
}

using Describe = std::function<std::string(std::size_t)>;

// run() under `cast` against the oracle, element by element; returns comparisons made.
std::size_t check(const std::string& what, const std::vector<Big>& oracle, const Cast& cast,
                  const std::function<xt::xarray<double>(const Cast&)>& run, const Describe& describe) {
  xt::xarray<double> got;
  try {
    got = run(cast);
  } catch (const std::exception& e) {
    // Name the inputs of the element the message points at, when it does.
    std::string inputs;
    const std::string message = e.what();
    const std::size_t at = message.find("element ");
    if (at != std::string::npos) {
      const std::size_t k = static_cast<std::size_t>(std::strtoull(message.c_str() + at + 8, nullptr, 10));
      if (k < oracle.size()) inputs = " [element " + std::to_string(k) + ": " + describe(k) + "]";
    }
    ADD_FAILURE() << what << " " << cast_name(cast) << ": threw " << message << inputs;
    return 0;
  }
  if (got.size() != oracle.size()) {
    ADD_FAILURE() << what << " " << cast_name(cast) << ": " << got.size() << " elements, want " << oracle.size();
    return 0;
  }
  numeq_oracle::RoundOracle o(cast.format);
  int reports = 0;
  for (std::size_t k = 0; k < oracle.size(); ++k) {
    const numeq_oracle::Expected e = o.cast_value(oracle[k].v, cast, k);
    EXPECT_FALSE(e.throws);
    if (!same_value(got.data()[k], e.value) && ++reports <= kMaxReports)
      ADD_FAILURE() << what << " " << cast_name(cast) << " element " << k << " " << describe(k) << ": got "
                    << numeq_oracle::describe(got.data()[k]) << " want " << numeq_oracle::describe(e.value);
  }
  EXPECT_EQ(reports, 0) << what << " " << cast_name(cast) << ": " << reports << " mismatches";
  g_comparisons.fetch_add(oracle.size());
  return oracle.size();
}

std::size_t check_all(const std::string& what, const std::vector<Big>& oracle,
                      const std::function<xt::xarray<double>(const Cast&)>& run, const Describe& describe) {
  EXPECT_EQ(g_oracle_inexact.load(), 0) << "oracle: a step meant to be exact was not";
  std::size_t n = 0;
  for (const Cast& c : sweep_casts()) n += check(what, oracle, c, run, describe);
  return n;
}

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

std::string describe_attention(const Attention& a, std::size_t k) {
  const std::size_t c = k % a.dv, i = (k / a.dv) % a.lq, b = k / (a.dv * a.lq);
  std::ostringstream s;
  s << "batch " << b << " query " << i << " column " << c << " d " << a.d << " Lk " << a.lk << " q "
    << list(a.q.data() + (b * a.lq + i) * a.d, a.d) << " k ";
  for (std::size_t j = 0; j < a.lk; ++j) s << list(a.k.data() + (b * a.lk + j) * a.d, a.d);
  s << " v[:, c] [";
  for (std::size_t j = 0; j < a.lk; ++j) s << (j ? ", " : "") << a.v.data()[(b * a.lk + j) * a.dv + c];
  s << "]";
  if (a.mask) s << " mask " << list(a.mask->data() + (b * a.lq + i) * a.lk, a.lk);
  if (a.scale) s << " scale " << *a.scale;
  if (a.causal) s << " causal";
  return s.str();
}

xt::xarray<double> run_attention(const Attention& a, const Cast& c) {
  reference::AttentionParameters p;
  p.scale = a.scale;
  p.causal = a.causal;
  p.mask = a.mask ? &*a.mask : nullptr;
  return reference::attention(a.q, a.k, a.v, p, c);
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

class CountReport : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("test_composite: %zu comparisons with the MPFR oracle\n", g_comparisons.load());
  }
};
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new CountReport);

}  // namespace
