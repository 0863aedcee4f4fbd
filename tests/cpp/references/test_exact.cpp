// Exact sum / dot / matmul against MPFR: every result element is the MPFR sum of exact products
// (2400-bit, so exact) rounded by the independent oracle, compared bit for bit.

#include "numeq/references/exact.hpp"

#include <gtest/gtest.h>
#include <mpfr.h>

#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "oracle/mpfr_oracle.hpp"
#include "oracle/test_support.hpp"

namespace {

using numeq::Cast;
using numeq::Format;
using numeq::Rounding;
namespace formats = numeq::formats;
namespace reference = numeq::reference;

enum class Kind { normal, cancelling, huge_range, subnormal, overflowing };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::normal: return "normal";
    case Kind::cancelling: return "cancelling";
    case Kind::huge_range: return "huge_range";
    case Kind::subnormal: return "subnormal";
    case Kind::overflowing: return "overflowing";
  }
  return "?";
}

// A random finite value of format f drawn as kind k. Values are produced as bit patterns of f
// (decoded by the oracle's own decoder), so every one lies in the format.
double draw(std::mt19937_64& rng, const Format& f, Kind k) {
  const int bits = f.bits();
  const std::uint64_t mask = bits == 64 ? ~0ull : (std::uint64_t{1} << bits) - 1;
  const std::uint64_t fraction_mask = (std::uint64_t{1} << f.mantissa_bits) - 1;
  const std::uint64_t sign = std::uint64_t{1} << (bits - 1);
  for (;;) {
    std::uint64_t pattern = rng() & mask;
    const std::uint64_t field = (pattern >> f.mantissa_bits) & ((std::uint64_t{1} << f.exponent_bits) - 1);
    const std::uint64_t top = (std::uint64_t{1} << f.exponent_bits) - 1;
    switch (k) {
      case Kind::normal:  // exponents within +-4 binades of 1
        pattern = (pattern & (sign | fraction_mask)) |
                  (static_cast<std::uint64_t>(f.bias - 4 + static_cast<int>(rng() % 9)) << f.mantissa_bits);
        break;
      case Kind::subnormal: pattern &= sign | fraction_mask; break;
      case Kind::overflowing:  // the top two binades
        pattern = (pattern & (sign | fraction_mask)) | ((top - 1 - (rng() % 2)) << f.mantissa_bits);
        break;
      default: (void)field; break;
    }
    const double x = numeq_oracle::decode_oracle(f, pattern << f.storage_shift);
    if (std::isfinite(x)) return x;
  }
}

class MpfrDot {
 public:
  MpfrDot() {
    mpfr_init2(sum_, 2400);
    mpfr_init2(term_, 256);
  }
  ~MpfrDot() {
    mpfr_clear(sum_);
    mpfr_clear(term_);
  }
  void clear() { mpfr_set_zero(sum_, 1); }
  void add_product(double x, double y) {
    mpfr_set_d(term_, x, MPFR_RNDN);
    mpfr_mul_d(term_, term_, y, MPFR_RNDN);
    mpfr_add(sum_, sum_, term_, MPFR_RNDN);
  }
  void add(double x) {
    mpfr_set_d(term_, x, MPFR_RNDN);
    mpfr_add(sum_, sum_, term_, MPFR_RNDN);
  }
  mpfr_srcptr value() const { return sum_; }

 private:
  mpfr_t sum_, term_;
};

const Format* const kInputs[] = {&formats::bf16, &formats::fp16, &formats::e4m3fn, &formats::e5m2, &formats::fp32};
const Format* const kResults[] = {&formats::fp32, &formats::bf16, &formats::fp16};
const Rounding kChecked[] = {Rounding::nearest_even, Rounding::toward_zero, Rounding::upward, Rounding::odd,
                             Rounding::stochastic};

