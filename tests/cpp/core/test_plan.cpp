// Plans as data: JSON round trips of every built-in plan, printing, and errors that name the
// field of a malformed plan.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "numeq/core/evaluate.hpp"
#include "numeq/core/plan.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"

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

// Each kind's parameters sit in their own named fields (plan.hpp, PlanNode), written under the
// JSON keys that always named them ("size" for the counts), and read back into the same fields.
TEST(Plan, EveryKindKeepsItsNamedFieldsThroughJson) {
  const core::Arithmetic ar{numeq::Cast{numeq::formats::fp32}};
  const numeq::Cast bf16{numeq::formats::bf16};
  const auto json_of = [](const core::PlanNode& n) {
    core::Plan p;
    p.reduction = n;
    const core::Plan back = core::plan_from_json(core::to_json(p));
    EXPECT_EQ(back, p) << core::to_string(p);
    return core::to_json(p, -1);
  };
  const core::PlanNode l = core::lanes(8, ar);
  EXPECT_EQ(l.lanes, 8u);
  EXPECT_NE(json_of(l).find(R"("size":8)"), std::string::npos);
  const core::PlanNode t = core::tree(3, ar);
  EXPECT_EQ(t.arity, 3u);
  EXPECT_NE(json_of(t).find(R"("size":3)"), std::string::npos);
  const core::PlanNode pw = core::pairwise(128, 8, core::lanes(8, ar), ar);
  EXPECT_EQ(pw.leaf, 128u);
  EXPECT_EQ(pw.multiple, 8u);
  EXPECT_NE(json_of(pw).find(R"("multiple":8)"), std::string::npos);
  const core::PlanNode ch = core::chunked(32, core::sequential(ar), core::sequential(ar, true));
  EXPECT_EQ(ch.chunk, 32u);
  EXPECT_NE(json_of(ch).find(R"("size":32)"), std::string::npos);
  const core::PlanNode sp = core::split(5, core::SplitMode::serial, bf16, core::sequential(ar));
  EXPECT_EQ(sp.parts, 5u);
  EXPECT_EQ(sp.through, bf16);
  EXPECT_NE(json_of(sp).find(R"("split_mode":"serial")"), std::string::npos);
  const core::PlanNode pm = core::permute(4, {0, 2, 1, 3}, core::sequential(ar));
  EXPECT_EQ(pm.block, 4u);
  EXPECT_NE(json_of(pm).find(R"("order":[0,2,1,3])"), std::string::npos);
  const core::PlanNode dc = core::decompose(16, 2, bf16, {{0, 0}, {1, 0}, {0, 1}}, core::sequential(ar), core::sequential(ar));
  EXPECT_EQ(dc.block, 16u);
  EXPECT_EQ(dc.pieces, 2u);
  EXPECT_EQ(dc.piece, bf16);
  EXPECT_EQ(dc.passes, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 0}, {1, 0}, {0, 1}}));
  EXPECT_EQ(dc.through, core::PlanNode{}.through);  // decompose's piece is its own field, not split's
  EXPECT_EQ(dc.multiple, core::PlanNode{}.multiple);
  const std::string dj = json_of(dc);
  EXPECT_NE(dj.find(R"("passes":[[0,0],[1,0],[0,1]])"), std::string::npos) << dj;
  EXPECT_NE(dj.find(R"("pieces":2)"), std::string::npos) << dj;
  EXPECT_NE(dj.find(R"("size":16)"), std::string::npos) << dj;
  const core::PlanNode tr = core::term(0);
  EXPECT_EQ(tr.index, 0u);
  const core::PlanNode g = core::group({core::term(1), core::term(0)}, ar);
  EXPECT_EQ(g.children[0].index, 1u);
  EXPECT_NE(json_of(g).find(R"x("tree":"(1 0)")x"), std::string::npos);
  // A pass naming a piece that does not exist names the field.
  core::Plan bad;
  bad.reduction = core::decompose(16, 2, bf16, {{0, 2}}, core::sequential(ar), core::sequential(ar));
  try {
    core::validate(bad);
    ADD_FAILURE() << "no error";
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("plan.reduction.passes: piece 2 does not exist (pieces 0 .. 1)", 0), 0u)
        << e.what();
  }
}

