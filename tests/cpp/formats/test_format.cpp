// Format descriptors: every encoding of every small format decodes to the value MPFR computes from
// the fields; the named constants match the published tables (FACTS.md s1, OCP OFP8 rev 1.0 s5,
// OCP MX v1.0 s5.3, IEEE 754); name lookup and its errors.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "oracle/mpfr_oracle.hpp"

namespace {

using numeq::Format;
using numeq_oracle::decode_oracle;
using numeq_oracle::Spec;

std::vector<const Format*> floating_formats() {
  std::vector<const Format*> out;
  for (const Format* f : numeq::all_formats())
    if (!f->is_integer()) out.push_back(f);
  return out;
}

// Every bit pattern of f, in storage placement (tf32: 2^19 fp32 patterns with 13 low zeros).
std::vector<std::uint64_t> all_patterns(const Format& f) {
  std::vector<std::uint64_t> out;
  const std::uint64_t n = std::uint64_t{1} << f.bits();
  out.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) out.push_back(i << f.storage_shift);
  return out;
}

// values_within against enumeration: x's values are within y's exactly when each finite value of x
// (decoded by the MPFR oracle) is among y's decoded values (y up to 16 bits) or survives a trip
// through float (y = fp32). Signs aside, as the function says: magnitudes only.
TEST(Format, ValuesWithinMatchesEnumeratedValues) {
  std::vector<const Format*> narrow;
  for (const Format* f : floating_formats())
    if (f->storage_bits <= 16) narrow.push_back(f);
  auto magnitudes = [](const Format& f) {
    std::set<double> out;
    const Spec spec(f);
    for (std::uint64_t bits : all_patterns(f)) {
      const double v = decode_oracle(spec, bits);
      if (std::isfinite(v)) out.insert(std::fabs(v));
    }
    return out;
  };
  std::size_t pairs = 0;
  for (const Format* x : narrow) {
    const std::set<double> xs = magnitudes(*x);
    bool in_fp32 = true;
    for (const double v : xs) in_fp32 = in_fp32 && static_cast<double>(static_cast<float>(v)) == v;
    EXPECT_EQ(numeq::values_within(*x, numeq::formats::fp32), in_fp32) << x->name << " in fp32";
    for (const Format* y : narrow) {
      const std::set<double> ys = magnitudes(*y);
      bool within = true;
      for (const double v : xs) within = within && ys.count(v) != 0;
      EXPECT_EQ(numeq::values_within(*x, *y), within) << x->name << " in " << y->name;
      ++pairs;
    }
  }
  std::cout << "[values_within] " << pairs << " pairs of formats enumerated\n";
}

// binade_spacing against the gaps between consecutive values of the format, decoded by the MPFR
// oracle: every value (and a point between it and the next) has the gap to the next value as its
// spacing; at and beyond the largest finite value the top binade's spacing continues.
TEST(Format, BinadeSpacingIsTheGapToTheNextValue) {
  for (const Format* f : floating_formats()) {
    if (f->storage_bits > 16 && f->name != "tf32") continue;
    const Spec spec(*f);
    std::set<double> values;
    for (std::uint64_t bits : all_patterns(*f)) {
      const double v = decode_oracle(spec, bits);
      if (std::isfinite(v) && v >= 0) values.insert(v);
    }
    const int emin = f->emin(), m = f->mantissa_bits;
    const std::vector<double> sorted(values.begin(), values.end());
    for (std::size_t i = 0; i + 1 < sorted.size(); ++i) {
      const double gap = sorted[i + 1] - sorted[i];  // exact: both are values of a narrow format
      ASSERT_EQ(numeq::binade_spacing(sorted[i], emin, m), gap) << f->name << " at " << sorted[i];
      ASSERT_EQ(numeq::binade_spacing(sorted[i] + gap / 2, emin, m), gap) << f->name << " inside " << sorted[i];
    }
    // The top binade's spacing: the gap below the largest value, or (no fraction bits: a binade of
    // one value, 2^e) the value itself.
    const double top = sorted.back();
    const double top_gap = m == 0 ? top : top - sorted[sorted.size() - 2];
    EXPECT_EQ(numeq::binade_spacing(top, emin, m), top_gap) << f->name;
    EXPECT_EQ(numeq::binade_spacing(top + top_gap / 2, emin, m), top_gap) << f->name;
  }
}

