// Rounding / Overflow / Subnormals names (the strings Python and the CLI use) and Cast validation.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/rounding.hpp"

namespace {

using numeq::Overflow;
using numeq::Rounding;
using numeq::Subnormals;

// The names are an interface (Python keyword values, CLI flags): spell them out here so a rename
// breaks this test rather than silently breaking scripts.
const std::vector<std::pair<Rounding, std::string>> kRoundings{
    {Rounding::nearest_even, "nearest_even"}, {Rounding::nearest_away, "nearest_away"},
    {Rounding::toward_zero, "toward_zero"},   {Rounding::upward, "upward"},
    {Rounding::downward, "downward"},         {Rounding::odd, "odd"},
    {Rounding::stochastic, "stochastic"}};
const std::vector<std::pair<Overflow, std::string>> kOverflows{{Overflow::ieee, "ieee"},
                                                              {Overflow::saturate, "saturate"}};
const std::vector<std::pair<Subnormals, std::string>> kSubnormals{
    {Subnormals::keep, "keep"},
    {Subnormals::flush_outputs, "flush_outputs"},
    {Subnormals::flush_inputs, "flush_inputs"},
    {Subnormals::flush_both, "flush_both"}};

// Checks an error message names the parameter and the bad value and lists every valid choice.
template <class Parse, class Table>
void expect_unknown_name_error(Parse parse, const Table& table, const std::string& bad) {
  try {
    (void)parse(bad, "my_param");
    ADD_FAILURE() << "no error for '" << bad << "'";
  } catch (const numeq::error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("my_param"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + bad + "'"), std::string::npos) << msg;
    for (const auto& [value, name] : table) EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
}

TEST(Rounding, NamesRoundTrip) {
  for (const auto& [mode, name] : kRoundings) {
    EXPECT_EQ(numeq::to_string(mode), name);
    EXPECT_EQ(numeq::rounding_by_name(name), mode);
    EXPECT_NE(numeq::rounding_names().find(name), std::string::npos);
  }
  for (const auto& [mode, name] : kOverflows) {
    EXPECT_EQ(numeq::to_string(mode), name);
    EXPECT_EQ(numeq::overflow_by_name(name), mode);
    EXPECT_NE(numeq::overflow_names().find(name), std::string::npos);
  }
  for (const auto& [mode, name] : kSubnormals) {
    EXPECT_EQ(numeq::to_string(mode), name);
    EXPECT_EQ(numeq::subnormals_by_name(name), mode);
    EXPECT_NE(numeq::subnormals_names().find(name), std::string::npos);
  }
  // The lists hold exactly the valid names, comma separated.
  EXPECT_EQ(numeq::overflow_names(), "ieee, saturate");
  EXPECT_EQ(numeq::subnormals_names(), "keep, flush_outputs, flush_inputs, flush_both");
}

TEST(Rounding, UnknownNamesListValidChoices) {
  for (const std::string bad : {"nearest", "", "RNE", "Nearest_Even", "nearest_even "})
    expect_unknown_name_error(
        [](const std::string& n, const char* p) { return numeq::rounding_by_name(n, p); },
        kRoundings, bad);
  for (const std::string bad : {"saturating", "", "IEEE", "clip"})
    expect_unknown_name_error(
        [](const std::string& n, const char* p) { return numeq::overflow_by_name(n, p); },
        kOverflows, bad);
  for (const std::string bad : {"ftz", "daz", "", "flush", "Keep"})
    expect_unknown_name_error(
        [](const std::string& n, const char* p) { return numeq::subnormals_by_name(n, p); },
        kSubnormals, bad);
  // Default parameter names.
  EXPECT_THROW((void)numeq::rounding_by_name("x"), numeq::error);
  try {
    (void)numeq::rounding_by_name("x");
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("rounding"), std::string::npos) << e.what();
  }
  try {
    (void)numeq::overflow_by_name("x");
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("overflow"), std::string::npos) << e.what();
  }
  try {
    (void)numeq::subnormals_by_name("x");
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("subnormals"), std::string::npos) << e.what();
  }
}

TEST(Rounding, CastDefaultsAndFlushPredicates) {
  const numeq::Cast c;
  EXPECT_EQ(c.format, numeq::formats::fp32);
  EXPECT_EQ(c.rounding, Rounding::nearest_even);
  EXPECT_EQ(c.overflow, Overflow::ieee);
  EXPECT_EQ(c.subnormals, Subnormals::keep);
  EXPECT_EQ(c.random_bits, numeq::default_random_bits);
  for (const auto& [mode, name] : kSubnormals) {
    numeq::Cast k;
    k.subnormals = mode;
    EXPECT_EQ(k.flushes_inputs(), name == "flush_inputs" || name == "flush_both") << name;
    EXPECT_EQ(k.flushes_outputs(), name == "flush_outputs" || name == "flush_both") << name;
  }
}

TEST(Rounding, ValidateRejectsIntegerFormats) {
  for (const numeq::Format* f : numeq::all_formats()) {
    numeq::Cast c;
    c.format = *f;
    if (!f->is_integer()) {
      EXPECT_NO_THROW(numeq::validate(c)) << f->name;
      continue;
    }
    try {
      numeq::validate(c, "dtype");
      ADD_FAILURE() << "no error for " << f->name;
    } catch (const numeq::error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("dtype"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string(f->name)), std::string::npos) << msg;
      // The message offers the floating formats one can cast into.
      EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
    }
  }
}

TEST(Rounding, ValidateChecksRandomBits) {
  numeq::Cast c;
  c.format = numeq::formats::bf16;
  c.rounding = Rounding::stochastic;
  for (int bits : {1, 2, 23, 32, 63, 64}) {
    c.random_bits = bits;
    EXPECT_NO_THROW(numeq::validate(c)) << bits;
  }
  for (int bits : {0, -1, 65, 128, -2147483647 - 1}) {
    c.random_bits = bits;
    try {
      numeq::validate(c);
      ADD_FAILURE() << "no error for random_bits " << bits;
    } catch (const numeq::error& e) {
      EXPECT_NE(std::string(e.what()).find("random_bits"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(bits)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