// The accumulator formats (formats::accumulators) are formats a plan names; enum fields name
// their choices when a value is unknown.
TEST(Plan, AccumulatorFormatsAndEnumChoicesAreRead) {
  const core::Plan wide = core::plan_from_json(R"({"reduction": {"kind": "sequential", "arithmetic":
      {"accumulate": {"format": "e8m25"}}}, "output": {"format": "e8m13", "rounding": "toward_zero"}})");
  EXPECT_EQ(wide.reduction.arithmetic.accumulate.format, numeq::formats::e8m25);
  EXPECT_EQ(wide.output.format, numeq::formats::e8m13);
  const std::string product = error_of(R"({"reduction": {"kind": "sequential", "arithmetic":
      {"accumulate": {"format": "fp32"}, "product": "exact"}}, "output": {"format": "fp32"}})");
  EXPECT_EQ(product.rfind("plan.reduction.arithmetic.product: unknown product mode 'exact'; valid: fma, rounded", 0), 0u)
      << product;
  const std::string mode = error_of(R"({"reduction": {"kind": "split", "size": 2, "split_mode": "both", "through":
      {"format": "fp32"}, "children": []}, "output": {"format": "fp32"}})");
  EXPECT_EQ(mode.rfind("plan.reduction.split_mode: unknown split mode 'both'; valid: parallel, serial", 0), 0u) << mode;
  const std::string placement = error_of(R"({"reduction": {"kind": "sequential", "arithmetic": {"accumulate":
      {"format": "fp32"}}}, "c_placement": "middle", "output": {"format": "fp32"}})");
  EXPECT_EQ(placement.rfind("plan.c_placement: unknown placement 'middle'; valid: first, last", 0), 0u) << placement;
}

// ---- strict reading: nothing cut, nothing ignored, nothing guessed (issue 14) ----

const std::string kFp32 = R"({"format": "fp32"})";

std::string fused_plan(const std::string& step_fields) {
  return R"({"reduction": {"kind": "fused", "fused": {)" + step_fields +
         R"(, "a_format": "bf16", "b_format": "bf16", "c_format": "fp32",
            "output": {"format": "fp32", "rounding": "toward_zero"}}}, "output": {"format": "fp32"}})";
}

TEST(Plan, IntegersOutsideTheirRangeAreRefusedNotCut) {
  // 2^32 + 4 once ran as n = 4 (cut to 32 bits).
  const std::string n = error_of(fused_plan(R"("n": 4294967300, "fraction_bits": 24)"));
  EXPECT_EQ(n.rfind("plan.reduction.fused.n: expected an integer in 1 .. 1048576, got 4294967300", 0), 0u) << n;
  EXPECT_EQ(error_of(fused_plan(R"("n": 4, "fraction_bits": 24)")), "");
  const std::string f = error_of(fused_plan(R"("n": 4, "fraction_bits": 4294967320)"));
  EXPECT_EQ(f.rfind("plan.reduction.fused.fraction_bits: expected an integer in 0 .. 700", 0), 0u) << f;
  const std::string floor = error_of(fused_plan(R"("n": 4, "fraction_bits": 24, "exponent_floor": 4294967170)"));
  EXPECT_EQ(floor.rfind("plan.reduction.fused.exponent_floor: expected an integer in -1074 .. 1023", 0), 0u) << floor;
  EXPECT_EQ(error_of(fused_plan(R"("n": 4, "fraction_bits": 24, "exponent_floor": -126)")), "");
  const std::string bits = error_of(R"({"reduction": {"kind": "sequential", "arithmetic": {"accumulate": {"format": "fp32"}}},
      "output": {"format": "bf16", "rounding": "stochastic", "random_bits": 4294967304}})");
  EXPECT_EQ(bits.rfind("plan.output.random_bits: expected an integer in 1 .. 64", 0), 0u) << bits;
  // A float is not an integer, even a whole one.
  const std::string whole = error_of(fused_plan(R"("n": 4.0, "fraction_bits": 24)"));
  EXPECT_EQ(whole.rfind("plan.reduction.fused.n: expected an integer", 0), 0u) << whole;
}