TEST(Format, EveryEncodingDecodesToTheMpfrValue) {
  for (const Format* f : floating_formats()) {
    if (f->storage_bits > 16 && f->name != "tf32") continue;
    const Spec spec(*f);
    int mismatches = 0;
    std::uint64_t count = 0;
    for (std::uint64_t bits : all_patterns(*f)) {
      const double want = decode_oracle(spec, bits);
      const double got = numeq::decode(bits, *f);
      ++count;
      // NaNs must agree in sign too: numeq keeps the sign of a NaN where the format has one.
      const bool ok = numeq_oracle::same_value(want, got) &&
                      std::signbit(want) == std::signbit(got);
      if (!ok && ++mismatches <= 10)
        ADD_FAILURE() << f->name << " bits 0x" << std::hex << bits << std::dec << ": expected "
                      << numeq_oracle::describe(want) << ", got " << numeq_oracle::describe(got);
    }
    std::cout << "[decode] " << f->name << ": " << count << " patterns\n";
  }
}

// fp32 and fp64 are too wide to enumerate here (test_exhaustive covers fp32 as a cast input);
// a stride through their patterns plus the hardware's own reading of them is an independent check.
TEST(Format, WideFormatsDecodeLikeTheHardware) {
  for (std::uint64_t i = 0; i < (std::uint64_t{1} << 32); i += 65521) {
    const auto bits = static_cast<std::uint32_t>(i);
    const double hw = static_cast<double>(std::bit_cast<float>(bits));
    EXPECT_TRUE(numeq_oracle::same_value(hw, numeq::decode(bits, numeq::formats::fp32))) << bits;
    EXPECT_TRUE(numeq_oracle::same_value(hw, decode_oracle(numeq::formats::fp32, bits))) << bits;
  }
  std::uint64_t state = 1;
  for (int i = 0; i < 100000; ++i) {
    state = numeq::splitmix64_mix(state + numeq::splitmix64_gamma);
    const double hw = std::bit_cast<double>(state);
    EXPECT_TRUE(numeq_oracle::same_value(hw, numeq::decode(state, numeq::formats::fp64))) << state;
    EXPECT_TRUE(numeq_oracle::same_value(hw, decode_oracle(numeq::formats::fp64, state))) << state;
  }
}

// Counting specials is a second, table-driven view of the encodings: IEEE formats spend
// 2 * (2^m - 1) patterns on NaN and 2 on Inf, fn one NaN per sign, fnuz exactly one, finite none;
// every other pattern is a distinct number (only +-0 share a value, told apart by sign).
TEST(Format, SpecialsAndDistinctValues) {
  for (const Format* f : floating_formats()) {
    if (f->storage_bits > 16 && f->name != "tf32") continue;
    const Spec spec(*f);
    std::uint64_t nans = 0, infs = 0;
    std::set<std::pair<double, bool>> values;
    std::uint64_t finite = 0;
    for (std::uint64_t bits : all_patterns(*f)) {
      const double v = decode_oracle(spec, bits);
      if (std::isnan(v)) {
        ++nans;
      } else if (std::isinf(v)) {
        ++infs;
      } else {
        ++finite;
        values.insert({v, std::signbit(v)});
      }
    }
    std::uint64_t want_nans = 0;
    switch (f->specials) {
      case numeq::Specials::ieee: want_nans = 2 * ((std::uint64_t{1} << f->mantissa_bits) - 1); break;
      case numeq::Specials::fn: want_nans = f->is_signed ? 2 : 1; break;
      case numeq::Specials::fnuz: want_nans = 1; break;
      case numeq::Specials::finite: want_nans = 0; break;
    }
    EXPECT_EQ(nans, want_nans) << f->name;
    EXPECT_EQ(infs, f->specials == numeq::Specials::ieee ? 2u : 0u) << f->name;
    EXPECT_EQ(values.size(), finite) << f->name << ": two patterns share a value";
    // The canonical NaN and Inf patterns numeq emits really are NaN / Inf.
    if (f->has_nan()) {
      EXPECT_TRUE(std::isnan(decode_oracle(spec, f->nan_bits(false) << f->storage_shift)));
      EXPECT_TRUE(std::isnan(decode_oracle(spec, f->nan_bits(true) << f->storage_shift)));
    }
    if (f->has_inf()) {
      EXPECT_EQ(decode_oracle(spec, f->inf_bits(false) << f->storage_shift), HUGE_VAL);
      EXPECT_EQ(decode_oracle(spec, f->inf_bits(true) << f->storage_shift), -HUGE_VAL);
    }
    EXPECT_EQ(decode_oracle(spec, f->max_finite_magnitude() << f->storage_shift),
              numeq::max_finite(*f))
        << f->name;
    if (!values.empty()) {
      EXPECT_EQ(values.rbegin()->first, numeq::max_finite(*f)) << f->name;
    }
  }
}

