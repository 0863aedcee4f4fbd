#pragma once
// Enum <-> name tables: the one way numeq turns an enumerator into its name and a name back into
// the enumerator. Each enum keeps one constexpr table of (enumerator, name) pairs; to_string,
// the *_by_name parsers, the JSON readers and writers and the lists of valid names all read it,
// so a name is spelled once and every "unknown name" error has the same wording:
//
//   "<parameter>: unknown <what> '<name>'; valid: a, b, c"
//
// optionally followed by a short note (for instance what each choice means).
//
// A table is any range of std::pair<Enum, std::string_view>: a NameTable, or a std::span over the
// first entries of one where a parser accepts only some of the enum's values.

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "numeq/formats/error.hpp"

namespace numeq {

template <class Enum, std::size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

// The name of `value`; "?" for a value the table does not hold (a cast out of range).
template <class Table, class Enum>
constexpr std::string_view name_of(const Table& table, Enum value) {
  for (const auto& [v, n] : table)
    if (v == value) return n;
  return "?";
}

// The enumerator named `name`, if the table holds it.
template <class Table>
constexpr auto find_by_name(const Table& table, std::string_view name)
    -> std::optional<typename Table::value_type::first_type> {
  for (const auto& [v, n] : table)
    if (n == name) return v;
  return std::nullopt;
}

// The table's names, comma separated, in table order ("a, b, c").
template <class Table>
std::string names_text(const Table& table) {
  std::string out;
  for (const auto& [v, n] : table) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// The table's names alone, in table order (for APIs that list names as a span of string_view).
template <class Enum, std::size_t N>
constexpr std::array<std::string_view, N> names_array(const NameTable<Enum, N>& table) {
  std::array<std::string_view, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = table[i].second;
  return out;
}

// The one "unknown name" message (see above); `note`, when given, follows after a space.
inline std::string unknown_name_message(std::string_view parameter, std::string_view what, std::string_view name,
                                        const std::string& valid, std::string_view note = {}) {
  std::string m = std::string(parameter) + ": unknown " + std::string(what) + " '" + std::string(name) +
                  "'; valid: " + valid;
  if (!note.empty()) m.append(" ").append(note);
  return m;
}

// The enumerator named `name`; numeq::error with the one wording otherwise. `what` names the
// kind of value ("rounding mode", "tier").
template <class Table>
auto by_name(const Table& table, std::string_view name, std::string_view parameter, std::string_view what,
             std::string_view note = {}) -> typename Table::value_type::first_type {
  if (const auto v = find_by_name(table, name)) return *v;
  throw error(unknown_name_message(parameter, what, name, names_text(table), note));
}

}  // namespace numeq
