// Scalar cast API: round_to_format / encode / convert / decode agree with each other, and the
// regressions for the bugs other libraries shipped (FACTS.md s1 "Known bugs in peers").

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/rounding.hpp"
#include "oracle/mpfr_oracle.hpp"
#include "oracle/test_support.hpp"

namespace {

using numeq::Cast;
using numeq::Format;
using numeq::Overflow;
using numeq::Rounding;
using numeq::Subnormals;
using numeq_oracle::same_value;
using numeq_oracle::Spec;

using numeq_test::kModes;

Cast make(const Format& f, Rounding r = Rounding::nearest_even, Overflow o = Overflow::ieee,
          Subnormals s = Subnormals::keep) {
  Cast c;
  c.format = f;
  c.rounding = r;
  c.overflow = o;
  c.subnormals = s;
  c.seed = 42;
  return c;
}

std::vector<const Format*> floating_formats() {
  std::vector<const Format*> out;
  for (const Format* f : numeq::all_formats())
    if (!f->is_integer()) out.push_back(f);
  return out;
}

// A deterministic input stream: raw bit patterns and values spread over the formats' ranges.
std::vector<double> sample_doubles(std::size_t n) {
  std::vector<double> out;
  std::uint64_t s = 12345;
  for (std::size_t i = 0; i < n; ++i) {
    s = numeq::splitmix64_mix(s + numeq::splitmix64_gamma);
    out.push_back(std::bit_cast<double>(s));
    const double mant = 1.0 + std::ldexp(static_cast<double>(s >> 12), -52);
    out.push_back(((s & 1) != 0 ? -1.0 : 1.0) * std::ldexp(mant, static_cast<int>(s % 300) - 150));
  }
  for (double x : {0.0, -0.0, HUGE_VAL, -HUGE_VAL, std::numeric_limits<double>::quiet_NaN(), 1.0,
                   -431.99999999999994, 464.0, 1e-310})
    out.push_back(x);
  return out;
}

TEST(Cast, RoundToFormatIsDecodeOfEncode) {
  const std::vector<double> xs = sample_doubles(4000);
  for (const Format* f : floating_formats()) {
    for (Rounding r : kModes) {
      for (Subnormals s : {Subnormals::keep, Subnormals::flush_both}) {
        const Cast c = make(*f, r, Overflow::ieee, s);
        for (std::size_t i = 0; i < xs.size(); ++i) {
          const double x = xs[i];
          if (std::isnan(x) && !f->has_nan()) continue;  // throws: tested below
          const std::uint64_t bits = numeq::encode(x, c, i);
          const double v = numeq::round_to_format(x, c, i);
          ASSERT_TRUE(same_value(v, numeq::decode(bits, *f)))
              << f->name << " " << numeq::to_string(r) << " x=" << numeq_oracle::describe(x);
          // A binary64 value through convert() from fp64 is the same cast as encode().
          ASSERT_EQ(numeq::convert(std::bit_cast<std::uint64_t>(x), numeq::formats::fp64, c, i),
                    bits)
              << f->name << " " << numeq::to_string(r) << " x=" << numeq_oracle::describe(x);
          // The draw index matters for stochastic rounding only.
          if (r != Rounding::stochastic) {
            ASSERT_EQ(numeq::encode(x, c, i + 977), bits) << f->name;
          }
        }
      }
    }
  }
}

// An fp32 value converted from its pattern is the same cast as its (exact) widening to double,
// as long as DAZ is off (DAZ looks at the source format's subnormals).
TEST(Cast, ConvertFromFp32MatchesEncodeOfTheWidenedValue) {
  std::uint64_t s = 99;
  for (const Format* f : floating_formats()) {
    for (Rounding r : kModes) {
      const Cast c = make(*f, r, Overflow::saturate, Subnormals::flush_outputs);
      for (int i = 0; i < 20000; ++i) {
        s = numeq::splitmix64_mix(s + numeq::splitmix64_gamma);
        const auto b = static_cast<std::uint32_t>(s);
        const double x = std::bit_cast<float>(b);
        if (std::isnan(x) && !f->has_nan()) continue;
        ASSERT_EQ(numeq::convert(b, numeq::formats::fp32, c, s), numeq::encode(x, c, s))
            << f->name << " " << numeq::to_string(r) << " fp32 0x" << std::hex << b;
      }
    }
  }
  // With DAZ the two differ exactly on fp32 subnormals (normal as doubles): 2^-130 -> bf16.
  const Cast daz = make(numeq::formats::bf16, Rounding::nearest_even, Overflow::ieee,
                        Subnormals::flush_inputs);
  const auto sub = std::bit_cast<std::uint32_t>(0x1p-130f);
  EXPECT_EQ(numeq::decode(numeq::convert(sub, numeq::formats::fp32, daz), numeq::formats::bf16), 0);
  EXPECT_EQ(numeq::round_to_format(0x1p-130, daz), 0x1p-130);
}

// Each exact value of a format casts to itself in every mode; every other format's values convert
// through convert() as their decoded value would.
TEST(Cast, EncodingsRoundTripAndConvertBetweenFormats) {
  for (const Format* f : floating_formats()) {
    if (f->storage_bits > 16) continue;
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << f->bits()); ++b) {
      const double v = numeq::decode(b, *f);
      for (Rounding r : kModes) {
        const Cast c = make(*f, r);
        if (std::isnan(v)) {
          EXPECT_EQ(numeq::encode(v, c), f->nan_bits(std::signbit(v))) << f->name << " " << b;
        } else {
          EXPECT_EQ(numeq::encode(v, c), b) << f->name << " " << numeq::to_string(r) << " " << b;
        }
      }
      for (const Format* g : floating_formats()) {
        if (std::isnan(v) && !g->has_nan()) continue;
        const Cast c = make(*g, Rounding::nearest_even, Overflow::saturate);
        EXPECT_EQ(numeq::convert(b, *f, c), numeq::encode(v, c))
            << f->name << " 0x" << std::hex << b << " -> " << g->name;
      }
    }
  }
}

