// Elementwise functions under platform function models (cases/elementwise.hpp), against the
// MPFR-certified references: every element within its bound, on every generator distribution,
// several input formats and platforms; and the bound covering every device value the model admits
// (all compute-format values within the ulp budget of the correctly rounded one).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "check_bounds.hpp"
#include "numeq/cases/elementwise.hpp"
#include "numeq/cases/generators.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/references/functions.hpp"

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
namespace ref = numeq::reference;
using numeq::Cast;
using numeq::Format;
using F = ref::Function;

const F kFunctions[] = {F::exp, F::tanh, F::sigmoid, F::gelu, F::gelu_tanh, F::silu, F::rsqrt, F::reciprocal};
const char* const kPlatforms[] = {"nvidia.h100", "cuda_core.fp32", "numpy", "trainium.trn1",
                                  "trainium.trn1[scalar_activation_ulps=16]"};
const Format kFormats[] = {numeq::formats::fp32, numeq::formats::bf16, numeq::formats::fp16, numeq::formats::e4m3fn};

const Cast kExact{numeq::formats::fp64};

// Every function x every distribution x format x platform, outputs in fp32 and in the input format.
numeq_test::Tally sweep(F f, const std::vector<std::size_t>& shape, std::uint64_t seed0, double* random_tightness) {
  numeq_test::Tally total;
  for (const char* name : kPlatforms) {
    const core::Platform platform = core::platform_by_name(name);
    for (const Format& fmt : kFormats) {
      for (const cases::Distribution d : cases::all_distributions()) {
        const xt::xarray<double> x = cases::generate({d, seed0 + static_cast<std::uint64_t>(d), 1.0}, fmt, shape);
        const xt::xarray<double> exact = ref::evaluate(f, x, kExact);
        for (const Cast& out : {Cast{numeq::formats::fp32}, Cast{fmt}}) {
          const cases::Emulation e = cases::function(f, x, platform, out);
          const std::string label = std::string(ref::function_name(f)) + " " + name + " " + std::string(fmt.name) +
                                    " " + std::string(cases::to_string(d)) + " -> " + std::string(out.format.name);
          const numeq_test::Tally t = numeq_test::check(e, exact, x, label);
          if (d == cases::Distribution::normal && out.format == numeq::formats::fp32)
            *random_tightness = std::max(*random_tightness, t.worst_ratio);
          total.add(t);
        }
      }
    }
  }
  return total;
}

TEST(Elementwise, EveryElementWithinItsBound) {
  numeq_test::Tally all;
  for (const F f : kFunctions) {
    double random = 0;
    const numeq_test::Tally t = sweep(f, {8, 64}, 100, &random);
    numeq_test::print(std::string(ref::function_name(f)).c_str(), t, random);
    EXPECT_EQ(t.violations, 0u) << t.first_violation;
    EXPECT_GT(t.checked, 50000u);
    all.add(t);
  }
  numeq_test::print("all functions", all, all.worst_ratio);
}

