// The seeded input generators (cases/generators.hpp): every value is a value of its format (MPFR
// oracle), the draws are reproducible and seed-dependent, and each family has the property it is
// named for, checked against published format limits (FACTS.md s1 table) and plain statistics.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "numeq/cases/generators.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "oracle/mpfr_oracle.hpp"

namespace {

namespace cases = numeq::cases;
using numeq::Format;

const Format* kFormats[] = {&numeq::formats::fp32, &numeq::formats::bf16,   &numeq::formats::fp16,
                            &numeq::formats::e4m3fn, &numeq::formats::e4m3, &numeq::formats::e5m2,
                            &numeq::formats::e4m3fnuz, &numeq::formats::e2m1fn, &numeq::formats::tf32};

// Published largest finite values and smallest normals (FACTS.md s1; OFP8 rev 1.0; OCP MX v1.0).
const std::map<std::string, std::pair<double, double>> kLimits = {
    {"fp32", {3.4028234663852886e38, 0x1p-126}}, {"bf16", {3.3895313892515355e38, 0x1p-126}},
    {"fp16", {65504.0, 0x1p-14}},                {"e4m3fn", {448.0, 0x1p-6}},
    {"e4m3", {240.0, 0x1p-6}},                   {"e5m2", {57344.0, 0x1p-14}},
    {"e4m3fnuz", {240.0, 0x1p-7}},               {"e2m1fn", {6.0, 1.0}},
    {"tf32", {3.4011621342146535e38, 0x1p-126}},
};

// x is a value of f: the oracle's nearest-even rounding leaves it unchanged.
bool is_value_of(double x, const Format& f) {
  const numeq_oracle::Expected e = numeq_oracle::round_oracle(x, numeq::Cast{f});
  return !e.throws && numeq_oracle::same_value(e.value, x);
}

TEST(Generators, EveryValueIsAValueOfItsFormat) {
  std::size_t checked = 0;
  for (const Format* f : kFormats)
    for (const cases::Distribution d : cases::all_distributions()) {
      const xt::xarray<double> x = cases::generate({d, 11, 1.0}, *f, {8, 64});
      ASSERT_EQ(x.size(), 512u);
      for (double v : x) {
        ASSERT_TRUE(std::isfinite(v)) << f->name << " " << cases::to_string(d);
        ASSERT_TRUE(is_value_of(v, *f)) << f->name << " " << cases::to_string(d) << " " << v;
        ++checked;
      }
    }
  EXPECT_EQ(checked, 9u * 8u * 512u);
}

TEST(Generators, ReproducibleAndSeeded) {
  for (const cases::Distribution d : cases::all_distributions()) {
    const xt::xarray<double> a = cases::generate({d, 5, 1.0}, numeq::formats::fp32, {16, 32});
    EXPECT_EQ(a, cases::generate({d, 5, 1.0}, numeq::formats::fp32, {16, 32})) << cases::to_string(d);
    EXPECT_NE(a, cases::generate({d, 6, 1.0}, numeq::formats::fp32, {16, 32})) << cases::to_string(d);
  }
}

double mean(const xt::xarray<double>& x) { return std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size()); }

TEST(Generators, NormalUniformAndHeavyTails) {
  const std::size_t n = 1 << 16;
  const xt::xarray<double> z = cases::generate({cases::Distribution::normal, 1, 2.0}, numeq::formats::fp32, {n});
  double m = mean(z), var = 0;
  for (double v : z) var += (v - m) * (v - m);
  var /= n;
  EXPECT_NEAR(m, 0.0, 5 * 2.0 / std::sqrt(n));
  EXPECT_NEAR(var, 4.0, 0.1);
  const xt::xarray<double> u = cases::generate({cases::Distribution::uniform, 1, 1.0}, numeq::formats::fp32, {n});
  EXPECT_NEAR(mean(u), 0.0, 0.02);
  for (double v : u) ASSERT_LE(std::fabs(v), 1.0);
  const xt::xarray<double> l = cases::generate({cases::Distribution::lognormal, 1, 1.0}, numeq::formats::fp32, {n});
  double largest = 0;
  for (double v : l) largest = std::max(largest, std::fabs(v));
  EXPECT_GT(largest, 200.0);  // exp(1.5 * 4.3 sigma): heavy tails show in 2^16 draws
}