// DAZ judges subnormality in the source format: a subnormal fp16 / e4m3fn / ... pattern is read as
// a zero even where the target (fp32, say) could hold it exactly; E8M0 has no subnormals at all.
TEST(Cast, ConvertFlushInputsLooksAtTheSourceFormat) {
  std::uint64_t checked = 0, flushed = 0;
  for (const Format* src : floating_formats()) {
    if (src->storage_bits > 16) continue;
    const Spec s(*src);
    for (const Format* dst : floating_formats()) {
      numeq_oracle::RoundOracle oracle(*dst);
      for (Rounding r : {Rounding::nearest_even, Rounding::upward}) {
        for (Subnormals sub : {Subnormals::flush_inputs, Subnormals::flush_both}) {
          const Cast c = make(*dst, r, Overflow::ieee, sub);
          for (std::uint64_t b = 0; b < (std::uint64_t{1} << src->bits()); ++b) {
            const double v = numeq_oracle::decode_oracle(s, b);
            const bool subnormal = s.has_zero && v != 0 && std::fabs(v) < std::ldexp(1.0, s.emin);
            const numeq_oracle::Expected want = oracle.cast(v, c, 0, subnormal);
            ++checked;
            flushed += subnormal ? 1 : 0;
            if (want.throws) {
              EXPECT_THROW((void)numeq::convert(b, *src, c), numeq::error);
              continue;
            }
            const std::uint64_t got = numeq::convert(b, *src, c);
            ASSERT_TRUE(same_value(numeq::decode(got, *dst), want.value))
                << src->name << " 0x" << std::hex << b << " -> " << dst->name << " "
                << numeq::to_string(r) << " " << numeq::to_string(sub) << ": expected "
                << numeq_oracle::describe(want.value) << ", got " << got;
          }
        }
      }
    }
  }
  std::cout << "[convert] DAZ by source format: " << checked << " casts, " << flushed
            << " of them flushed inputs\n";
  // The plain case spelled out: the smallest fp16 subnormal into fp32.
  const Cast daz = make(numeq::formats::fp32, Rounding::nearest_even, Overflow::ieee,
                        Subnormals::flush_inputs);
  EXPECT_EQ(numeq::convert(0x0001, numeq::formats::fp16, daz), 0u);
  EXPECT_EQ(numeq::convert(0x8001, numeq::formats::fp16, daz), 0x80000000u);
  EXPECT_EQ(numeq::convert(0x0400, numeq::formats::fp16, daz), std::bit_cast<std::uint32_t>(0x1p-14f));
}

