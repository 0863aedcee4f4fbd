// numeq/testing.hpp: the GoogleTest helpers and matchers pass a platform's own output, fail
// planted bugs, and put the verdict (tier, counts, worst elements) in the failure message.

#include "numeq/testing.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include "numeq/cases/generators.hpp"
#include "numeq/core/evaluate.hpp"

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
namespace fmts = numeq::formats;
using Array = xt::xarray<double>;

TEST(Testing, ExplainedByAndBitExact) {
  const Array a = cases::generate({cases::Distribution::normal, 1, 1.0}, fmts::bf16, {16, 256});
  const Array b = cases::generate({cases::Distribution::normal, 2, 1.0}, fmts::bf16, {256, 8});
  const cases::Op op = cases::matmul(a, b, nullptr, "bf16", numeq::Cast{fmts::fp32});
  const Array h100 = core::matmul(a, b, nullptr, core::plan_for(core::platform_by_name("nvidia.h100"),
                                                                core::Operation::matmul, "bf16", "fp32"));
  EXPECT_NUMEQ_EXPLAINED(h100, op, "nvidia.h100");
  EXPECT_TRUE(numeq::testing::bit_exact_with(h100, op, "nvidia.h100"));
  // The H100's result is not Trainium's bit for bit, but within Trainium's bound of the exact one?
  // Not necessarily; what must hold is that the exact reference rounded to fp32 is explained by
  // every platform (it is closer to the exact value than any bound allows).
  const Array ref = op.reference();
  for (const char* p : {"nvidia.h100", "trainium.trn1", "cuda_core.fp32"}) EXPECT_NUMEQ_EXPLAINED(ref, op, p);

  Array off = h100;
  off(3, 4) += 1.0;  // far beyond any bound of a K = 256 fp32 accumulation of N(0,1) bf16 products
  const ::testing::AssertionResult r = numeq::testing::explained_by(off, op, "nvidia.h100");
  EXPECT_FALSE(r);
  const std::string message = r.message();
  EXPECT_NE(message.find("FAIL"), std::string::npos) << message;
  EXPECT_NE(message.find("! [3,4]"), std::string::npos) << message;
  EXPECT_NE(message.find("violations 1"), std::string::npos) << message;
  EXPECT_FALSE(numeq::testing::bit_exact_with(off, op, "nvidia.h100"));
}

}  // namespace

// ---- the matchers (IsExplainedBy, IsBitExactWith, IsPortOf) ----
//
// Oracles: the correct outputs are numeq's own emulations of the platforms (checked against
// measured GPU vectors in test_platform / test_fused); the wrong ones are bugs planted by hand (a
// bf16 accumulator, a dropped K tile). What is tested is that the matchers tell the two apart and
// say why; no expected number here comes from numeq.

namespace {

using numeq::testing::IsBitExactWith;
using numeq::testing::IsExplainedBy;
using numeq::testing::IsPortOf;
using ::testing::Not;

// K = 300: Trainium's 128-row tiles are 128, 128 and a partial 44.
constexpr std::size_t kM = 24, kK = 300, kN = 16;

struct Matmul {
  Array a = cases::generate({cases::Distribution::normal, 11, 1.0}, fmts::bf16, {kM, kK});
  Array b = cases::generate({cases::Distribution::normal, 12, 1.0}, fmts::bf16, {kK, kN});
  cases::Op op = cases::matmul(a, b, nullptr, "bf16", numeq::Cast{fmts::fp32});

