// Tolerances over draws of an input family (cases/family_tolerance.hpp). Oracle: the exact result
// rounded once (the op's reference, MPFR-checked elsewhere): a tolerance fitted on calibration
// draws holds for a correct platform's output on draws it never saw, alone and between platforms;
// and it rejects a bf16 accumulator in place of fp32.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "numeq/cases/family_tolerance.hpp"
#include "numeq/cases/generators.hpp"
#include "numeq/cases/op.hpp"
#include "numeq/core/bound.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
namespace fmts = numeq::formats;
using numeq::Cast;
using Array = xt::xarray<double>;

constexpr std::size_t kM = 8, kK = 1000, kN = 8;

cases::Op draw(std::uint64_t seed) {
  const cases::Generator a{cases::Distribution::normal, 2 * seed, 1.0}, b{cases::Distribution::normal, 2 * seed + 1, 1.0};
  return cases::matmul(cases::generate(a, fmts::bf16, {kM, kK}), cases::generate(b, fmts::bf16, {kK, kN}), nullptr,
                       "bf16", Cast{fmts::fp32});
}

core::BoundOptions probabilistic(double per_check) {
  core::BoundOptions o;
  o.kind = core::BoundKind::probabilistic;
  o.failure_probability = per_check / static_cast<double>(kM * kN);
  return o;
}

bool within(const Array& x, const Array& y, const cases::ToleranceForms& t) {
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x.data()[i] - y.data()[i]) <= t.atol + t.rtol * std::abs(y.data()[i]))) return false;
  return true;
}

TEST(FamilyTolerance, HoldsOnFreshDrawsAgainstTheReference) {
  const core::Platform trn2 = core::platform_by_name("trainium.trn2");
  std::vector<cases::Requirement> calibration;
  for (std::uint64_t s = 0; s < 4; ++s) {
    const cases::Op op = draw(s);
    calibration.push_back(cases::requirement(op, op.emulate(trn2, probabilistic(1e-6)), nullptr));
    EXPECT_GT(calibration.back().failure_probability, 0);
    EXPECT_LE(calibration.back().failure_probability, 1e-6 * (1 + 1e-9));
  }
  const cases::ToleranceForms t = cases::fit_tolerance(calibration, fmts::fp32);
  EXPECT_GT(t.atol, 0);
  EXPECT_GT(t.max_rtol, 0);
  for (std::uint64_t s = 100; s < 108; ++s) {
    const cases::Op op = draw(s);
    EXPECT_TRUE(within(op.emulate(trn2, {}).values, op.reference_values(), t)) << "seed " << s;
  }
}

TEST(FamilyTolerance, HoldsBetweenPlatformsAndCatchesABf16Accumulator) {
  const core::Platform h100 = core::platform_by_name("nvidia.h100"), trn2 = core::platform_by_name("trainium.trn2");
  std::vector<cases::Requirement> calibration;
  for (std::uint64_t s = 0; s < 4; ++s) {
    const cases::Op op = draw(s);
    const cases::Emulation g = op.emulate(h100, probabilistic(1e-6)), n = op.emulate(trn2, probabilistic(1e-6));
    calibration.push_back(cases::requirement(op, g, &n));
  }
  const cases::ToleranceForms t = cases::fit_tolerance(calibration, fmts::fp32);
  // A Trainium kernel whose PSUM accumulates in bf16: trn2's plan with every accumulator bf16.
  core::Plan bug = core::plan_for(trn2, core::Operation::matmul, "bf16", "fp32");
  for (core::PlanNode& child : bug.reduction.children) child.arithmetic.accumulate = Cast{fmts::bf16};
  int caught = 0;
  for (std::uint64_t s = 50; s < 56; ++s) {
    const cases::Op op = draw(s);
    const Array gpu = op.emulate(h100, {}).values;
    EXPECT_TRUE(within(op.emulate(trn2, {}).values, gpu, t)) << "seed " << s;
    const Array bad = core::matmul(cases::generate({cases::Distribution::normal, 2 * s, 1.0}, fmts::bf16, {kM, kK}),
                                   cases::generate({cases::Distribution::normal, 2 * s + 1, 1.0}, fmts::bf16, {kK, kN}),
                                   nullptr, bug);
    caught += within(bad, gpu, t) ? 0 : 1;
  }
  EXPECT_EQ(caught, 6);
}