TEST(Plan, UnknownAndRepeatedKeysAreRefused) {
  // A typo once fell back to the default rounding.
  const std::string typo = error_of(R"({"reduction": {"kind": "sequential", "arithmetic": {"accumulate":
      {"format": "fp32", "roundng": "toward_zero"}}}, "output": {"format": "fp32"}})");
  EXPECT_EQ(typo.rfind("plan.reduction.arithmetic.accumulate.roundng: unknown key 'roundng'", 0), 0u) << typo;
  EXPECT_NE(typo.find("valid keys here: format, rounding"), std::string::npos) << typo;
  const std::string top = error_of(R"({"reduction": {"kind": "sequential", "arithmetic": {"accumulate": {"format": "fp32"}}},
      "output": {"format": "fp32"}, "c_placment": "last"})");
  EXPECT_EQ(top.rfind("plan.c_placment: unknown key", 0), 0u) << top;
  // A key of another node kind: "multiple" belongs to pairwise.
  const std::string other = error_of(R"({"reduction": {"kind": "lanes", "size": 8, "multiple": 2,
      "arithmetic": {"accumulate": {"format": "fp32"}}}, "output": {"format": "fp32"}})");
  EXPECT_EQ(other.rfind("plan.reduction.multiple: unknown key", 0), 0u) << other;
  const std::string twice = error_of(R"({"reduction": {"kind": "sequential", "arithmetic": {"accumulate":
      {"format": "fp32", "rounding": "toward_zero", "rounding": "nearest_even"}}}, "output": {"format": "fp32"}})");
  EXPECT_EQ(twice.rfind("plan: key 'rounding' appears twice", 0), 0u) << twice;
}

// A pairwise node whose multiple exceeds its leaf size cannot cut some ranges strictly inside:
// the evaluator recursed forever on them. validate() refuses it, and everything that runs a
// plan validates it first.
TEST(Plan, PairwiseMultipleAboveTheLeafIsRefused) {
  const core::Arithmetic ar{numeq::Cast{numeq::formats::fp32}};
  core::Plan p;
  p.reduction = core::pairwise(2, 8, core::sequential(ar), ar);
  p.output = numeq::Cast{numeq::formats::fp32};
  try {
    core::validate(p);
    ADD_FAILURE() << "accepted";
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("plan.reduction.multiple: 8 exceeds the leaf size 2", 0), 0u) << e.what();
  }
  const std::vector<double> x(5, 1.0);
  EXPECT_THROW(core::evaluate(x, {}, std::nullopt, p), numeq::error);
  const std::string json = error_of(R"({"reduction": {"kind": "pairwise", "size": 2, "multiple": 8,
      "arithmetic": {"accumulate": {"format": "fp32"}}, "children": [{"kind": "sequential",
      "arithmetic": {"accumulate": {"format": "fp32"}}}]}, "output": {"format": "fp32"}})");
  EXPECT_EQ(json.rfind("plan.reduction.multiple:", 0), 0u) << json;
  // multiple == leaf is fine, and sums like a balanced tree of leaves: 5 ones give 5.
  p.reduction = core::pairwise(2, 2, core::sequential(ar), ar);
  EXPECT_EQ(core::evaluate(x, {}, std::nullopt, p), 5.0);
}

TEST(Plan, DeepJsonIsRefusedAtTheLimit) {
  // 8,000 levels once overflowed the stack; the parser now stops at max_json_depth.
  std::string deep = R"({"name": )";
  for (int i = 0; i < 8000; ++i) deep += "[";
  for (int i = 0; i < 8000; ++i) deep += "]";
  deep += "}";
  const std::string e = error_of(deep);
  EXPECT_EQ(e.rfind("plan: JSON nested deeper than 256 levels", 0), 0u) << e.substr(0, 200);
  // A plan nested node in node (chunked in chunked ...) deeper than the limit, likewise.
  std::string nodes;
  for (int i = 0; i < 300; ++i) nodes += R"({"kind": "split", "size": 2, "split_mode": "serial", "through": {"format": "fp32"}, "children": [)";
  nodes += R"({"kind": "sequential", "arithmetic": {"accumulate": {"format": "fp32"}}})";
  for (int i = 0; i < 300; ++i) nodes += "]}";
  const std::string n = error_of(R"({"reduction": )" + nodes + R"(, "output": {"format": "fp32"}})");
  EXPECT_EQ(n.rfind("plan: JSON nested deeper than 256 levels", 0), 0u) << n.substr(0, 200);
}