// A device within N ulps of the correctly rounded fp32 value: every such value (N steps up and
// down, crossing binades), cast to the output, stays within the bound.
TEST(Elementwise, BoundCoversEveryValueTheBudgetAdmits) {
  std::size_t checked = 0, violations = 0;
  for (const char* name : {"nvidia.h100", "trainium.trn1[scalar_activation_ulps=16]", "numpy"}) {
    const core::Platform platform = core::platform_by_name(name);
    for (const F f : kFunctions) {
      const core::FunctionModel model = core::function_model(platform, ref::function_name(f));
      const int n = static_cast<int>(std::ceil(model.ulps));
      for (const cases::Distribution d : {cases::Distribution::normal, cases::Distribution::lognormal,
                                          cases::Distribution::subnormal_rich, cases::Distribution::small_integers}) {
        const xt::xarray<double> x = cases::generate({d, 7, 1.0}, numeq::formats::fp32, {256});
        const xt::xarray<double> exact = ref::evaluate(f, x, kExact);
        for (const Cast& out : {Cast{numeq::formats::fp32}, Cast{numeq::formats::bf16}}) {
          const cases::Emulation e = cases::function(f, x, platform, out);
          const xt::xarray<double> cr = ref::evaluate(f, x, Cast{numeq::formats::fp32});
          for (std::size_t i = 0; i < x.size(); ++i) {
            if (!std::isfinite(e.bound(i)) || !std::isfinite(cr(i))) continue;
            for (const float dir : {INFINITY, -INFINITY}) {
              float v = static_cast<float>(cr(i));
              for (int k = 0; k < n; ++k) v = std::nextafter(v, dir);
              if (model.ulps != std::floor(model.ulps) && n > 0) v = std::nextafter(v, -dir);  // 2.52: 2 steps
              const double device = numeq::round_to_format(static_cast<double>(v), out);
              ++checked;
              if (!(std::abs(device - exact(i)) <= e.bound(i) * (1 + 1e-15) + 0x1p-1074)) {
                ++violations;
                ADD_FAILURE() << name << " " << ref::function_name(f) << " x=" << x(i) << " device=" << device
                              << " exact=" << exact(i) << " bound=" << e.bound(i);
              }
            }
          }
        }
      }
    }
  }
  std::printf("[ bounds ] device values at the budget's edge: checked %zu, violations %zu\n", checked, violations);
  EXPECT_EQ(violations, 0u);
}

// The budget counts: trainium at 16 ulps has a bound at least as large as at 4 for every element.
TEST(Elementwise, LargerBudgetLargerBound) {
  const xt::xarray<double> x = cases::generate({cases::Distribution::normal, 3, 2.0}, numeq::formats::fp32, {512});
  const cases::Emulation a = cases::function(F::exp, x, core::platform_by_name("trainium.trn1"), Cast{});
  const cases::Emulation b =
      cases::function(F::exp, x, core::platform_by_name("trainium.trn1[scalar_activation_ulps=16]"), Cast{});
  EXPECT_EQ(a.values, b.values);  // the emulation is the correctly rounded value under both
  std::size_t larger = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_GE(b.bound(i), a.bound(i));
    larger += b.bound(i) > a.bound(i) ? 1 : 0;
  }
  EXPECT_GT(larger, 400u);
}

TEST(Elementwise, FunctionNamesAgreeWithReferences) {
  const auto core_names = core::function_model_names();
  const auto ref_names = ref::function_names();
  ASSERT_EQ(core_names.size(), ref_names.size());
  for (std::size_t i = 0; i < core_names.size(); ++i) EXPECT_EQ(core_names[i], ref_names[i]);
}

TEST(Elementwise, ErrorsNameTheArgument) {
  const xt::xarray<double> x = {1.0, 2.0};
  try {
    cases::function(F::exp, x, core::platform_by_name("numpy"), Cast{numeq::formats::int8});
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("out", 0), 0u) << e.what();
  }
  // Non-finite inputs: no claim (NaN bound); a finite input at a pole: +Inf.
  const xt::xarray<double> s = {INFINITY, 0.0};
  const cases::Emulation e = cases::function(F::rsqrt, s, core::platform_by_name("nvidia.h100"), Cast{});
  EXPECT_TRUE(std::isnan(e.bound(0)));
  EXPECT_TRUE(std::isinf(e.bound(1)));
}

// NUMEQ_LONG_TESTS=1: >= 10^7 output elements checked.
TEST(Elementwise, Long) {
  if (!numeq_test::long_tests()) GTEST_SKIP() << "set NUMEQ_LONG_TESTS=1";
  numeq_test::Tally all;
  double random = 0;
  for (const F f : kFunctions) all.add(sweep(f, {32, 256}, 9000, &random));
  numeq_test::print("long: all functions", all, random);
  EXPECT_EQ(all.violations, 0u) << all.first_violation;
  EXPECT_GE(all.checked + all.unbounded + all.agreed_special, 10000000u);
}

}  // namespace
