// numeq::widen: arrays of any element type read as doubles, checked against a format in the same
// pass. Values are compared with the MPFR decode oracle (decode_oracle builds each value from
// sign, exponent field and fraction, never calling numeq's decode) for every bit pattern of every
// 1- and 2-byte format, and with the hardware's integer conversion for integers; the check is
// compared with numeq::is_value element by element (the one definition of "a value of in_fmt",
// checked against MPFR in test_cast); exactness of 64-bit integers with an 80-bit long double
// round trip. The first element of each kind is what the report must name, on any thread count.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numeq/numeq.hpp"
#include "oracle/mpfr_oracle.hpp"

namespace {

using numeq::ElementType;
using numeq::Format;
using numeq::WidenReport;
using numeq_oracle::decode_oracle;
using numeq_oracle::same_value;

class WidenTest : public ::testing::Test {
 protected:
  void TearDown() override { numeq::set_num_threads(0); }
};

std::uint64_t pattern_limit(const Format& f) { return std::uint64_t{1} << f.storage_bits; }

// Every pattern of every 1- and 2-byte floating format, widened: the MPFR decode, and the first
// pattern with stray bits reported (6- and 4-bit formats in bytes).
TEST_F(WidenTest, EveryPatternOfEveryNarrowFormatDecodesAsTheOracle) {
  for (const Format* f : numeq::all_formats()) {
    if (f->is_integer() || f->storage_bits > 16) continue;
    SCOPED_TRACE(f->name);
    const std::uint64_t count = pattern_limit(*f);
    std::vector<double> out(count);
    WidenReport r;
    if (f->storage_bits == 8) {
      std::vector<std::uint8_t> bits(count);
      for (std::uint64_t p = 0; p < count; ++p) bits[p] = static_cast<std::uint8_t>(p);
      r = numeq::widen(bits.data(), count, ElementType::patterns(*f), out.data());
    } else {
      std::vector<std::uint16_t> bits(count);
      for (std::uint64_t p = 0; p < count; ++p) bits[p] = static_cast<std::uint16_t>(p);
      r = numeq::widen(bits.data(), count, ElementType::patterns(*f), out.data());
    }
    std::size_t first_stray = count;
    for (std::uint64_t p = 0; p < count; ++p) {
      if ((p & ~numeq::pattern_mask(*f)) != 0) {
        first_stray = std::min<std::size_t>(first_stray, p);
        continue;
      }
      ASSERT_TRUE(same_value(out[p], decode_oracle(*f, p))) << "pattern " << p << ": " << out[p];
    }
    EXPECT_EQ(r.not_pattern, first_stray);
    EXPECT_EQ(r.not_value, count);
    EXPECT_EQ(r.not_exact, count);
  }
}

// Each pattern alone, checked against every format: flagged exactly when is_value says its value
// is not one of the format's.
TEST_F(WidenTest, CheckFlagsExactlyThePatternsIsValueRefuses) {
  for (const Format* f : numeq::all_formats()) {
    if (f->is_integer() || f->storage_bits > 16) continue;
    const std::uint64_t count = pattern_limit(*f);
    for (const Format* check : numeq::all_formats()) {
      SCOPED_TRACE(std::string(f->name) + " checked against " + std::string(check->name));
      for (std::uint64_t p = 0; p < count; ++p) {
        if ((p & ~numeq::pattern_mask(*f)) != 0) continue;
        const std::uint8_t b8 = static_cast<std::uint8_t>(p);
        const std::uint16_t b16 = static_cast<std::uint16_t>(p);
        const void* data = f->storage_bits == 8 ? static_cast<const void*>(&b8) : static_cast<const void*>(&b16);
        double value = 0;
        const WidenReport r = numeq::widen(data, 1, ElementType::patterns(*f), &value, check);
        const bool expected = numeq::is_value(decode_oracle(*f, p), *check);
        ASSERT_EQ(r.not_value == 0, !expected) << "pattern " << p;
        // The check alone (no output) answers the same.
        ASSERT_EQ(numeq::widen(data, 1, ElementType::patterns(*f), nullptr, check).not_value, r.not_value);
      }
    }
  }
}

template <class T>
std::vector<T> integer_edges() {
  using L = std::numeric_limits<T>;
  std::vector<T> v = {L::min(), L::max(), T(0), T(1), T(L::max() / 2), T(L::min() / 2), T(L::max() - 1)};
  if constexpr (sizeof(T) == 8) {
    const T two53 = T(std::uint64_t{1} << 53);
    for (T d : {T(-2), T(-1), T(0), T(1), T(2), T(3), T(4)}) v.push_back(T(two53 + d));
    v.push_back(T(std::uint64_t{0xFFFFFFFFFFFFF} << 11));  // 52 significant bits, shifted: exact
    v.push_back(T(std::uint64_t{0x1FFFFFFFFFFFFF} << 10));  // 53 significant bits: exact
    v.push_back(T(std::uint64_t{0x3FFFFFFFFFFFFF} << 9));   // 54: not exact
    if constexpr (std::is_signed_v<T>)
      for (T d : {T(-2), T(-1), T(0), T(1), T(2), T(3)}) v.push_back(T(-two53 - d));
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) v.push_back(static_cast<T>(rng() >> (rng() % 64)));
  return v;
}

// Whether double holds v: the hardware's rounded conversion, compared in 80-bit long double
// (which holds every 64-bit integer).
template <class T>
bool exact_in_double(T v) {
  return static_cast<long double>(static_cast<double>(v)) == static_cast<long double>(v);
}

template <class T>
void check_integers(const std::vector<const Format*>& checks) {
  const std::vector<T> v = integer_edges<T>();
  const ElementType type = ElementType::integers(sizeof(T), std::is_signed_v<T>);
  std::vector<double> out(v.size());
  const WidenReport r = numeq::widen(v.data(), v.size(), type, out.data());
  std::size_t first_inexact = v.size();
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!exact_in_double(v[i])) first_inexact = std::min(first_inexact, i);
    ASSERT_EQ(out[i], static_cast<double>(v[i])) << i;
  }
  EXPECT_EQ(r.not_exact, first_inexact);
  EXPECT_EQ(r.not_pattern, v.size());
  if (sizeof(T) < 8) {
    EXPECT_EQ(first_inexact, v.size());
  }
  for (const Format* check : checks) {
    SCOPED_TRACE(check->name);
    std::size_t first = v.size();
    for (std::size_t i = 0; i < v.size() && first == v.size(); ++i)
      if (!numeq::is_value(static_cast<double>(v[i]), *check)) first = i;
    EXPECT_EQ(numeq::widen(v.data(), v.size(), type, out.data(), check).not_value, first);
    EXPECT_EQ(numeq::widen(v.data(), v.size(), type, nullptr, check).not_value, first);
    // Each element alone (the table of 1- and 2-byte types against the scalar test).
    for (std::size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(numeq::widen(&v[i], 1, type, nullptr, check).not_value == 0,
                !numeq::is_value(static_cast<double>(v[i]), *check)) << i;
  }
}

