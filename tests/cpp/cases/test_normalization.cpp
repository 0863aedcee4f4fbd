// Softmax, log-softmax, layernorm and rmsnorm under platforms (cases/normalization.hpp), against
// the MPFR-certified references (references/composite.hpp): every element within its bound on
// every generator distribution, several formats and platforms; planted kernel bugs flagged by the
// bounds of the correct algorithms; bad arguments named.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "check_bounds.hpp"
#include "numeq/cases/generators.hpp"
#include "numeq/cases/normalization.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/references/composite.hpp"

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
namespace ref = numeq::reference;
using numeq::Cast;
using numeq::Format;

const char* const kPlatforms[] = {"nvidia.h100", "cuda_core.fp32", "numpy", "trainium.trn1",
                                  "trainium.trn1[scalar_activation_ulps=16,vector_reduce_order=pairwise]"};
const Format kFormats[] = {numeq::formats::fp32, numeq::formats::bf16, numeq::formats::fp16, numeq::formats::e4m3fn};
const Cast kExact{numeq::formats::fp64};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const numeq::error& e) {
    return e.what();
  }
  return "";
}

struct Sweep {
  std::vector<std::size_t> shape;
  std::uint64_t seed;
};

// softmax and log_softmax, every variant.
numeq_test::Tally softmax_sweep(bool log, cases::SoftmaxVariant variant, const Sweep& s, double* random) {
  numeq_test::Tally total;
  for (const char* name : kPlatforms) {
    const core::Platform platform = core::platform_by_name(name);
    for (const Format& fmt : kFormats) {
      for (const cases::Distribution d : cases::all_distributions()) {
        const xt::xarray<double> x = cases::generate({d, s.seed + static_cast<std::uint64_t>(d), 1.0}, fmt, s.shape);
        const xt::xarray<double> exact = log ? ref::log_softmax(x, -1, kExact) : ref::softmax(x, -1, kExact);
        cases::SoftmaxOptions o;
        o.variant = variant;
        o.block = 16;
        for (const Cast& out : {Cast{numeq::formats::fp32}, Cast{fmt}}) {
          const cases::Emulation e = log ? cases::log_softmax(x, -1, platform, out, o) : cases::softmax(x, -1, platform, out, o);
          const std::string label = std::string(log ? "log_softmax " : "softmax ") + std::string(cases::to_string(variant)) +
                                    " " + name + " " + std::string(fmt.name) + " " + std::string(cases::to_string(d)) +
                                    " -> " + std::string(out.format.name);
          const numeq_test::Tally t = numeq_test::check(e, exact, x, label);
          if (d == cases::Distribution::normal && out.format == numeq::formats::fp32) *random = std::max(*random, t.worst_ratio);
          total.add(t);
        }
      }
    }
  }
  return total;
}

// layernorm (variants; bn_stats on Trainium only) and rmsnorm, with gamma, beta and eps.
numeq_test::Tally norm_sweep(bool rms, cases::LayernormVariant variant, const Sweep& s, double* random) {
  numeq_test::Tally total;
  const std::size_t n = s.shape.back();
  for (const char* name : kPlatforms) {
    const core::Platform platform = core::platform_by_name(name);
    if (variant == cases::LayernormVariant::bn_stats && platform.name.rfind("trainium", 0) != 0) continue;
    for (const Format& fmt : kFormats) {
      for (const cases::Distribution d : cases::all_distributions()) {
        const xt::xarray<double> x = cases::generate({d, s.seed + static_cast<std::uint64_t>(d), 1.0}, fmt, s.shape);
        const xt::xarray<double> gamma = cases::generate({cases::Distribution::normal, s.seed + 50, 1.0}, fmt, {n});
        const xt::xarray<double> beta = cases::generate({cases::Distribution::uniform, s.seed + 51, 0.5}, fmt, {n});
        ref::NormParameters p;
        p.eps = 1e-5;
        const bool affine = static_cast<int>(d) % 2 == 0;
        if (affine) {
          p.gamma = &gamma;
          p.beta = &beta;
        }
        const xt::xarray<double> exact = rms ? ref::rmsnorm(x, p, kExact) : ref::layernorm(x, p, kExact);
        cases::NormOptions o;
        o.variant = variant;
        for (const Cast& out : {Cast{numeq::formats::fp32}, Cast{fmt}}) {
          const cases::Emulation e = rms ? cases::rmsnorm(x, p, platform, out, o) : cases::layernorm(x, p, platform, out, o);
          const std::string label = std::string(rms ? "rmsnorm " : "layernorm ") + std::string(cases::to_string(variant)) +
                                    " " + name + " " + std::string(fmt.name) + " " + std::string(cases::to_string(d)) +
                                    " -> " + std::string(out.format.name);
          const numeq_test::Tally t = numeq_test::check(e, exact, x, label);
          if (d == cases::Distribution::normal && out.format == numeq::formats::fp32) *random = std::max(*random, t.worst_ratio);
          total.add(t);
        }
      }
    }
  }
  return total;
}