TEST(Generators, OutlierChannelsAreOnePercent) {
  const xt::xarray<double> x = cases::generate({cases::Distribution::outlier_channels, 3, 1.0}, numeq::formats::fp32, {256, 400});
  std::size_t outliers = 0;
  for (std::size_t c = 0; c < 400; ++c) {
    double sum_sq = 0;
    for (std::size_t r = 0; r < 256; ++r) sum_sq += x(r, c) * x(r, c);
    const double rms = std::sqrt(sum_sq / 256);
    if (rms > 30) ++outliers;
    else EXPECT_LT(rms, 2.0);
  }
  EXPECT_EQ(outliers, 4u);
  // Fewer than 100 channels: still one.
  const xt::xarray<double> y = cases::generate({cases::Distribution::outlier_channels, 3, 1.0}, numeq::formats::fp32, {64, 16});
  std::size_t big = 0;
  for (double v : y) big += std::fabs(v) > 20 ? 1 : 0;
  EXPECT_GT(big, 20u);
}

TEST(Generators, CancellationRowsSumNearZero) {
  for (const Format* f : {&numeq::formats::fp32, &numeq::formats::bf16}) {
    const xt::xarray<double> x = cases::generate({cases::Distribution::cancellation, 4, 1.0}, *f, {32, 257});
    for (std::size_t r = 0; r < 32; ++r) {
      double sum = 0, abs_sum = 0;  // in double: exact enough for the ratio
      for (std::size_t c = 0; c < 257; ++c) {
        sum += x(r, c);
        abs_sum += std::fabs(x(r, c));
      }
      EXPECT_LT(std::fabs(sum), abs_sum * 64 * std::ldexp(1.0, -f->precision())) << f->name << " row " << r;
      EXPECT_GT(abs_sum, 50.0);
    }
  }
}

TEST(Generators, FormatDefinedRanges) {
  for (const Format* f : kFormats) {
    const auto [max, min_normal] = kLimits.at(std::string(f->name));
    const xt::xarray<double> big = cases::generate({cases::Distribution::near_overflow, 2, 1.0}, *f, {4096});
    for (double v : big) {
      ASSERT_LE(std::fabs(v), max) << f->name;
      ASSERT_GE(std::fabs(v), max / 4 * (1 - 1e-9)) << f->name;
    }
    const xt::xarray<double> tiny = cases::generate({cases::Distribution::subnormal_rich, 2, 1.0}, *f, {4096});
    std::size_t subnormal = 0;
    for (double v : tiny) {
      ASSERT_LE(std::fabs(v), 16 * min_normal) << f->name;
      subnormal += (v != 0 && std::fabs(v) < min_normal) ? 1 : 0;
    }
    // (e2m1 has a single subnormal, 0.5: half its draws round to 0 or 1)
    if (f->has_zero && f->mantissa_bits >= 2) {
      EXPECT_GT(subnormal, 1200u) << f->name;
    }
    const xt::xarray<double> ints = cases::generate({cases::Distribution::small_integers, 2, 1.0}, *f, {4096});
    for (double v : ints) ASSERT_LE(std::fabs(v), std::min(8.0, max)) << f->name;
  }
  const xt::xarray<double> ints = cases::generate({cases::Distribution::small_integers, 2, 1.0}, numeq::formats::bf16, {4096});
  for (double v : ints) ASSERT_EQ(v, std::floor(v));
  EXPECT_EQ(*std::max_element(ints.begin(), ints.end()), 8.0);
  EXPECT_EQ(*std::min_element(ints.begin(), ints.end()), -8.0);
}

TEST(Generators, BadInputIsNamed) {
  EXPECT_THROW(cases::distribution_by_name("gaussian"), numeq::error);
  try {
    cases::distribution_by_name("gaussian");
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("generator: unknown generator 'gaussian'; valid: normal, uniform"),
              std::string::npos);
  }
  EXPECT_THROW(cases::generate({cases::Distribution::normal, 0, 0.0}, numeq::formats::fp32, {4}), numeq::error);
  EXPECT_THROW(cases::generate({cases::Distribution::normal, 0, NAN}, numeq::formats::fp32, {4}), numeq::error);
  EXPECT_THROW(cases::generate({cases::Distribution::normal, 0, 1.0}, numeq::formats::int8, {4}), numeq::error);
  EXPECT_EQ(cases::generate({cases::Distribution::cancellation, 0, 1.0}, numeq::formats::fp32, {0, 5}).size(), 0u);
}

}  // namespace
