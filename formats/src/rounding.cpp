#include "numeq/formats/rounding.hpp"

#include <array>
#include <utility>

#include "numeq/formats/error.hpp"

namespace numeq {
namespace {

template <class Enum, std::size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

constexpr NameTable<Rounding, 7> rounding_table{{{Rounding::nearest_even, "nearest_even"},
                                                 {Rounding::nearest_away, "nearest_away"},
                                                 {Rounding::toward_zero, "toward_zero"},
                                                 {Rounding::upward, "upward"},
                                                 {Rounding::downward, "downward"},
                                                 {Rounding::odd, "odd"},
                                                 {Rounding::stochastic, "stochastic"}}};
constexpr NameTable<Overflow, 2> overflow_table{
    {{Overflow::ieee, "ieee"}, {Overflow::saturate, "saturate"}}};
constexpr NameTable<Subnormals, 4> subnormals_table{{{Subnormals::keep, "keep"},
                                                     {Subnormals::flush_outputs, "flush_outputs"},
                                                     {Subnormals::flush_inputs, "flush_inputs"},
                                                     {Subnormals::flush_both, "flush_both"}}};

template <class Table>
std::string names_of(const Table& table) {
  std::string names;
  for (const auto& [value, name] : table) {
    if (!names.empty()) names += ", ";
    names += name;
  }
  return names;
}

template <class Table>
auto lookup(const Table& table, std::string_view name, std::string_view parameter,
            std::string_view what) {
  for (const auto& [value, n] : table)
    if (n == name) return value;
  throw error(std::string(parameter) + ": unknown " + std::string(what) + " '" +
              std::string(name) + "'; valid choices: " + names_of(table));
}

template <class Table, class Enum>
std::string_view name_of(const Table& table, Enum value) {
  for (const auto& [v, n] : table)
    if (v == value) return n;
  return "?";
}

}  // namespace

std::string_view to_string(Rounding r) { return name_of(rounding_table, r); }
std::string_view to_string(Overflow o) { return name_of(overflow_table, o); }
std::string_view to_string(Subnormals s) { return name_of(subnormals_table, s); }

Rounding rounding_by_name(std::string_view name, std::string_view parameter) {
  return lookup(rounding_table, name, parameter, "rounding mode");
}
Overflow overflow_by_name(std::string_view name, std::string_view parameter) {
  return lookup(overflow_table, name, parameter, "overflow mode");
}
Subnormals subnormals_by_name(std::string_view name, std::string_view parameter) {
  return lookup(subnormals_table, name, parameter, "subnormal mode");
}
std::string rounding_names() { return names_of(rounding_table); }
std::string overflow_names() { return names_of(overflow_table); }
std::string subnormals_names() { return names_of(subnormals_table); }

void validate(const Cast& cast, std::string_view parameter) {
  if (cast.format.is_integer())
    throw error(std::string(parameter) + ": '" + std::string(cast.format.name) +
                "' is an integer format; casting floats into it needs a scale: use quantize "
                "(numeq.quantize in Python); floating formats: " +
                format_names(FormatKind::floating));
  if (cast.random_bits < 1 || cast.random_bits > 64)
    throw error("random_bits: must be between 1 and 64, got " + std::to_string(cast.random_bits));
}

}  // namespace numeq