TEST(ExactMatmul, AgreesWithMpfrBitForBit) {
  std::mt19937_64 rng(11);
  MpfrDot ref;
  std::size_t compared = 0;
  for (const Format* in : kInputs) {
    for (Kind kind : {Kind::normal, Kind::cancelling, Kind::huge_range, Kind::subnormal, Kind::overflowing}) {
      const std::size_t M = 12, K = 1 + rng() % 64, N = 10;
      xt::xarray<double> a = xt::xarray<double>::from_shape({M, K});
      xt::xarray<double> b = xt::xarray<double>::from_shape({K, N});
      for (double& x : a) x = draw(rng, *in, kind == Kind::cancelling ? Kind::normal : kind);
      for (double& x : b) x = draw(rng, *in, kind == Kind::cancelling ? Kind::normal : kind);
      if (kind == Kind::cancelling && K >= 2) {
        // Each row of a repeats its first half negated, against equal halves of b's columns, plus
        // one small term: the large products cancel exactly.
        for (std::size_t m = 0; m < M; ++m)
          for (std::size_t k = 0; k + 1 < K; k += 2) a(m, k + 1) = -a(m, k);
        for (std::size_t n = 0; n < N; ++n)
          for (std::size_t k = 0; k + 1 < K; k += 2) b(k + 1, n) = b(k, n);
        a(0, K - 1) = draw(rng, *in, Kind::subnormal);
      }
      for (const Format* out : kResults) {
        for (Rounding mode : kChecked) {
          Cast cast{*out, mode};
          cast.seed = 5;
          const xt::xarray<double> got = reference::matmul(a, b, cast);
          numeq_oracle::RoundOracle oracle(*out);
          for (std::size_t m = 0; m < M; ++m) {
            for (std::size_t n = 0; n < N; ++n) {
              ref.clear();
              for (std::size_t k = 0; k < K; ++k) ref.add_product(a(m, k), b(k, n));
              const auto expected = oracle.cast_value(ref.value(), cast, m * N + n);
              if (mpfr_zero_p(ref.value())) {
                ASSERT_EQ(got(m, n), 0.0);
                continue;
              }
              ASSERT_TRUE(numeq_oracle::same_value(got(m, n), expected.value))
                  << in->name << " " << kind_name(kind) << " -> " << out->name << " mode "
                  << static_cast<int>(mode) << " element (" << m << ", " << n << "): expected "
                  << numeq_oracle::describe(expected.value) << ", got " << numeq_oracle::describe(got(m, n));
              ++compared;
            }
          }
        }
      }
    }
  }
  std::printf("[ exact ] %zu matmul elements compared with MPFR\n", compared);
}

TEST(ExactMatmul, BatchesBroadcastAndBiasIsAddedExactly) {
  std::mt19937_64 rng(12);
  const std::size_t M = 3, K = 7, N = 2;
  xt::xarray<double> a = xt::xarray<double>::from_shape({2, 1, M, K});
  xt::xarray<double> b = xt::xarray<double>::from_shape({3, K, N});
  xt::xarray<double> c = xt::xarray<double>::from_shape({N});
  for (double& x : a) x = draw(rng, formats::bf16, Kind::huge_range);
  for (double& x : b) x = draw(rng, formats::bf16, Kind::huge_range);
  for (double& x : c) x = draw(rng, formats::fp32, Kind::huge_range);
  const Cast cast{formats::fp32};
  const xt::xarray<double> got = reference::matmul(a, b, cast, &c);
  ASSERT_EQ(got.shape().size(), 4u);
  EXPECT_EQ(got.shape()[0], 2u);
  EXPECT_EQ(got.shape()[1], 3u);
  MpfrDot ref;
  numeq_oracle::RoundOracle oracle(formats::fp32);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t m = 0; m < M; ++m)
        for (std::size_t n = 0; n < N; ++n) {
          ref.clear();
          for (std::size_t k = 0; k < K; ++k) ref.add_product(a(i, 0, m, k), b(j, k, n));
          ref.add(c(n));
          const auto expected = oracle.cast_value(ref.value(), cast);
          ASSERT_TRUE(numeq_oracle::same_value(got(i, j, m, n), expected.value));
        }
}

TEST(ExactSum, AlongEveryAxisAndDot) {
  std::mt19937_64 rng(13);
  xt::xarray<double> x = xt::xarray<double>::from_shape({3, 4, 5});
  for (double& v : x) v = draw(rng, formats::fp32, Kind::huge_range);
  MpfrDot ref;
  const Cast cast{formats::bf16, Rounding::nearest_even};
  numeq_oracle::RoundOracle oracle(formats::bf16);
  for (std::ptrdiff_t axis : {0, 1, 2, -1}) {
    const xt::xarray<double> got = reference::sum(x, axis, cast);
    const std::size_t ax = static_cast<std::size_t>(axis < 0 ? axis + 3 : axis);
    ASSERT_EQ(got.dimension(), 2u);
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 4; ++j)
        for (std::size_t k = 0; k < 5; ++k) {
          std::size_t idx[3] = {i, j, k};
          if (idx[ax] != 0) continue;
          ref.clear();
          for (std::size_t t = 0; t < x.shape()[ax]; ++t) {
            idx[ax] = t;
            ref.add(x(idx[0], idx[1], idx[2]));
          }
          idx[ax] = 0;
          const double g = ax == 0 ? got(j, k) : ax == 1 ? got(i, k) : got(i, j);
          ASSERT_TRUE(numeq_oracle::same_value(g, oracle.cast_value(ref.value(), cast).value)) << "axis " << axis;
        }
  }
  xt::xarray<double> u = xt::xarray<double>::from_shape({100});
  xt::xarray<double> v = xt::xarray<double>::from_shape({100});
  for (double& t : u) t = draw(rng, formats::e4m3fn, Kind::huge_range);
  for (double& t : v) t = draw(rng, formats::e4m3fn, Kind::huge_range);
  ref.clear();
  for (std::size_t k = 0; k < 100; ++k) ref.add_product(u(k), v(k));
  const auto d = reference::dot(u, v, Cast{formats::fp16});
  numeq_oracle::RoundOracle o16(formats::fp16);
  EXPECT_TRUE(numeq_oracle::same_value(d(), o16.cast_value(ref.value(), Cast{formats::fp16}).value));
  // The double-double form: hi is the exact value to nearest.
  const auto e = reference::dot_exact(u, v);
  mpfr_t hi;
  mpfr_init2(hi, 53);
  mpfr_set(hi, ref.value(), MPFR_RNDN);
  EXPECT_EQ(e.hi(), mpfr_get_d(hi, MPFR_RNDN));
  mpfr_clear(hi);
}