TEST_F(WidenTest, IntegersOfEveryWidthAsTheirDoubles) {
  std::vector<const Format*> checks(numeq::all_formats().begin(), numeq::all_formats().end());
  check_integers<std::int8_t>(checks);
  check_integers<std::uint8_t>(checks);
  check_integers<std::int16_t>(checks);
  check_integers<std::uint16_t>(checks);
  check_integers<std::int32_t>(checks);
  check_integers<std::uint32_t>(checks);
  check_integers<std::int64_t>(checks);
  check_integers<std::uint64_t>(checks);
}

// Every 1- and 2-byte integer pattern against every format at once: the first flagged is the
// first is_value refuses.
TEST_F(WidenTest, EverySmallIntegerPatternChecked) {
  for (int bytes : {1, 2})
    for (bool is_signed : {false, true}) {
      const std::size_t count = std::size_t{1} << (8 * bytes);
      std::vector<std::uint16_t> b16(count);
      std::vector<std::uint8_t> b8(count);
      for (std::size_t p = 0; p < count; ++p) b16[p] = static_cast<std::uint16_t>(p), b8[p] = static_cast<std::uint8_t>(p);
      const void* data = bytes == 1 ? static_cast<const void*>(b8.data()) : static_cast<const void*>(b16.data());
      const ElementType type = ElementType::integers(bytes, is_signed);
      for (const Format* check : numeq::all_formats()) {
        SCOPED_TRACE(std::string(check->name) + (is_signed ? " signed " : " unsigned ") + std::to_string(bytes));
        std::vector<double> out(count);
        const WidenReport r = numeq::widen(data, count, type, out.data(), check);
        std::size_t first = count;
        for (std::size_t p = 0; p < count; ++p) {
          const double v = is_signed && (p >> (8 * bytes - 1)) ? static_cast<double>(static_cast<std::int64_t>(p) - static_cast<std::int64_t>(count))
                                                               : static_cast<double>(p);
          ASSERT_EQ(out[p], v) << p;
          if (first == count && !numeq::is_value(v, *check)) first = p;
        }
        EXPECT_EQ(r.not_value, first);
      }
    }
}

