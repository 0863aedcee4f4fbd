#pragma once
// Scalar casts: one value in, one value or bit pattern out. Array casts (array.hpp) run the same
// kernel over xtensor expressions.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "numeq/formats/fast_round.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/round_and_pack.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq {

// x rounded into cast.format, as a double (NaN where the format gives NaN). `index` selects the
// stochastic draw (element i of an array uses index i). Throws numeq::error for an integer target
// format or a NaN into a format that has no NaN.
double round_to_format_by_kernel(double x, const Cast& cast, std::uint64_t index);
// Inline: the common case (FastRound's) costs a few integer operations where a running bound
// rounds several times per element; the kernel decides the rest.
inline double round_to_format(double x, const Cast& cast, std::uint64_t index = 0) {
  if (double r; FastRound(cast)(x, r)) return r;
  return round_to_format_by_kernel(x, cast, index);
}

// Whether x is a value of f: it rounds to itself in every mode (the sign of zero kept; NaN and
// +-Inf where f has them; integers: an integer in f's range). Decided from x's bits and f's
// quantum at x's binade, without rounding: the input check of every array a user says holds f.
bool is_value(double x, const Format& f);
// The first of x[0..n) that is not a value of f (is_value), or n: f's limits worked out once.
std::size_t first_not_value(const double* x, std::size_t n, const Format& f);
// The same for float32 values, read in place (no float64 copy first).
std::size_t first_not_value(const float* x, std::size_t n, const Format& f);
// is_value with f's limits worked out once, for loops that test element by element (f must
// outlive it: the registered formats do).
class ValueTest {
 public:
  explicit ValueTest(const Format& f);
  // Inline: input checks call it once per element.
  bool operator()(double x) const {
    if (f_.is_integer())
      return x == std::floor(x) && x >= static_cast<double>(f_.int_min()) && x <= static_cast<double>(f_.int_max());
    if (std::isnan(x)) return f_.has_nan();
    if (x < 0 && !f_.is_signed) return false;
    if (std::isinf(x)) return f_.has_inf();
    if (x == 0) return f_.has_zero && (!std::signbit(x) || f_.has_negative_zero());
    if (any_double_) return true;
    const double a = std::abs(x);
    if (a > max_ || a < min_sub_) return false;  // below min_sub: also every binary64 subnormal
    // a = 1.fraction x 2^e (a normal double here); a value of f when it is a multiple of f's
    // quantum 2^q at a's binade, q = max(e, emin) - mantissa_bits (the subnormal quantum below
    // f's normal range): the fraction's lowest 52 - (e - q) bits are zero.
    const std::uint64_t bits = std::bit_cast<std::uint64_t>(a);
    const int e = static_cast<int>(bits >> 52) - 1023;
    const int q = std::max(e, emin_) - mantissa_bits_;
    const int low = 52 - (e - q);
    return low <= 0 || (bits & ((std::uint64_t{1} << low) - 1)) == 0;
  }

 private:
  const Format& f_;
  double max_, min_sub_;
  int emin_, mantissa_bits_;
  bool any_double_;  // fp64: every double is a value
};

// The bit pattern of x in cast.format (storage placement included: tf32 is an fp32 pattern).
std::uint64_t encode(double x, const Cast& cast, std::uint64_t index = 0);

// The value of a bit pattern; integer formats read two's complement. Throws numeq::error when
// bits has set bits outside the format's pattern.
double decode(std::uint64_t bits, const Format& f);

// A value of format `source`, given as its bit pattern, encoded into cast.format. Flushing
// inputs (DAZ) looks at `source`'s subnormals. Throws numeq::error when bits has set bits outside
// the source's pattern.
std::uint64_t convert(std::uint64_t bits, const Format& source, const Cast& cast,
                      std::uint64_t index = 0);

// Bits of a pattern of f, as placed in its storage (0x3F for e3m2fn, the top 19 bits of 32 for
// tf32, all 8 for int8).
constexpr std::uint64_t pattern_mask(const Format& f) {
  const std::uint64_t low = f.bits() == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << f.bits()) - 1;
  return low << f.storage_shift;
}

// Value of a bit pattern of any format, integers (two's complement) included. No checks.
constexpr double decode_pattern(const Format& f, std::uint64_t bits) {
  if (!f.is_integer()) return decode_bits(f, bits);
  if (f.is_signed && f.storage_bits < 64 && (bits >> (f.storage_bits - 1)) != 0)
    return static_cast<double>(static_cast<std::int64_t>(bits) - (std::int64_t{1} << f.storage_bits));
  return static_cast<double>(bits);
}

}  // namespace numeq
