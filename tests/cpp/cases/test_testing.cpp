// numeq/testing.hpp: the GoogleTest helpers pass a platform's own output, fail planted bugs, and
// put the verdict (counts, worst elements) in the failure message.

#include "numeq/testing.hpp"

#include <gtest/gtest.h>

#include <string>

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
