#include "numeq/formats/rounding.hpp"

#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"

namespace numeq {
namespace {

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

}  // namespace

std::string_view to_string(Rounding r) { return name_of(rounding_table, r); }
std::string_view to_string(Overflow o) { return name_of(overflow_table, o); }
std::string_view to_string(Subnormals s) { return name_of(subnormals_table, s); }

Rounding rounding_by_name(std::string_view name, std::string_view parameter) {
  return by_name(rounding_table, name, parameter, "rounding mode");
}
Overflow overflow_by_name(std::string_view name, std::string_view parameter) {
  return by_name(overflow_table, name, parameter, "overflow mode");
}
Subnormals subnormals_by_name(std::string_view name, std::string_view parameter) {
  return by_name(subnormals_table, name, parameter, "subnormal mode");
}
std::string rounding_names() { return names_text(rounding_table); }
std::string overflow_names() { return names_text(overflow_table); }
std::string subnormals_names() { return names_text(subnormals_table); }

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
