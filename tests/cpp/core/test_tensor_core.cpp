// numeq/core/tensor_core.hpp: the one builder of tensor-core reductions. The built-in NVIDIA
// platforms' plans (whose steps reproduce the GPU-measured vectors: test_fused_vectors,
// test_platform) are its reductions, and the generic candidate grid a fit tries holds every one
// of them: for each built-in matmul plan made of tensor-core steps alone (no input cast, no
// promotion to CUDA cores), a candidate with the same step parameters and structure has the same
// reduction node for node.

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "numeq/core/platform.hpp"
#include "numeq/core/tensor_core.hpp"
#include "numeq/formats/error.hpp"

namespace {

namespace core = numeq::core;

// The fused step of a plan built by tensor_core_reduction, and its structure; nullptr otherwise.
const core::FusedStep* step_of(const core::PlanNode& n, core::TensorCoreStructure& s) {
  if (n.kind == core::NodeKind::fused) {
    s = core::TensorCoreStructure::chain;
    return &n.fused;
  }
  if (n.kind != core::NodeKind::chunked || n.children.size() != 2) return nullptr;
  const core::PlanNode& inner = n.children[0];
  if (inner.kind == core::NodeKind::fused && n.chunk == static_cast<std::size_t>(inner.fused.n)) {
    s = core::TensorCoreStructure::c_last;
    return &inner.fused;
  }
  if (inner.kind == core::NodeKind::permute && inner.children.size() == 1 &&
      inner.children[0].kind == core::NodeKind::fused && n.chunk == 2 * static_cast<std::size_t>(inner.children[0].fused.n)) {
    s = core::TensorCoreStructure::halves;
    return &inner.children[0].fused;
  }
  return nullptr;
}

TEST(TensorCore, TheCandidateGridHoldsEveryBuiltInTensorCorePlan) {
  std::size_t checked = 0;
  for (const std::string& name : core::platform_names()) {
    if (name.rfind("nvidia.", 0) != 0) continue;
    for (const core::PlanEntry& e : core::platform_by_name(name).plans) {
      if (e.op != core::Operation::matmul || e.plan.input_a) continue;  // tf32's input cast: not a generic core
      core::TensorCoreStructure s{};
      const core::FusedStep* step = step_of(e.plan.reduction, s);
      if (!step || step->exponent_floor != core::no_exponent_floor) continue;
      SCOPED_TRACE(name + " " + e.in_fmt + " -> " + e.out_fmt);
      // The grid's accumulator is fp16 for out = fp16, else fp32: the step's c format (an fp32
      // accumulator with a narrower output casts in the epilogue, outside the reduction).
      const auto grid = core::tensor_core_candidates(step->a_format, step->c_format, {step->n},
                                                     {step->fraction_bits}, {step->output}, {s});
      ASSERT_EQ(grid.size(), 1u);
      EXPECT_EQ(grid[0].plan.reduction, e.plan.reduction);
      ++checked;
    }
  }
  EXPECT_GE(checked, 10u);  // V100 to B200, fp16 / bf16 / fp8 (chain and mma.sync halves)
}

TEST(TensorCore, HalvesFeedProductsByRegisterBytes) {
  core::FusedStep s;
  s.n = 16;
  const core::PlanNode r = core::tensor_core_reduction(s, core::TensorCoreStructure::halves);
  ASSERT_EQ(r.kind, core::NodeKind::chunked);
  EXPECT_EQ(r.chunk, 32u);
  const std::vector<std::size_t>& order = r.children[0].order;
  ASSERT_EQ(order.size(), 32u);
  // bytes 0-1 of each 32-bit register of four fp8 values first, then bytes 2-3
  EXPECT_EQ((std::vector<std::size_t>(order.begin(), order.begin() + 4)), (std::vector<std::size_t>{0, 1, 4, 5}));
  EXPECT_EQ((std::vector<std::size_t>(order.begin() + 16, order.begin() + 20)), (std::vector<std::size_t>{2, 3, 6, 7}));
}

TEST(TensorCore, StepsBeyondWhatAStepTakesAreRefusedBeforeAnyPlan) {
  const numeq::Cast rz{numeq::formats::fp32, numeq::Rounding::toward_zero};
  for (const auto& [n, f, word] : {std::tuple{core::max_products + 1, 24, "n:"}, std::tuple{0, 24, "n:"},
                                   std::tuple{16, core::max_fraction_bits + 1, "fraction_bits:"}}) {
    try {
      core::tensor_core_candidates(numeq::formats::bf16, numeq::formats::fp32, {n}, {f}, {rz},
                                   {core::TensorCoreStructure::halves});
      ADD_FAILURE() << n << " " << f;
    } catch (const numeq::error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(word, 0), 0u) << e.what();
    }
  }
}

TEST(TensorCore, StructureNamesAreRefusedByName) {
  EXPECT_EQ(core::tensor_core_structure_by_name("c_last"), core::TensorCoreStructure::c_last);
  try {
    core::tensor_core_structure_by_name("spiral");
    ADD_FAILURE() << "accepted";
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("structure"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chain, c_last, halves"), std::string::npos) << e.what();
  }
}

}  // namespace