// ml_dtypes rounds float64 -> fp8 through float32 (open PR 401): -431.99999999999994 lies just
// below the e4m3fn midpoint 432 between 416 and 448, but its float32 rounding is exactly 432,
// which then ties to even 448.
TEST(Regression, MlDtypesDoubleRounding) {
  const double x = -431.99999999999994;
  const Cast c = make(numeq::formats::e4m3fn);
  EXPECT_EQ(numeq::round_to_format(x, c), -416);
  // The trap is real: the value rounded to fp32 first does go to -448.
  EXPECT_EQ(static_cast<double>(static_cast<float>(x)), -432);
  EXPECT_EQ(numeq::round_to_format(static_cast<float>(x), c), -448);
  // And the oracle agrees.
  EXPECT_EQ(numeq_oracle::round_oracle(x, c).value, -416);
}

// CPFloat's e4m3 preset admits 480. The IEEE-like e4m3 has max 240 (S.1111.000 is Inf): nothing
// rounds to 480 and 248 (the midpoint 240 | 256) and above overflow.
TEST(Regression, CpfloatE4m3NeverGives480) {
  std::uint64_t checked = 0;
  const auto lo = std::bit_cast<std::uint32_t>(200.0f);
  const auto hi = std::bit_cast<std::uint32_t>(600.0f);
  for (Rounding r : kModes) {
    for (Overflow o : {Overflow::ieee, Overflow::saturate}) {
      const Cast c = make(numeq::formats::e4m3, r, o);
      for (std::uint32_t b = lo; b <= hi; b += 7) {
        for (std::uint32_t sign : {0u, 0x80000000u}) {
          const double v = numeq::decode(numeq::convert(b | sign, numeq::formats::fp32, c, b),
                                         numeq::formats::e4m3);
          ++checked;
          ASSERT_NE(std::fabs(v), 480) << numeq::to_string(r) << " " << std::bit_cast<float>(b);
          ASSERT_TRUE(std::isinf(v) || std::fabs(v) <= 240);
        }
      }
    }
  }
  std::cout << "[regression] e4m3 480 check: " << checked << " casts\n";
  const Cast c = make(numeq::formats::e4m3);
  EXPECT_EQ(numeq::max_finite(numeq::formats::e4m3), 240);
  EXPECT_EQ(numeq::round_to_format(std::nextafter(248.0, 0.0), c), 240);
  EXPECT_EQ(numeq::round_to_format(248, c), HUGE_VAL);  // tie: 240 is odd, goes to 256 -> Inf
  EXPECT_EQ(numeq::round_to_format(-250, c), -HUGE_VAL);
  EXPECT_EQ(numeq::round_to_format(480, c), HUGE_VAL);
  EXPECT_EQ(numeq::round_to_format(480, make(numeq::formats::e4m3, Rounding::nearest_even,
                                             Overflow::saturate)),
            240);
  EXPECT_EQ(numeq::encode(HUGE_VAL, c), 0x78u);  // S.1111.000
}

// QPyTorch's "nearest" is ties-away and always saturates: numeq's two nearest modes differ
// exactly at ties, and neither saturates under Overflow::ieee.
TEST(Regression, QpytorchTiesAndSaturation) {
  int differing_ties = 0;
  for (const Format* f : {&numeq::formats::e4m3fn, &numeq::formats::e5m2, &numeq::formats::bf16,
                          &numeq::formats::fp16}) {
    const Cast even = make(*f, Rounding::nearest_even, Overflow::saturate);
    const Cast away = make(*f, Rounding::nearest_away, Overflow::saturate);
    // Adjacent positive finite values, as the codes 0, 1, 2, ... up to the maximum.
    const std::uint64_t top = f->max_finite_magnitude();
    for (std::uint64_t b = 0; b < top; ++b) {
      const double lo = numeq::decode(b, *f);
      const double hi = numeq::decode(b + 1, *f);
      const double mid = (lo + hi) / 2;
      // At the tie: away takes the larger magnitude, even the even code.
      EXPECT_EQ(numeq::round_to_format(mid, away), hi) << f->name << " " << mid;
      EXPECT_EQ(numeq::round_to_format(-mid, away), -hi) << f->name << " " << mid;
      EXPECT_EQ(numeq::round_to_format(mid, even), (b % 2 == 0) ? lo : hi) << f->name << " " << mid;
      if (b % 2 == 0) ++differing_ties;
      // Off the tie both are plain round-to-nearest.
      for (double x : {std::nextafter(mid, 0.0), std::nextafter(mid, HUGE_VAL)}) {
        EXPECT_EQ(numeq::round_to_format(x, away), numeq::round_to_format(x, even))
            << f->name << " " << x;
      }
    }
  }
  EXPECT_GT(differing_ties, 1000);
  EXPECT_EQ(numeq::round_to_format(1.0625, make(numeq::formats::e4m3fn)), 1.0);
  EXPECT_EQ(numeq::round_to_format(1.0625, make(numeq::formats::e4m3fn, Rounding::nearest_away)),
            1.125);
  // No silent saturation: ties-away at 464 reaches 480 > 448 and overflows to NaN / Inf.
  EXPECT_TRUE(std::isnan(
      numeq::round_to_format(464, make(numeq::formats::e4m3fn, Rounding::nearest_away))));
  EXPECT_EQ(numeq::round_to_format(61440, make(numeq::formats::e5m2, Rounding::nearest_away)),
            HUGE_VAL);
  EXPECT_EQ(numeq::round_to_format(464, make(numeq::formats::e4m3fn)), 448);
}

