// numeq::core::fused_step and fused_chain without the measured vectors (those are
// test_fused_vectors.cpp): the wide sum is exact on extreme inputs, NaN/Inf and zero-sign rules,
// the exponent and zero-term choices, bad input, and with enough fraction bits a step equals the
// correctly rounded exact sum (numeq::reference::sum).

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/core/fused.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/references/exact.hpp"

namespace {

using numeq::Cast;
using numeq::Rounding;
using numeq::core::FusedStep;
using numeq::core::fused_chain;
using numeq::core::fused_step;
namespace nv = numeq::core::nvidia;
namespace fmts = numeq::formats;

constexpr double inf = std::numeric_limits<double>::infinity();
const double qnan = std::numeric_limits<double>::quiet_NaN();

TEST(FusedStepParams, PlainComparableData) {
  static_assert(std::is_aggregate_v<FusedStep>);
  static_assert(nv::h100_fp16 == nv::h100_fp16);
  static_assert(!(nv::h100_fp16 == nv::a100_fp16));
  static_assert(nv::h100_e4m3.output.format == nv::e8m13);
  static_assert(nv::h100_e4m3.fraction_bits == 13 && nv::h100_e4m3.n == 32);
  static_assert(nv::a100_tf32.n == 4 && nv::h100_tf32.n == 8 && nv::b200_e4m3.fraction_bits == 25);
  FusedStep s = nv::a100_fp16;
  EXPECT_TRUE(s == nv::a100_fp16);
  s.output.rounding = Rounding::nearest_even;
  EXPECT_FALSE(s == nv::a100_fp16);
  // e8m13 values are fp32 values: the top 22 bits of the pattern.
  EXPECT_EQ(numeq::round_to_format(1.0 + std::ldexp(1.0, -13) + std::ldexp(1.0, -14), Cast{nv::e8m13, Rounding::toward_zero}),
            1.0 + std::ldexp(1.0, -13));
  EXPECT_EQ(numeq::encode(1.5, Cast{nv::e8m13}), 0x3FC00000u);
}

TEST(FusedStepParams, Tf32Truncation) {
  EXPECT_EQ(nv::tf32_truncate_bits(0x3F801FFFu), 0x3F800000u);
  EXPECT_EQ(nv::tf32_truncate_bits(0xBF802000u), 0xBF802000u);
  EXPECT_EQ(nv::tf32_truncate(1.0f + std::ldexp(1.0f, -11)), 1.0);               // not rounded up
  EXPECT_EQ(nv::tf32_truncate(-(1.0f + 3 * std::ldexp(1.0f, -11))), -(1.0 + std::ldexp(1.0, -10)));  // toward zero
  EXPECT_EQ(nv::tf32_truncate_bits(0x7F800001u), 0x7F800000u);  // low-payload NaN -> Inf, as the bits do
  EXPECT_EQ(nv::tf32_truncate(std::ldexp(1.0f, -140)), 0.0);  // fp32 subnormal below tf32's grid
}

TEST(FusedStep, WideSumIsExactOnExtremeInputs) {
  // bf16: max^2 (2^256) and min-subnormal^2 (2^-266) in one step: 522 binades apart. With F = 700
  // the step holds both exactly; each rounding direction of a binary64 output shows it.
  const double big = numeq::max_finite(fmts::bf16);
  const double tiny = numeq::min_subnormal(fmts::bf16);
  for (Rounding mode : {Rounding::toward_zero, Rounding::upward, Rounding::downward, Rounding::nearest_even}) {
    FusedStep s = nv::h100_bf16;
    s.fraction_bits = 700;
    s.output = Cast{fmts::fp64, mode};
    s.overflow = numeq::core::OverflowRule::cast;
    for (double sign : {1.0, -1.0}) {
      const double a[2] = {big, tiny}, b[2] = {big, sign * tiny};
      const double got = fused_step(a, b, 0.0, s);
      const xt::xarray<double> terms = {big * big, sign * tiny * tiny};
      const double want = numeq::reference::sum(terms, 0, s.output)();
      EXPECT_EQ(got, want) << numeq::to_string(mode) << " sign " << sign;
    }
  }
  // The same inputs in H100's step (F = 25): the tiny product is cut away; max^2 overflows fp32.
  {
    const double a[2] = {big, tiny}, b[2] = {big, -tiny};
    EXPECT_EQ(fused_step(a, b, 0.0, nv::h100_bf16), inf);
    FusedStep s = nv::h100_bf16;
    s.overflow = numeq::core::OverflowRule::cast;  // IEEE: toward zero never overflows to Inf
    EXPECT_EQ(fused_step(a, b, 0.0, s), numeq::max_finite(fmts::fp32));
  }
  // fp16: 65504^2 - (2^-24)^2. F = 25 cuts the tiny product (toward zero: to 0), so the step gives
  // 65504^2 exactly; with F = 100 it survives and toward-zero rounding gives the fp32 below.
  {
    const double m = 65504.0, t = std::ldexp(1.0, -24);
    const double a[2] = {m, t}, b[2] = {m, -t};
    EXPECT_EQ(fused_step(a, b, 0.0, nv::h100_fp16), m * m);
    FusedStep s = nv::h100_fp16;
    s.fraction_bits = 100;
    EXPECT_EQ(fused_step(a, b, 0.0, s), static_cast<double>(std::nextafter(static_cast<float>(m * m), 0.0f)));
  }
  // The widest realistic steps are exact: 32 fp8 products at F = 13 and 16 fp16 products at F = 25.
  for (const auto* step : {&nv::h100_e4m3, &nv::h100_e5m2}) {
    const double mx = numeq::max_finite(step->a_format);
    const std::vector<double> a(32, mx), b(32, mx);
    EXPECT_EQ(fused_step(a, b, 0.0, *step), 32 * mx * mx) << step->a_format.name;
    std::vector<double> alt(32, mx);
    for (std::size_t i = 0; i < 32; i += 2) alt[i] = -mx;
    EXPECT_EQ(fused_step(a, alt, 0.0, *step), 0.0);  // 16 positive and 16 negative max products
  }
  {
    const std::vector<double> a(16, 65504.0), b(16, 65504.0);
    EXPECT_EQ(fused_step(a, b, 0.0, nv::h100_fp16), 16 * 65504.0 * 65504.0);
    EXPECT_EQ(fused_step(a, b, 0.0, nv::h100_fp16_f16), inf);  // beyond fp16: Inf
  }
  // Subnormal operands are decoded exactly: (2^-24)^2 = 2^-48, (2^-9)^2 = 2^-18 (e4m3).
  {
    const double a[1] = {std::ldexp(1.0, -24)};
    EXPECT_EQ(fused_step(a, a, 0.0, nv::h100_fp16), std::ldexp(1.0, -48));
    const double e[1] = {std::ldexp(1.0, -9)};
    EXPECT_EQ(fused_step(e, e, 0.0, nv::h100_e4m3), std::ldexp(1.0, -18));
  }
}

TEST(FusedStep, EnoughFractionBitsGiveTheCorrectlyRoundedSum) {
  // With F large enough that 2^(E - F) lies below every term's last bit, truncation drops nothing
  // and the step is the exact sum rounded once. Random operands with random exponents over each
  // format's whole range (raw bit patterns), against numeq::reference::sum (the long accumulator).
  std::mt19937_64 rng(20260515);
  struct Case {
    const numeq::Format* in;
    int n;
  };
  const Case cases[] = {{&fmts::fp16, 16}, {&fmts::bf16, 16}, {&fmts::tf32, 8}, {&fmts::e4m3fn, 32}, {&fmts::e5m2, 32}};
  int compared = 0;
  for (const Case& k : cases) {
    for (Rounding mode : {Rounding::toward_zero, Rounding::nearest_even, Rounding::upward, Rounding::downward}) {
      for (auto align : {numeq::core::Alignment::truncate, numeq::core::Alignment::nearest_even}) {
        FusedStep s = nv::h100_fp16;
        s.n = k.n;
        s.fraction_bits = 700;
        s.alignment = align;
        s.a_format = s.b_format = *k.in;
        s.output = Cast{fmts::fp32, mode};
        s.overflow = numeq::core::OverflowRule::cast;  // IEEE overflow, as the reference rounds
        for (int trial = 0; trial < 400; ++trial) {
          std::vector<double> a, b;
          xt::xarray<double> terms = xt::zeros<double>({static_cast<std::size_t>(k.n + 1)});
          const auto draw = [&](const numeq::Format& f) {
            for (;;) {
              const std::uint64_t bits = (rng() & numeq::pattern_mask(f));
              const double v = numeq::decode(bits, f);
              if (std::isfinite(v)) return v;
            }
          };
          for (int i = 0; i < k.n; ++i) {
            a.push_back(draw(*k.in));
            b.push_back(draw(*k.in));
            terms(static_cast<std::size_t>(i)) = a.back() * b.back();  // exact in binary64
          }
          const double c = trial % 3 == 0 ? 0.0 : draw(fmts::fp32);
          terms(static_cast<std::size_t>(k.n)) = c;
          const double got = fused_step(a, b, c, s);
          const double want = numeq::reference::sum(terms, 0, s.output)();
          ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want)))
              << k.in->name << " " << numeq::to_string(mode) << " trial " << trial << ": " << got
              << " vs " << want;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 5 * 4 * 2 * 400);
}

TEST(FusedStep, NanAndInfRules) {
  const auto& s = nv::h100_fp16;
  const double one = 1.0;
  auto run = [&](std::vector<double> a, std::vector<double> b, double c) { return fused_step(a, b, c, s); };
  EXPECT_TRUE(std::isnan(run({qnan, 1}, {1, 1}, 0)));
  EXPECT_TRUE(std::isnan(run({1, 1}, {1, 1}, qnan)));
  EXPECT_TRUE(std::isnan(run({inf, 1}, {0, 1}, 0)));        // Inf * 0
  EXPECT_TRUE(std::isnan(run({inf, inf}, {one, -one}, 0)));  // +Inf and -Inf products
  EXPECT_TRUE(std::isnan(run({inf}, {one}, -inf)));          // +Inf product, c = -Inf
  EXPECT_EQ(run({inf, 65504}, {-one, 65504}, 1), -inf);      // Inf propagates with its sign
  EXPECT_EQ(run({-inf}, {-one}, 5), inf);
  EXPECT_EQ(run({1, 2}, {3, 4}, inf), inf);
  EXPECT_EQ(fused_step(std::vector<double>{inf}, std::vector<double>{-1.0}, 0.0, nv::h100_fp16_f16), -inf);
  // e4m3fn has no Inf: an Inf operand is not an e4m3fn value.
  EXPECT_THROW(fused_step(std::vector<double>{inf}, std::vector<double>{1.0}, 0.0, nv::h100_e4m3), numeq::error);
  // Overflow of finite terms: Inf under the NVIDIA rule (also toward zero), the largest finite
  // value under the IEEE cast rule.
  const std::vector<double> big(16, numeq::max_finite(fmts::bf16));
  EXPECT_EQ(fused_step(big, big, 0.0, nv::h100_bf16), inf);
  FusedStep ieee = nv::h100_bf16;
  ieee.overflow = numeq::core::OverflowRule::cast;
  EXPECT_EQ(fused_step(big, big, 0.0, ieee), numeq::max_finite(fmts::fp32));
}

TEST(FusedStep, ZeroSigns) {
  const std::vector<double> z = {-0.0}, one = {1.0};
  EXPECT_FALSE(std::signbit(fused_step(z, one, -0.0, nv::h100_fp16)));  // NVIDIA models: +0
  FusedStep s = nv::h100_fp16;
  s.zero_sign = numeq::core::ZeroSign::ieee;
  EXPECT_TRUE(std::signbit(fused_step(z, one, -0.0, s)));
  EXPECT_FALSE(std::signbit(fused_step(z, one, 0.0, s)));
  const std::vector<double> a = {1.0, 1.0}, b = {1.0, -1.0};
  EXPECT_FALSE(std::signbit(fused_step(a, b, 0.0, s)));  // exact cancellation: +0
  s.output.rounding = Rounding::downward;
  EXPECT_TRUE(std::signbit(fused_step(a, b, 0.0, s)));   // ... -0 when rounding downward
}

TEST(FusedStep, ExponentChoices) {
  // A subnormal operand's product counts at ea + eb with ea = emin (MMA-Sim), not at its true
  // exponent. a0 * b0 = 2^-24 * 2^15 = 2^-9 with encoded exponent -14 + 15 = 1; a1 * b1 = 1 + 2^-10.
  // With F = 10: encoded E = 1 cuts 2^-10 away; normalised (and MATLAB's largest term) E = 0 keeps it.
  FusedStep s = nv::v100_fp16;
  s.fraction_bits = 10;
  const double a[2] = {std::ldexp(1.0, -24), 1.0 + std::ldexp(1.0, -10)}, b[2] = {32768.0, 1.0};
  EXPECT_EQ(fused_step(a, b, 0.0, s), 1.0 + std::ldexp(1.0, -9));
  s.max_exponent = numeq::core::MaxExponent::normalized;
  EXPECT_EQ(fused_step(a, b, 0.0, s), 1.0 + std::ldexp(1.0, -9) + std::ldexp(1.0, -10));
  s.max_exponent = numeq::core::MaxExponent::largest_term;
  EXPECT_EQ(fused_step(a, b, 0.0, s), 1.0 + std::ldexp(1.0, -9) + std::ldexp(1.0, -10));
  // Products are not renormalised: 1.5 * 1.5 = 2.25 has ea + eb = 0 and F bits below 2^0, so
  // with F = 1 the term 2^-1 is kept and 2^-2 dropped: 2.25 -> 2.0 and 0.5 survives.
  FusedStep t = nv::v100_fp16;
  t.fraction_bits = 1;
  const double x[2] = {1.5, 0.5}, y[2] = {1.5, 1.0};
  EXPECT_EQ(fused_step(x, y, 0.0, t), 2.5);  // 2.25 -> 2.0 (cut at 2^-1), + 0.5
  t.max_exponent = numeq::core::MaxExponent::largest_term;  // MATLAB: one more bit, same grid
  EXPECT_EQ(fused_step(x, y, 0.0, t), 2.5);
  t.max_exponent = numeq::core::MaxExponent::normalized;  // E = 1: grid 2^0, 0.5 cut away
  EXPECT_EQ(fused_step(x, y, 0.0, t), 2.0);
}

TEST(FusedStep, ZerosAndTinyTerms) {
  // bf16: a zero times 2^127 has exponent -126 + 127 = 1 under MMA-Sim's rule and sets E, cutting
  // the genuine product 2^-120; with zeros excluded (MATLAB) the product survives.
  const double a[2] = {0.0, std::ldexp(1.0, -60)}, b[2] = {std::ldexp(1.0, 127), std::ldexp(1.0, -60)};
  EXPECT_EQ(fused_step(a, b, 0.0, nv::h100_bf16), 0.0);
  FusedStep s = nv::h100_bf16;
  s.zeros = numeq::core::ZeroTerms::excluded;
  EXPECT_EQ(fused_step(a, b, 0.0, s), std::ldexp(1.0, -120));
  // A product far below fp32: kept exactly without a floor, cut with MATLAB's -126 floor.
  s.output = Cast{fmts::fp64, Rounding::toward_zero};
  const double t[1] = {std::ldexp(1.0, -100)};
  EXPECT_EQ(fused_step(t, t, 0.0, s), std::ldexp(1.0, -200));
  s.exponent_floor = -126;
  EXPECT_EQ(fused_step(t, t, 0.0, s), 0.0);
  // And MMA-Sim's zero c (exponent -126) does the same.
  s.exponent_floor = numeq::core::no_exponent_floor;
  s.zeros = numeq::core::ZeroTerms::fp32_emin;
  EXPECT_EQ(fused_step(t, t, 0.0, s), 0.0);
}

TEST(FusedChain, A100K16IsTwoStepsOfEight) {
  // c = 1 and one product 2^-24 in each half: each step gives 1 + 2^-24, cut to 1 in fp32; a
  // single 16-wide step with F = 24 would keep both (1 + 2^-23).
  std::vector<double> a(16, 0.0), b(16, 0.0);
  a[3] = a[12] = std::ldexp(1.0, -12);
  b[3] = b[12] = std::ldexp(1.0, -12);
  EXPECT_EQ(fused_chain(a, b, 1.0, 16, nv::a100_fp16), 1.0);
  const double first = fused_step(std::span(a).first(8), std::span(b).first(8), 1.0, nv::a100_fp16);
  EXPECT_EQ(fused_chain(a, b, 1.0, 16, nv::a100_fp16),
            fused_step(std::span(a).subspan(8), std::span(b).subspan(8), first, nv::a100_fp16));
  FusedStep wide = nv::a100_fp16;
  wide.n = 16;
  EXPECT_EQ(fused_chain(a, b, 1.0, 16, wide), 1.0 + std::ldexp(1.0, -23));
  // A short last step and K = 0.
  EXPECT_EQ(fused_chain(a, b, 1.0, 13, nv::a100_fp16), 1.0);
  EXPECT_EQ(fused_chain(a, b, 0.75, 0, nv::a100_fp16), 0.75);
  EXPECT_THROW(fused_chain(a, b, 1.0, 17, nv::a100_fp16), numeq::error);
}

TEST(FusedStep, RejectsBadInput) {
  const std::vector<double> one = {1.0};
  EXPECT_THROW(fused_step(std::vector<double>{0.1}, one, 0.0, nv::h100_bf16), numeq::error);  // not bf16
  EXPECT_THROW(fused_step(std::vector<double>{500.0}, one, 0.0, nv::h100_e4m3), numeq::error);
  EXPECT_THROW(fused_step(one, one, 0.1, nv::h100_fp16_f16), numeq::error);  // c not fp16
  EXPECT_THROW(fused_step(one, std::vector<double>{1.0, 2.0}, 0.0, nv::h100_fp16), numeq::error);
  EXPECT_THROW(fused_step(std::vector<double>(5, 1.0), std::vector<double>(5, 1.0), 0.0, nv::v100_fp16),
               numeq::error);  // 5 products in a step of 4
  FusedStep s = nv::h100_fp16;
  s.fraction_bits = numeq::core::max_fraction_bits + 1;
  EXPECT_THROW(fused_step(one, one, 0.0, s), numeq::error);
  s = nv::h100_fp16;
  s.output.rounding = Rounding::stochastic;
  EXPECT_THROW(fused_step(one, one, 0.0, s), numeq::error);
  try {
    fused_step(std::vector<double>{1.0, 0.1}, std::vector<double>{1.0, 1.0}, 0.0, nv::h100_fp16);
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("a[1]"), std::string::npos) << e.what();
  }
}

TEST(FusedStep, H100MmaSyncFp8F16Composition) {
  std::vector<double> a(32), b(32);
  for (std::size_t k = 0; k < 32; ++k) {
    a[k] = std::ldexp(1.0 + static_cast<double>(k % 8) / 8, static_cast<int>(k % 5) - 2);
    b[k] = (k % 3 == 0 ? -1.0 : 1.0) * std::ldexp(1.0, -static_cast<int>(k % 4));
  }
  const double c = 0.3330078125;  // an fp16 value
  std::vector<double> la, lb, ha, hb;
  for (std::size_t k = 0; k < 32; ++k) {
    (k % 4 < 2 ? la : ha).push_back(a[k]);
    (k % 4 < 2 ? lb : hb).push_back(b[k]);
  }
  const auto& half = nv::h100_mma_sync_e4m3_f16_half;
  const double d2 = fused_step(ha, hb, fused_step(la, lb, 0.0, half), half);
  const double want = numeq::round_to_format(d2 + c, Cast{fmts::fp16, Rounding::nearest_even});
  EXPECT_EQ(nv::h100_mma_sync_fp8_f16(a, b, c, half), want);
}

}  // namespace
