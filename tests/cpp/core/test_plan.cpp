// Plans as data: JSON round trips of every built-in plan, printing, and errors that name the
// field of a malformed plan.

#include <gtest/gtest.h>

#include <string>

#include "numeq/core/plan.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/error.hpp"

namespace {

namespace core = numeq::core;

std::string error_of(const std::string& text) {
  try {
    core::plan_from_json(text);
  } catch (const numeq::error& e) {
    return e.what();
  }
  return "";
}

TEST(Plan, EveryBuiltinPlanRoundTripsThroughJson) {
  std::size_t plans = 0;
  for (const std::string& name : core::platform_names()) {
    const core::Platform p = core::platform_by_name(name);
    for (const core::PlanEntry& e : p.plans) {
      const core::Plan back = core::plan_from_json(core::to_json(e.plan));
      EXPECT_EQ(back, e.plan) << name << ": " << core::to_json(e.plan);
      ++plans;
    }
    EXPECT_EQ(core::platform_from_json(core::to_json(p)), p) << name;
    EXPECT_FALSE(p.evidence.empty()) << name << " carries no evidence";
  }
  EXPECT_GT(plans, 4u);
}

TEST(Plan, PrintsItsStructure) {
  const core::Plan numpy = core::plan_for(core::platform_by_name("numpy"), core::Operation::sum, "fp32", "fp32");
  const std::string text = core::to_string(numpy);
  EXPECT_NE(text.find("pairwise(leaf 128, multiple 8"), std::string::npos) << text;
  EXPECT_NE(text.find("lanes(8, fp32 nearest_even"), std::string::npos) << text;
}

TEST(Plan, MalformedPlansNameTheField) {
  const std::string ok = R"({"reduction": {"kind": "sequential", "arithmetic": {"accumulate": {"format": "fp32"}}},
                              "output": {"format": "fp32"}})";
  EXPECT_EQ(error_of(ok), "");
  EXPECT_EQ(error_of(R"({"output": {"format": "fp32"}})").rfind("plan.reduction: missing", 0), 0u);
  const std::string bad_kind = error_of(R"({"reduction": {"kind": "zigzag"}, "output": {"format": "fp32"}})");
  EXPECT_EQ(bad_kind.rfind("plan.reduction.kind:", 0), 0u) << bad_kind;
  EXPECT_NE(bad_kind.find("pairwise"), std::string::npos) << bad_kind;  // lists the valid kinds
  const std::string bad_size = error_of(R"({"reduction": {"kind": "lanes", "size": 0,
      "arithmetic": {"accumulate": {"format": "fp32"}}}, "output": {"format": "fp32"}})");
  EXPECT_EQ(bad_size.rfind("plan.reduction.size:", 0), 0u) << bad_size;
  const std::string bad_format = error_of(R"({"reduction": {"kind": "sequential",
      "arithmetic": {"accumulate": {"format": "fp33"}}}, "output": {"format": "fp32"}})");
  EXPECT_EQ(bad_format.rfind("plan.reduction.arithmetic.accumulate.format:", 0), 0u) << bad_format;
  EXPECT_NE(bad_format.find("bf16"), std::string::npos) << bad_format;
  const std::string children = error_of(R"({"reduction": {"kind": "chunked", "size": 4, "children": [
      {"kind": "sequential", "arithmetic": {"accumulate": {"format": "fp32"}}}]}, "output": {"format": "fp32"}})");
  EXPECT_EQ(children.rfind("plan.reduction.children:", 0), 0u) << children;
  EXPECT_EQ(error_of("{not json").rfind("plan: not valid JSON", 0), 0u);
}

}  // namespace