TEST(ExactMatmul, ResultsDoNotDependOnTheThreadCount) {
  std::mt19937_64 rng(14);
  xt::xarray<double> a = xt::xarray<double>::from_shape({64, 300});
  xt::xarray<double> b = xt::xarray<double>::from_shape({300, 64});
  for (double& x : a) x = draw(rng, formats::bf16, Kind::normal);
  for (double& x : b) x = draw(rng, formats::bf16, Kind::normal);
  Cast cast{formats::bf16, Rounding::stochastic};
  cast.seed = 3;
  numeq::set_num_threads(1);
  const xt::xarray<double> one = reference::matmul(a, b, cast);
  numeq::set_num_threads(4);
  const xt::xarray<double> four = reference::matmul(a, b, cast);
  numeq::set_num_threads(0);
  EXPECT_EQ(one, four);
}

TEST(ExactMatmul, ExactZerosTakeTheSignIeee754Gives) {
  // IEEE 754-2019 s6.3: cancelling nonzero products give +0 (-0 rounding downward); a sum of
  // -0 products is -0; +0 + -0 is +0.
  auto m = [](std::initializer_list<double> row, std::initializer_list<double> col, Rounding mode,
              const xt::xarray<double>* c = nullptr) {
    xt::xarray<double> a = xt::xarray<double>::from_shape({1, row.size()});
    xt::xarray<double> b = xt::xarray<double>::from_shape({col.size(), 1});
    std::copy(row.begin(), row.end(), a.begin());
    std::copy(col.begin(), col.end(), b.begin());
    return reference::matmul(a, b, Cast{formats::fp32, mode}, c)(0, 0);
  };
  EXPECT_TRUE(std::signbit(m({-0.0, -0.0}, {1.0, 2.0}, Rounding::nearest_even)));
  EXPECT_FALSE(std::signbit(m({1.0, -1.0}, {3.0, 3.0}, Rounding::nearest_even)));
  EXPECT_TRUE(std::signbit(m({1.0, -1.0}, {3.0, 3.0}, Rounding::downward)));
  xt::xarray<double> minus_zero = xt::xarray<double>::from_shape({1});
  minus_zero(0) = -0.0;
  EXPECT_FALSE(std::signbit(m({0.0}, {1.0}, Rounding::nearest_even, &minus_zero)));
  EXPECT_TRUE(std::signbit(m({-0.0}, {1.0}, Rounding::nearest_even, &minus_zero)));
}

TEST(ExactErrors, ShapesAndFormatsAreChecked) {
  xt::xarray<double> a = xt::zeros<double>({2, 3});
  xt::xarray<double> b = xt::zeros<double>({4, 2});
  numeq_test::expect_error_mentioning([&] { reference::matmul(a, b, Cast{formats::fp32}); }, "inner dimensions");
  xt::xarray<double> v = xt::zeros<double>({3});
  numeq_test::expect_error_mentioning([&] { reference::matmul(v, a, Cast{formats::fp32}); }, "use dot");
  numeq_test::expect_error_mentioning([&] { reference::dot(v, xt::xarray<double>(xt::zeros<double>({4})), Cast{formats::fp32}); },
                                      "equal length");
  numeq_test::expect_error_mentioning([&] { reference::sum(a, 2, Cast{formats::fp32}); }, "axis");
  xt::xarray<double> c = xt::zeros<double>({5});
  xt::xarray<double> bb = xt::zeros<double>({3, 2});
  numeq_test::expect_error_mentioning([&] { reference::matmul(a, bb, Cast{formats::fp32}, &c); }, "c:");
  xt::xarray<double> nan = xt::xarray<double>::from_shape({1, 1});
  nan(0, 0) = std::nan("");
  xt::xarray<double> one = xt::ones<double>({1, 1});
  numeq_test::expect_error_mentioning([&] { reference::matmul(nan, one, Cast{formats::e2m1fn}); }, "no NaN");
  EXPECT_TRUE(std::isnan(reference::matmul(nan, one, Cast{formats::fp32})(0, 0)));
}

}  // namespace
