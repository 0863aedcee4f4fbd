// Counter-based random bits (random.hpp) and the statistics of stochastic rounding.
//
// Oracles: the published SplitMix64 reference outputs (Rosetta Code "Pseudo-random
// numbers/Splitmix64", seed 1234567), a sequential SplitMix64 written here from the paper's
// algorithm (state += gamma; output = mix(state)), and binomial statistics. Every statistical
// check uses a fixed seed (so it is deterministic) and a 6-sigma band (a correct implementation
// fails one check with probability about 2e-9).

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "numeq/numeq.hpp"

namespace {

using numeq::Cast;
using numeq::Format;
using numeq::Rounding;
__extension__ using u128 = unsigned __int128;

// SplitMix64 as in Steele, Lea and Flood (2014) / Vigna's splitmix64.c: a state advanced by the
// golden gamma, each output the state through the variant-13 finaliser of MurmurHash3.
class SequentialSplitMix64 {
 public:
  explicit SequentialSplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

// |observed - n p| within 6 standard deviations of Binomial(n, p); exact when p is 0 or 1.
void expect_binomial(std::uint64_t observed, std::uint64_t n, double p, const std::string& what) {
  const double mean = static_cast<double>(n) * p;
  const double sigma = std::sqrt(static_cast<double>(n) * p * (1 - p));
  EXPECT_LE(std::fabs(static_cast<double>(observed) - mean), 6 * sigma)
      << what << ": observed " << observed << " of " << n << ", expected " << mean << " +- 6 * "
      << sigma;
}

TEST(RandomBits, PublishedSplitMix64Outputs) {
  // random_bits_at(key, i) is SplitMix64 started at state `key`, output i.
  const std::uint64_t want[] = {6457827717110365317ull, 3203168211198807973ull, 9817491932198370423ull,
                                4593380528125082431ull, 16408922859458223821ull};
  for (std::uint64_t i = 0; i < 5; ++i) EXPECT_EQ(numeq::random_bits_at(1234567, i), want[i]) << i;
  EXPECT_EQ(numeq::random_bits_at(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(numeq::random_bits_at(0, 1), 0x6E789E6AA1B965F4ull);
}

TEST(RandomBits, CounterMatchesSequentialGenerator) {
  for (std::uint64_t key : {std::uint64_t{0}, std::uint64_t{1}, ~std::uint64_t{0},
                            numeq::random_stream_key(0), numeq::random_stream_key(42)}) {
    SequentialSplitMix64 g(key);
    for (std::uint64_t i = 0; i < 100000; ++i) {
      const std::uint64_t want = g.next();
      if (numeq::random_bits_at(key, i) != want) {
        ADD_FAILURE() << "key " << key << " index " << i;
        break;
      }
    }
  }
  // Indices at the top of the counter range wrap like the state does.
  SequentialSplitMix64 g(7 + (0xFFFFFFFFFFFFFFF0ull + 1) * 0x9E3779B97F4A7C15ull - 0x9E3779B97F4A7C15ull);
  for (std::uint64_t i = 0xFFFFFFFFFFFFFFF0ull; i != 0; ++i) {
    EXPECT_EQ(numeq::random_bits_at(7, i), g.next()) << i;
  }
}

TEST(RandomBits, DeterministicAndDistinct) {
  const std::uint64_t k0 = numeq::random_stream_key(0);
  const std::uint64_t k1 = numeq::random_stream_key(1);
  EXPECT_EQ(numeq::random_stream_key(0), k0);
  EXPECT_NE(k0, k1);
  // Same (key, index): same bits, every time. Different indices or seeds: different bits (the
  // finaliser is a bijection of distinct states, so within one stream there are no repeats at
  // all; across seeds the two windows of 20,000 outputs should not meet).
  std::set<std::uint64_t> seen;
  for (std::uint64_t i = 0; i < 20000; ++i) {
    const std::uint64_t a = numeq::random_bits_at(k0, i);
    EXPECT_EQ(a, numeq::random_bits_at(k0, i));
    seen.insert(a);
  }
  EXPECT_EQ(seen.size(), 20000u);
  std::size_t shared = 0;
  for (std::uint64_t i = 0; i < 20000; ++i) shared += seen.count(numeq::random_bits_at(k1, i));
  EXPECT_EQ(shared, 0u);
  // Seeds that differ in one bit give unrelated keys: about half the key bits differ.
  for (int b = 0; b < 64; ++b) {
    const int flipped = std::popcount(numeq::random_stream_key(0) ^ numeq::random_stream_key(std::uint64_t{1} << b));
    EXPECT_GE(flipped, 10) << "seed bit " << b;
    EXPECT_LE(flipped, 54) << "seed bit " << b;
  }
}

TEST(RandomBits, EveryBitIsBalanced) {
  constexpr std::uint64_t n = 1000000;
  for (std::uint64_t seed : {0ull, 12345ull}) {
    const std::uint64_t key = numeq::random_stream_key(seed);
    std::uint64_t ones[64] = {};
    std::uint64_t adjacent_equal_top = 0;  // top bit of draw i equals top bit of draw i+1
    std::uint64_t previous = numeq::random_bits_at(key, 0);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t r = numeq::random_bits_at(key, i);
      for (int b = 0; b < 64; ++b) ones[b] += (r >> b) & 1;
      if (i > 0) adjacent_equal_top += ((r ^ previous) >> 63) == 0 ? 1 : 0;
      previous = r;
    }
    for (int b = 0; b < 64; ++b)
      expect_binomial(ones[b], n, 0.5, "seed " + std::to_string(seed) + " bit " + std::to_string(b));
    expect_binomial(adjacent_equal_top, n - 1, 0.5, "adjacent top bits equal");
  }
}

// ---------------------------------------------------------------------------------------------
// Stochastic rounding: x = lo + frac * ulp between two neighbours lo and lo + ulp of a format.
// With R random bits numeq rounds away with probability floor(frac * 2^R) / 2^R exactly; over
// indices 0 .. 10^6 - 1 the number of results equal to the far neighbour is Binomial(10^6, p),
// and the mean result converges to x for large R.

struct SrCase {
  const Format* f;
  double lo;   // the neighbour nearer zero (a value of f)
  double ulp;  // the gap to the next value of f away from zero
  double frac;
};

double p_away(double frac, int random_bits) {
  return std::ldexp(std::floor(std::ldexp(frac, random_bits)), -random_bits);  // exact
}

TEST(StochasticRounding, ProbabilityIsTheTruncatedFraction) {
  const Format& bf16 = numeq::formats::bf16;
  const Format& e4m3 = numeq::formats::e4m3fn;
  const std::vector<SrCase> cases{
      {&bf16, 1.0, 0x1p-7, 0x1p-40},        // fraction near 0
      {&bf16, 1.0, 0x1p-7, 0.3},
      {&bf16, 0x1.fep100, 0x1p93, 0.5},     // an exact tie, large binade
      {&bf16, 1.0, 0x1p-7, 0.7},
      {&bf16, 0x1p-133, 0x1p-133, 1 - 0x1p-30},  // bf16 subnormal, fraction near 1
      {&e4m3, 416.0, 32.0, 0x1p-40},
      {&e4m3, 416.0, 32.0, 0.3},
      {&e4m3, 3 * 0x1p-9, 0x1p-9, 0.5},     // e4m3fn subnormals
      {&e4m3, 1.125, 0.125, 0.7},
      {&e4m3, 2.5, 0.125 * 2, 1 - 0x1p-30},
  };
  constexpr std::uint64_t n = 1000000;
  int case_number = 0;
  for (const SrCase& c : cases) {
    for (int random_bits : {1, 8, 32, 64}) {
      ++case_number;
      const bool negative = case_number % 2 == 0;
      const double sign = negative ? -1.0 : 1.0;
      const double lo = sign * c.lo;
      const double hi = sign * (c.lo + c.ulp);
      const double x = sign * (c.lo + c.frac * c.ulp);
      // The case is what it says: x is strictly between two neighbours of the format.
      ASSERT_EQ(numeq::round_to_format(x, Cast{*c.f, Rounding::toward_zero}), lo);
      ASSERT_EQ(numeq::round_to_format(x, Cast{*c.f, negative ? Rounding::downward : Rounding::upward}), hi);
      Cast cast{*c.f, Rounding::stochastic};
      cast.random_bits = random_bits;
      cast.seed = 1000 + static_cast<std::uint64_t>(case_number);
      const std::string what = std::string(c.f->name) + " x=" + std::to_string(x) + " frac=" +
                               std::to_string(c.frac) + " R=" + std::to_string(random_bits);
      std::uint64_t away = 0;
      std::uint64_t other = 0;
      double sum = 0;  // of (result - lo) / (hi - lo): exactly 0 or 1
      for (std::uint64_t i = 0; i < n; ++i) {
        const double r = numeq::round_to_format(x, cast, i);
        if (r == hi) {
          ++away;
          sum += 1;
        } else if (r != lo) {
          ++other;
        }
      }
      EXPECT_EQ(other, 0u) << what << ": results other than the two neighbours";
      const double p = p_away(c.frac, random_bits);
      expect_binomial(away, n, p, what);
      if (random_bits >= 32) {
        // The mean result converges to x: |mean - x| within 6 standard errors (plus the bias
        // 2^-R of truncating the fraction, below 2^-32 of a unit here).
        const double mean_fraction = sum / static_cast<double>(n);
        const double se = std::sqrt(c.frac * (1 - c.frac) / static_cast<double>(n));
        EXPECT_LE(std::fabs(mean_fraction - c.frac), 6 * se + std::ldexp(1.0, -random_bits)) << what;
        const double mean = lo + (hi - lo) * mean_fraction;
        EXPECT_LE(std::fabs(mean - x), (6 * se + std::ldexp(1.0, -random_bits)) * c.ulp) << what;
      }
    }
  }
}

TEST(StochasticRounding, OneRandomBitRoundsBelowHalfDown) {
  // With R = 1, floor(2 frac) / 2 is 0 for every frac < 1/2: never away, deterministically.
  Cast cast{numeq::formats::e4m3fn, Rounding::stochastic};
  cast.random_bits = 1;
  const double x = 1.125 + 0.49 * 0.125;
  for (std::uint64_t i = 0; i < 100000; ++i) ASSERT_EQ(numeq::round_to_format(x, cast, i), 1.125) << i;
}

TEST(StochasticRounding, ExactValuesNeverMove) {
  Cast cast{numeq::formats::bf16, Rounding::stochastic};
  for (int random_bits : {1, 8, 32, 64}) {
    cast.random_bits = random_bits;
    for (double x : {1.0, -1.0, 0x1.fep100, 0x1p-133, 0.0, -0.0, 3.0})
      for (std::uint64_t i = 0; i < 1000; ++i)
        ASSERT_EQ(std::bit_cast<std::uint64_t>(numeq::round_to_format(x, cast, i)),
                  std::bit_cast<std::uint64_t>(x));
  }
}

TEST(StochasticRounding, DrawsAreIndependentAcrossIndicesAndSeeds) {
  // For frac = 1/2 each decision is a fair coin: pairs (i, i+1) are both away a quarter of the
  // time, and two seeds agree half of the time.
  constexpr std::uint64_t n = 1000000;
  Cast a{numeq::formats::bf16, Rounding::stochastic};
  Cast b = a;
  a.seed = 1;
  b.seed = 2;
  const double x = 1.0 + 0.5 * 0x1p-7;
  std::uint64_t both = 0, agree = 0, away = 0;
  bool previous = numeq::round_to_format(x, a, 0) != 1.0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const bool up_a = numeq::round_to_format(x, a, i) != 1.0;
    const bool up_b = numeq::round_to_format(x, b, i) != 1.0;
    away += up_a ? 1 : 0;
    if (i > 0) both += (up_a && previous) ? 1 : 0;
    agree += up_a == up_b ? 1 : 0;
    previous = up_a;
  }
  expect_binomial(away, n, 0.5, "away");
  expect_binomial(both, n - 1, 0.25, "adjacent indices both away");
  expect_binomial(agree, n, 0.5, "seeds 1 and 2 agree");
}

TEST(StochasticRounding, DrawForIndexIsTheCounterOutput) {
  // The decision for element i is made from random_bits_at(random_stream_key(seed), i): away iff
  // the top R bits r satisfy r >= 2^R - floor(frac * 2^R). Recomputed here for a few thousand
  // indices, an independent statement of the rule in round_and_pack.hpp.
  const double lo = 416.0, ulp = 32.0;
  for (int random_bits : {1, 3, 8, 32, 63, 64}) {
    for (double frac : {0.3, 0.5, 0.9375, 1 - 0x1p-40}) {
      Cast cast{numeq::formats::e4m3fn, Rounding::stochastic};
      cast.random_bits = random_bits;
      cast.seed = 77;
      const double x = lo + frac * ulp;
      const std::uint64_t key = numeq::random_stream_key(cast.seed);
      // floor(frac * 2^R) and 2^R as 128-bit integers (R may be 64); frac * 2^64 is an integer
      // for these fractions (their last bit is no lower than 2^-64).
      const auto frac64 = static_cast<u128>(std::ldexp(frac, 64));
      ASSERT_EQ(static_cast<double>(frac64), std::ldexp(frac, 64));
      const u128 scaled = frac64 >> (64 - random_bits);
      const u128 full = static_cast<u128>(1) << random_bits;
      for (std::uint64_t i = 0; i < 4000; ++i) {
        const u128 r = numeq::random_bits_at(key, i) >> (64 - random_bits);
        const bool want_away = scaled != 0 && r >= full - scaled;
        const double got = numeq::round_to_format(x, cast, i);
        ASSERT_EQ(got, want_away ? lo + ulp : lo) << "R=" << random_bits << " frac=" << frac << " i=" << i;
      }
    }
  }
}

}  // namespace
