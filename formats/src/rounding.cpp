#include "numeq/formats/rounding.hpp"

#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"

namespace numeq {

Rounding rounding_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<Rounding>, name, parameter, "rounding mode");
}
Overflow overflow_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<Overflow>, name, parameter, "overflow mode");
}
Subnormals subnormals_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<Subnormals>, name, parameter, "subnormal mode");
}
std::string rounding_names() { return names_text(enum_names<Rounding>); }
std::string overflow_names() { return names_text(enum_names<Overflow>); }
std::string subnormals_names() { return names_text(enum_names<Subnormals>); }

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