// Universal rounded 464 + 2^-20 to 448: it is above the tie, so it rounds to 480 and overflows.
TEST(Regression, UniversalOverflowAboveTie) {
  const double x = 464 + 0x1p-20;
  const Cast ieee = make(numeq::formats::e4m3fn);
  const Cast sat = make(numeq::formats::e4m3fn, Rounding::nearest_even, Overflow::saturate);
  EXPECT_EQ(numeq::encode(x, ieee), numeq::formats::e4m3fn.nan_bits(false));
  EXPECT_EQ(numeq::encode(-x, ieee), numeq::formats::e4m3fn.nan_bits(true));
  EXPECT_TRUE(std::isnan(numeq::round_to_format(x, ieee)));
  EXPECT_EQ(numeq::round_to_format(x, sat), 448);
  EXPECT_EQ(numeq::round_to_format(-x, sat), -448);
  EXPECT_EQ(numeq::round_to_format(465, sat), 448);
  EXPECT_EQ(numeq::round_to_format(464, ieee), 448);
}

// CUDA's __float2bfloat16(double) rounds to odd into fp32 first: with 24 >= 8 + 2 bits, round-to-
// odd then round-to-nearest-even equals one direct rounding (Boldo & Melquiond). numeq must agree
// on every input, while the naive fp32-nearest path must not.
TEST(Regression, CudaRoundToOddThenBf16EqualsDirect) {
  const Cast odd32 = make(numeq::formats::fp32, Rounding::odd);
  std::uint64_t s = 2024, checked = 0;
  std::vector<double> xs;
  for (int i = 0; i < (1 << 20); ++i) {
    s = numeq::splitmix64_mix(s + numeq::splitmix64_gamma);
    const double mant = 1.0 + std::ldexp(static_cast<double>(s >> 12), -52);
    xs.push_back(((s & 1) != 0 ? -1.0 : 1.0) * std::ldexp(mant, static_cast<int>(s % 280) - 140));
    // Near bf16 midpoints: a bf16 midpoint nudged by a few binary64 ulps or by less than an
    // fp32 ulp (where fp32 nearest would land on the tie).
    const double base = std::ldexp(1.0 + std::ldexp(static_cast<double>((s >> 20) & 0x7F), -7) +
                                       0x1p-8, static_cast<int>((s >> 30) % 250) - 125);
    const double nudge = std::ldexp(static_cast<double>(static_cast<int>((s >> 40) % 64) - 32),
                                    std::ilogb(base) - 40);
    xs.push_back(base + nudge);
    xs.push_back(std::bit_cast<double>(s));
  }
  int naive_differs = 0;
  for (Overflow o : {Overflow::ieee, Overflow::saturate}) {
    for (Subnormals sub : {Subnormals::keep, Subnormals::flush_outputs}) {
      const Cast bf = make(numeq::formats::bf16, Rounding::nearest_even, o, sub);
      const Cast near32 = make(numeq::formats::fp32, Rounding::nearest_even, o, sub);
      for (double x : xs) {
        const std::uint64_t via_odd =
            numeq::convert(numeq::encode(x, odd32), numeq::formats::fp32, bf);
        ASSERT_EQ(via_odd, numeq::encode(x, bf))
            << numeq_oracle::describe(x) << " overflow=" << numeq::to_string(o)
            << " subnormals=" << numeq::to_string(sub);
        ++checked;
        if (numeq::convert(numeq::encode(x, near32), numeq::formats::fp32, bf) !=
            numeq::encode(x, bf))
          ++naive_differs;
      }
    }
  }
  std::cout << "[regression] round-to-odd bf16: " << checked << " inputs, naive fp32 path differs on "
            << naive_differs << "\n";
  EXPECT_GT(naive_differs, 0);  // the inputs do reach the double-rounding cases
}

