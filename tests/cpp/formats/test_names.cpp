// numeq/formats/names.hpp: enum <-> name tables, the one "unknown name" wording, and a sample of
// the parsers built on it across the library (each keeps its parameter, the bad value and the
// valid names in its message).

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "numeq/cases/verdict.hpp"
#include "numeq/core/plan.hpp"
#include "numeq/formats/error.hpp"
#include "oracle/test_support.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/quantize.hpp"
#include "numeq/references/functions.hpp"

namespace {

enum class Colour : unsigned char { red, green, blue };

constexpr numeq::NameTable<Colour, 3> kColours{{{Colour::red, "red"}, {Colour::green, "green"}, {Colour::blue, "blue"}}};

// Enumerators with gaps, at both ends of the probed range, inside a class.
struct Holder {
  enum class Sparse : std::uint8_t { first, third = 2, last_probed = numeq::detail::kEnumProbe - 1 };
};
enum Unscoped : int { plain_zero, plain_one };

using numeq_test::error_message_of;

TEST(Names, RoundTrips) {
  for (const auto& [value, name] : kColours) {
    EXPECT_EQ(numeq::name_of(kColours, value), name);
    EXPECT_EQ(numeq::by_name(kColours, name, "colour", "colour"), value);
    EXPECT_EQ(numeq::find_by_name(kColours, name), value);
  }
  // Usable at compile time.
  static_assert(numeq::name_of(kColours, Colour::green) == "green");
  static_assert(*numeq::find_by_name(kColours, "blue") == Colour::blue);
  static_assert(!numeq::find_by_name(kColours, "Blue").has_value());
  // A value outside the table (a cast out of range) has no name.
  EXPECT_EQ(numeq::name_of(kColours, static_cast<Colour>(7)), "?");
}

TEST(Names, EnumNamesReadTheDeclaration) {
  // The hand-written table is the oracle: the same pairs, in the same order.
  static_assert(numeq::enum_names<Colour> == kColours);
  constexpr auto& sparse = numeq::enum_names<Holder::Sparse>;
  static_assert(sparse.size() == 3);
  EXPECT_EQ(sparse[0], std::make_pair(Holder::Sparse::first, std::string_view("first")));
  EXPECT_EQ(sparse[1], std::make_pair(Holder::Sparse::third, std::string_view("third")));
  EXPECT_EQ(sparse[2], std::make_pair(Holder::Sparse::last_probed, std::string_view("last_probed")));
  EXPECT_EQ(numeq::name_of(sparse, static_cast<Holder::Sparse>(1)), "?");
  EXPECT_EQ(numeq::names_text(numeq::enum_names<Unscoped>), "plain_zero, plain_one");
  // Library enums: spelled here by hand.
  EXPECT_EQ(numeq::names_text(numeq::enum_names<numeq::Rounding>),
            "nearest_even, nearest_away, toward_zero, upward, downward, odd, stochastic");
  EXPECT_EQ(numeq::names_text(numeq::enum_names<numeq::core::NodeKind>),
            "sequential, lanes, pairwise, chunked, split, tree, fused, permute, group, term, decompose");
}

TEST(Names, ListsInTableOrder) {
  EXPECT_EQ(numeq::names_text(kColours), "red, green, blue");
  constexpr std::array<std::string_view, 3> names = numeq::names_array(kColours);
  EXPECT_EQ(names[0], "red");
  EXPECT_EQ(names[1], "green");
  EXPECT_EQ(names[2], "blue");
}

TEST(Names, UnknownNameMessage) {
  EXPECT_EQ(error_message_of([] { return numeq::by_name(kColours, "purple", "fill", "colour"); }),
            "fill: unknown colour 'purple'; valid: red, green, blue");
  // Names match exactly: no case folding, no trimming.
  EXPECT_EQ(error_message_of([] { return numeq::by_name(kColours, "Red", "fill", "colour"); }),
            "fill: unknown colour 'Red'; valid: red, green, blue");
  EXPECT_EQ(error_message_of([] { return numeq::by_name(kColours, "red ", "fill", "colour"); }),
            "fill: unknown colour 'red '; valid: red, green, blue");
  EXPECT_EQ(error_message_of([] { return numeq::by_name(kColours, "", "fill", "colour", "(the primaries)"); }),
            "fill: unknown colour ''; valid: red, green, blue (the primaries)");
}

TEST(Names, SubsetOfATable) {
  // A parser may accept only the first entries (tier_by_name refuses violation this way).
  const std::span<const std::pair<Colour, std::string_view>> warm(kColours.data(), 2);
  EXPECT_EQ(numeq::by_name(warm, "green", "fill", "colour"), Colour::green);
  EXPECT_EQ(error_message_of([&] { return numeq::by_name(warm, "blue", "fill", "colour"); }),
            "fill: unknown colour 'blue'; valid: red, green");
}

TEST(Names, LibraryParsersShareTheWording) {
  EXPECT_EQ(error_message_of([] { return numeq::quant_range_by_name("half", "range"); }),
            "range: unknown range 'half'; valid: full, symmetric");
  EXPECT_EQ(error_message_of([] { return numeq::cases::tier_by_name("violation", "accept"); }),
            "accept: unknown tier 'violation'; valid: bit_exact, variant, probabilistic, deterministic "
            "(the weakest tier that passes)");
  EXPECT_EQ(error_message_of([] { return numeq::core::split_mode_by_name("both"); }),
            "split_mode: unknown split mode 'both'; valid: parallel, serial");
  EXPECT_EQ(error_message_of([] { return numeq::reference::function_by_name("cosh", "f"); }),
            "f: unknown function 'cosh'; valid: exp, exp2, log, tanh, sigmoid, gelu, gelu_tanh, silu, softplus, "
            "sqrt, rsqrt, reciprocal, erf, erf_dx, sin, cos, tan, atan, mish, gelu_sigmoid, gelu_dx, silu_dx, "
            "gelu_sigmoid_dx");
  // function_names() lists the same table.
  std::string listed;
  for (const std::string_view n : numeq::reference::function_names()) listed += (listed.empty() ? "" : ", ") + std::string(n);
  EXPECT_NE(error_message_of([] { return numeq::reference::function_by_name("cosh", "f"); }).find(listed), std::string::npos);
}

}  // namespace
