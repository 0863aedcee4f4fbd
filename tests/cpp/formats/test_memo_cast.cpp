// The memoised cast paths (formats/src/memo_cast.hpp: a table of the kernel's answers per class
// of inputs, looked up in AVX-512, AVX2 or scalar code) against the rounding kernel itself, called
// per element through encode_bits with draw i, bit for bit on every class, mode and instruction set.

// The memoised cast paths' private header (its scalar stochastic decision is tested on chosen
// draws), first: it includes <immintrin.h> under a pragma that silences GCC 12's false
// -Wmaybe-uninitialized reports from the AVX-512 intrinsics.
#include "../../../formats/src/memo_cast.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include "array_test_support.hpp"
#include "numeq/numeq.hpp"

namespace {

using numeq::Cast;
using numeq::Format;
using numeq::Rounding;
using numeq_test::ArrayTest;
using numeq_test::bits_of;
using numeq_test::describe;
using numeq_test::with_bits_type;

// Large contiguous float arrays into formats of <= 7 mantissa bits take a memoised path
// (formats/src/memo_cast.hpp): a table of the kernel's answers per class of inputs, looked up in
// AVX-512, AVX2 or scalar code, and for stochastic rounding a pair of answers per class chosen by
// the kernel's comparison of the discarded bits with the draw. Every path must agree with the
// kernel itself, called per element through encode_bits with draw i, on every class: every sign,
// exponent and top-bits combination, with the rest of the mantissa zero, just above zero, just
// below, at and just above the half-unit, all ones and random; in every rounding mode and every
// overflow and subnormal setting, on 1 and 2 threads, and on views that start at any element and
// whose length is not a multiple of the vector width.

// NUMEQ_SWEEP_SCALE (default 1; e.g. 0.05 under sanitizers) thins the stochastic sweeps.
double sweep_scale() {
  const char* s = std::getenv("NUMEQ_SWEEP_SCALE");
  const double v = s != nullptr ? std::atof(s) : 1.0;
  return v > 0 ? std::min(v, 1.0) : 1.0;
}

// Caps the instruction set of the memoised paths (NUMEQ_ISA) while in scope.
class IsaScope {
 public:
  explicit IsaScope(const char* isa) { setenv("NUMEQ_ISA", isa, 1); }
  ~IsaScope() { unsetenv("NUMEQ_ISA"); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
};

const char* const kIsas[] = {"avx512", "avx2", "portable"};

bool memo_format(const Format& f) {
  return f.kind == numeq::FormatKind::floating && f.mantissa_bits <= 7 && f.storage_bits <= 16 && f.has_nan() &&
         f.emin() >= numeq::formats::fp32.emin();
}

// One input per class and a few more: top 9 + m bits, then each of the low-bit shapes.
std::vector<float> class_inputs(const Format& f, std::mt19937_64& g, bool stochastic) {
  const int low_bits = 23 - f.mantissa_bits;
  const std::uint32_t half = std::uint32_t{1} << (low_bits - 1);
  const std::uint32_t mask = (std::uint32_t{1} << low_bits) - 1;
  std::vector<float> inputs;
  for (std::uint32_t top = 0; top < (std::uint32_t{1} << (9 + f.mantissa_bits)); ++top) {
    std::vector<std::uint32_t> lows{0u, 1u, half - 1, half, half + 1, mask, static_cast<std::uint32_t>(g()) & mask};
    if (stochastic) {
      // Leading zeros and single bits anywhere: the draw's window (top random_bits of the
      // discarded bits) sees all, part or none of them.
      lows.push_back((static_cast<std::uint32_t>(g()) & mask) >> (g() % low_bits));
      lows.push_back(std::uint32_t{1} << (g() % low_bits));
    }
    for (const std::uint32_t low : lows) inputs.push_back(std::bit_cast<float>((top << low_bits) | low));
  }
  return inputs;
}

// Casts inputs[offset, offset + length) (a contiguous view starting at that element: its element
// i draws random_bits_at(key, i)) on every instruction set and on 1 and 2 threads, and counts the
// elements whose bits or values differ from the kernel's.
std::size_t memo_mismatches(const std::vector<float>& inputs, std::size_t offset, std::size_t length, const Cast& cast,
                            bool check_values, const std::string& label) {
  SCOPED_TRACE(label + " " + describe(cast) + " " + std::string(numeq::to_string(cast.subnormals)) + " seed " +
               std::to_string(cast.seed) + " offset " + std::to_string(offset) + " length " + std::to_string(length));
  const bool stochastic = cast.rounding == Rounding::stochastic;
  const std::uint64_t key = numeq::random_stream_key(cast.seed);
  const float* data = inputs.data() + offset;
  std::vector<std::uint64_t> want(length);
  for (std::size_t i = 0; i < length; ++i)
    want[i] = numeq::encode_bits(numeq::formats::fp32, std::bit_cast<std::uint32_t>(data[i]), cast,
                                 stochastic ? numeq::random_bits_at(key, i) : 0);
  const auto view = xt::adapt(data, length, xt::no_ownership(), std::vector<std::size_t>{length});
  std::size_t mismatches = 0;
  for (const char* isa : kIsas)
    for (int threads : {1, 2}) {
      const IsaScope scope(isa);
      numeq::set_num_threads(threads);
      with_bits_type(cast.format.storage_bits, [&]<class Bits>() {
        const xt::xarray<Bits> got = numeq::encode<Bits>(view, cast);
        for (std::size_t i = 0; i < length; ++i)
          if (got.data()[i] != want[i] && mismatches++ < 3)
            ADD_FAILURE() << isa << " threads " << threads << ": element " << i << " input 0x" << std::hex
                          << std::bit_cast<std::uint32_t>(data[i]) << " gives 0x" << +got.data()[i] << ", kernel 0x"
                          << want[i];
      });
      if (!check_values) continue;
      const xt::xarray<double> values = numeq::round(view, cast);
      for (std::size_t i = 0; i < length; ++i) {
        const double w = numeq::decode_bits(cast.format, want[i]);
        // Bit for bit, NaNs too: the vector paths widen bf16 patterns instead of reading the table
        // of decoded values (memo_cast.hpp, values_by_widening), and must give decode_bits' NaN.
        if (bits_of(values.data()[i]) != bits_of(w) && mismatches++ < 3)
          ADD_FAILURE() << isa << " threads " << threads << ": value of element " << i << " input 0x" << std::hex
                        << std::bit_cast<std::uint32_t>(data[i]);
      }
    }
  numeq::set_num_threads(0);
  return mismatches;
}

TEST_F(ArrayTest, MemoisedFloatCastsMatchTheKernel) {
  std::mt19937_64 g(7);
  for (const Format* f : numeq::formats::all) {
    if (!memo_format(*f)) continue;  // (the others take the per-element kernel)
    const std::vector<float> inputs = class_inputs(*f, g, false);
    for (int r = 0; r < 6; ++r)  // every mode but stochastic (below)
      for (const auto overflow : {numeq::Overflow::ieee, numeq::Overflow::saturate})
        for (const auto subnormals : {numeq::Subnormals::keep, numeq::Subnormals::flush_inputs,
                                      numeq::Subnormals::flush_outputs, numeq::Subnormals::flush_both}) {
          const Cast cast{*f, static_cast<Rounding>(r), overflow, subnormals};
          EXPECT_EQ(memo_mismatches(inputs, 0, inputs.size(), cast, true, "classes"), 0u) << f->name;
        }
  }
}

TEST_F(ArrayTest, MemoisedStochasticCastsMatchTheKernel) {
  // random_bits: below, at and above the discarded width of normal results (16 for bf16, 20 for
  // e4m3, 21 for e5m2), around 32 (the vector path's split) and up to 64.
  const std::vector<int> widths{1, 2, 3, 5, 8, 13, 16, 17, 20, 21, 22, 24, 31, 32, 33, 40, 47, 52, 63, 64};
  const double scale = sweep_scale();
  std::mt19937_64 g(17);
  for (const Format* f : numeq::formats::all) {
    if (!memo_format(*f)) continue;
    const std::vector<float> inputs = class_inputs(*f, g, true);
    std::size_t setting = 0;
    for (const auto overflow : {numeq::Overflow::ieee, numeq::Overflow::saturate})
      for (const auto subnormals : {numeq::Subnormals::keep, numeq::Subnormals::flush_inputs,
                                    numeq::Subnormals::flush_outputs, numeq::Subnormals::flush_both}) {
        // Every width under keep/ieee; a third of them (a different third each time) otherwise.
        for (std::size_t w = 0; w < widths.size(); ++w) {
          if (setting != 0 && (w + setting) % 3 != 0) continue;
          if (static_cast<double>(g() % 1000) >= 1000 * scale) continue;
          Cast cast{*f, Rounding::stochastic, overflow, subnormals};
          cast.random_bits = widths[w];
          cast.seed = g();
          EXPECT_EQ(memo_mismatches(inputs, 0, inputs.size(), cast, w % 4 == 0, "classes"), 0u) << f->name;
        }
        ++setting;
      }
  }
}

// Standard-normal and random-bit inputs over many seeds, on views that start mid-vector and end
// with a partial vector, above the parallel threshold (chunks then start mid-vector too).
TEST_F(ArrayTest, MemoisedCastsOnUnalignedViewsAndManySeeds) {
  std::mt19937_64 g(23);
  std::normal_distribution<float> normal;
  const std::size_t n = 70001 + 64;
  std::vector<float> normals(n), patterns(n);
  for (std::size_t i = 0; i < n; ++i) {
    normals[i] = normal(g);
    patterns[i] = std::bit_cast<float>(static_cast<std::uint32_t>(g()));
  }
  // Scaled into the 8-bit formats' subnormal range and below.
  std::vector<float> tiny(n);
  for (std::size_t i = 0; i < n; ++i) tiny[i] = std::ldexp(normals[i], -static_cast<int>(g() % 40));
  const std::size_t seeds = std::max<std::size_t>(2, static_cast<std::size_t>(12 * sweep_scale()));
  for (const Format* f : {&numeq::formats::bf16, &numeq::formats::e4m3fn, &numeq::formats::e5m2,
                          &numeq::formats::e4m3fnuz, &numeq::formats::e5m2fnuz, &numeq::formats::e4m3}) {
    for (std::size_t k = 0; k < seeds; ++k) {
      const std::size_t offset = std::vector<std::size_t>{0, 1, 3, 7, 15, 16, 33}[k % 7];
      const std::size_t length = n - 64 - (g() % 40);
      Cast cast{*f, k % 3 == 2 ? static_cast<Rounding>(g() % 6) : Rounding::stochastic};
      cast.seed = g();
      cast.random_bits = std::vector<int>{32, 64, 7, 33, 24, 48}[k % 6];
      if (k % 4 == 1) cast.overflow = numeq::Overflow::saturate;
      if (k % 5 == 3) cast.subnormals = numeq::Subnormals::flush_both;
      const bool values = k % 2 == 0;
      EXPECT_EQ(memo_mismatches(normals, offset, length, cast, values, "normal"), 0u) << f->name;
      EXPECT_EQ(memo_mismatches(patterns, offset, length, cast, values, "random bits"), 0u) << f->name;
      EXPECT_EQ(memo_mismatches(tiny, offset, length, cast, values, "tiny"), 0u) << f->name;
    }
  }
}

// The vector path compares the top 32 bits of the discarded bits and of the draw; with more than
// 32 random bits a carry from the low halves can decide, which happens when the discarded bits
// reach below bit 32 (results far below the normal range) and the top halves sum to 2^32 - 1.
// Random inputs hit that about once in 2^32 elements, so here the inputs are built from the draws:
// at the indices whose draw starts with the right bits, an input whose discarded bits (q = 33 of
// them) complement the draw's top half and end in a one.
TEST_F(ArrayTest, MemoisedStochasticCarryFromTheLowHalf) {
  const std::size_t n = 70001;
  for (const Format* f : {&numeq::formats::e4m3fn, &numeq::formats::e5m2, &numeq::formats::e4m3fnuz}) {
    for (const int random_bits : {33, 40, 64}) {
      Cast cast{*f, Rounding::stochastic};
      cast.random_bits = random_bits;
      cast.seed = 5 + static_cast<std::uint64_t>(random_bits);
      const std::uint64_t key = numeq::random_stream_key(cast.seed);
      const int low_bits = 23 - f->mantissa_bits;
      const int q = 33;  // discarded bits of S: D = S << 31, its top half S >> 1, its low half (S & 1) << 31
      const std::uint32_t field = static_cast<std::uint32_t>(f->emin() + 127 - (q - low_bits));
      std::mt19937_64 g(static_cast<std::uint64_t>(random_bits));
      std::normal_distribution<float> normal;
      std::vector<float> inputs(n);
      std::size_t crafted = 0, decided_by_carry = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t random = numeq::random_bits_at(key, i);
        const auto top = static_cast<std::uint32_t>(random >> 32);
        // S >> 1 = ~top needs top's 9 high bits to be 1111111110 ... (S has bit 23 set).
        if ((top >> 22) != 0x3FEu) {
          inputs[i] = normal(g);
          continue;
        }
        const std::uint32_t significand = ((~top & 0x7FFFFFu) << 1) | 1u;  // bit 23 set by ~top
        const std::uint32_t sign = (g() & 1) != 0 ? 0x80000000u : 0u;
        const std::uint32_t x = sign | field << 23 | (significand & 0x7FFFFFu);
        inputs[i] = std::bit_cast<float>(x);
        ++crafted;
        // The kernel's answer differs from the one of a draw without its low half: the carry decides.
        if (numeq::encode_bits(numeq::formats::fp32, x, cast, random) !=
            numeq::encode_bits(numeq::formats::fp32, x, cast, random & ~std::uint64_t{0xFFFFFFFF}))
          ++decided_by_carry;
      }
      ASSERT_GT(decided_by_carry, 10u) << f->name << " R" << random_bits << ": " << crafted << " crafted";
      EXPECT_EQ(memo_mismatches(inputs, 0, n, cast, true, "carry"), 0u) << f->name;
    }
  }
}

// The other edge of the comparison: frac + r == 2^R - 1 exactly (no increment; one more and there
// would be one). Random inputs meet it with probability 2^-R, so inputs are built from the draws:
// for element i with draw r, an input whose top R discarded bits are 2^R - 1 - r, with q
// discarded bits (q = 23 - m for normal results, more below the normal range), where such an
// input exists (the q bits must cover what the window needs).
std::optional<std::uint32_t> boundary_input(const Format& f, int random_bits, std::uint64_t random, int q,
                                            std::mt19937_64& g) {
  const int low_bits = 23 - f.mantissa_bits;
  const int emin_field = f.emin() + 127;
  const std::uint64_t window = random_bits == 64 ? ~std::uint64_t{0} : ~std::uint64_t{0} << (64 - random_bits);
  const std::uint64_t want = ~random & window;  // the top R bits of D: (2^R - 1 - r) << (64 - R)
  if (q > 64 || q < low_bits) return std::nullopt;
  std::uint64_t low = want >> (64 - q);  // the q discarded bits of S
  if ((low << (64 - q)) != want) return std::nullopt;
  if (q > random_bits) low |= g() & ((std::uint64_t{1} << (q - random_bits)) - 1);  // below the window
  std::uint64_t significand = low;
  if (q < 24) {
    significand |= ((std::uint64_t{1} << 23) | g()) & ~((std::uint64_t{1} << q) - 1) & 0xFFFFFF;
  } else if (significand < (std::uint64_t{1} << 23) || significand >= (std::uint64_t{1} << 24)) {
    return std::nullopt;  // S of a normal fp32 input has bit 23 set
  }
  int field = emin_field - (q - low_bits);
  if (q == low_bits) field += static_cast<int>(g() % static_cast<std::uint64_t>(255 - emin_field));
  if (field < 1 || field > 254) return std::nullopt;
  const std::uint32_t sign = (g() & 1) != 0 ? 0x80000000u : 0u;
  return sign | static_cast<std::uint32_t>(field) << 23 | static_cast<std::uint32_t>(significand & 0x7FFFFF);
}

TEST_F(ArrayTest, MemoisedStochasticEdgeOfTheComparison) {
  const std::size_t n = 70001;
  for (const Format* f : {&numeq::formats::bf16, &numeq::formats::e4m3fn, &numeq::formats::e5m2, &numeq::formats::e5m2fnuz}) {
    // Widths where such inputs come often enough: up to a few bits above the discarded width of
    // normal results (16 for bf16), and for the 8-bit formats up to 33 through results below the
    // normal range (q up to 34 discarded bits). Wider draws: the carry test above.
    const bool bf16 = *f == numeq::formats::bf16;
    for (const int random_bits : {1, 4, 8, 15, 16, 20, 21, 24, 28, 32, 33}) {
      if (bf16 && random_bits > 20) continue;
      Cast cast{*f, Rounding::stochastic};
      cast.random_bits = random_bits;
      cast.seed = 1000 + static_cast<std::uint64_t>(random_bits);
      const std::uint64_t key = numeq::random_stream_key(cast.seed);
      const std::uint64_t unit = std::uint64_t{1} << (64 - random_bits);
      std::mt19937_64 g(static_cast<std::uint64_t>(random_bits) * 31);
      std::normal_distribution<float> normal;
      std::vector<float> inputs(n);
      std::size_t edges = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t random = numeq::random_bits_at(key, i);
        std::optional<std::uint32_t> x;
        for (int q = 23 - f->mantissa_bits; q <= 34 && !x; ++q) x = boundary_input(*f, random_bits, random, q, g);
        inputs[i] = x ? std::bit_cast<float>(*x) : normal(g);
        // An edge: one more unit in the draw's window would increment.
        if (x && (~random & ~(unit - 1)) != 0 &&
            numeq::encode_bits(numeq::formats::fp32, *x, cast, random) !=
                numeq::encode_bits(numeq::formats::fp32, *x, cast, random + unit))
          ++edges;
      }
      ASSERT_GT(edges, 5u) << f->name << " R" << random_bits;
      EXPECT_EQ(memo_mismatches(inputs, 0, n, cast, random_bits % 2 == 0, "edge"), 0u) << f->name;
    }
  }
}