TEST(Cast, NanIntoFormatWithoutNanThrows) {
  for (const Format* f : {&numeq::formats::e2m1fn, &numeq::formats::e3m2fn,
                          &numeq::formats::e2m3fn}) {
    for (Overflow o : {Overflow::ieee, Overflow::saturate}) {
      const Cast c = make(*f, Rounding::nearest_even, o);
      const double nan = std::numeric_limits<double>::quiet_NaN();
      EXPECT_THROW((void)numeq::encode(nan, c), numeq::error) << f->name;
      EXPECT_THROW((void)numeq::encode(-nan, c), numeq::error) << f->name;
      EXPECT_THROW((void)numeq::round_to_format(nan, c), numeq::error) << f->name;
      EXPECT_THROW((void)numeq::convert(0x7FC00000u, numeq::formats::fp32, c), numeq::error);
      EXPECT_THROW((void)numeq::convert(0x7F, numeq::formats::e4m3fn, c), numeq::error);
      try {
        (void)numeq::encode(nan, c);
      } catch (const numeq::error& e) {
        EXPECT_NE(std::string(e.what()).find(std::string(f->name)), std::string::npos) << e.what();
      }
      // Infinities saturate: these formats have neither Inf nor NaN.
      EXPECT_EQ(numeq::round_to_format(HUGE_VAL, c), numeq::max_finite(*f));
      EXPECT_EQ(numeq::round_to_format(-HUGE_VAL, c), -numeq::max_finite(*f));
    }
  }
  EXPECT_EQ(numeq::round_to_format(-HUGE_VAL, make(numeq::formats::e2m1fn)), -6);
}

TEST(Cast, IntegerTargetOrSourceThrows) {
  for (const Format* f : {&numeq::formats::int8, &numeq::formats::uint8, &numeq::formats::int32}) {
    const Cast c = make(*f);
    EXPECT_THROW((void)numeq::encode(1.0, c), numeq::error) << f->name;
    EXPECT_THROW((void)numeq::round_to_format(1.0, c), numeq::error) << f->name;
    EXPECT_THROW((void)numeq::convert(0x3F800000u, numeq::formats::fp32, c), numeq::error);
    EXPECT_THROW((void)numeq::convert(1, *f, make(numeq::formats::fp32)), numeq::error) << f->name;
  }
  Cast bad = make(numeq::formats::bf16, Rounding::stochastic);
  bad.random_bits = 0;
  EXPECT_THROW((void)numeq::encode(1.0, bad), numeq::error);
}

// Stochastic rounding: rounds up with probability floor(frac * 2^R) / 2^R, reproducibly per
// (seed, index).
TEST(Cast, StochasticRoundingStatistics) {
  Cast c = make(numeq::formats::bf16, Rounding::stochastic);
  const double ulp = 0x1p-7;
  const double x = 1 + 0.3 * ulp;  // frac = 0.3 (up to the binary64 representation)
  const int n = 1 << 16;
  int up = 0;
  for (int i = 0; i < n; ++i) {
    const double v = numeq::round_to_format(x, c, static_cast<std::uint64_t>(i));
    ASSERT_TRUE(v == 1 || v == 1 + ulp) << v;
    up += v > 1 ? 1 : 0;
    ASSERT_EQ(numeq::round_to_format(x, c, static_cast<std::uint64_t>(i)), v);  // reproducible
  }
  // Binomial(n, 0.3): sigma = 117; 6 sigma.
  EXPECT_NEAR(up, 0.3 * n, 700);
  // With one random bit, floor(0.3 * 2) = 0: never rounds up; 0.6 rounds up half the time.
  c.random_bits = 1;
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(numeq::round_to_format(x, c, i), 1);
  int half = 0;
  for (int i = 0; i < n; ++i) half += numeq::round_to_format(1 + 0.6 * ulp, c, i) > 1 ? 1 : 0;
  EXPECT_NEAR(half, n / 2, 700);
  // Another seed draws differently.
  c.random_bits = 32;
  Cast other = c;
  other.seed = 43;
  int differ = 0;
  for (int i = 0; i < 1000; ++i)
    differ += numeq::encode(x, c, i) != numeq::encode(x, other, i) ? 1 : 0;
  EXPECT_GT(differ, 100);
}

}  // namespace

