#pragma once
// Enum <-> name tables: the one way numeq turns an enumerator into its name and a name back into
// the enumerator. enum_names<Enum> is the table of (enumerator, name) pairs, read from the enum's
// own declaration, so a name is spelled once, where the enumerator is declared; to_string, the
// *_by_name parsers, the JSON readers and writers and the lists of valid names all read it, and
// every "unknown name" error has the same wording:
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
#include <type_traits>
#include <utility>

#include "numeq/formats/error.hpp"

namespace numeq {

template <class Enum, std::size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

namespace detail {

inline constexpr std::size_t kEnumProbe = 64;

// GCC and Clang write a function template's arguments into __PRETTY_FUNCTION__; an enum value
// that an enumerator names is written as that enumerator ("numeq::Rounding::upward"), any other
// as a cast ("(numeq::Rounding)9"). GCC: "... [with auto Value = numeq::Rounding::upward; ...]";
// Clang: "... [Value = numeq::Rounding::upward]".
template <auto Value>
constexpr std::string_view enumerator_text() {
  return __PRETTY_FUNCTION__;
}

// The enumerator's identifier from that text; empty for a value no enumerator names.
constexpr std::string_view enumerator_name(std::string_view text) {
  constexpr std::string_view key = "Value = ";
  const std::size_t at = text.find(key);
  if (at == std::string_view::npos) return {};
  const std::size_t begin = at + key.size();
  const std::string_view value = text.substr(begin, text.find_first_of(";]", begin) - begin);
  if (value.empty() || value.front() == '(' || (value.front() >= '0' && value.front() <= '9') ||
      value.front() == '-')
    return {};
  const std::size_t scope = value.rfind("::");
  return scope == std::string_view::npos ? value : value.substr(scope + 2);
}

template <class Enum, std::size_t... I>
constexpr std::array<std::string_view, sizeof...(I)> probe_enumerators(std::index_sequence<I...>) {
  return {enumerator_name(enumerator_text<static_cast<Enum>(I)>())...};
}

template <class Enum>
constexpr auto enum_table_of() {
  static_assert(std::is_enum_v<Enum>, "enum_names: not an enum");
  constexpr auto probed = probe_enumerators<Enum>(std::make_index_sequence<kEnumProbe>{});
  constexpr std::size_t count = [&] {
    std::size_t n = 0;
    for (const std::string_view name : probed) n += !name.empty();
    return n;
  }();
  static_assert(count > 0, "enum_names: no enumerator in 0..kEnumProbe-1 (this compiler's text not understood?)");
  NameTable<Enum, count> table{};
  std::size_t next = 0;
  for (std::size_t i = 0; i < probed.size(); ++i)
    if (!probed[i].empty()) table[next++] = {static_cast<Enum>(i), probed[i]};
  return table;
}

}  // namespace detail

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

// The table of every named enumerator of `Enum`, in value order, each named as it is spelled in
// the enum's declaration: an enumerator and its public name are one word, written once, and the
// table cannot fall out of step with the enum. Read from the compiler's own text for a template
// instantiated at each value (detail::enumerator_name above). Only the values 0..kEnumProbe-1 are
// probed: an enumerator numbered past them would be left out (numeq's enums count from 0), and an
// enum with none in that range does not compile.
template <class Enum>
inline constexpr auto enum_names = detail::enum_table_of<Enum>();

// The name of an enumerator: to_string for every numeq enum. Namespaces below numeq that declare
// enums bring it in with `using numeq::to_string;`, so calls read the same everywhere.
template <class Enum>
  requires std::is_enum_v<Enum>
constexpr std::string_view to_string(Enum value) {
  return name_of(enum_names<Enum>, value);
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