// One row of a published format table.
struct Row {
  const char* name;
  int sign, exp, man, bias;
  bool inf, nan, negative_zero;
  double max_finite, min_normal, min_subnormal;
  int bits;  // information bits (sign + exponent + fraction)
};

// FACTS.md s1 (from OCP OFP8 rev 1.0 s5, ml_dtypes, LLVM APFloat); fp64 from IEEE 754 Table 3.5;
// FP6/FP4 from OCP MX v1.0 s5.3.2/5.3.3 (E3M2 max 28, E2M3 max 7.5, E2M1 max 6).
const Row kTable[] = {
    {"fp64", 1, 11, 52, 1023, true, true, true, 1.7976931348623157e308, 0x1p-1022, 0x1p-1074, 64},
    {"fp32", 1, 8, 23, 127, true, true, true, static_cast<double>(3.4028235e38f), 0x1p-126,
     0x1p-149, 32},
    {"tf32", 1, 8, 10, 127, true, true, true, 0, 0x1p-126, 0x1p-136, 19},  // max "~3.4e38"
    {"bf16", 1, 8, 7, 127, true, true, true, static_cast<double>(3.3895314e38f), 0x1p-126,
     0x1p-133, 16},
    {"fp16", 1, 5, 10, 15, true, true, true, 65504, 0x1p-14, 0x1p-24, 16},
    {"e4m3fn", 1, 4, 3, 7, false, true, true, 448, 0x1p-6, 0x1p-9, 8},
    {"e4m3", 1, 4, 3, 7, true, true, true, 240, 0x1p-6, 0x1p-9, 8},
    {"e4m3fnuz", 1, 4, 3, 8, false, true, false, 240, 0x1p-7, 0x1p-10, 8},
    {"e5m2", 1, 5, 2, 15, true, true, true, 57344, 0x1p-14, 0x1p-16, 8},
    {"e5m2fnuz", 1, 5, 2, 16, false, true, false, 57344, 0x1p-15, 0x1p-17, 8},
    // "none, no zero": numeq reports min_subnormal == min_normal for a format without subnormals.
    {"e8m0fnu", 0, 8, 0, 127, false, true, false, 0x1p127, 0x1p-127, 0x1p-127, 8},
    {"e3m2fn", 1, 3, 2, 3, false, false, true, 28, 0.25, 0.0625, 6},
    {"e2m3fn", 1, 2, 3, 1, false, false, true, 7.5, 1, 0.125, 6},
    {"e2m1fn", 1, 2, 1, 1, false, false, true, 6, 1, 0.5, 4},
};

TEST(Format, MatchesPublishedTable) {
  EXPECT_EQ(std::size(kTable), floating_formats().size());
  for (const Row& row : kTable) {
    SCOPED_TRACE(row.name);
    const Format& f = numeq::format_by_name(row.name);
    EXPECT_FALSE(f.is_integer());
    EXPECT_EQ(f.is_signed, row.sign == 1);
    EXPECT_EQ(f.exponent_bits, row.exp);
    EXPECT_EQ(f.mantissa_bits, row.man);
    EXPECT_EQ(f.bias, row.bias);
    EXPECT_EQ(f.has_inf(), row.inf);
    EXPECT_EQ(f.has_nan(), row.nan);
    EXPECT_EQ(f.has_negative_zero(), row.negative_zero);
    EXPECT_EQ(f.bits(), row.bits);
    EXPECT_EQ(f.precision(), row.man + 1);
    EXPECT_EQ(f.has_zero, std::string(row.name) != "e8m0fnu");
    EXPECT_EQ(numeq::min_normal(f), row.min_normal);
    EXPECT_EQ(numeq::min_subnormal(f), row.min_subnormal);
    EXPECT_EQ(std::ldexp(1.0, f.emin()), row.min_normal);
    if (row.max_finite != 0) {
      EXPECT_EQ(numeq::max_finite(f), row.max_finite);
    } else {  // tf32: the table gives "~3.4e38"
      EXPECT_NEAR(numeq::max_finite(f), 3.4e38, 0.01e38);
    }
    // The oracle derives the same maximum from the fields alone.
    EXPECT_EQ(Spec(f).max_finite, numeq::max_finite(f));
  }
  // Storage: tf32 travels in an fp32 register, FP6/FP4 one per byte.
  EXPECT_EQ(numeq::formats::tf32.storage_bits, 32);
  EXPECT_EQ(numeq::formats::tf32.storage_shift, 13);
  EXPECT_EQ(numeq::formats::e3m2fn.storage_bits, 8);
  EXPECT_EQ(numeq::formats::e2m1fn.storage_bits, 8);
  // bf16's max is the pattern 0x7F7F (FACTS.md s1).
  EXPECT_EQ(numeq::decode(0x7F7F, numeq::formats::bf16), static_cast<double>(3.3895314e38f));
}

