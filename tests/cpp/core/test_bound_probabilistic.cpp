// The probabilistic bounds (bound_probabilistic.cpp): the bound at lambda standard deviations and
// its stated failure probability against its violation rate, on every platform's plans, every
// distribution, with and without c, and failure_probability's choice of lambda. The oracle is the
// exact reference (numeq::reference, a long accumulator); shared checking in bound_test_support.hpp.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "bound_test_support.hpp"

namespace {

using namespace numeq;
using namespace numeq::core;
using namespace numeq_test_bound;
using numeq::cases::Distribution;

TEST(Bound, Probabilistic) {
  const std::vector<std::pair<std::string, Plan>> plans = {
      {"cuda_core fp32 dot", plan_for(platform_by_name("cuda_core.fp32"), Operation::dot, "fp32", "fp32")},
      {"h100 fp16->fp16 matmul", plan_for(platform_by_name("nvidia.h100"), Operation::matmul, "fp16", "fp16")},
      {"trainium bf16 matmul", plan_for(platform_by_name("trainium.trn1"), Operation::matmul, "bf16", "fp32")},
      {"bf16 chain", plan_of(sequential(ar(formats::bf16)), Cast{formats::bf16})},
  };
  for (const double lambda : {4.0, 6.0}) {
    BoundOptions o;
    o.kind = BoundKind::probabilistic;
    o.lambda = lambda;
    for (const auto& [label, plan] : plans) {
      const std::size_t K = 512;
      Tally t, det;
      for (const Distribution d : {Distribution::normal, Distribution::uniform, Distribution::lognormal}) {
        if (plan.reduction.kind == NodeKind::sequential && plan.reduction.start_from_zero) {
          t.merge(check_dot(plan, formats::fp32, d, 41, 256, K, false, o));
          det.merge(check_dot(plan, formats::fp32, d, 41, 256, K, false));
        } else if (plan.reduction.kind == NodeKind::sequential) {
          t.merge(check_dot(plan, formats::bf16, d, 41, 256, K, false, o));
          det.merge(check_dot(plan, formats::bf16, d, 41, 256, K, false));
        } else {
          const Format& in = label.find("fp16") != std::string::npos ? formats::fp16 : formats::bf16;
          t.merge(check_matmul(plan, in, d, 43, 16, K, 16, false, o));
          det.merge(check_matmul(plan, in, d, 43, 16, K, 16, false));
        }
      }
      const double failure = reduction_weights(plan, K, false, o).failure_probability;
      const double rate = t.checked ? static_cast<double>(t.violations) / static_cast<double>(t.checked) : 0.0;
      std::printf("[probabilistic lambda=%g] %-24s checked %zu violations %zu (rate %.3g, stated failure %.3g); "
                  "worst error/bound %.3g (deterministic %.3g)\n",
                  lambda, label.c_str(), t.checked, t.violations, rate, failure, t.worst_ratio, det.worst_ratio);
      EXPECT_LE(rate, failure) << label;
      EXPECT_EQ(det.violations, 0u);
    }
  }
}

// The data-driven probabilistic bound (bound_probabilistic.cpp) on every platform's plans, every
// distribution, with and without c: never violated by the emulation (oracle: the exact reference).
TEST(Bound, ProbabilisticEveryPlatform) {
  BoundOptions o;
  o.kind = BoundKind::probabilistic;
  Tally all;
  for (const std::string& name : platform_names()) {
    const Tally t = check_platform(platform_by_name(name), 1.0, o);
    report("probabilistic " + name, t);
    EXPECT_EQ(t.violations, 0u) << t.first_violation;
    all.merge(t);
  }
  EXPECT_GT(all.checked, 10000u);
}

// failure_probability: validated, and lambda chosen so that the stated failure is at most it.
TEST(Bound, FailureProbabilityChoosesLambda) {
  const Plan h8 = plan_for(platform_by_name("nvidia.h100"), Operation::matmul, "e4m3fn", "fp32");
  const Plan cuda = plan_for(platform_by_name("cuda_core.fp32"), Operation::matmul, "bf16", "fp32");
  for (const double bad : {-0.5, 1.0, 2.0, std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::infinity()}) {
    BoundOptions o;
    o.kind = BoundKind::probabilistic;
    o.failure_probability = bad;
    try {
      reduction_weights(h8, 64, false, o);
      FAIL() << "no error for " << bad;
    } catch (const numeq::error& e) {
      EXPECT_NE(std::string(e.what()).find("failure_probability"), std::string::npos) << e.what();
    }
  }
  const xt::xarray<double> a = gen(Distribution::normal, 5, formats::e4m3fn, {4, 512});
  const xt::xarray<double> b = gen(Distribution::normal, 6, formats::e4m3fn, {512, 4});
  for (const Plan* plan : {&h8, &cuda}) {
    const xt::xarray<double> em = core::matmul(a, b, nullptr, *plan);
    double previous = 0;
    for (const double p : {1e-2, 1e-6, 1e-12}) {
      BoundOptions o;
      o.kind = BoundKind::probabilistic;
      o.failure_probability = p;
      const double stated = reduction_weights(*plan, 512, false, o).failure_probability;
      EXPECT_LE(stated, p) << plan->name;
      EXPECT_GE(stated, 0.5 * p) << plan->name << ": lambda larger than needed";
      const xt::xarray<double> bd = matmul_bound(a, b, nullptr, *plan, em, o);
      const double total = xt::sum(bd)();
      EXPECT_GE(total, previous) << plan->name << ": a smaller failure probability gave a smaller bound";
      previous = total;
    }
  }
}

}  // namespace
