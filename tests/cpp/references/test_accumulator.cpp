// LongAccumulator against MPFR: the exact sum (compared as MPFR values) and its single rounding
// into formats x modes (compared with the independent oracle's rounding of the MPFR sum).

#include "numeq/references/accumulator.hpp"

#include <gtest/gtest.h>
#include <mpfr.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "oracle/mpfr_oracle.hpp"
#include "oracle/test_support.hpp"

namespace {

using numeq::Cast;
using numeq::LongAccumulator;
using numeq::Rounding;
namespace formats = numeq::formats;

// The exact sum of terms (and products) in MPFR: 2400 bits span 2^-1088 .. 2^1300, so every
// addition is exact.
class MpfrSum {
 public:
  MpfrSum() {
    mpfr_init2(sum_, 2400);
    mpfr_init2(term_, 256);
    mpfr_set_zero(sum_, 1);
  }
  ~MpfrSum() {
    mpfr_clear(sum_);
    mpfr_clear(term_);
  }
  void add(double x) {
    mpfr_set_d(term_, x, MPFR_RNDN);
    mpfr_add(sum_, sum_, term_, MPFR_RNDN);
  }
  void add_product(double x, double y) {
    mpfr_set_d(term_, x, MPFR_RNDN);
    mpfr_mul_d(term_, term_, y, MPFR_RNDN);  // exact: 256 bits hold a 106-bit product
    mpfr_add(sum_, sum_, term_, MPFR_RNDN);
  }
  mpfr_srcptr value() const { return sum_; }

 private:
  mpfr_t sum_, term_;
};

const numeq::Format* const kOutputs[] = {&formats::fp64, &formats::fp32, &formats::bf16, &formats::fp16,
                                         &formats::e4m3fn, &formats::e5m2, &formats::e8m0fnu};

// The accumulator's exact value equals MPFR's, and every rounding agrees with the oracle.
void expect_matches(const LongAccumulator& acc, const MpfrSum& reference, const std::string& what) {
  mpfr_t mine;
  mpfr_init2(mine, 2);
  numeq::to_mpfr(acc, mine);
  if (!mpfr_zero_p(reference.value()))
    ASSERT_TRUE(mpfr_equal_p(mine, reference.value())) << what << ": exact value differs";
  else
    ASSERT_TRUE(mpfr_zero_p(mine)) << what;
  mpfr_clear(mine);
  for (const numeq::Format* f : kOutputs) {
    numeq_oracle::RoundOracle oracle(*f);
    for (Rounding mode : numeq_test::kModes) {
      for (auto overflow : {numeq::Overflow::ieee, numeq::Overflow::saturate}) {
        Cast cast{*f, mode, overflow};
        cast.seed = 7;
        const std::uint64_t random = numeq::random_bits_at(numeq::random_stream_key(cast.seed), 3);
        const numeq_oracle::Expected expected = oracle.cast_value(reference.value(), cast, 3);
        const double got = acc.round_value(cast, random);
        // An exact zero sum: the oracle sees MPFR's +0; the sign rule is tested separately.
        if (mpfr_zero_p(reference.value())) {
          ASSERT_EQ(got, 0.0) << what;
          continue;
        }
        ASSERT_TRUE(numeq_oracle::same_value(got, expected.value))
            << what << " into " << f->name << " mode " << static_cast<int>(mode) << " overflow " << static_cast<int>(overflow) << ": expected "
            << numeq_oracle::describe(expected.value) << ", got " << numeq_oracle::describe(got);
      }
    }
  }
}

double random_double_any_exponent(std::mt19937_64& rng, int min_exp, int max_exp) {
  std::uniform_int_distribution<int> e(min_exp, max_exp);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  const double x = std::ldexp(m(rng), e(rng));
  return (rng() & 1) ? -x : x;
}

TEST(LongAccumulator, RandomSumsOfDoublesAcrossTheWholeRange) {
  std::mt19937_64 rng(1);
  int cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    LongAccumulator acc;
    MpfrSum ref;
    const int terms = 1 + static_cast<int>(rng() % 40);
    // Narrow exponent windows give heavy cancellation and carries; wide ones use the whole register.
    const int lo = -1074 + static_cast<int>(rng() % 2000);
    const int hi = std::min(1023, lo + static_cast<int>(rng() % 200));
    for (int t = 0; t < terms; ++t) {
      const double x = random_double_any_exponent(rng, std::max(lo, -1074), hi);
      acc.add(x);
      ref.add(x);
    }
    expect_matches(acc, ref, "trial " + std::to_string(trial));
    ++cases;
  }
  std::printf("[ accumulator ] %d random sums checked in %zu formats x 7 modes x 2 overflows\n", cases,
              std::size(kOutputs));
}