// float and double: exact widening, the check as first_not_value over the whole array.
TEST_F(WidenTest, FloatAndDoubleCheckedAsFirstNotValue) {
  std::mt19937_64 rng(3);
  std::vector<float> f;
  for (float x : {0.0f, -0.0f, 1.0f, 1.5f, 65504.0f, 65520.0f, 448.0f, 1e-45f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    f.push_back(x);
  for (int i = 0; i < 20000; ++i) f.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng()) & 0xFFFF0000u));
  std::vector<double> d(f.begin(), f.end());
  for (const Format* check : numeq::all_formats()) {
    SCOPED_TRACE(check->name);
    std::vector<double> out(f.size());
    const WidenReport rf = numeq::widen(f.data(), f.size(), ElementType::patterns(numeq::formats::fp32), out.data(), check);
    EXPECT_EQ(rf.not_value, numeq::first_not_value(f.data(), f.size(), *check));
    if (rf.not_value == f.size()) {
      for (std::size_t i = 0; i < f.size(); ++i) ASSERT_TRUE(same_value(out[i], static_cast<double>(f[i])));
    }
    const WidenReport rd = numeq::widen(d.data(), d.size(), ElementType::patterns(numeq::formats::fp64), out.data(), check);
    EXPECT_EQ(rd.not_value, numeq::first_not_value(d.data(), d.size(), *check));
  }
  std::vector<double> out(f.size());
  const WidenReport r = numeq::widen(f.data(), f.size(), ElementType::patterns(numeq::formats::fp32), out.data());
  EXPECT_EQ(r.first(), f.size());
  for (std::size_t i = 0; i < f.size(); ++i) ASSERT_TRUE(same_value(out[i], static_cast<double>(f[i])));
}

// tf32 patterns (4 bytes, the top 19 bits): decoded one by one, stray low bits reported.
TEST_F(WidenTest, WidePatternsOfAnotherFormat) {
  const Format& f = numeq::formats::tf32;
  std::vector<std::uint32_t> bits;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 5000; ++i) bits.push_back(static_cast<std::uint32_t>(rng()) & static_cast<std::uint32_t>(numeq::pattern_mask(f)));
  std::vector<double> out(bits.size());
  WidenReport r = numeq::widen(bits.data(), bits.size(), ElementType::patterns(f), out.data());
  EXPECT_EQ(r.first(), bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) ASSERT_TRUE(same_value(out[i], decode_oracle(f, bits[i])));
  bits[1234] |= 1;
  bits[4000] |= 2;
  r = numeq::widen(bits.data(), bits.size(), ElementType::patterns(f), out.data());
  EXPECT_EQ(r.not_pattern, 1234u);
}

// The first of each kind over the whole array, whatever the thread count and the slices.
TEST_F(WidenTest, FirstOfEachKindOnAnyThreadCount) {
  const std::size_t n = 300000;
  std::vector<std::uint8_t> bits(n, 0x38);  // e4m3fn 1.0
  bits[250000] = 0x39;                       // 1.125: not a value of e5m2 (second slice)
  bits[10] = 0x39;                           // first offender, first slice
  std::vector<std::int64_t> ints(n, 3);
  ints[200000] = (std::int64_t{1} << 53) + 1;
  ints[290000] = (std::int64_t{1} << 60) + 1;
  for (int threads : {1, 2, 3, 4, 7}) {
    numeq::set_num_threads(threads);
    SCOPED_TRACE(threads);
    std::vector<double> out(n);
    WidenReport r = numeq::widen(bits.data(), n, ElementType::patterns(numeq::formats::e4m3fn), out.data(),
                                 &numeq::formats::e5m2);
    EXPECT_EQ(r.not_value, 10u);
    EXPECT_EQ(out[250000], 1.125);
    bits[10] = 0x38;
    r = numeq::widen(bits.data(), n, ElementType::patterns(numeq::formats::e4m3fn), nullptr, &numeq::formats::e5m2);
    EXPECT_EQ(r.not_value, 250000u);
    bits[10] = 0x39;
    r = numeq::widen(ints.data(), n, ElementType::integers(8, true), out.data(), &numeq::formats::bf16);
    EXPECT_EQ(r.not_exact, 200000u);
    EXPECT_EQ(r.not_value, n);  // the check sees the widened 2^53 and 2^60, both values of bf16
    r = numeq::widen(ints.data(), n, ElementType::integers(8, true), nullptr, &numeq::formats::fp16);
    EXPECT_EQ(r.not_value, 200000u);  // beyond fp16's range
  }
}

TEST_F(WidenTest, ErrorsNameTheParameter) {
  std::uint8_t x = 0;
  EXPECT_THROW(ElementType::integers(3, true), numeq::error);
  EXPECT_THROW(ElementType::patterns(numeq::formats::int8), numeq::error);
  ElementType bad = ElementType::patterns(numeq::formats::bf16);
  bad.bytes = 1;
  try {
    numeq::widen(&x, 1, bad, nullptr);
    FAIL() << "no throw";
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("format: 'bf16' is stored in 16 bits"), std::string::npos) << e.what();
  }
  EXPECT_EQ(numeq::widen(&x, 0, ElementType::integers(1, true), nullptr, &numeq::formats::fp16).first(), 0u);
}

}  // namespace