  static core::Plan plan(std::string_view platform) {
    return core::plan_for(core::platform_by_name(platform), core::Operation::matmul, "bf16", "fp32");
  }
  Array on(std::string_view platform) const { return core::matmul(a, b, nullptr, plan(platform)); }
};

// The planted bug "accumulates in bf16": every addition of the plan (and every fused tensor-core
// step's result) rounded into bf16 instead of fp32.
void accumulate_in_bf16(core::PlanNode& node) {
  node.arithmetic.accumulate.format = fmts::bf16;
  if (node.kind == core::NodeKind::fused) node.fused.output.format = fmts::bf16;
  for (core::PlanNode& child : node.children) accumulate_in_bf16(child);
}

Array bf16_accumulation(const Matmul& m, std::string_view platform) {
  core::Plan p = Matmul::plan(platform);
  accumulate_in_bf16(p.reduction);
  return core::matmul(m.a, m.b, nullptr, p);
}

// The planted bug "drops the last K tile": the partial tile of 44 rows never reaches the sum.
Array dropped_k_tile(const Matmul& m, std::string_view platform) {
  const Array a = xt::view(m.a, xt::all(), xt::range(0, 256));
  const Array b = xt::view(m.b, xt::range(0, 256), xt::all());
  return core::matmul(a, b, nullptr, Matmul::plan(platform));
}

template <class M, class T>
std::string explanation(const M& matcher, const T& value, bool* matched) {
  ::testing::StringMatchResultListener listener;
  *matched = ::testing::ExplainMatchResult(matcher, value, &listener);
  return listener.str();
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

TEST(Matchers, PassEachPlatformsOwnOutput) {
  const Matmul m;
  const Array h100 = m.on("nvidia.h100");
  const Array trn2 = m.on("trainium.trn2");
  ASSERT_NE(h100, trn2);  // otherwise the port check below would be vacuous
  EXPECT_THAT(h100, IsBitExactWith(m.op, "nvidia.h100"));
  EXPECT_THAT(h100, IsExplainedBy(m.op, "nvidia.h100"));
  EXPECT_THAT(trn2, IsBitExactWith(m.op, "trainium.trn2"));
  EXPECT_THAT(trn2, IsExplainedBy(m.op, "trainium.trn2", cases::Tier::bit_exact));
  EXPECT_THAT(trn2, IsPortOf(h100, m.op, "nvidia.h100", "trainium.trn2"));
  // Each platform's own output is not the other's bit for bit.
  EXPECT_THAT(trn2, Not(IsBitExactWith(m.op, "nvidia.h100")));
  EXPECT_THAT(h100, Not(IsBitExactWith(m.op, "trainium.trn2")));

  // A kernel's float output, as an xtensor array or as a flat vector in C order.
  const xt::xarray<float> trn2_float = xt::cast<float>(trn2);
  const std::vector<float> trn2_flat(trn2_float.begin(), trn2_float.end());
  EXPECT_THAT(trn2_float, IsBitExactWith(m.op, "trainium.trn2"));
  EXPECT_THAT(trn2_flat, IsBitExactWith(m.op, "trainium.trn2"));
  EXPECT_THAT(trn2_flat, IsPortOf(std::vector<double>(h100.begin(), h100.end()), m.op, "nvidia.h100", "trainium.trn2"));
}

TEST(Matchers, DescribeWhatTheyCheck) {
  const Matmul m;
  const std::string signature = m.op.signature;
  EXPECT_EQ(::testing::DescribeMatcher<Array>(IsExplainedBy(m.op, "trainium.trn2")),
            "is explained by trainium.trn2 (probabilistic or stronger) as " + signature);
  EXPECT_EQ(::testing::DescribeMatcher<Array>(IsExplainedBy(m.op, "trainium.trn2"), /*negation=*/true),
            "is not explained by trainium.trn2 (probabilistic or stronger) as " + signature);
  EXPECT_EQ(::testing::DescribeMatcher<Array>(IsExplainedBy(m.op, "nvidia.h100", cases::Tier::variant)),
            "is explained by nvidia.h100 (variant or stronger) as " + signature);
  EXPECT_EQ(::testing::DescribeMatcher<Array>(IsBitExactWith(m.op, "nvidia.h100")),
            "is bit-exact with nvidia.h100's " + signature);
  const std::string port = ::testing::DescribeMatcher<Array>(IsPortOf(m.on("nvidia.h100"), m.op, "nvidia.h100", "trainium.trn2"));
  EXPECT_TRUE(contains(port, "is a port to trainium.trn2 of the nvidia.h100 output of " + signature)) << port;
}

TEST(Matchers, FailABf16Accumulator) {
  const Matmul m;
  for (const char* platform : {"nvidia.h100", "trainium.trn2"}) {
    SCOPED_TRACE(platform);
    const Array bug = bf16_accumulation(m, platform);
    bool matched = true;
    const std::string why = explanation(IsExplainedBy(m.op, platform), bug, &matched);
    EXPECT_FALSE(matched) << why;
    EXPECT_TRUE(contains(why, "FAIL (violation)")) << why;
    EXPECT_TRUE(contains(why, m.op.signature)) << why;
    EXPECT_TRUE(contains(why, "worst elements")) << why;
    // The explanation is the verdict's message, as Python's str(verdict) prints it.
    EXPECT_EQ(why, cases::describe(cases::compare(bug, m.op, core::platform_by_name(platform))));
    // Not even the worst-case bound holds.
    EXPECT_THAT(bug, Not(IsExplainedBy(m.op, platform, cases::Tier::deterministic)));
    EXPECT_THAT(bug, Not(IsBitExactWith(m.op, platform)));
  }
}

TEST(Matchers, FailADroppedKTile) {
  const Matmul m;
  for (const char* platform : {"nvidia.h100", "trainium.trn2"}) {
    SCOPED_TRACE(platform);
    const Array bug = dropped_k_tile(m, platform);
    bool matched = true;
    const std::string why = explanation(IsExplainedBy(m.op, platform, cases::Tier::deterministic), bug, &matched);
    EXPECT_FALSE(matched) << why;
    EXPECT_TRUE(contains(why, "FAIL (violation)")) << why;
    EXPECT_TRUE(contains(why, m.op.signature)) << why;
    EXPECT_TRUE(contains(why, "worst elements")) << why;
  }
}

TEST(Matchers, PortCheckFailsWhenEitherSideHasABug) {
  const Matmul m;
  const Array h100 = m.on("nvidia.h100");
  const Array trn2 = m.on("trainium.trn2");
  const auto port_of_h100 = IsPortOf(h100, m.op, "nvidia.h100", "trainium.trn2");
  EXPECT_THAT(trn2, port_of_h100);
  EXPECT_THAT(bf16_accumulation(m, "trainium.trn2"), Not(port_of_h100));
  EXPECT_THAT(dropped_k_tile(m, "trainium.trn2"), Not(port_of_h100));
  EXPECT_THAT(trn2, Not(IsPortOf(bf16_accumulation(m, "nvidia.h100"), m.op, "nvidia.h100", "trainium.trn2")));

  bool matched = true;
  const std::string why = explanation(port_of_h100, dropped_k_tile(m, "trainium.trn2"), &matched);
  EXPECT_FALSE(matched);
  EXPECT_TRUE(contains(why, "FAIL (port check)")) << why;
  EXPECT_TRUE(contains(why, "trainium output against trainium.trn2")) << why;
  EXPECT_TRUE(contains(why, "beyond the cross-platform bound")) << why;
}

TEST(Matchers, AVariantIsNotBitExactButExplained) {
  const Matmul m;
  const std::string variant = "trainium.trn2[pe_order=pairwise]";
  const Array out = m.on(variant);
  EXPECT_THAT(out, Not(IsBitExactWith(m.op, "trainium.trn2")));
  bool matched = false;
  const std::string why = explanation(IsExplainedBy(m.op, "trainium.trn2", cases::Tier::variant), out, &matched);
  EXPECT_TRUE(matched) << why;
  EXPECT_TRUE(contains(why, "PASS (variant: " + variant + ")")) << why;
}

TEST(Matchers, BadInputNamesTheParameter) {
  const Matmul m;
  const auto message_of = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const numeq::error& e) {
      return e.what();
    }
    return "(no numeq::error)";
  };
  const std::string platform = message_of([&] { (void)IsExplainedBy(m.op, "nvidia.h1000"); });
  EXPECT_TRUE(contains(platform, "platform")) << platform;
  EXPECT_TRUE(contains(platform, "nvidia.h100")) << platform;  // the valid names are listed
  const std::string gpu = message_of([&] { (void)IsPortOf(m.on("nvidia.h100"), m.op, "nvidia.h1000", "trainium.trn2"); });
  EXPECT_TRUE(contains(gpu, "gpu_platform")) << gpu;
  const std::string trainium = message_of([&] { (void)IsPortOf(m.on("nvidia.h100"), m.op, "nvidia.h100", "trainium.trn9"); });
  EXPECT_TRUE(contains(trainium, "trainium_platform")) << trainium;
  // A flat output of the wrong length, and an array of the wrong shape.
  const std::vector<float> short_output(kM * kN - 1, 0.0F);
  const std::string flat = message_of([&] {
    bool matched = false;
    (void)explanation(IsExplainedBy(m.op, "nvidia.h100"), short_output, &matched);
  });
  EXPECT_TRUE(contains(flat, "actual")) << flat;
  const Array transposed = xt::transpose(m.on("nvidia.h100"));
  const std::string shape = message_of([&] {
    bool matched = false;
    (void)explanation(IsExplainedBy(m.op, "nvidia.h100"), transposed, &matched);
  });
  EXPECT_TRUE(contains(shape, "actual")) << shape;
}

}  // namespace