const cases::SoftmaxVariant kSoftmaxVariants[] = {cases::SoftmaxVariant::plain, cases::SoftmaxVariant::max_subtracted,
                                                   cases::SoftmaxVariant::online};
const cases::LayernormVariant kNormVariants[] = {cases::LayernormVariant::two_pass, cases::LayernormVariant::welford,
                                                 cases::LayernormVariant::bn_stats};

TEST(Normalization, SoftmaxWithinItsBound) {
  for (const bool log : {false, true}) {
    for (const cases::SoftmaxVariant v : kSoftmaxVariants) {
      double random = 0;
      const numeq_test::Tally t = softmax_sweep(log, v, {{4, 64}, 300}, &random);
      numeq_test::print(((log ? "log_softmax " : "softmax ") + std::string(cases::to_string(v))).c_str(), t, random);
      EXPECT_EQ(t.violations, 0u) << t.first_violation;
      EXPECT_GT(t.checked, 50000u);
    }
  }
}

TEST(Normalization, LayernormAndRmsnormWithinTheirBound) {
  for (const cases::LayernormVariant v : kNormVariants) {
    double random = 0;
    const numeq_test::Tally t = norm_sweep(false, v, {{2, 1100}, 400}, &random);
    numeq_test::print(("layernorm " + std::string(cases::to_string(v))).c_str(), t, random);
    EXPECT_EQ(t.violations, 0u) << t.first_violation;
    EXPECT_GT(t.checked, 50000u);
  }
  double random = 0;
  const numeq_test::Tally t = norm_sweep(true, cases::LayernormVariant::two_pass, {{2, 1100}, 500}, &random);
  numeq_test::print("rmsnorm", t, random);
  EXPECT_EQ(t.violations, 0u) << t.first_violation;
}

// Planted bug 1: softmax without the max subtraction on large inputs. The max-subtracted plan's
// bound must flag it (overflow gives NaN or 0 where the exact value is not).
TEST(Normalization, FlagsSoftmaxWithoutMaxSubtraction) {
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  const xt::xarray<double> x = cases::generate({cases::Distribution::normal, 11, 40.0}, numeq::formats::fp32, {32, 64});
  const xt::xarray<double> exact = ref::softmax(x, -1, kExact);
  cases::SoftmaxOptions good, bad;
  bad.variant = cases::SoftmaxVariant::plain;
  const cases::Emulation correct = cases::softmax(x, -1, h100, Cast{}, good);
  const cases::Emulation planted = cases::softmax(x, -1, h100, Cast{}, bad);
  EXPECT_EQ(numeq_test::check(correct, exact, x, "correct").violations, 0u);
  cases::Emulation judged{planted.values, correct.bound, 0};
  const numeq_test::Tally t = numeq_test::check(judged, exact, x, "planted");
  std::size_t rows_flagged = 0;
  for (std::size_t r = 0; r < 32; ++r) {
    bool flagged = false;
    for (std::size_t j = 0; j < 64; ++j) {
      const double v = planted.values(r, j), e = exact(r, j);
      flagged = flagged || !(std::abs(v - e) <= correct.bound(r, j) + std::abs(e) * 0x1p-53);
    }
    rows_flagged += flagged ? 1 : 0;
  }
  std::printf("[ planted ] softmax without max subtraction (N(0, 40^2), n = 64): %zu of %zu elements, %zu of 32 rows "
              "flagged\n",
              t.violations, x.size(), rows_flagged);
  EXPECT_GT(t.violations, 0u);
  EXPECT_GE(rows_flagged, 16u);
}

