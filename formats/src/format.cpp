#include "numeq/formats/format.hpp"

#include <cmath>

#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"

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
  throw error(unknown_name_message(parameter, "format", name, format_names()));
}

const Format& plan_format_by_name(std::string_view name, std::string_view parameter) {
  for (const Format* f : formats::accumulators)
    if (f->name == name) return *f;
  for (const Format* f : formats::all)
    if (f->name == name) return *f;
  std::string accumulators;
  for (const Format* f : formats::accumulators) accumulators += ", " + std::string(f->name);
  throw error(unknown_name_message(parameter, "format", name, format_names() + accumulators));
}

}  // namespace numeq
