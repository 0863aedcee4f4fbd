#include "numeq/formats/format.hpp"

#include <cmath>

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

double max_finite(const Format& f) {
  if (f.is_integer()) return static_cast<double>(f.int_max());
  const std::uint64_t mag = f.max_finite_magnitude();
  const int field = static_cast<int>(mag >> f.mantissa_bits);
  const double fraction = static_cast<double>(mag & ((std::uint64_t{1} << f.mantissa_bits) - 1));
  return std::ldexp(1.0 + std::ldexp(fraction, -f.mantissa_bits), field - f.bias);
}

double min_normal(const Format& f) {
  if (f.is_integer()) return 1.0;
  return std::ldexp(1.0, f.emin());
}

double min_subnormal(const Format& f) {
  if (f.is_integer()) return 1.0;
  return f.has_zero ? std::ldexp(1.0, f.emin() - f.mantissa_bits) : min_normal(f);
}

}  // namespace numeq