namespace {

// The definition is_value shortcuts: x rounds to itself (nearest even; any mode would do for a
// value), the sign of zero kept, NaN where the format holds NaN; a refusal (NaN or Inf into a
// format without them) means "not a value".
bool rounds_to_itself(double x, const numeq::Format& f) {
  if (f.is_integer())
    return x == std::floor(x) && x >= static_cast<double>(f.int_min()) && x <= static_cast<double>(f.int_max());
  try {
    const double r = numeq::round_to_format(x, numeq::Cast{f});
    return (r == x && std::signbit(r) == std::signbit(x)) || (std::isnan(r) && std::isnan(x));
  } catch (const numeq::error&) {
    return false;
  }
}

}  // namespace

TEST(Cast, IsValueIsRoundingToItself) {
  // Every value of every format of at most 16 bits, each of them also decoded into every other
  // format's test, with its neighbours in binary64, midpoints and small offsets (mostly not
  // values), and the specials: is_value agrees with rounding to itself on each.
  std::vector<double> xs = {0.0, -0.0, std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min()};
  for (const numeq::Format* f : numeq::all_formats()) {
    if (f->is_integer() || f->bits() > 16) continue;
    std::vector<double> values;
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << f->bits()); ++b) {
      const double v = numeq::decode(b << f->storage_shift, *f);
      if (!std::isnan(v)) values.push_back(v);
    }
    std::sort(values.begin(), values.end());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double v = values[i];
      xs.insert(xs.end(), {v, std::nextafter(v, INFINITY), std::nextafter(v, -INFINITY), v * (1 + 0x1p-20), v * 3});
      if (i + 1 < values.size()) xs.push_back(v + (values[i + 1] - v) / 2);
    }
  }
  for (int e = -1080; e <= 1030; e += 7) xs.insert(xs.end(), {std::ldexp(1.0, e), std::ldexp(-1.5, e), std::ldexp(1 + 0x1p-23, e)});
  for (const double x : sample_doubles(20000)) xs.push_back(x);
  std::size_t checked = 0, values = 0;
  for (const numeq::Format* f : numeq::all_formats()) {
    for (const double x : xs) {
      const bool want = rounds_to_itself(x, *f);
      ASSERT_EQ(numeq::is_value(x, *f), want) << f->name << " " << x;
      ++checked;
      values += want;
    }
  }
  EXPECT_GT(values, 10000u);
  std::cout << "is_value: " << checked << " (value, format) pairs, " << values << " values\n";
}

// Arrays of ones (a value of every floating format) with `odd` (no value of a format narrower
// than the array's type) at a few positions around first_not_value's 1024-element blocks: the
// answer is the first element is_value refuses.
template <class T>
void expect_first_in_rows(const numeq::Format& f, T odd) {
  std::vector<T> row;
  for (const std::size_t at : {std::size_t{0}, std::size_t{1023}, std::size_t{1024}, std::size_t{2999}}) {
    row.assign(3000, T{1});
    row[at] = odd;
    std::size_t want = row.size();
    for (std::size_t i = 0; i < row.size() && want == row.size(); ++i)
      if (!numeq::is_value(static_cast<double>(row[i]), f)) want = i;
    EXPECT_EQ(numeq::first_not_value(row.data(), row.size(), f), want) << f.name << " " << at;
  }
}

