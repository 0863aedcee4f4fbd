#include "numeq/formats/cast.hpp"

#include "numeq/formats/fast_round.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <sstream>

#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/parallel.hpp"
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

bool is_value(double x, const Format& f) { return ValueTest(f)(x); }

namespace {

// The first of x[begin..n) that is not a value of f (n when none). A sufficient test first, branch-free so that it
// vectorises: +0 (where f has a zero), or a value whose exponent lies in one of f's normal binades
// below the top one (every fraction of those binades is a finite value of f, whatever f's NaN
// encoding) and whose fraction bits beyond f's are zero. Blocks where some element fails it are
// decided element by element by ValueTest. float32 arrays go through the same test on the
// widened value (exact), read in place.
struct BlockTest {
  std::uint64_t low_e = 0, binades = 0;  // exponent fields low_e .. low_e + binades - 1
  std::uint64_t low = 0;                  // fraction bits below the format's
  std::uint64_t zero = 0;                 // 1 where +0 is a value
};

// Whether every element of x[0, n) passes the block test. Unsigned arithmetic and no
// short-circuit, so that it vectorises; the x86-64-v3 clone (AVX2: 64-bit lane compares) is what
// makes it a memory-bound pass on the CPUs that have it.
template <class T>
[[gnu::always_inline]] inline bool all_pass(const T* x, std::size_t n, const BlockTest& t) {
  std::uint64_t failed = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto u = std::bit_cast<std::uint64_t>(static_cast<double>(x[i]));
    const std::uint64_t e = (u >> 52) & 0x7ff;
    const std::uint64_t in_range = static_cast<std::uint64_t>((u & t.low) == 0) & static_cast<std::uint64_t>(e - t.low_e < t.binades);
    failed |= (in_range | (static_cast<std::uint64_t>(u == 0) & t.zero)) ^ 1;
  }
  return failed == 0;
}
NUMEQ_X86_64_V3_CLONE bool all_pass_f64(const double* x, std::size_t n, const BlockTest& t) { return all_pass(x, n, t); }
NUMEQ_X86_64_V3_CLONE bool all_pass_f32(const float* x, std::size_t n, const BlockTest& t) { return all_pass(x, n, t); }
bool all_pass_of(const double* x, std::size_t n, const BlockTest& t) { return all_pass_f64(x, n, t); }
bool all_pass_of(const float* x, std::size_t n, const BlockTest& t) { return all_pass_f32(x, n, t); }

template <class T>
std::size_t first_not_value_in(const T* x, std::size_t begin, std::size_t n, const Format& f, const ValueTest& test) {
  if (f.is_integer() || !f.is_signed || f.mantissa_bits >= 52) {
    for (std::size_t i = begin; i < n; ++i)
      if (!test(static_cast<double>(x[i]))) return i;
    return n;
  }
  int top = 0;
  (void)std::frexp(max_finite(f), &top);  // max_finite in [2^(top-1), 2^top)
  BlockTest t;
  t.low_e = static_cast<std::uint64_t>(f.emin() + 1023);
  t.binades = static_cast<std::uint64_t>(top - 1 + 1023) - t.low_e;  // up to the top binade, excluded
  t.low = (std::uint64_t{1} << (52 - f.mantissa_bits)) - 1;
  t.zero = f.has_zero ? 1 : 0;
  constexpr std::size_t block = 1024;
  for (std::size_t from = begin; from < n; from += block) {
    const std::size_t end = std::min(n, from + block);
    if (all_pass_of(x + from, end - from, t)) continue;
    for (std::size_t i = from; i < end; ++i)
      if (!test(static_cast<double>(x[i]))) return i;
  }
  return n;
}

// The slices scanned on parallel_for's threads; the first offending index is the least of the
// slices' first ones (about 2 ns an element: a thread pays off from about 2^16 elements).
template <class T>
std::size_t first_not_value_of(const T* x, std::size_t n, const Format& f) {
  const ValueTest test(f);
  std::atomic<std::size_t> first{n};
  parallel_for(n, [&](std::size_t begin, std::size_t end) {
    const std::size_t at = first_not_value_in(x, begin, end, f, test);
    if (at == end) return;
    std::size_t seen = first.load();
    while (at < seen && !first.compare_exchange_weak(seen, at)) {
    }
  }, std::size_t{1} << 16);
  return first.load();
}

}  // namespace

std::size_t first_not_value(const double* x, std::size_t n, const Format& f) { return first_not_value_of(x, n, f); }
std::size_t first_not_value(const float* x, std::size_t n, const Format& f) { return first_not_value_of(x, n, f); }

double round_to_format_by_kernel(double x, const Cast& cast, std::uint64_t index) {
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
