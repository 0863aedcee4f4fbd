// The bound walker (bound.hpp) against exact results: for every built-in platform's every plan,
// Trainium variants, split-K, hand-built plans of every node kind, directed and stochastic
// roundings and flushing, |emulated - exact| <= bound must hold for every element. The exact
// values come from numeq::reference (a long accumulator: independent of the evaluator and of the
// walker); the inputs from numeq::cases::generate, rounded into the input formats.
//
// Besides soundness: tightness (observed worst error / bound on random data, printed per family,
// and adversarial inputs that nearly attain the deterministic bound, with a lower limit), a
// planted bug (bf16 accumulation emulated, fp32 plan bounded) that must be caught. The
// probabilistic bounds: test_bound_probabilistic.cpp; shared checking: bound_test_support.hpp.
// NUMEQ_LONG_TESTS=1 enables BoundLong.*, at least 10^7 output elements per family.

#include <gtest/gtest.h>
#include <mpfr.h>

#include <chrono>
#include <cmath>
#include <random>
#include <cstdio>
#include <cstdlib>

#include "bound_test_support.hpp"

namespace {

using namespace numeq;
using namespace numeq::core;
using namespace numeq_test_bound;
using numeq::cases::Distribution;

// ---- the tests ----

TEST(Bound, Names) {
  EXPECT_EQ(to_string(BoundKind::deterministic), "deterministic");
  EXPECT_EQ(to_string(BoundKind::probabilistic), "probabilistic");
  EXPECT_EQ(bound_kind_by_name("probabilistic"), BoundKind::probabilistic);
  try {
    bound_kind_by_name("loose", "bound_kind");
    FAIL() << "no error";
  } catch (const numeq::error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bound_kind"), std::string::npos) << m;
    EXPECT_NE(m.find("deterministic"), std::string::npos) << m;
  }
  BoundOptions bad;
  bad.kind = BoundKind::probabilistic;
  bad.lambda = -1;
  EXPECT_THROW(reduction_weights(plan_of(sequential(ar(formats::fp32))), 4, false, bad), numeq::error);
}

TEST(Bound, WeightsOfClassicalPlans) {
  // Recursive fp32 summation of n terms: term k (k >= 1) passes n - k additions, term 0 also its
  // first rounding: w_k = (1 + u)^(n-k) - 1 >= (n - k) u (Higham 2002, (4.4)).
  const double u = 0x1p-24;
  const ReductionWeights w = reduction_weights(plan_of(sequential(ar(formats::fp32))), 10, false);
  ASSERT_EQ(w.term.size(), 10u);
  EXPECT_GE(w.term[1], 9 * u);
  EXPECT_LE(w.term[1], 9 * u * (1 + 1e-6));
  EXPECT_GE(w.term[0], 10 * u);
  EXPECT_GE(w.term[9], u);
  // Pairwise over 2^k terms: k roundings each (plus the leaf's first rounding).
  const ReductionWeights p = reduction_weights(plan_of(tree(2, ar(formats::fp32))), 16, false);
  for (double x : p.term) EXPECT_LE(x, 5.0001 * u);
  // Integer accumulation is exact.
  const ReductionWeights z = reduction_weights(plan_of(sequential(ar(formats::int32))), 16, true);
  for (double x : z.term) EXPECT_EQ(x, 0.0);
  EXPECT_EQ(z.init, 0.0);
  // A fused H100 bf16 step: (1 + 15 * 2^-25)(1 + 2^-23) - 1 per step for 16 products.
  const ReductionWeights f = reduction_weights(plan_of(fused(nvidia::h100_bf16)), 16, false);
  EXPECT_NEAR(f.term[0], 15 * 0x1p-25 + 0x1p-23, 1e-12);
}

TEST(Bound, OutputCast) {
  const Cast fp16{formats::fp16};
  EXPECT_TRUE(std::isnan(with_output_cast(fp16, 1.0, std::nan(""))));
  EXPECT_TRUE(std::isinf(with_output_cast(fp16, std::numeric_limits<double>::infinity(), 0)));
  EXPECT_TRUE(std::isinf(with_output_cast(Cast{formats::e4m3fn, Rounding::nearest_even, Overflow::saturate}, 448, 0)));
  EXPECT_TRUE(std::isinf(with_output_cast(Cast{formats::fp16, Rounding::toward_zero}, 65504, 0)));
  // Exact value 1 + 2^-11 (a tie): rounded to 1; any v' within B rounds within the bound.
  const double b = with_output_cast(fp16, 1.0, 0x1p-12);
  EXPECT_GE(b, 0x1p-11);
  EXPECT_LE(b, 0x1p-9);
  // The power-of-two boundary: v just below 2 may round up to 2 (an error of half an ulp of
  // [1, 2)): the bound holds for every v' in [2 - 3B, 2 + B].
  const double B = 0x1p-12;
  const double bound = with_output_cast(fp16, 2.0, B);
  for (double s = 2.0 - 2 * B; s <= 2.0 + 2 * B; s += B / 64)
    for (double v = s - B; v <= s + B; v += B / 16) {
      const double cv = round_to_format(v, fp16);
      EXPECT_LE(std::fabs(cv - s), bound) << v << " " << s;
    }
}

// The output cast's bound holds as stated (bound.hpp): for an exact value s, any pre-cast values v
// (the emulator's) and v' (a device's) within B of s, the device's rounded v' lies within the
// bound of s, the bound taken at the emulated round(v). The oracle is the round-and-pack kernel
// itself; s is drawn densely just below and above powers of two, where half an ulp of |v'|'s binade
// and rho |v'| differ most, and across the subnormals.
TEST(Bound, OutputCastBoundHoldsAtBinadeEdges) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::size_t checked = 0;
  for (const Format* f : {&formats::fp32, &formats::bf16, &formats::fp16, &formats::e4m3fn, &formats::e5m2}) {
    for (const Rounding r : {Rounding::nearest_even, Rounding::nearest_away, Rounding::toward_zero, Rounding::upward, Rounding::downward}) {
      const Cast cast{*f, r, Overflow::ieee};
      const OutputCastBound bound(cast);
      const double ulp1 = std::ldexp(1.0, -f->mantissa_bits);  // spacing in [1, 2)
      for (int i = 0; i < 20000; ++i) {
        const int e = f->emin() - f->mantissa_bits + static_cast<int>(rng() % static_cast<unsigned>(f->mantissa_bits - f->emin() + 8));
        // Within four ulps of 2^e, either side.
        const double s = std::ldexp(1.0 + (unit(rng) - 0.5) * 8 * ulp1, e) * (rng() % 2 ? 1 : -1);
        const double B = i % 5 == 0 ? 0.0 : std::ldexp(unit(rng) * ulp1, e - static_cast<int>(rng() % 4));
        const double v = s + (2 * unit(rng) - 1) * B, w = s + (2 * unit(rng) - 1) * B;
        const double emulated = round_to_format(v, cast), device = round_to_format(w, cast);
        ASSERT_LE(std::fabs(device - s), bound(emulated, B))
            << f->name << " " << to_string(r) << " s " << s << " B " << B << " v " << v << " v' " << w;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 500000u);
}

// OutputCastBound (with_output_cast) evaluates its formula to nearest and raises the result once
// (bound.cpp). The oracle: the same formula in 256-bit MPFR, B + min(rho V + eta, spacing) with
// V = (|emulated| + eta) / (1 - rho) + 2B and spacing half an ulp (nearest) or one ulp at the
// binade of min(V, |emulated| + that part of the spacing at |emulated| + 2B), every step rounded
// upward (so above the exact value) for "never below", downward for "at most 2^-46 above": rho and eta restated here from the format
// (nearest: half an ulp and half the subnormal spacing; toward zero: whole ones).
TEST(Bound, OutputCastBoundIsItsFormulaRaisedOnce) {
  std::mt19937_64 rng(5);
  std::size_t checked = 0;
  for (const Format* f : {&formats::fp32, &formats::bf16, &formats::fp16, &formats::e4m3fn, &formats::e5m2}) {
    for (const Rounding r : {Rounding::nearest_even, Rounding::toward_zero}) {
      const Cast cast{*f, r, Overflow::ieee};
      const OutputCastBound bound(cast);
      const bool nearest = r == Rounding::nearest_even;
      const double rho = std::ldexp(1.0, -f->mantissa_bits - (nearest ? 1 : 0));
      const double eta = std::ldexp(1.0, f->emin() - f->mantissa_bits - (nearest ? 1 : 0));
      for (int i = 0; i < 4000; ++i) {
        // |emulated| and B over the format's range, from its subnormals up to a 16th of its top.
        const int top = static_cast<int>(std::ilogb(numeq::max_finite(*f))) - 4, low = f->emin() - f->mantissa_bits;
        const double e = std::ldexp(1.0 + static_cast<double>(rng() >> 11) * 0x1p-53, low + static_cast<int>(rng() % static_cast<unsigned>(top - low)));
        const double B = i % 7 == 0 ? 0.0 : std::ldexp(static_cast<double>(rng() >> 11) * 0x1p-53, low + static_cast<int>(rng() % static_cast<unsigned>(top - low)));
        const double emulated = numeq::round_to_format(i % 2 ? e : -e, Cast{*f});
        const double got = bound(emulated, B);
        ASSERT_EQ(got, with_output_cast(cast, emulated, B));
        double want[2];
        // The spacing form's binade: exact for "never below", from a raised V for "at most above".
        long binade_exact = 0, binade_raised = 0;
        for (int side = 0; side < 2; ++side) {
          const mpfr_rnd_t rnd = side == 0 ? MPFR_RNDU : MPFR_RNDD;
          mpfr_t v, t;
          mpfr_inits2(256, v, t, static_cast<mpfr_ptr>(nullptr));
          mpfr_set_d(v, std::fabs(emulated), rnd);
          mpfr_add_d(v, v, eta, rnd);
          mpfr_set_d(t, 1.0, rnd);
          mpfr_sub_d(t, t, rho, side == 0 ? MPFR_RNDD : MPFR_RNDU);  // the divisor the other way
          mpfr_div(v, v, t, rnd);
          mpfr_add_d(v, v, 2 * B, rnd);  // 2B exact
          if (side == 0) {
            // min(V, |emulated| + that part of the spacing at |emulated|'s binade + 2B); mpfr's
            // exponent is floor(log2) + 1; below the normal range, the subnormal spacing.
            const int e_binade = std::max(std::ilogb(emulated), f->emin());
            mpfr_set_d(t, std::fabs(emulated), MPFR_RNDN);
            mpfr_add_d(t, t, std::ldexp(nearest ? 0.5 : 1.0, e_binade - f->mantissa_bits), MPFR_RNDN);
            mpfr_add_d(t, t, 2 * B, MPFR_RNDN);
            if (mpfr_cmp(t, v) > 0) mpfr_set(t, v, MPFR_RNDN);
            binade_exact = std::max<long>(mpfr_get_exp(t) - 1, f->emin());
            mpfr_mul_d(t, t, 1 + 0x1p-48, MPFR_RNDU);
            binade_raised = std::max<long>(mpfr_get_exp(t) - 1, f->emin());
          }
          const long binade = side == 0 ? binade_exact : binade_raised;
          const double spacing = std::ldexp(nearest ? 0.5 : 1.0, static_cast<int>(binade) - f->mantissa_bits);
          mpfr_mul_d(v, v, rho, rnd);    // rho a power of two: exact
          mpfr_add_d(v, v, eta, rnd);
          if (mpfr_cmp_d(v, spacing) > 0) mpfr_set_d(v, spacing, rnd);  // a power of two: exact
          mpfr_add_d(v, v, B, rnd);
          want[side] = mpfr_get_d(v, rnd);
          mpfr_clears(v, t, static_cast<mpfr_ptr>(nullptr));
        }
        ASSERT_GE(got, want[0]) << f->name << " emulated " << emulated << " B " << B;
        ASSERT_LE(got, want[1] * (1 + 0x1p-46) + 0x1p-1060) << f->name << " emulated " << emulated << " B " << B;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 40000u);
}

// Every built-in platform's every plan entry.
TEST(Bound, BuiltinPlatforms) {
  Tally all;
  for (const std::string& name : platform_names()) {
    const Tally t = check_platform(platform_by_name(name), 1.0);
    report(name, t);
    EXPECT_EQ(t.violations, 0u) << t.first_violation;
    all.merge(t);
  }
  report("all built-in platforms", all);
  EXPECT_GT(all.checked, 10000u);
}

TEST(Bound, TrainiumVariantsAndSplitK) {
  Tally all;
  for (const std::string& name : trainium_variants()) {
    const Tally t = check_platform(platform_by_name(name), 0.5);
    report(name, t);
    EXPECT_EQ(t.violations, 0u) << t.first_violation;
    all.merge(t);
  }
  // Split-K, serial and parallel, on tensor-core, CUDA-core and Trainium plans.
  const std::vector<std::pair<std::string, std::string>> bases = {
      {"nvidia.h100", "bf16"}, {"nvidia.a100", "fp16"}, {"cuda_core.fp32", "fp32"}, {"trainium.trn1", "bf16"},
      {"nvidia.h100", "e4m3fn"}};
  Tally split_tally, split_probabilistic;
  // The data-driven walk follows the split part by part (bound_probabilistic.cpp): its bound at
  // lambda = 6 (failure probability about 3e-8 per element) holds on these elements too.
  BoundOptions probabilistic;
  probabilistic.kind = BoundKind::probabilistic;
  probabilistic.lambda = 6;
  std::uint64_t seed = 5;
  for (const auto& [name, in] : bases) {
    const Platform p = platform_by_name(name);
    const Plan base = plan_for(p, Operation::matmul, in, "fp32");
    for (const std::size_t parts : {2, 3, 5})
      for (const SplitMode mode : {SplitMode::serial, SplitMode::parallel})
        for (const Distribution d : dists()) {
          const Plan sk = with_split_k(base, parts, mode, Cast{formats::fp32});
          ++seed;
          split_tally.merge(check_matmul(sk, fmt(in), d, seed, 6, 97 + parts * 20, 5, seed % 2 == 0));
          split_probabilistic.merge(
              check_matmul(sk, fmt(in), d, seed, 6, 97 + parts * 20, 5, seed % 2 == 0, probabilistic));
        }
  }
  report("split-K", split_tally);
  report("split-K probabilistic", split_probabilistic);
  EXPECT_EQ(split_tally.violations, 0u) << split_tally.first_violation;
  EXPECT_EQ(split_probabilistic.violations, 0u) << split_probabilistic.first_violation;
  all.merge(split_tally);
  report("trainium variants + split-K", all);
}

TEST(Bound, HandBuiltPlans) {
  Tally all;
  for (const HandPlan& h : hand_plans()) {
    const Tally t = check_hand(h, 1.0, true);
    if (t.violations) report(h.plan.name, t);
    EXPECT_EQ(t.violations, 0u) << h.plan.name << ": " << t.first_violation;
    all.merge(t);
  }
  report("hand-built plans", all);
  EXPECT_GT(all.checked, 10000u);
}

TEST(Bound, NumpySums) {
  const Platform np = platform_by_name("numpy");
  Tally t;
  std::uint64_t seed = 900;
  for (const PlanEntry& e : np.plans)
    for (const Distribution d : dists())
      for (const std::size_t K : {3, 8, 9, 127, 128, 129, 1000, 4099})
        t.merge(check_sum(e.plan, fmt(e.in_fmt), d, ++seed, 64, K));
  report("numpy sums", t);
  EXPECT_EQ(t.violations, 0u) << t.first_violation;
}

// Tightness on random data (printed) and on adversarial data (asserted).
TEST(Bound, Tightness) {
  const Plan cuda = plan_for(platform_by_name("cuda_core.fp32"), Operation::dot, "fp32", "fp32");
  const Plan h100 = plan_for(platform_by_name("nvidia.h100"), Operation::matmul, "bf16", "fp32");
  const Plan npsum = plan_for(platform_by_name("numpy"), Operation::sum, "fp32", "fp32");
  const Plan bf16_chain = plan_of(sequential(ar(formats::bf16)), Cast{formats::bf16});
  // Random data: observed worst error / bound.
  for (const Distribution d : {Distribution::normal, Distribution::uniform, Distribution::cancellation}) {
    const Tally a = check_dot(cuda, formats::fp32, d, 3, 64, 1024, false);
    const Tally b = check_matmul(h100, formats::bf16, d, 4, 32, 1024, 32, false);
    const Tally c = check_sum(npsum, formats::fp32, d, 5, 64, 1024);
    const Tally e = check_dot(bf16_chain, formats::bf16, d, 6, 64, 64, false);
    std::printf("[tightness random %s] cuda_core fp32 dot %.3g, h100 bf16 matmul %.3g, numpy sum %.3g, bf16 chain %.3g\n",
                std::string(cases::to_string(d)).c_str(), a.worst_ratio, b.worst_ratio, c.worst_ratio, e.worst_ratio);
    EXPECT_EQ(a.violations + b.violations + c.violations + e.violations, 0u);
  }
  // Adversarial: 1 followed by terms just under half an ulp of 1: every addition rounds down,
  // losing almost u each time (Higham 2002, s4.2: the bound is attainable to first order).
  const auto adversarial = [](const Plan& plan, double t, std::size_t n) {
    xt::xarray<double> a = xt::ones<double>({std::size_t{1}, n}) * t;
    a(0, 0) = 1.0;
    const xt::xarray<double> b = xt::ones<double>({std::size_t{1}, n});
    const xt::xarray<double> em = core::dot(a, b, nullptr, plan);
    const xt::xarray<double> bd = dot_bound(a, b, nullptr, plan, em);
    return compare(em, dot_exact_rows(a, b, nullptr), bd, plan.name);
  };
  const Tally s32 = adversarial(cuda, 0x1.fffffep-25, 2000);
  const Tally s16 = adversarial(bf16_chain, 0x1.fcp-9, 24);
  // Fused truncation: 1 and 15 products just below 2^(E-F) = 2^-25 are cut to nothing.
  const Plan step = plan_of(fused(nvidia::h100_bf16));
  const Tally fz = adversarial(step, 0x1.fep-26, 16);
  std::printf("[tightness adversarial] fp32 chain %.3f, bf16 chain %.3f, fused truncation %.3f\n", s32.worst_ratio,
              s16.worst_ratio, fz.worst_ratio);
  EXPECT_EQ(s32.violations + s16.violations + fz.violations, 0u);
  EXPECT_GE(s32.worst_ratio, 0.25);
  EXPECT_GE(s16.worst_ratio, 0.25);
  EXPECT_GE(fz.worst_ratio, 0.25);
}

// K beyond one chunk of the worst-case bound's sums (2^16 terms, bound_matmul.cpp): the bound
// summed chunk by chunk still holds against the exact products, on two row blocks and few columns
// (a dot product's shape), with and without a bias.
TEST(Bound, LongKIsSummedInChunksAndStillHolds) {
  const Plan h100 = plan_for(platform_by_name("nvidia.h100"), Operation::matmul, "bf16", "fp32");
  const Plan trn2 = plan_for(platform_by_name("trainium.trn2"), Operation::matmul, "bf16", "fp32");
  const std::size_t K = 2 * (std::size_t{1} << 16) + 700;
  Tally t = check_matmul(h100, formats::bf16, Distribution::normal, 71, 1, K, 1, false);
  t.merge(check_matmul(trn2, formats::bf16, Distribution::uniform, 72, 66, K, 3, true));
  EXPECT_EQ(t.violations, 0u);
  EXPECT_GT(t.worst_ratio, 0.0);
}

// A kernel that accumulates in bf16 where the plan says fp32 must be caught.
TEST(Bound, PlantedBugIsDetected) {
  const Plan fp32_plan = plan_for(platform_by_name("cuda_core.fp32"), Operation::matmul, "bf16", "fp32");
  Plan bug = fp32_plan;
  bug.reduction = sequential(ar(formats::bf16), true);
  Tally t;
  for (const Distribution d : {Distribution::normal, Distribution::uniform, Distribution::lognormal})
    t.merge(check_matmul(fp32_plan, formats::bf16, d, 31, 16, 256, 16, false, {}, &bug));
  report("planted bug (bf16 accumulation)", t);
  EXPECT_GT(t.violations, t.checked / 2) << "the bound did not catch bf16 accumulation";
}



// Never silently deterministic: on every tensor-core platform, for every matmul plan with an fp32
// output, the probabilistic bound at K = 1024 is below the deterministic one on every element
// (normal data), and the emulation stays within it.
TEST(Bound, ProbabilisticBelowDeterministicOnTensorCores) {
  BoundOptions o;
  o.kind = BoundKind::probabilistic;
  o.failure_probability = 1e-6;
  std::size_t plans = 0;
  for (const std::string& name : platform_names()) {
    const Platform p = platform_by_name(name);
    for (const PlanEntry& e : p.plans) {
      if (e.op != Operation::matmul || e.out_fmt != "fp32") continue;
      bool fused = false;
      std::function<void(const PlanNode&)> scan = [&](const PlanNode& n) {
        fused = fused || n.kind == NodeKind::fused;
        for (const PlanNode& c : n.children) scan(c);
      };
      scan(e.plan.reduction);
      if (!fused) continue;
      ++plans;
      const Format& in = fmt(e.in_fmt);
      const std::size_t M = 4, K = 1024, N = 4;
      const xt::xarray<double> a = gen(Distribution::normal, 77, in, {M, K});
      const xt::xarray<double> b = gen(Distribution::normal, 78, in, {K, N});
      const xt::xarray<double> em = core::matmul(a, b, nullptr, e.plan);
      const xt::xarray<double> det = matmul_bound(a, b, nullptr, e.plan, em);
      const xt::xarray<double> prob = matmul_bound(a, b, nullptr, e.plan, em, o);
      const reference::ExactValues ex = reference::matmul_exact(a, b, nullptr);
      const Tally t = compare(em, ex, prob, e.plan.name);
      EXPECT_EQ(t.violations, 0u) << t.first_violation;
      double worst = 0;
      for (std::size_t i = 0; i < em.size(); ++i) {
        EXPECT_LT(prob.data()[i], det.data()[i]) << e.plan.name << " element " << i;
        worst = std::max(worst, prob.data()[i] / det.data()[i]);
      }
      std::printf("[tensor cores] %-40s probabilistic / deterministic <= %.3g\n", e.plan.name.c_str(), worst);
    }
  }
  EXPECT_GT(plans, 20u);
}


// The bound of a 1024^3 matmul is one more non-negative matmul: it must be fast.
TEST(Bound, MatmulSpeed) {
  const std::size_t n = 1024;
  const xt::xarray<double> a = gen(Distribution::normal, 1, formats::bf16, {n, n});
  const xt::xarray<double> b = gen(Distribution::normal, 2, formats::bf16, {n, n});
  const Plan plan = plan_for(platform_by_name("nvidia.h100"), Operation::matmul, "bf16", "fp32");
  const xt::xarray<double> em = xt::zeros<double>({n, n});
  const auto t0 = std::chrono::steady_clock::now();
  const xt::xarray<double> bd = matmul_bound(a, b, nullptr, plan, em);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[speed] matmul_bound 1024 x 1024 x 1024 (h100 bf16 plan): %.3f s on %d threads\n", s, num_threads());
  EXPECT_TRUE(std::isfinite(bd(3, 5)));
  EXPECT_LT(s, 10.0);  // a generous limit for loaded machines; the measured time is printed
}

// ---- the long run: at least 10^7 output elements per family ----

TEST(BoundLong, TenMillionPerFamily) {
  const char* env = std::getenv("NUMEQ_LONG_TESTS");
  if (!env || std::string(env) != "1") GTEST_SKIP() << "set NUMEQ_LONG_TESTS=1";
  const std::size_t target = 10'000'000;
  const auto run = [&](const std::string& family, const std::function<Tally(std::uint64_t)>& once) {
    Tally t;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::uint64_t round = 0; t.checked < target; ++round) t.merge(once(round));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report(family + " (long)", t);
    std::printf("        %.1f s\n", s);
    EXPECT_EQ(t.violations, 0u) << t.first_violation;
  };
  const auto d_of = [](std::uint64_t r) { return cases::all_distributions()[r % 8]; };
  const Plan cuda = plan_for(platform_by_name("cuda_core.fp32"), Operation::matmul, "fp32", "fp32");
  run("cuda_core fp32 matmul", [&](std::uint64_t r) { return check_matmul(cuda, formats::fp32, d_of(r), r, 256, 48, 512, r % 2); });
  const Plan h100 = plan_for(platform_by_name("nvidia.h100"), Operation::matmul, "bf16", "fp32");
  run("h100 bf16 matmul", [&](std::uint64_t r) { return check_matmul(h100, formats::bf16, d_of(r), r, 256, 64, 512, r % 2); });
  const Plan h8 = plan_for(platform_by_name("nvidia.h100"), Operation::matmul, "e4m3fn", "fp32");
  run("h100 e4m3 matmul", [&](std::uint64_t r) { return check_matmul(h8, formats::e4m3fn, d_of(r), r, 256, 64, 512, r % 2); });
  const Plan trn = plan_for(platform_by_name("trainium.trn1[fp32_matmul=bf16x4]"), Operation::matmul, "fp32", "fp32");
  run("trainium bf16x4 matmul", [&](std::uint64_t r) { return check_matmul(trn, formats::fp32, d_of(r), r, 256, 40, 512, false); });
  const Plan np = plan_for(platform_by_name("numpy"), Operation::sum, "fp32", "fp32");
  run("numpy fp32 sum", [&](std::uint64_t r) { return check_sum(np, formats::fp32, d_of(r), r, 65536, 37 + r % 100); });
  const Plan chain = plan_of(sequential(ar(formats::bf16, Rounding::toward_zero, Subnormals::flush_both)),
                             Cast{formats::bf16, Rounding::stochastic});
  run("bf16 RZ FTZ chain, stochastic out", [&](std::uint64_t r) { return check_dot(chain, formats::bf16, d_of(r), r, 65536, 30, r % 2); });
}

}  // namespace