TEST(LongAccumulator, ExactProductsOfFp32IncludingSubnormals) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 300; ++trial) {
    LongAccumulator acc;
    MpfrSum ref;
    for (int t = 0; t < 64; ++t) {
      // Any finite fp32 pattern: subnormals, huge values, everything between.
      float x, y;
      do x = std::bit_cast<float>(static_cast<std::uint32_t>(rng())); while (!std::isfinite(x));
      do y = std::bit_cast<float>(static_cast<std::uint32_t>(rng())); while (!std::isfinite(y));
      acc.add_product(x, y);
      ref.add_product(x, y);
    }
    expect_matches(acc, ref, "trial " + std::to_string(trial));
  }
}

TEST(LongAccumulator, CancellationToTinyRemainders) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    LongAccumulator acc;
    MpfrSum ref;
    std::vector<double> big;
    for (int t = 0; t < 20; ++t) big.push_back(random_double_any_exponent(rng, 900, 1023));
    for (double x : big) {
      acc.add(x);
      ref.add(x);
    }
    const double tiny = random_double_any_exponent(rng, -1074, -1000);
    acc.add(tiny);
    ref.add(tiny);
    for (double x : big) {  // the big terms cancel exactly, in another order
      acc.add(-x);
      ref.add(-x);
    }
    expect_matches(acc, ref, "trial " + std::to_string(trial));
    EXPECT_EQ(acc.round_value(Cast{formats::fp64}), tiny);
  }
}

