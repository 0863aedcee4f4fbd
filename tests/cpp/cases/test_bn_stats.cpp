// bn_stats and bn_aggr as values (cases/bn_stats.hpp) against the documented formulas written here
// in the host's IEEE binary32 arithmetic (float +, -, *, /: correctly rounded to nearest even;
// -ffp-contract=off keeps every operation apart): bit for bit wherever the oracle is not NaN,
// NaN where it is; rows with NaN, Inf, subnormals and huge values; the errors.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>

#include "numeq/cases/bn_stats.hpp"
#include "numeq/formats/error.hpp"

namespace {

namespace cases = numeq::cases;

struct Triple {
  float count, mean, m2;
};

Triple welford(const std::vector<float>& row, std::size_t first) {
  float mean = 0, m2 = 0, k = 0;
  for (std::size_t j = first; j < row.size(); j += 2) {
    k += 1;
    const float delta = row[j] - mean;
    mean = mean + delta / k;
    m2 = m2 + delta * (row[j] - mean);
  }
  return {k, mean, m2};
}

std::pair<float, float> chan(const std::vector<Triple>& t) {
  double n = t[0].count;
  float mean = t[0].mean, m2 = t[0].m2;
  for (std::size_t i = 1; i < t.size(); ++i) {
    const double total = n + t[i].count;
    const auto tn = static_cast<float>(total);
    const float delta = t[i].mean - mean;
    mean = mean + delta * (t[i].count / tn);
    const float weight = static_cast<float>(n * t[i].count) / tn;
    m2 = (m2 + t[i].m2) + (delta * delta) * weight;
    n = total;
  }
  return {mean, m2 / static_cast<float>(n)};
}

std::pair<float, float> naive(const std::vector<Triple>& t) {
  double n = 0;
  float s = 0, q = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    n += t[i].count;
    const float ds = t[i].mean * t[i].count, dq = t[i].m2 + (t[i].mean * t[i].mean) * t[i].count;
    s = i == 0 ? ds : s + ds;
    q = i == 0 ? dq : q + dq;
  }
  const auto total = static_cast<float>(n);
  const float mean = s / total;
  return {mean, q / total - mean * mean};
}

void expect_same(double got, float want, const std::string& where) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << where << ": " << got;
    return;
  }
  EXPECT_EQ(std::bit_cast<std::uint32_t>(static_cast<float>(got)), std::bit_cast<std::uint32_t>(want))
      << where << ": " << got << " vs " << want;
  EXPECT_EQ(static_cast<double>(static_cast<float>(got)), got) << where << ": not an fp32 value";
}

// rows x n values: normal at spread scales, some subnormal or near fp32's largest value, some
// NaN and +-Inf.
std::vector<std::vector<float>> draw(std::mt19937_64& g, std::size_t rows, std::size_t n) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> scale(-140, 126), pick(0, 40);
  std::vector<std::vector<float>> x(rows, std::vector<float>(n));
  for (auto& row : x)
    for (float& v : row) {
      const int p = pick(g);
      v = p == 0 ? NAN : p == 1 ? INFINITY : p == 2 ? -INFINITY : std::ldexp(normal(g), p < 20 ? scale(g) % 8 : scale(g));
    }
  return x;
}

xt::xarray<double> as_array(const std::vector<std::vector<float>>& x) {
  xt::xarray<double> a = xt::xarray<double>::from_shape({x.size(), x.empty() ? 0 : x[0].size()});
  for (std::size_t r = 0; r < x.size(); ++r)
    for (std::size_t j = 0; j < x[r].size(); ++j) a(r, j) = x[r][j];
  return a;
}

TEST(BnStats, WelfordInBinary32) {
  std::mt19937_64 g(5);
  for (const std::size_t n : {0u, 1u, 2u, 3u, 17u, 512u}) {
    const auto x = draw(g, 24, n);
    const xt::xarray<double> got = cases::bn_stats(as_array(x));
    ASSERT_EQ(got.shape()[1], 6u);
    for (std::size_t r = 0; r < x.size(); ++r)
      for (std::size_t parity = 0; parity < 2; ++parity) {
        const Triple t = welford(x[r], parity);
        const std::string where = "n " + std::to_string(n) + " row " + std::to_string(r) + " half " + std::to_string(parity);
        expect_same(got(r, 3 * parity), t.count, where + " count");
        expect_same(got(r, 3 * parity + 1), t.mean, where + " mean");
        expect_same(got(r, 3 * parity + 2), t.m2, where + " M2");
      }
  }
}

TEST(BnAggr, MergesInBinary32) {
  std::mt19937_64 g(9);
  for (const std::size_t m : {1u, 2u, 6u}) {
    // Triples as bn_stats writes them, and arbitrary ones (zero and fractional counts, -0 means).
    auto x = draw(g, 32, 3 * m);
    for (std::size_t r = 0; r < x.size(); ++r)
      for (std::size_t i = 0; i < m; ++i) {
        x[r][3 * i] = r < 8 ? static_cast<float>(g() % 300) : r < 12 ? 0.0f : r < 16 ? 2.5f : x[r][3 * i];
        if (r >= 16 && r < 20) x[r][3 * i + 1] = -0.0f;
      }
    for (const auto merge : {cases::BnAggrMerge::chan, cases::BnAggrMerge::naive}) {
      const xt::xarray<double> got = cases::bn_aggr(as_array(x), merge);
      for (std::size_t r = 0; r < x.size(); ++r) {
        std::vector<Triple> t;
        for (std::size_t i = 0; i < m; ++i) t.push_back({x[r][3 * i], x[r][3 * i + 1], x[r][3 * i + 2]});
        const auto [mean, var] = merge == cases::BnAggrMerge::chan ? chan(t) : naive(t);
        const std::string where = std::string(cases::to_string(merge)) + " m " + std::to_string(m) + " row " +
                                  std::to_string(r);
        expect_same(got(r, 0), mean, where + " mean");
        expect_same(got(r, 1), var, where + " variance");
      }
    }
  }
}

TEST(BnAggr, ErrorsNameTheArgument) {
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const numeq::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { cases::bn_aggr(xt::xarray<double>::from_shape({2, 4}), cases::BnAggrMerge::chan); })
                .find("stats: 4 elements"),
            std::string::npos);
  EXPECT_NE(message([] { cases::bn_stats(xt::xarray<double>::from_shape({5})); }).find("x: expected shape"),
            std::string::npos);
  EXPECT_NE(message([] { cases::bn_stats(xt::zeros<double>({2, 2}), numeq::formats::fp64); }).find("compute: fp64"),
            std::string::npos);
  EXPECT_NE(message([] { cases::bn_aggr_merge_by_name("mean", "merge"); }).find("merge"), std::string::npos);
}

}  // namespace
