// The rounding shortcut (numeq/formats/fast_round.hpp: nearest even and toward zero) against the
// rounding kernel it stands in front of (encode then decode_bits, the generic path), on every floating format: where the
// shortcut answers, the kernel's value bit for bit; round_to_format (which takes the shortcut)
// equal to the kernel everywhere. Inputs: for formats of at most 16 bits every value, every
// midpoint between neighbours and the doubles on either side of each (every rounding decision
// the format has), plus the same around the largest finite value and the smallest normal, and
// random doubles of every magnitude; for wider formats (tf32 aside, fp32) the same around random
// values of the format. Where the shortcut answers, its bit pattern (FastRound::pattern) is the
// kernel's encoding.

#include "numeq/formats/fast_round.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace {

using numeq::Cast;
using numeq::Format;

double kernel(double x, const Cast& c) { return numeq::decode_bits(c.format, numeq::encode(x, c)); }

bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

// The doubles around a value v and around the midpoint of v and its successor w.
void around(double v, double w, std::vector<double>& out) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (const double p : {v, (v + w) / 2}) {  // (v + w) / 2 is exact: both lie in one or two binades of f < fp64
    out.push_back(p);
    out.push_back(std::nextafter(p, inf));
    out.push_back(std::nextafter(p, -inf));
    out.push_back(-p);
    out.push_back(-std::nextafter(p, inf));
  }
}

std::vector<double> inputs(const Format& f, std::mt19937_64& rng) {
  std::vector<double> xs;
  const std::uint64_t magnitudes = std::uint64_t{1} << (f.bits() - (f.is_signed ? 1 : 0));
  const double top = numeq::max_finite(f);
  if (f.bits() <= 16) {
    for (std::uint64_t m = 0; m + 1 < magnitudes; ++m) {
      const double v = numeq::decode_bits(f, m), w = numeq::decode_bits(f, m + 1);
      if (std::isfinite(v) && std::isfinite(w) && v <= top && w <= top) around(v, w, xs);
    }
  } else {
    std::uniform_int_distribution<std::uint64_t> pick(0, magnitudes - 2);
    for (int i = 0; i < 200000; ++i) {
      const std::uint64_t m = pick(rng);
      const double v = numeq::decode_bits(f, m), w = numeq::decode_bits(f, m + 1);
      if (std::isfinite(v) && std::isfinite(w) && v <= top && w <= top) around(v, w, xs);
    }
  }
  // The edges: past the largest finite value (overflow, saturation's boundary) and the smallest
  // normal (the shortcut's lower limit).
  around(top, top * (1 + std::ldexp(1.0, -f.mantissa_bits)), xs);
  around(numeq::min_normal(f), numeq::min_normal(f) * (1 + std::ldexp(1.0, -f.mantissa_bits)), xs);
  std::uniform_real_distribution<double> exponent(-1100, 1100);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::ldexp(0.5 + 0.5 * std::ldexp(double(rng() >> 11), -53), int(exponent(rng))));
  for (const double s : {0.0, -0.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                         std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max()})
    xs.push_back(s);
  return xs;
}

TEST(FastRound, EqualsTheKernelOnEveryFloatingFormat) {
  std::mt19937_64 rng(11);
  std::size_t shortcut = 0, total = 0;
  for (const Format* f : numeq::all_formats()) {
    if (f->is_integer()) continue;
    const std::vector<double> xs = inputs(*f, rng);
    for (const numeq::Rounding mode : {numeq::Rounding::nearest_even, numeq::Rounding::toward_zero})
    for (const numeq::Overflow o : {numeq::Overflow::ieee, numeq::Overflow::saturate})
      for (const numeq::Subnormals s : {numeq::Subnormals::keep, numeq::Subnormals::flush_both}) {
        Cast c;
        c.format = *f;
        c.rounding = mode;
        c.overflow = o;
        c.subnormals = s;
        const numeq::FastRound fast(c);
        std::size_t failures = 0;
        for (const double x : xs) {
          ++total;
          double r = 0;
          double k = 0;
          bool refused = false;
          try {
            k = kernel(x, c);
          } catch (const std::exception&) {
            refused = true;  // NaN into a format without NaN: the kernel's error
          }
          if (fast(x, r)) {
            ++shortcut;
            if (refused || !same(r, k)) ++failures;
            // Its bit pattern: the kernel's encoding of x (storage placement included).
            if (!refused && fast.pattern(r) != numeq::encode(x, c)) ++failures;
          }
          if (!refused && !same(numeq::round_to_format(x, c), k)) ++failures;
          if (failures > 0 && failures < 4) ADD_FAILURE() << f->name << ": x = " << x << " kernel " << k << " shortcut " << r;
        }
        EXPECT_EQ(failures, 0u) << f->name;
      }
  }
  EXPECT_GT(shortcut, total / 4);  // the shortcut answers a good share
}

TEST(FastRound, OtherModesAndFormatsAreLeftToTheKernel) {
  double r = 0;
  Cast c;
  c.format = numeq::formats::bf16;
  c.rounding = numeq::Rounding::upward;
  EXPECT_FALSE(numeq::FastRound(c)(1.5, r));
  c.rounding = numeq::Rounding::nearest_even;
  EXPECT_TRUE(numeq::FastRound(c)(1.5, r));
  c.format = numeq::formats::fp64;
  EXPECT_FALSE(numeq::FastRound(c)(1.5, r));
  c.format = numeq::formats::e8m0fnu;  // unsigned
  EXPECT_FALSE(numeq::FastRound(c)(2.0, r));
}

}  // namespace