// Planted bug 2: one-pass textbook variance (E[x^2] - mean^2) computed in bf16 arithmetic, judged
// by the bound of the two-pass layernorm a kernel should run (fp32 statistics from bf16 inputs,
// bf16 output). Chan, Golub, LeVeque (1983): the one-pass error grows like n kappa^2 u, the
// two-pass one like n u + n^2 kappa^2 u^2; here kappa = |mean| / std is about 8 and u = 2^-8.
TEST(Normalization, FlagsOnePassVarianceInBf16) {
  const Cast b16{numeq::formats::bf16};
  const std::size_t rows = 16, n = 256;
  xt::xarray<double> x = cases::generate({cases::Distribution::normal, 21, 1.0}, numeq::formats::fp32, {rows, n});
  for (double& v : x) v = numeq::round_to_format(v + 8.0, b16);
  ref::NormParameters p;
  p.eps = 1e-5;
  const xt::xarray<double> exact = ref::layernorm(x, p, kExact);
  const cases::Emulation two_pass = cases::layernorm(x, p, core::platform_by_name("nvidia.h100"), b16);
  const numeq_test::Tally own = numeq_test::check(two_pass, exact, x, "two-pass");
  EXPECT_EQ(own.violations, 0u) << own.first_violation;
  // The planted kernel: s += x, q += x * x in bf16 (in order), var = q/n - (s/n)^2, every step
  // rounded to bf16.
  xt::xarray<double> planted = xt::zeros<double>({rows, n});
  const auto r = [&](double v) { return numeq::round_to_format(v, b16); };
  for (std::size_t i = 0; i < rows; ++i) {
    double s = 0, q = 0;
    for (std::size_t j = 0; j < n; ++j) {
      s = r(s + x(i, j));
      q = r(q + r(x(i, j) * x(i, j)));
    }
    const double mean = r(s / static_cast<double>(n));
    const double var = r(r(q / static_cast<double>(n)) - r(mean * mean));
    const double rstd = r(1 / std::sqrt(r(var + r(p.eps))));
    for (std::size_t j = 0; j < n; ++j) planted(i, j) = r(r(x(i, j) - mean) * rstd);
  }
  cases::Emulation judged{planted, two_pass.bound, 0};
  const numeq_test::Tally t = numeq_test::check(judged, exact, x, "one-pass");
  std::printf("[ planted ] one-pass variance in bf16 (mean 8, std 1, n = 256) against the fp32 two-pass bound: %zu of "
              "%zu elements flagged; the two-pass emulation: %zu checked, %zu violations, worst/bound %.3g\n",
              t.violations, x.size(), own.checked, own.violations, own.worst_ratio);
  EXPECT_GT(t.violations, x.size() / 4);
}

// The compute format is a parameter: layernorm in bf16 arithmetic on a platform with a bf16 sum
// plan (a pairwise tree, as GPU block reductions are) stays within its own bound.
TEST(Normalization, Bf16ArithmeticWithinItsBound) {
  core::Platform bf16 = core::platform_by_name("cuda_core.fp32");
  bf16.name = "test.bf16_arithmetic";
  bf16.aliases.clear();
  core::Plan plan;
  plan.name = "bf16 pairwise sum";
  plan.reduction = core::tree(2, core::Arithmetic{Cast{numeq::formats::bf16}});
  plan.output = Cast{numeq::formats::bf16};
  bf16.plans.push_back(core::PlanEntry{core::Operation::sum, "bf16", "bf16", plan});
  cases::NormOptions o;
  o.compute = numeq::formats::bf16;
  cases::SoftmaxOptions so;
  so.compute = numeq::formats::bf16;
  numeq_test::Tally t;
  for (const cases::Distribution d : cases::all_distributions()) {
    const xt::xarray<double> x = cases::generate({d, 31, 1.0}, numeq::formats::bf16, {8, 256});
    ref::NormParameters p;
    p.eps = 1e-3;
    t.add(numeq_test::check(cases::layernorm(x, p, bf16, Cast{numeq::formats::bf16}, o), ref::layernorm(x, p, kExact), x,
                            "layernorm bf16 " + std::string(cases::to_string(d))));
    t.add(numeq_test::check(cases::softmax(x, -1, bf16, Cast{numeq::formats::bf16}, so), ref::softmax(x, -1, kExact), x,
                            "softmax bf16 " + std::string(cases::to_string(d))));
  }
  numeq_test::print("bf16 arithmetic (layernorm, softmax)", t, t.worst_ratio);
  EXPECT_EQ(t.violations, 0u) << t.first_violation;
}