TEST(Cast, FirstNotValueOfFloat32ArraysIsValueTestElementByElement) {
  // The float32 overload (the block shortcut on the widened value, ValueTest for the rest) against
  // is_value on the widened value, one float32 at a time: every 2^16-th bit pattern plus every
  // pattern with a random high half (all exponents, both signs, NaN payloads, subnormals), then
  // whole arrays whose first non-value sits anywhere in a block.
  std::vector<float> xs;
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 0x10000 - 1) xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(b)));
  std::uint64_t state = 88172645463325252u;
  for (int i = 0; i < 200000; ++i) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(state)));
    xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(state) & 0xffff0000u));
    xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(state) & 0xffffe000u));
  }
  std::size_t checked = 0;
  for (const numeq::Format* f : numeq::all_formats()) {
    for (const float x : xs) {
      const bool want = numeq::is_value(static_cast<double>(x), *f);
      ASSERT_EQ(numeq::first_not_value(&x, 1, *f) == 0, !want) << f->name << " " << x;
      ++checked;
    }
    expect_first_in_rows<float>(*f, 1.0f + 0x1p-23f);
  }
  std::cout << "first_not_value(float32): " << checked << " (value, format) pairs\n";
}

TEST(Cast, FirstNotValueOfFloat64ArraysIsValueTestElementByElement) {
  // The float64 overload's block shortcut (exponent in a normal binade below f's top one, no
  // fraction bits beyond f's) against is_value, one double at a time and in arrays: values and
  // neighbours of every format (their binade edges included), random doubles and the specials.
  std::vector<double> xs = {0.0, -0.0, std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min()};
  for (const numeq::Format* f : numeq::all_formats()) {
    if (f->is_integer()) continue;
    for (const double v : {numeq::max_finite(*f), numeq::min_normal(*f), numeq::min_subnormal(*f)})
      for (const double s : {1.0, -1.0, 0.5, 2.0, 1.5, 0.75})
        xs.insert(xs.end(), {v * s, std::nextafter(v * s, INFINITY), std::nextafter(v * s, -INFINITY)});
  }
  for (int e = -1080; e <= 1030; e += 3) xs.insert(xs.end(), {std::ldexp(1.0, e), std::ldexp(-1.5, e), std::ldexp(1 + 0x1p-7, e)});
  for (const double x : sample_doubles(100000)) {
    xs.push_back(x);
    xs.push_back(std::bit_cast<double>(std::bit_cast<std::uint64_t>(x) & ~((std::uint64_t{1} << 45) - 1)));
  }
  for (const numeq::Format* f : numeq::all_formats()) {
    for (const double x : xs)
      ASSERT_EQ(numeq::first_not_value(&x, 1, *f) == 0, !numeq::is_value(x, *f)) << f->name << " " << x;
    expect_first_in_rows<double>(*f, 1.0 + 0x1p-40);
  }
}

TEST(Cast, FirstNotValueOfLargeArraysIsTheFirstAcrossThreads) {
  // Arrays far above the threaded scan's slice size, with non-values planted in several slices:
  // the answer is the lowest planted index (the oracle: the plants themselves), on any thread
  // count, for both overloads.
  const numeq::Format& bf16 = numeq::format_by_name("bf16", "fmt");
  constexpr std::size_t n = std::size_t{3} << 20;
  std::vector<double> xd(n);
  for (std::size_t i = 0; i < n; ++i) xd[i] = std::ldexp(1.0 + static_cast<double>(i % 128) / 128.0, static_cast<int>(i % 40) - 20);
  std::vector<float> xf(xd.begin(), xd.end());
  const std::vector<std::vector<std::size_t>> plants = {
      {}, {n - 1}, {0, n - 1}, {n / 2 + 3, n - 7}, {(n / 3) * 2 + 1, n / 3 + 5, n - 1}, {1000, 900000, 2500000}};
  for (int threads : {1, 2, 3, 7}) {
    numeq::set_num_threads(threads);
    for (const auto& at : plants) {
      std::vector<double> d = xd;
      std::vector<float> f = xf;
      for (std::size_t i : at) d[i] = f[i] = 1.0f + 0x1p-20f;  // not a bf16 value
      std::size_t want = n;
      for (std::size_t i : at) want = std::min(want, i);
      EXPECT_EQ(numeq::first_not_value(d.data(), n, bf16), want) << threads << " threads";
      EXPECT_EQ(numeq::first_not_value(f.data(), n, bf16), want) << threads << " threads";
    }
  }
  numeq::set_num_threads(0);
}