// The scalar decision (the tails, the slow lanes and machines without AVX-512) on draws chosen at
// will rather than drawn: for every class and random inputs, draws at the edge (frac + r = 2^R - 1
// and 2^R), random draws, 0 and all ones, every R from 1 to 64, against the kernel given the
// same draw. (The edge at R = 64 cannot be reached through SplitMix64 draws in a test.)
TEST_F(ArrayTest, MemoisedStochasticDecisionOnChosenDraws) {
  std::mt19937_64 g(41);
  for (const Format* f : numeq::formats::all) {
    if (!memo_format(*f)) continue;
    const std::vector<float> all_inputs = class_inputs(*f, g, true);
    // A random sample (a stride would keep one low-bit shape of class_inputs' nine).
    const auto samples = std::min(all_inputs.size(), static_cast<std::size_t>(20000 * sweep_scale()) + 100);
    for (const auto subnormals : {numeq::Subnormals::keep, numeq::Subnormals::flush_both})
      for (int random_bits = 1; random_bits <= 64; ++random_bits) {
        Cast cast{*f, Rounding::stochastic, random_bits % 2 == 0 ? numeq::Overflow::ieee : numeq::Overflow::saturate,
                  subnormals};
        cast.random_bits = random_bits;
        const auto table = numeq::memo::table_for(cast);
        const numeq::memo::StochasticSetup setup = numeq::memo::stochastic_setup(cast);
        const std::uint64_t window = setup.mask;
        const std::uint64_t unit = std::uint64_t{1} << (64 - random_bits);
        std::size_t mismatches = 0, edges = 0;
        for (std::size_t sample = 0; sample < samples; ++sample) {
          const auto x = std::bit_cast<std::uint32_t>(all_inputs[g() % all_inputs.size()]);
          // The discarded bits as round_and_pack aligns them, from the kernel's own unpack.
          const numeq::Unpacked u = numeq::unpack(numeq::formats::fp32, x);
          std::uint64_t discarded = 0;
          if (u.cls == numeq::ValueClass::finite) {
            const int target = std::max(u.exponent, f->emin());
            const int shift = 63 - f->mantissa_bits + (target - u.exponent);
            discarded = shift < 64 ? u.significand << (64 - shift) : shift < 128 ? u.significand >> (shift - 64) : 0;
          }
          const std::uint64_t edge = ~discarded & window;  // frac + r = 2^R - 1
          for (const std::uint64_t random : {edge, edge | (g() & ~window), edge + unit, edge - unit, g(), std::uint64_t{0},
                                             ~std::uint64_t{0}}) {
            const std::uint64_t want = numeq::encode_bits(numeq::formats::fp32, x, cast, random);
            const std::uint16_t got = numeq::memo::stochastic_pick(*table, setup, x, random);
            if (got != want && mismatches++ < 3)
              ADD_FAILURE() << describe(cast) << ": input 0x" << std::hex << x << " draw 0x" << random << " gives 0x" << got
                            << ", kernel 0x" << want;
          }
          if (numeq::encode_bits(numeq::formats::fp32, x, cast, edge) !=
              numeq::encode_bits(numeq::formats::fp32, x, cast, edge + unit))
            ++edges;
        }
        EXPECT_EQ(mismatches, 0u) << describe(cast);
        EXPECT_GT(edges, 0u) << describe(cast);
      }
  }
}

}  // namespace
