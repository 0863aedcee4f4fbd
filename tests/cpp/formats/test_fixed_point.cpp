// formats/exact.hpp: the one exact accumulator (FixedPoint), the one zero-sign rule (ZeroSigns)
// and the exactly rounded sum, each against an oracle that shares no code with it: GMP integers
// for the fixed-point register, the host's IEEE 754 additions (under each rounding direction) for
// the signs of zero sums, MPFR's correctly rounded additions for the rounded sum. (The long
// accumulator's full check against MPFR over formats x modes is references/test_accumulator.)

#include "numeq/formats/exact.hpp"

#include <gmp.h>
#include <gtest/gtest.h>
#include <mpfr.h>

#include <array>
#include <cfenv>
#include <cmath>
#include <random>
#include <vector>

namespace {

using numeq::Cast;
using numeq::FixedPoint;
using numeq::Rounding;
using numeq::uint128;
namespace formats = numeq::formats;

// A GMP integer from the register's two's-complement words.
void to_mpz(mpz_t out, const FixedPoint<4>& r) {
  const auto m = r.magnitude();
  mpz_import(out, m.size(), -1, sizeof(std::uint64_t), 0, 0, m.data());
  if (r.is_negative()) mpz_neg(out, out);
}

TEST(FixedPoint, SignedSumsOfShiftedTermsEqualGmp) {
  std::mt19937_64 rng(19);
  std::size_t checked = 0;
  mpz_t want, got, term;
  mpz_inits(want, got, term, nullptr);
  for (int trial = 0; trial < 400; ++trial) {
    FixedPoint<4> r;
    mpz_set_ui(want, 0);
    const int terms = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < terms; ++k) {
      // Magnitudes of 1 to 128 bits at positions 0 .. 120: every word boundary and carry chain.
      const int width = 1 + static_cast<int>(rng() % 128);
      uint128 m = (static_cast<uint128>(rng()) << 64) | rng();
      if (width < 128) m &= (uint128{1} << width) - 1;
      if (trial % 7 == 0) m = (uint128{1} << (width - 1));  // lone bits: long carry and borrow runs
      const int position = static_cast<int>(rng() % 121);
      const bool negative = (rng() & 1) != 0;
      r.add(negative, m, position);
      mpz_import(term, 2, -1, sizeof(std::uint64_t), 0, 0,
                 std::array<std::uint64_t, 2>{static_cast<std::uint64_t>(m), static_cast<std::uint64_t>(m >> 64)}.data());
      mpz_mul_2exp(term, term, static_cast<mp_bitcnt_t>(position));
      if (negative) mpz_sub(want, want, term);
      else mpz_add(want, want, term);
      to_mpz(got, r);
      ASSERT_EQ(mpz_cmp(got, want), 0) << "trial " << trial << " term " << k;
      ASSERT_EQ(r.is_zero(), mpz_sgn(want) == 0);
      ++checked;
      if (mpz_sgn(want) == 0) continue;
      // leading(): sign, exponent of the leading bit, its 64 bits and the sticky bit.
      const numeq::Exact e = r.leading(-300);
      mpz_abs(term, want);
      const auto bits = static_cast<long>(mpz_sizeinbase(term, 2));
      EXPECT_EQ(e.negative, mpz_sgn(want) < 0);
      EXPECT_EQ(e.exponent, bits - 1 - 300);
      mpz_t top;
      mpz_init(top);
      if (bits >= 64) mpz_tdiv_q_2exp(top, term, static_cast<mp_bitcnt_t>(bits - 64));
      else mpz_mul_2exp(top, term, static_cast<mp_bitcnt_t>(64 - bits));
      EXPECT_EQ(e.significand, mpz_get_ui(top));
      const bool sticky = bits > 64 && mpz_scan1(term, 0) < static_cast<mp_bitcnt_t>(bits - 64);
      EXPECT_EQ(e.sticky, sticky);
      mpz_clear(top);
    }
    // The sum of two registers is the register of the sum.
    FixedPoint<4> twice = r;
    twice.add(r);
    mpz_mul_2exp(want, want, 1);
    to_mpz(got, twice);
    ASSERT_EQ(mpz_cmp(got, want), 0);
  }
  mpz_clears(want, got, term, nullptr);
  std::printf("[ FixedPoint ] %zu partial sums compared with GMP\n", checked);
}

struct HostRounding {
  Rounding mode;
  int fe;
};
const HostRounding kHostModes[] = {{Rounding::nearest_even, FE_TONEAREST},
                                   {Rounding::toward_zero, FE_TOWARDZERO},
                                   {Rounding::upward, FE_UPWARD},
                                   {Rounding::downward, FE_DOWNWARD}};