TEST(LongAccumulator, ManyTermsCarryAcrossWords) {
  // 2^20 copies of the largest double minus 2^20 copies of it again, with 1 in between: carries
  // and borrows run through every word of the register.
  LongAccumulator acc;
  const double big = std::numeric_limits<double>::max();
  for (int i = 0; i < (1 << 20); ++i) acc.add(big);
  acc.add(1.0);
  for (int i = 0; i < (1 << 20); ++i) acc.add(-big);
  EXPECT_EQ(acc.round_value(Cast{formats::fp64}), 1.0);
  acc.add(-1.0);
  acc.add(std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(acc.round_value(Cast{formats::fp64}), std::numeric_limits<double>::denorm_min());
}

TEST(LongAccumulator, OverflowingSumsRoundLikeTheFormatSays) {
  // 2^20 * max fp32 is far above fp32's range: Inf in nearest, max in toward_zero or saturate.
  LongAccumulator acc;
  for (int i = 0; i < 1024; ++i) acc.add_product(std::numeric_limits<float>::max(), 1024.0f);
  EXPECT_EQ(acc.round_value(Cast{formats::fp32}), HUGE_VAL);
  EXPECT_EQ(acc.round_value(Cast{formats::fp32, Rounding::toward_zero}), std::numeric_limits<float>::max());
  EXPECT_EQ(acc.round_value(Cast{formats::e4m3fn, Rounding::nearest_even, numeq::Overflow::saturate}), 448.0);
  EXPECT_TRUE(std::isnan(acc.round_value(Cast{formats::e4m3fn})));
}

TEST(LongAccumulator, SpecialValuesFollowIeee754) {
  const double inf = HUGE_VAL, nan = std::nan("");
  auto sum_of = [](std::initializer_list<double> xs) {
    LongAccumulator acc;
    for (double x : xs) acc.add(x);
    return acc.round_value(Cast{formats::fp32});
  };
  EXPECT_TRUE(std::isnan(sum_of({1.0, nan, 2.0})));
  EXPECT_TRUE(std::isnan(sum_of({inf, -inf})));
  EXPECT_EQ(sum_of({inf, 1e300, -1e300}), inf);
  EXPECT_EQ(sum_of({-inf, 5.0}), -inf);
  LongAccumulator p;
  p.add_product(inf, 0.0);
  EXPECT_TRUE(std::isnan(p.round_value(Cast{formats::fp32})));
  LongAccumulator q;
  q.add_product(-inf, 2.0);
  EXPECT_EQ(q.round_value(Cast{formats::bf16}), -inf);
}

TEST(LongAccumulator, SignOfAnExactZero) {
  // IEEE 754-2019 s6.3: an exact zero sum of nonzero terms is +0 (-0 rounding downward); a sum of
  // -0 terms only is -0.
  LongAccumulator acc;
  acc.add(-0.0);
  acc.add(-0.0);
  EXPECT_TRUE(std::signbit(acc.round_value(Cast{formats::fp32})));
  acc.add(3.0);
  acc.add(-3.0);
  EXPECT_FALSE(std::signbit(acc.round_value(Cast{formats::fp32})));
  EXPECT_TRUE(std::signbit(acc.round_value(Cast{formats::fp32, Rounding::downward})));
  LongAccumulator empty;
  EXPECT_FALSE(std::signbit(empty.round_value(Cast{formats::bf16})));  // the empty sum is +0
}

TEST(LongAccumulator, SignOfAnExactZeroInEveryRoundingMode) {
  // IEEE 754-2019 s6.3 written out: x + x keeps x's sign (all -0: -0, all +0: +0); an exact zero
  // sum of operands of opposite signs is +0 in every direction but roundTowardNegative (-0). The
  // host FPU's binary64 addition (round to nearest) agrees on the two-term cases.
  const std::vector<std::vector<double>> cases = {{-0.0, 0.0},  {0.0, -0.0},      {-0.0, -0.0}, {0.0, 0.0},
                                                  {1.5, -1.5},  {-0.0, 2.0, -2.0}, {0.0, -0.0, 0.0},
                                                  {-0.0, -0.0, -0.0}};
  for (Rounding mode : {Rounding::nearest_even, Rounding::nearest_away, Rounding::toward_zero, Rounding::upward,
                        Rounding::downward, Rounding::odd}) {
    for (const auto& terms : cases) {
      bool all_negative_zero = true, all_positive_zero = true;
      for (double t : terms) {
        all_negative_zero = all_negative_zero && t == 0 && std::signbit(t);
        all_positive_zero = all_positive_zero && t == 0 && !std::signbit(t);
      }
      const bool want = all_negative_zero || (!all_positive_zero && mode == Rounding::downward);
      LongAccumulator acc, left, right;
      for (std::size_t i = 0; i < terms.size(); ++i) {
        acc.add(terms[i]);
        (i % 2 ? right : left).add(terms[i]);
      }
      left.add(right);
      for (const numeq::Format* f : {&formats::fp32, &formats::bf16, &formats::fp64}) {
        const double got = acc.round_value(Cast{*f, mode});
        EXPECT_EQ(got, 0.0);
        EXPECT_EQ(std::signbit(got), want) << numeq::to_string(mode) << " terms " << terms.size() << " first "
                                           << terms[0];
        EXPECT_EQ(std::signbit(left.round_value(Cast{*f, mode})), want) << "merged";
      }
      if (terms.size() == 2 && mode == Rounding::nearest_even) {
        EXPECT_EQ(std::signbit(terms[0] + terms[1]), want);
      }
    }
  }
}

TEST(LongAccumulator, MergingEqualsAddingEverything) {
  std::mt19937_64 rng(4);
  LongAccumulator whole, left, right;
  MpfrSum ref;
  for (int t = 0; t < 1000; ++t) {
    const double x = random_double_any_exponent(rng, -300, 300);
    (t % 3 ? left : right).add(x);
    whole.add(x);
    ref.add(x);
  }
  left.add(right);
  expect_matches(left, ref, "merged");
  EXPECT_EQ(left.round_value(Cast{formats::fp64}), whole.round_value(Cast{formats::fp64}));
}

TEST(LongAccumulator, DoubleDoubleIsTheExactValueToNearest) {
  std::mt19937_64 rng(5);
  mpfr_t hi, rest;
  mpfr_init2(hi, 53);
  mpfr_init2(rest, 2400);
  for (int trial = 0; trial < 200; ++trial) {
    LongAccumulator acc;
    MpfrSum ref;
    for (int t = 0; t < 10; ++t) {
      const double x = random_double_any_exponent(rng, -60, 60);
      acc.add(x);
      ref.add(x);
    }
    const numeq::DoubleDouble d = acc.to_double_double();
    mpfr_set(hi, ref.value(), MPFR_RNDN);
    ASSERT_EQ(d.hi, mpfr_get_d(hi, MPFR_RNDN));
    mpfr_sub_d(rest, ref.value(), d.hi, MPFR_RNDN);
    ASSERT_EQ(d.lo, mpfr_get_d(rest, MPFR_RNDN));
  }
  mpfr_clear(hi);
  mpfr_clear(rest);
}

TEST(LongAccumulator, TermsOutsideTheExactRangeAreRefused) {
  LongAccumulator acc;
  // A binary64 subnormal times 2^-100 has bits below 2^-1088.
  numeq_test::expect_error_mentioning([&] { acc.add_product(std::numeric_limits<double>::denorm_min(), 0x1p-100); },
                                      "long accumulator");
  numeq_test::expect_error_mentioning([&] { acc.add_product(0x1p1000, 0x1p1000); }, "long accumulator");
}

}  // namespace
