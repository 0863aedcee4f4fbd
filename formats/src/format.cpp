#include "numeq/formats/format.hpp"

#include <bit>
#include <cmath>
#include <cstdint>

#include "numeq/formats/error.hpp"

namespace numeq {

std::span<const Format* const> all_formats() { return formats::all; }

std::string format_names() { return format_names(FormatKind::floating) + ", " + format_names(FormatKind::integer); }

std::string format_names(FormatKind kind) {
  std::string names;
  for (const Format* f : formats::all) {
    if (f->kind != kind) continue;
    if (!names.empty()) names += ", ";
    names += f->name;
  }
  return names;
}

const Format& format_by_name(std::string_view name, std::string_view parameter) {
  for (const Format* f : formats::all)
    if (f->name == name) return *f;
  throw error(std::string(parameter) + ": unknown format '" + std::string(name) +
              "'; valid formats: " + format_names());
}

namespace {

// 2^e, built from its bits in binary64's normal range (these limits are asked for per element in
// the verdict and running-bound loops, where a libm ldexp call costs more than the work).
double pow2(int e) {
  if (e >= -1022 && e <= 1023) return std::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52);
  return std::ldexp(1.0, e);
}

}  // namespace

double max_finite(const Format& f) {
  if (f.is_integer()) return static_cast<double>(f.int_max());
  // (2^m + fraction) 2^(field - bias - m): an integer below 2^53 times a power of two, exact.
  const std::uint64_t mag = f.max_finite_magnitude();
  const int field = static_cast<int>(mag >> f.mantissa_bits);
  const std::uint64_t significand = (std::uint64_t{1} << f.mantissa_bits) | (mag & ((std::uint64_t{1} << f.mantissa_bits) - 1));
  return static_cast<double>(significand) * pow2(field - f.bias - f.mantissa_bits);
}

double min_normal(const Format& f) {
  if (f.is_integer()) return 1.0;
  return pow2(f.emin());
}

double min_subnormal(const Format& f) {
  if (f.is_integer()) return 1.0;
  return f.has_zero ? pow2(f.emin() - f.mantissa_bits) : min_normal(f);
}

}  // namespace numeq