// emax() is the exponent of the largest finite value: MPFR's field-derived maximum (the oracle's)
// read by ilogb, for every format (integers: of int_max).
TEST(Format, EmaxIsTheLargestFiniteValuesExponent) {
  for (const Format* f : numeq::all_formats()) {
    SCOPED_TRACE(f->name);
    const double largest = f->is_integer() ? static_cast<double>(f->int_max()) : Spec(*f).max_finite;
    EXPECT_EQ(f->emax(), std::ilogb(largest));
  }
  EXPECT_EQ(numeq::formats::fp32.emax(), 127);
  EXPECT_EQ(numeq::formats::e4m3fn.emax(), 8);
}

TEST(Format, IntegerFormatsMatchTable) {
  EXPECT_EQ(numeq::max_finite(numeq::formats::int8), 127);
  EXPECT_EQ(numeq::max_finite(numeq::formats::uint8), 255);
  EXPECT_EQ(numeq::max_finite(numeq::formats::int32), 2147483647.0);
  EXPECT_EQ(numeq::formats::int8.int_min(), -128);
  EXPECT_EQ(numeq::formats::uint8.int_min(), 0);
  EXPECT_EQ(numeq::formats::int32.int_min(), -2147483648LL);
  for (const Format* f : {&numeq::formats::int8, &numeq::formats::uint8, &numeq::formats::int32})
    EXPECT_TRUE(f->is_integer()) << f->name;
  // Two's complement reading of every int8 / uint8 pattern.
  for (std::uint64_t b = 0; b < 256; ++b) {
    EXPECT_EQ(numeq::decode(b, numeq::formats::int8),
              static_cast<double>(static_cast<std::int8_t>(static_cast<std::uint8_t>(b))));
    EXPECT_EQ(numeq::decode(b, numeq::formats::uint8), static_cast<double>(b));
  }
}

TEST(Format, LookupByNameForEveryFormat) {
  std::set<std::string_view> names;
  ASSERT_EQ(numeq::all_formats().size(), numeq::formats::all.size());
  for (const Format* f : numeq::all_formats()) {
    EXPECT_TRUE(names.insert(f->name).second) << "duplicate name " << f->name;
    const Format& found = numeq::format_by_name(f->name);
    EXPECT_EQ(&found, f) << f->name;
    EXPECT_NE(numeq::format_names().find(std::string(f->name)), std::string::npos) << f->name;
    const std::string kind_names = numeq::format_names(f->kind);
    EXPECT_NE(kind_names.find(std::string(f->name)), std::string::npos) << f->name;
  }
  EXPECT_EQ(numeq::format_names(numeq::FormatKind::floating).find("int8"), std::string::npos);
  EXPECT_EQ(numeq::format_names(numeq::FormatKind::integer).find("bf16"), std::string::npos);
}

TEST(Format, UnknownNameErrorListsValidNames) {
  for (const char* bad : {"fp8", "", "FP16", "e4m3fn ", "bfloat16"}) {
    try {
      (void)numeq::format_by_name(bad, "target");
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const numeq::error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("target"), std::string::npos) << msg;
      EXPECT_NE(msg.find("'" + std::string(bad) + "'"), std::string::npos) << msg;
      for (const Format* f : numeq::all_formats())
        EXPECT_NE(msg.find(std::string(f->name)), std::string::npos) << f->name << " in " << msg;
    }
  }
  // The default parameter name, and the standard-library base class.
  try {
    (void)numeq::format_by_name("nope");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fmt"), std::string::npos) << e.what();
  }
}

// The accumulator formats plans name (e8m13, e8m24 ..): apart from `all`, found by
// plan_format_by_name with the formats of `all`, and listed by its error.
TEST(Format, AccumulatorFormatsAreFoundForPlans) {
  for (const Format* f : numeq::formats::accumulators) {
    EXPECT_EQ(&numeq::plan_format_by_name(f->name), f) << f->name;
    for (const Format* g : numeq::all_formats()) EXPECT_NE(f->name, g->name);
    EXPECT_THROW((void)numeq::format_by_name(f->name), numeq::error) << f->name;
    // Wider than fp32 by the fraction only: fp32's exponent range, every value in binary64.
    EXPECT_EQ(f->exponent_bits, 8);
    EXPECT_EQ(f->bias, 127);
  }
  for (const Format* g : numeq::all_formats()) EXPECT_EQ(&numeq::plan_format_by_name(g->name), g) << g->name;
  try {
    (void)numeq::plan_format_by_name("e8m99", "plan.output.format");
    ADD_FAILURE() << "no error";
  } catch (const numeq::error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("plan.output.format: unknown format 'e8m99'", 0), 0u) << msg;
    for (const Format* f : numeq::formats::accumulators) EXPECT_NE(msg.find(std::string(f->name)), std::string::npos) << msg;
    EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
  }
}