// A sequential chain of 4096 terms as an explicit tree (what reveal_order finds for a plain
// loop) is 4095 groups deep: written as tree text it stays proportionate and reads back equal.
TEST(Plan, DeepExplicitTreesAreWrittenAsText) {
  const core::Arithmetic ar{numeq::Cast{numeq::formats::fp32}};
  const std::size_t n = 4096;
  // chain + term k, moving the chain (an initializer list would copy it every time).
  const auto extend = [&](core::PlanNode chain, std::size_t k) {
    std::vector<core::PlanNode> children;
    children.push_back(std::move(chain));
    children.push_back(core::term(k));
    return core::group(std::move(children), ar);
  };
  core::PlanNode chain = core::term(0);
  for (std::size_t k = 1; k < n; ++k) chain = extend(std::move(chain), k);
  core::Plan p;
  p.reduction = std::move(chain);
  p.output = numeq::Cast{numeq::formats::fp32};
  core::validate(p);
  const std::string json = core::to_json(p);
  // The tree text: "(" per group, the indices, a space per child after the first, ")" per group.
  std::size_t digits = 0;
  for (std::size_t k = 0; k < n; ++k) digits += std::to_string(k).size();
  const std::size_t text = 2 * (n - 1) + digits + (n - 1);
  EXPECT_LT(json.size(), text + 1000) << "not written as text";
  EXPECT_EQ(core::plan_from_json(json), p);
  // Its value: a plain sequential fp32 loop (the host's float additions are the oracle).
  std::vector<double> x(n);
  float want = 0.0f;
  for (std::size_t k = 0; k < n; ++k) {
    x[k] = 1.0 + static_cast<double>(k % 7) * 0x1p-20;
    want = k == 0 ? static_cast<float>(x[k]) : want + static_cast<float>(x[k]);
  }
  EXPECT_EQ(core::evaluate(x, {}, std::nullopt, p), static_cast<double>(want));
  // One group deeper than max_plan_depth is refused, by validate and by the reader.
  core::PlanNode deeper = std::move(p.reduction);
  for (std::size_t k = n; k < core::max_plan_depth + 2; ++k) deeper = extend(std::move(deeper), k);
  p.reduction = std::move(deeper);
  EXPECT_THROW(core::validate(p), numeq::error);
  const std::string too_deep = error_of(core::to_json(p));
  EXPECT_NE(too_deep.find("nested deeper than 4096"), std::string::npos) << too_deep.substr(0, 200);
  const std::string unclosed = error_of(R"({"reduction": {"kind": "group", "arithmetic": {"accumulate": {"format": "fp32"}},
      "tree": "((0 1) 2"}, "output": {"format": "fp32"}})");
  EXPECT_EQ(unclosed.rfind("plan.reduction.tree: at character 8: the tree is not closed", 0), 0u) << unclosed;
}

// Found by tests/fuzz (fuzz_plan_json): a number beyond binary64 made the JSON library throw an
// exception of another kind than its parse errors, which escaped as no numeq::error (std::terminate
// in C++).
TEST(Plan, NumbersBeyondBinary64AreInvalidJson) {
  const std::string e = error_of(R"({"reduction": {"kind": "sequential", "arithmetic": {"accumulate": {"format": "fp32"}}},
      "output": {"format": "fp32"}, "initial": 77777777777777e777})");
  EXPECT_EQ(e.rfind("plan: not valid JSON", 0), 0u) << e;
  try {
    numeq::core::platform_from_json(R"({"name": "x", "plans": [], "functions": [{"function": "exp", "model": "ulp_budget", "ulps": 1e999}]})");
    ADD_FAILURE() << "accepted";
  } catch (const numeq::error& x) {
    EXPECT_EQ(std::string(x.what()).rfind("profile: not valid JSON", 0), 0u) << x.what();
  }
}

}  // namespace
