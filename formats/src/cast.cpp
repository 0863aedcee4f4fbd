#include "numeq/formats/cast.hpp"

#include "numeq/formats/nearest_even.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <sstream>

#include "numeq/formats/error.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq {
namespace {

std::uint64_t draw(const Cast& cast, std::uint64_t index) {
  return cast.rounding == Rounding::stochastic
             ? random_bits_at(random_stream_key(cast.seed), index)
             : 0;
}

std::uint64_t checked(std::uint64_t bits, const Cast& cast) {
  if (bits == invalid_encoding)
    throw error("x: NaN cannot be cast into " + std::string(cast.format.name) +
                ", which has no NaN encoding (OCP MX FP6/FP4 hold finite values only)");
  return bits;
}

}  // namespace

std::uint64_t convert(std::uint64_t bits, const Format& source, const Cast& cast,
                      std::uint64_t index) {
  validate(cast);
  if (source.is_integer())
    throw error("source: integer format '" + std::string(source.name) +
                "' holds no float bit patterns; decode it first");
  if ((bits & ~pattern_mask(source)) != 0) {
    std::ostringstream message;
    message << "bits: 0x" << std::hex << bits << " is not a bit pattern of " << source.name
            << " (only bits 0x" << pattern_mask(source) << " may be set)";
    throw error(message.str());
  }
  return checked(encode_bits(source, bits, cast, draw(cast, index)), cast);
}

std::uint64_t encode(double x, const Cast& cast, std::uint64_t index) {
  return convert(std::bit_cast<std::uint64_t>(x), formats::fp64, cast, index);
}

ValueTest::ValueTest(const Format& fmt)
    : f_(fmt), max_(max_finite(fmt)), min_sub_(min_subnormal(fmt)), emin_(fmt.emin()), mantissa_bits_(fmt.mantissa_bits),
      any_double_(fmt.kind == FormatKind::floating && fmt.exponent_bits == 11 && fmt.mantissa_bits == 52) {}

bool ValueTest::operator()(double x) const {
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

bool is_value(double x, const Format& f) { return ValueTest(f)(x); }

std::size_t first_not_value(const double* x, std::size_t n, const Format& f) {
  const ValueTest test(f);
  for (std::size_t i = 0; i < n; ++i)
    if (!test(x[i])) return i;
  return n;
}

double round_to_format(double x, const Cast& cast, std::uint64_t index) {
  if (double r; cast.rounding == Rounding::nearest_even && NearestEven(cast)(x, r)) return r;
  return decode_bits(cast.format, encode(x, cast, index));
}

double decode(std::uint64_t bits, const Format& f) {
  const std::uint64_t mask = pattern_mask(f);
  if ((bits & ~mask) != 0) {
    std::ostringstream message;
    message << "bits: 0x" << std::hex << bits << " is not a bit pattern of " << f.name << " (only bits 0x"
            << mask << " may be set)";
    throw error(message.str());
  }
  return decode_pattern(f, bits);
}

}  // namespace numeq