TEST(FamilyTolerance, OverAFamily) {
  // The family form: the same draws through family_tolerance as by hand above, and the tier.
  const core::Platform h100 = core::platform_by_name("nvidia.h100"), trn2 = core::platform_by_name("trainium.trn2");
  const cases::FamilyTolerance f = cases::family_tolerance(draw, {0, 1, 2, 3}, h100, &trn2);
  EXPECT_EQ(f.tier, cases::Tier::probabilistic);
  EXPECT_EQ(f.draws, 4u);
  EXPECT_GT(f.failure_probability, 0);
  EXPECT_LE(f.failure_probability, 2e-6 * (1 + 1e-9));  // both platforms' bounds
  for (std::uint64_t s = 200; s < 206; ++s) {
    const cases::Op op = draw(s);
    EXPECT_TRUE(within(op.emulate(trn2, {}).values, op.emulate(h100, {}).values, f.forms)) << "seed " << s;
  }
  const cases::FamilyTolerance worst =
      cases::family_tolerance(draw, {0, 1}, trn2, nullptr, core::BoundKind::deterministic);
  EXPECT_EQ(worst.tier, cases::Tier::deterministic);
  EXPECT_EQ(worst.failure_probability, 0);
  EXPECT_THROW(cases::family_tolerance(draw, {}, trn2, nullptr), numeq::error);
  EXPECT_THROW(cases::family_tolerance(draw, {0}, trn2, nullptr, core::BoundKind::probabilistic, 0.0), numeq::error);
}

TEST(FamilyTolerance, LambdaInsteadOfAFailureProbability) {
  // Higham and Mary's lambda per element in place of the per-draw failure probability: a larger
  // lambda gives a wider tolerance that fails less often; a lambda <= 0 is refused by name.
  const core::Platform trn2 = core::platform_by_name("trainium.trn2");
  const cases::FamilyTolerance narrow =
      cases::family_tolerance(draw, {0, 1}, trn2, nullptr, core::BoundKind::probabilistic, 1e-6, 2.0, 3.0);
  const cases::FamilyTolerance wide =
      cases::family_tolerance(draw, {0, 1}, trn2, nullptr, core::BoundKind::probabilistic, 1e-6, 2.0, 8.0);
  EXPECT_EQ(narrow.tier, cases::Tier::probabilistic);
  EXPECT_GT(narrow.failure_probability, wide.failure_probability);
  EXPECT_LT(narrow.forms.ulps, wide.forms.ulps);
  try {
    cases::family_tolerance(draw, {0}, trn2, nullptr, core::BoundKind::probabilistic, 1e-6, 2.0, -1.0);
    ADD_FAILURE() << "lam -1 accepted";
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("lam:"), std::string::npos) << e.what();
  }
}

TEST(FamilyTolerance, AtolRelativeToTheSmallestDrawsScale) {
  // Two draws of max|y| 4 and 2 (an Inf left out of the scale): atol_rel = atol / 2.
  cases::Requirement a, b;
  a.need = {1e-3, 1e-3};
  a.expected = {4.0, -1.0};
  b.need = {1e-3, 1e-3};
  b.expected = {2.0, std::numeric_limits<double>::infinity()};
  const cases::ToleranceForms f = cases::fit_tolerance({a, b}, fmts::fp32, 1.0);
  EXPECT_EQ(f.atol_rel, f.atol / 2.0);
}

TEST(FamilyTolerance, TheMarginScalesTheComputedPartOnly) {
  // One element of need 3e-3, of which 1e-3 computed: margin 2 gives 3e-3 + 1e-3; without the
  // split (computed empty) the whole need is doubled; a computed part of the wrong length is refused.
  cases::Requirement r;
  r.need = {3e-3};
  r.expected = {1.0};
  r.computed = {1e-3};
  EXPECT_DOUBLE_EQ(cases::fit_tolerance({r}, fmts::fp32, 2.0).max_abs, 4e-3);
  EXPECT_DOUBLE_EQ(cases::fit_tolerance({r}, fmts::fp32, 1.0).max_abs, 3e-3);
  r.computed.clear();
  EXPECT_DOUBLE_EQ(cases::fit_tolerance({r}, fmts::fp32, 2.0).max_abs, 6e-3);
  r.computed = {1e-3, 1e-3};
  EXPECT_THROW(cases::fit_tolerance({r}, fmts::fp32, 2.0), numeq::error);
  // A draw's computed part is its bound less the output cast's own rounding: within [0, need].
  const cases::Op op = draw(3);
  const cases::Requirement q = cases::requirement(op, op.emulate(core::platform_by_name("trainium.trn2"), {}), nullptr);
  ASSERT_EQ(q.computed.size(), q.need.size());
  for (std::size_t i = 0; i < q.need.size(); ++i) {
    EXPECT_GE(q.computed[i], 0.0);
    EXPECT_LE(q.computed[i], q.need[i]);
  }
}

TEST(FamilyTolerance, Refusals) {
  EXPECT_THROW(cases::fit_tolerance({}, fmts::fp32, 0.5), numeq::error);
  const cases::ToleranceForms empty = cases::fit_tolerance({}, fmts::fp32);
  EXPECT_TRUE(std::isnan(empty.rtol) && std::isnan(empty.atol) && std::isnan(empty.ulps));
  const cases::Op op = draw(1);
  const cases::Emulation e = op.emulate(core::platform_by_name("trainium.trn2"), {});
  cases::Emulation shorter{xt::zeros<double>({3}), xt::zeros<double>({3}), 0};
  try {
    (void)cases::requirement(op, e, &shorter);
    FAIL() << "a shape mismatch was accepted";
  } catch (const numeq::error& err) {
    EXPECT_NE(std::string(err.what()).find("against:"), std::string::npos) << err.what();
  }
}

}  // namespace