// Equality is the whole spec: a format built by hand under a table name is not that format
// unless every field agrees.
TEST(Format, EqualityComparesTheWholeSpec) {
  static_assert(numeq::formats::fp32 == numeq::formats::fp32);
  static_assert(!(numeq::formats::fp32 == numeq::formats::tf32));
  Format f = numeq::formats::fp32;
  EXPECT_EQ(f, numeq::formats::fp32);
  f.storage_shift = 13;
  EXPECT_NE(f, numeq::formats::fp32);
  f = numeq::formats::fp16;
  f.bias = 14;
  EXPECT_NE(f, numeq::formats::fp16);
  f = numeq::formats::e4m3;
  f.specials = numeq::Specials::fn;
  EXPECT_NE(f, numeq::formats::e4m3);
  EXPECT_NE(f, numeq::formats::e4m3fn);  // e4m3fn's spec under another name
  f.name = "e4m3fn";
  EXPECT_EQ(f, numeq::formats::e4m3fn);
  f.is_signed = false;
  EXPECT_NE(f, numeq::formats::e4m3fn);
  for (const Format* a : numeq::all_formats())
    for (const Format* b : numeq::all_formats()) EXPECT_EQ(*a == *b, a == b) << a->name << " " << b->name;
}

TEST(Format, DecodeRejectsBitsOutsideThePattern) {
  for (const Format* f : numeq::all_formats()) {
    SCOPED_TRACE(f->name);
    const std::uint64_t mask = numeq::pattern_mask(*f);
    if (f->storage_bits == 64) {
      EXPECT_NO_THROW((void)numeq::decode(~std::uint64_t{0}, *f));
      continue;
    }
    EXPECT_NO_THROW((void)numeq::decode(mask, *f));
    // Every single bit outside the pattern is rejected: above it, and below it for tf32.
    for (int bit = 0; bit < 64; ++bit) {
      const std::uint64_t b = std::uint64_t{1} << bit;
      if ((mask & b) != 0) continue;
      EXPECT_THROW((void)numeq::decode(b, *f), numeq::error) << "bit " << bit;
    }
  }
  EXPECT_THROW((void)numeq::decode(0x40, numeq::formats::e3m2fn), numeq::error);
  EXPECT_THROW((void)numeq::decode(0x10, numeq::formats::e2m1fn), numeq::error);
  EXPECT_THROW((void)numeq::decode(0x3F800001, numeq::formats::tf32), numeq::error);
  EXPECT_THROW((void)numeq::decode(0x100, numeq::formats::e4m3fn), numeq::error);
  EXPECT_THROW((void)numeq::decode(0x10000, numeq::formats::fp16), numeq::error);
  EXPECT_THROW((void)numeq::decode(0x100, numeq::formats::int8), numeq::error);
}

}  // namespace

namespace {

// next_up / next_down against libm's nextafter, bit for bit: the specials, both zeros, the
// subnormal and normal edges, and random bit patterns of every class.
TEST(Format, NextUpAndDownAreNextafter) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> xs = {0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::denorm_min(), -std::numeric_limits<double>::denorm_min(),
                            std::numeric_limits<double>::min(), -std::numeric_limits<double>::min(),
                            std::numeric_limits<double>::max(), -std::numeric_limits<double>::max(), 1.0, -1.0, 0x1p-1022 - 0x1p-1074};
  std::uint64_t state = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < 200000; ++i) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    xs.push_back(std::bit_cast<double>(state));
  }
  for (const double x : xs) {
    const double up = numeq::next_up(x), down = numeq::next_down(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(up) && std::isnan(down));
      continue;
    }
    EXPECT_EQ(std::bit_cast<std::uint64_t>(up), std::bit_cast<std::uint64_t>(std::nextafter(x, inf))) << x;
    EXPECT_EQ(std::bit_cast<std::uint64_t>(down), std::bit_cast<std::uint64_t>(std::nextafter(x, -inf))) << x;
  }
}

}  // namespace