TEST(Normalization, ErrorsNameTheArgument) {
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  const xt::xarray<double> x = xt::ones<double>({2, 8});
  const xt::xarray<double> g3 = xt::ones<double>({3});
  const auto starts = [](const std::string& what, const std::string& prefix) {
    EXPECT_EQ(what.rfind(prefix, 0), 0u) << what;
  };
  starts(error_of([&] { cases::softmax(x, 2, h100, Cast{}); }), "axis:");
  starts(error_of([&] { cases::softmax(x, -3, h100, Cast{}); }), "axis:");
  cases::SoftmaxOptions online;
  online.variant = cases::SoftmaxVariant::online;
  starts(error_of([&] { cases::softmax(x, -1, h100, Cast{}, online); }), "block:");
  online.block = 3;
  starts(error_of([&] { cases::log_softmax(x, -1, h100, Cast{}, online); }), "block:");
  ref::NormParameters p;
  p.eps = -1;
  starts(error_of([&] { cases::layernorm(x, p, h100, Cast{}); }), "eps:");
  p.eps = std::nan("");
  starts(error_of([&] { cases::rmsnorm(x, p, h100, Cast{}); }), "eps:");
  p.eps = 0;
  p.gamma = &g3;
  starts(error_of([&] { cases::layernorm(x, p, h100, Cast{}); }), "gamma:");
  p.gamma = nullptr;
  p.beta = &g3;
  starts(error_of([&] { cases::rmsnorm(x, p, h100, Cast{}); }), "beta:");
  p.beta = nullptr;
  cases::NormOptions fp16;
  fp16.compute = numeq::formats::fp16;
  const std::string missing = error_of([&] { cases::layernorm(x, p, h100, Cast{}, fp16); });
  starts(missing, "in_fmt:");
  EXPECT_NE(missing.find("fp32 -> fp32"), std::string::npos) << missing;  // lists what exists
  cases::NormOptions fp64;
  fp64.compute = numeq::formats::fp64;
  starts(error_of([&] { cases::rmsnorm(x, p, core::platform_by_name("numpy"), Cast{}, fp64); }), "compute:");
  cases::NormOptions bn;
  bn.variant = cases::LayernormVariant::bn_stats;
  starts(error_of([&] { cases::layernorm(x, p, h100, Cast{}, bn); }), "variant:");
  starts(error_of([&] { cases::softmax(x, -1, h100, Cast{numeq::formats::int8}); }), "out");
  starts(error_of([&] { cases::softmax_variant_by_name("fast"); }), "variant:");
  starts(error_of([&] { cases::layernorm_variant_by_name("fast"); }), "variant:");
  EXPECT_EQ(error_of([&] { cases::layernorm(x, p, core::platform_by_name("trainium.trn2"), Cast{}, bn); }), "");
}

// NUMEQ_LONG_TESTS=1: >= 10^7 output elements per family.
TEST(Normalization, Long) {
  if (!numeq_test::long_tests()) GTEST_SKIP() << "set NUMEQ_LONG_TESTS=1";
  numeq_test::Tally soft, norm;
  double r1 = 0, r2 = 0;
  for (const bool log : {false, true})
    for (const cases::SoftmaxVariant v : kSoftmaxVariants) soft.add(softmax_sweep(log, v, {{64, 128}, 7000}, &r1));
  numeq_test::print("long: softmax family", soft, r1);
  for (const cases::LayernormVariant v : kNormVariants) norm.add(norm_sweep(false, v, {{16, 2048}, 8000}, &r2));
  norm.add(norm_sweep(true, cases::LayernormVariant::two_pass, {{16, 2048}, 9000}, &r2));
  numeq_test::print("long: layernorm + rmsnorm", norm, r2);
  EXPECT_EQ(soft.violations, 0u) << soft.first_violation;
  EXPECT_EQ(norm.violations, 0u) << norm.first_violation;
  EXPECT_GE(soft.checked + soft.unbounded + soft.agreed_special, 10000000u);
  EXPECT_GE(norm.checked + norm.unbounded + norm.agreed_special, 10000000u);
}

}  // namespace