// Every sequence of up to four terms from {+0, -0, 1, -1, 2, -2} whose sum is zero: the sign the
// host's IEEE additions give it, left to right, in each rounding direction, is the sign of
// ZeroSigns and of exact_sum_rounded (the sums are exact, so the order does not matter).
TEST(ZeroSigns, EveryShortZeroSumSignedAsTheHostAddsIt) {
  const double pool[] = {0.0, -0.0, 1.0, -1.0, 2.0, -2.0};
  std::size_t checked = 0;
  for (int length = 1; length <= 4; ++length) {
    int count = 1;
    for (int i = 0; i < length; ++i) count *= 6;
    for (int code = 0; code < count; ++code) {
      std::vector<double> v;
      numeq::ZeroSigns zeros;
      for (int i = 0, c = code; i < length; ++i, c /= 6) {
        v.push_back(pool[c % 6]);
        if (v.back() == 0) zeros.zero(std::signbit(v.back()));
        else zeros.nonzero = true;
      }
      double total = 0;
      for (const double x : v) total += x;
      if (total != 0) continue;
      for (const HostRounding& h : kHostModes) {
        std::fesetround(h.fe);
        volatile double s = v[0];
        for (std::size_t i = 1; i < v.size(); ++i) s = s + v[i];
        const bool host_negative = std::signbit(s);
        std::fesetround(FE_TONEAREST);
        ASSERT_EQ(zeros.negative(h.mode), host_negative) << "code " << code << " length " << length;
        const double got = numeq::exact_sum_rounded(v, Cast{formats::fp64, h.mode});
        ASSERT_EQ(got, 0.0);
        ASSERT_EQ(std::signbit(got), host_negative);
        ++checked;
      }
    }
  }
  numeq::ZeroSigns none;
  EXPECT_FALSE(none.negative(Rounding::downward)) << "the empty sum is +0";
  EXPECT_EQ(numeq::exact_sum_rounded({}, Cast{formats::fp64, Rounding::downward}), 0.0);
  std::printf("[ ZeroSigns ] %zu zero sums compared with the host's additions\n", checked);
}

// Sums of doubles of widely spread exponents (cancellation included) rounded once into binary64
// in each direction: MPFR's exact sum (mpfr_sum), rounded by MPFR itself.
TEST(ExactSumRounded, EqualsMpfrCorrectlyRoundedSum) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> exponent(-200, 200);
  std::normal_distribution<double> normal;
  const mpfr_rnd_t kMpfr[] = {MPFR_RNDN, MPFR_RNDZ, MPFR_RNDU, MPFR_RNDD};
  std::size_t checked = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 3 + static_cast<int>(rng() % 30);
    std::vector<double> v(n);
    for (double& x : v) x = std::ldexp(normal(rng), exponent(rng));
    if (trial % 3 == 0) v.push_back(-v[0]);  // an exact cancellation of the leading term
    std::vector<mpfr_t> terms(v.size());
    std::vector<mpfr_ptr> ptrs;
    for (std::size_t i = 0; i < v.size(); ++i) {
      mpfr_init2(terms[i], 53);
      mpfr_set_d(terms[i], v[i], MPFR_RNDN);
      ptrs.push_back(terms[i]);
    }
    mpfr_t sum;
    mpfr_init2(sum, 53);
    for (int m = 0; m < 4; ++m) {
      mpfr_sum(sum, ptrs.data(), ptrs.size(), kMpfr[m]);
      const double want = mpfr_get_d(sum, MPFR_RNDN);  // exact: sum has 53 bits, normal range
      const double got = numeq::exact_sum_rounded(v, Cast{formats::fp64, kHostModes[m].mode});
      ASSERT_EQ(got, want) << "trial " << trial << " mode " << m;
      ++checked;
    }
    mpfr_clear(sum);
    for (auto& t : terms) mpfr_clear(t);
  }
  std::printf("[ exact_sum_rounded ] %zu sums compared with MPFR\n", checked);
}

// DAZ: under flush_inputs an fp32-subnormal term reads as zero of its sign; kept otherwise.
TEST(ExactSumRounded, FlushesSubnormalInputsOfTheAccumulatingFormat) {
  const double tiny = std::ldexp(1.0, -130);  // an fp32 subnormal
  const Cast keep{formats::fp32, Rounding::upward};
  Cast daz = keep;
  daz.subnormals = numeq::Subnormals::flush_inputs;
  const std::vector<double> v{1.0, tiny};
  EXPECT_EQ(numeq::exact_sum_rounded(v, keep), std::nextafter(1.0f, 2.0f));
  EXPECT_EQ(numeq::exact_sum_rounded(v, daz), 1.0);
  EXPECT_EQ(numeq::flush_input(-tiny, daz), 0.0);
  EXPECT_TRUE(std::signbit(numeq::flush_input(-tiny, daz)));
  EXPECT_EQ(numeq::flush_input(-tiny, keep), -tiny);
}

}  // namespace
