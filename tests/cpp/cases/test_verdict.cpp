// The verdict ladder (cases/verdict.hpp), the variant search (cases/variants.hpp) and the port
// check (cases/port.hpp). Oracles: outputs that a named variant platform computes (its emulation,
// itself checked against measured tensor-core vectors and exact results elsewhere), re-emulated
// by the name the verdict gives; planted bugs made by hand (a nudged element, a dropped K tile);
// the exact result's bounds walked independently of the verdict.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <xtensor/xview.hpp>

#include "numeq/cases/generators.hpp"
#include "numeq/cases/op.hpp"
#include "numeq/cases/port.hpp"
#include "numeq/cases/variants.hpp"
#include "numeq/cases/verdict.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/parallel.hpp"

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
namespace fmts = numeq::formats;
using numeq::Cast;
using Array = xt::xarray<double>;

Array generate(std::uint64_t seed, std::vector<std::size_t> shape) {
  return cases::generate(cases::Generator{cases::Distribution::normal, seed, 1.0}, fmts::bf16, shape);
}

bool same_values(const Array& x, const Array& y) {
  if (x.shape() != y.shape()) return false;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double a = x.data()[i], b = y.data()[i];
    if (std::isnan(a) || std::isnan(b)) {
      if (!(std::isnan(a) && std::isnan(b))) return false;
    } else if (a != b || std::signbit(a) != std::signbit(b)) {
      return false;
    }
  }
  return true;
}

struct Fixture {
  Array a = generate(1, {12, 300});
  Array b = generate(2, {300, 20});
  cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32});
  Array on(const std::string& platform) const { return op.emulate(core::platform_by_name(platform), {}).values; }
};

// Each output computed by a named variant is explained, bit for bit, by the variant the verdict
// names (which may be another name for the same arithmetic on these data); never by the default.
TEST(Verdict, NamesTheVariantThatComputedTheOutput) {
  const Fixture f;
  const std::vector<std::pair<std::string, std::string>> cases_ = {
      {"trainium.trn2", "trainium.trn2[pe_order=pairwise]"},
      {"trainium.trn2", "trainium.trn2[psum_rounding=toward_zero]"},
      {"trainium.trn2", "trainium.trn2[pe_order=fused,accumulator_bits=27]"},
      {"trainium.trn2", "trainium.trn2[split_k=4,split_mode=parallel]"},
      {"trainium.trn1", "trainium.trn1[products=bf16,pe_rounding=toward_zero]"},
      {"nvidia.h100", "nvidia.h100[split_k=3,split_mode=parallel]"},
  };
  for (const auto& [platform, variant] : cases_) {
    const Array device = f.on(variant);
    const cases::Verdict v = cases::compare(device, f.op, core::platform_by_name(platform));
    if (same_values(device, f.on(platform))) {
      EXPECT_EQ(v.tier, cases::Tier::bit_exact) << variant;
      continue;
    }
    ASSERT_EQ(v.tier, cases::Tier::variant) << variant << "\n" << cases::describe(v);
    EXPECT_TRUE(v.passed);
    EXPECT_TRUE(same_values(device, f.on(v.explained_by))) << variant << " explained by " << v.explained_by;
  }
}

// A nudged element: not bit-exact, no variant explains it, within the probabilistic bound: tier
// probabilistic; it fails when only bit-exact is accepted, and the failure is located.
TEST(Verdict, TiersAndAcceptance) {
  const Fixture f;
  const core::Platform p = core::platform_by_name("nvidia.h100");
  Array device = f.on("nvidia.h100");
  const double x = device(3, 7);
  device(3, 7) = std::nextafter(static_cast<float>(x), static_cast<float>(INFINITY));
  const cases::Verdict v = cases::compare(device, f.op, p);
  EXPECT_EQ(v.tier, cases::Tier::probabilistic) << cases::describe(v);
  EXPECT_TRUE(v.passed);
  EXPECT_EQ(v.bit_exact, device.size() - 1);
  EXPECT_EQ(v.within_bound, 1u);
  EXPECT_GT(v.variants_searched, 0u);
  cases::CompareOptions strict;
  strict.accept = cases::Tier::bit_exact;
  const cases::Verdict s = cases::compare(device, f.op, p, strict);
  EXPECT_FALSE(s.passed);
  EXPECT_EQ(s.tier, cases::Tier::probabilistic);
  EXPECT_EQ(s.failures, 1u);
  ASSERT_FALSE(s.worst.empty());
  EXPECT_TRUE(s.worst[0].violation);
  EXPECT_EQ(s.worst[0].index, (std::vector<std::size_t>{3, 7}));
  EXPECT_NE(s.concentration.find("row 3"), std::string::npos) << s.concentration;
  EXPECT_NE(s.concentration.find("column 7"), std::string::npos) << s.concentration;
  const std::string text = cases::describe(s);
  for (const char* needle : {"FAIL (probabilistic)", "a[12,300] bf16 @ b[300,20] bf16 -> fp32", "nvidia.h100",
                             "worst elements", "where:"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
}

// An element between the probabilistic and the worst-case bound: tier deterministic, a failure
// unless deterministic is accepted.
TEST(Verdict, BeyondTheProbabilisticBoundOnlyIsDeterministic) {
  const Fixture f;
  const core::Platform p = core::platform_by_name("trainium.trn2");
  const cases::Emulation prob = *cases::check_emulation(f.op, p, cases::CompareOptions{}, f.op.emulate(p, {}).values.size());
  const cases::Emulation det = f.op.emulate(p, {});
  const numeq::reference::ExactValues ex = f.op.exact();
  Array device = det.values;
  bool planted = false;
  for (std::size_t i = 0; i < device.size() && !planted; ++i) {
    const double P = prob.bound.data()[i], D = det.bound.data()[i];
    if (!(P < 0.9 * D)) continue;
    const double exact = ex.hi.data()[i] + ex.lo.data()[i];
    const double value = numeq::round_to_format(exact + 0.5 * (P + D), Cast{fmts::fp32});
    const double error = std::abs(value - exact);
    if (error > P * 1.01 && error < D * 0.99) {
      device.data()[i] = value;
      planted = true;
    }
  }
  ASSERT_TRUE(planted) << "the probabilistic bound is not below 0.9x the worst-case bound anywhere";
  const cases::Verdict v = cases::compare(device, f.op, p);
  EXPECT_EQ(v.tier, cases::Tier::deterministic) << cases::describe(v);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.deterministic_only, 1u);
  cases::CompareOptions lenient;
  lenient.accept = cases::Tier::deterministic;
  EXPECT_TRUE(cases::compare(device, f.op, p, lenient).passed);
}

// A dropped last K tile in the last 8 columns: a violation, no variant explains it, the failures
// are located in those columns.
TEST(Verdict, PlantedBugIsAViolationLocatedInItsColumns) {
  const Fixture f;
  const core::Platform p = core::platform_by_name("trainium.trn2");
  Array device = f.on("trainium.trn2");
  const Array a_cut = xt::view(f.a, xt::all(), xt::range(0, 256));
  const Array b_cut = xt::view(f.b, xt::range(0, 256), xt::range(12, 20));
  const cases::Op cut = cases::matmul(a_cut, b_cut, nullptr, "bf16", Cast{fmts::fp32});
  xt::view(device, xt::all(), xt::range(12, 20)) = cut.emulate(p, {}).values;
  const cases::Verdict v = cases::compare(device, f.op, p);
  EXPECT_EQ(v.tier, cases::Tier::violation);
  EXPECT_FALSE(v.passed);
  EXPECT_TRUE(v.explained_by.empty());
  EXPECT_GT(v.violations, 0u);
  EXPECT_NE(v.concentration.find("columns 12..19"), std::string::npos) << v.concentration;
}

TEST(Verdict, OptionsAreChecked) {
  const Fixture f;
  const core::Platform p = core::platform_by_name("nvidia.h100");
  EXPECT_THROW(cases::tier_by_name("nope"), numeq::error);
  EXPECT_THROW(cases::tier_by_name("violation"), numeq::error);
  EXPECT_EQ(cases::tier_by_name("variant"), cases::Tier::variant);
  cases::CompareOptions o;
  for (const double bad : {0.0, 1.0, -1.0, std::nan("")}) {
    o.failure_probability = bad;
    EXPECT_THROW(cases::compare(f.on("nvidia.h100"), f.op, p, o), numeq::error) << bad;
  }
  EXPECT_THROW(core::platform_by_name("nvidia.h100[split_k=0]"), numeq::error);
  EXPECT_THROW(core::platform_by_name("nvidia.h100[split_k=x]"), numeq::error);
  EXPECT_THROW(core::platform_by_name("nvidia.h100[split_mode=parallel]"), numeq::error);
  EXPECT_THROW(core::platform_by_name("nvidia.h100[split_k=2,split_mode=sideways]"), numeq::error);
}

// Variants are named in the platform string syntax, each a platform that exists; the assumptions
// that do not touch the op (an fp32-output matmul's output rounding) are not varied.
// An op keeps its exact value and reference (Op::exact_values, reference_values): a second
// compare, a compare through a copy of the op, two compares at once from two threads on a fresh
// op, and a compare on an op built anew (nothing kept) give the same verdict, field for field.
TEST(Verdict, SameVerdictWhetherTheExactValueIsKeptOrNot) {
  const Fixture f;
  const Array x = generate(7, {6, 40});
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  const auto build_softmax = [&] { return cases::softmax(x, -1, "bf16", Cast{fmts::bf16}); };
  const auto build_matmul = [&] { return cases::matmul(f.a, f.b, nullptr, "bf16", Cast{fmts::fp32}); };
  // Outputs: the platform's own (bit-exact), another platform's (a variant or within the bound),
  // and one with an element pushed far off (a violation).
  Array off = f.on("nvidia.h100");
  off(3, 7) += 1.0;
  Array soft = build_softmax().emulate(core::platform_by_name("trainium.trn2"), {}).values;
  const auto text = [](const cases::Verdict& v) {
    std::string s = cases::describe(v);
    for (const double t : {v.tolerance.rtol, v.tolerance.atol, v.tolerance.max_ulps, v.tolerance.max_abs,
                           v.worst_error_over_bound, v.max_ulps, v.failure_probability})
      s += " " + std::to_string(t);
    return s;
  };
  for (const bool matmul : {true, false}) {
    const auto build = [&] { return matmul ? build_matmul() : build_softmax(); };
    for (const Array& actual : matmul ? std::vector<Array>{f.on("nvidia.h100"), f.on("trainium.trn2"), off}
                                      : std::vector<Array>{soft}) {
      const std::string fresh = text(cases::compare(actual, build(), h100));
      const cases::Op op = build();
      EXPECT_EQ(text(cases::compare(actual, op, h100)), fresh);
      EXPECT_EQ(text(cases::compare(actual, op, h100)), fresh);  // kept
      const cases::Op copy = op;
      EXPECT_EQ(text(cases::compare(actual, copy, h100)), fresh);
      const cases::Op shared = build();
      std::string one, two;
      std::thread t1([&] { one = text(cases::compare(actual, shared, h100)); });
      std::thread t2([&] { two = text(cases::compare(actual, shared, h100)); });
      t1.join();
      t2.join();
      EXPECT_EQ(one, fresh);
      EXPECT_EQ(two, fresh);
    }
  }
}

TEST(Variants, AreNamedPlatformsThatMatterToTheOp) {
  const Fixture f;
  const std::vector<std::string> names = cases::platform_variants(core::platform_by_name("trainium.trn2"), f.op);
  ASSERT_FALSE(names.empty());
  for (const std::string& n : names) {
    EXPECT_NO_THROW(core::platform_by_name(n)) << n;
    EXPECT_EQ(n.find("output_rounding"), std::string::npos) << n;
    EXPECT_EQ(n.find("scalar_activation_ulps"), std::string::npos) << n;
  }
  EXPECT_NE(std::find(names.begin(), names.end(), "trainium.trn2[pe_order=pairwise]"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "trainium.trn2[split_k=4,split_mode=parallel]"), names.end());
  const std::vector<std::string> h100 = cases::platform_variants(core::platform_by_name("nvidia.h100"), f.op);
  EXPECT_NE(std::find(h100.begin(), h100.end(), "nvidia.h100.mma_sync"), h100.end());
}

// For a kernel run's output (its tiling and sums read from its trace) only the hardware's variants
// are named: the assumption alternatives, never a tiling or split-K, the kernel's own choices.
TEST(Variants, AHardwareScopeNamesNoTilingOrSplitK) {
  const Fixture f;
  const core::Platform trn2 = core::platform_by_name("trainium.trn2[psum_group=2]");
  const std::vector<std::string> all = cases::platform_variants(trn2, f.op);
  const std::vector<std::string> hw = cases::platform_variants(trn2, f.op, cases::VariantScope::hardware);
  ASSERT_FALSE(hw.empty());
  EXPECT_LT(hw.size(), all.size());
  for (const std::string& n : hw) {
    EXPECT_EQ(n.find("split_k"), std::string::npos) << n;
    EXPECT_EQ(n.find("k_tile"), std::string::npos) << n;
    EXPECT_NE(std::find(all.begin(), all.end(), n), all.end()) << n;  // a subset of the full search
  }
  EXPECT_NE(std::find(hw.begin(), hw.end(), "trainium.trn2[pe_order=pairwise,psum_group=2]"), hw.end());
}

// A Trainium kernel's K tiling is searched at any K: an output computed in 64-row K tiles is named
// by its k_tile, whether or not 64 divides K (no split-K names it where it does not), and every
// other variant that gives the same bits is said beside it, each re-emulated here.
TEST(Variants, NameATrainiumKernelsKTileAtAnyK) {
  for (const std::size_t K : {1000u, 640u, 1024u}) {
    const Array a = generate(3, {8, K}), b = generate(4, {K, 16});
    const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32});
    const Array device = op.emulate(core::platform_by_name("trainium.trn2[k_tile=64]"), {}).values;
    const cases::Verdict v = cases::compare(device, op, core::platform_by_name("trainium.trn2"));
    ASSERT_EQ(v.tier, cases::Tier::variant) << K << "\n" << cases::describe(v);
    EXPECT_EQ(v.explained_by, "trainium.trn2[k_tile=64]") << K;
    for (const std::string& other : v.also_explained_by) {
      EXPECT_TRUE(same_values(device, op.emulate(core::platform_by_name(other), {}).values)) << other;
      EXPECT_NE(v.diagnosis.find(other), std::string::npos) << v.diagnosis;
    }
    if (K == 1024) {  // 16 splits of 64: the split-K orders K as the tiles do
      EXPECT_NE(std::find(v.also_explained_by.begin(), v.also_explained_by.end(), "trainium.trn2[split_k=16]"),
                v.also_explained_by.end()) << cases::describe(v);
    }
  }
  // Tiles the instruction cannot contract (256 rows of bf16) are not variants.
  const Fixture f;
  for (const std::string& n : cases::platform_variants(core::platform_by_name("trainium.trn2"), f.op))
    EXPECT_EQ(n.find("k_tile=256"), std::string::npos) << n;
}

// Failures in one row and two columns (inputs wrong in a row of a and two columns of b) are said
// to lie there, not "spread over every row and column".
TEST(Verdict, SaysWhichWholeRowsAndColumnsHoldTheFailures) {
  const Array a = generate(5, {64, 96}), b = generate(6, {96, 80});
  const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32});
  Array device = op.emulate(core::platform_by_name("nvidia.h100"), {}).values;
  for (std::size_t i = 0; i < 64; ++i)
    for (std::size_t j = 0; j < 80; ++j)
      if (i == 59 || j == 7 || j == 61) device(i, j) = numeq::round_to_format(device(i, j) * 1.5 + 1.0, Cast{fmts::fp32});
  const cases::Verdict v = cases::compare(device, op, core::platform_by_name("nvidia.h100"));
  EXPECT_EQ(v.concentration, "all " + std::to_string(v.failures) + " failures lie in row 59 and columns 7, 61")
      << v.concentration;
  EXPECT_EQ(v.failures, 64u * 2 + 80 - 2);
}

// A 1-D result (a sum per row) says which elements hold the failures, not "rows and columns".
TEST(Verdict, SaysWhichElementsOfA1DResultHoldTheFailures) {
  const Array x = generate(7, {40, 128});
  const cases::Op op = cases::reduce(cases::Reduction::sum, x, -1, "fp32", Cast{fmts::fp32});
  Array device = op.emulate(core::platform_by_name("nvidia.h100"), {}).values;
  for (std::size_t i = 3; i <= 7; ++i) device(i) = numeq::round_to_format(device(i) * 1.5 + 1.0, Cast{fmts::fp32});
  const cases::Verdict v = cases::compare(device, op, core::platform_by_name("nvidia.h100"));
  EXPECT_EQ(v.concentration, "all 5 failures lie in elements 3..7") << v.concentration;
  device(20) = numeq::round_to_format(device(20) * 1.5 + 1.0, Cast{fmts::fp32});
  device(35) = numeq::round_to_format(device(35) * 1.5 + 1.0, Cast{fmts::fp32});
  EXPECT_EQ(cases::compare(device, op, core::platform_by_name("nvidia.h100")).concentration,
            "all 7 failures lie in elements 3, 4, 5, 6, 7, 20, 35");
}

// The worst elements are in error / bound order among the failures, values outside the output
// format included (they fail whatever their distance, and are ranked by it).
TEST(Verdict, ListsTheWorstInErrorOverBoundOrder) {
  const Fixture f;
  const cases::Op op = cases::matmul(f.a, f.b, nullptr, "bf16", Cast{fmts::bf16});
  Array device = op.emulate(core::platform_by_name("nvidia.h100"), {}).values;
  // Foreign values (not bf16: a few fp32 ulps off) at small errors, and bf16 values far off.
  device(0, 0) = std::nextafter(static_cast<float>(device(0, 0)), 1e30f);
  device(1, 1) = std::nextafter(static_cast<float>(device(1, 1)), -1e30f);
  device(2, 2) = numeq::round_to_format(device(2, 2) * 64 + 3, Cast{fmts::bf16});
  device(3, 3) = numeq::round_to_format(device(3, 3) * 4 + 9, Cast{fmts::bf16});
  cases::CompareOptions o;
  o.worst = 6;
  const cases::Verdict v = cases::compare(device, op, core::platform_by_name("nvidia.h100"), o);
  ASSERT_EQ(v.not_in_format, 2u);
  ASSERT_GE(v.worst.size(), 4u);
  for (std::size_t k = 0; k + 1 < v.worst.size(); ++k) {
    const auto& x = v.worst[k];
    const auto& y = v.worst[k + 1];
    if (x.violation != y.violation) {
      EXPECT_TRUE(x.violation);
      continue;
    }
    EXPECT_GE(x.error / x.bound, y.error / y.bound) << "worst[" << k << "] before worst[" << k + 1 << "]";
  }
  for (std::size_t k = 0; k < 4; ++k) EXPECT_TRUE(v.worst[k].violation) << k;
}

// Two outputs each bit-exact with its platform, where the platforms differ on a special value:
// the exact sum 65520 - 2^-10 rounds to 65520 in trn2's fp32 PSUM (then Inf in fp16) and stays
// below it under h100's truncating fused steps (65504 in fp16). The port check fails there (the
// cross bound admits no special value one platform alone gives) and says the platforms differ,
// not that an output is wrong.
TEST(Port, PlatformsThatDifferOnASpecialValueAreSaidToDiffer) {
  const Array a = {{65280.0, 240.0, -0x1p-10}, {1.0, 2.0, 3.0}};
  const Array b = xt::ones<double>({3, 2});
  const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp16});
  const core::Platform h100 = core::platform_by_name("nvidia.h100"), trn2 = core::platform_by_name("trainium.trn2");
  const Array gpu = op.emulate(h100, {}).values, trn = op.emulate(trn2, {}).values;
  ASSERT_EQ(gpu(0, 0), 65504.0);
  ASSERT_TRUE(std::isinf(trn(0, 0)));
  const cases::PortVerdict v = cases::compare_port(gpu, trn, op, h100, trn2);
  EXPECT_EQ(v.gpu.tier, cases::Tier::bit_exact);
  EXPECT_EQ(v.trainium.tier, cases::Tier::bit_exact);
  EXPECT_FALSE(v.passed);
  EXPECT_NE(v.diagnosis.find("the platforms themselves differ there"), std::string::npos) << v.diagnosis;
  EXPECT_EQ(v.diagnosis.find("not what its platform computes"), std::string::npos) << v.diagnosis;
}

// The port check: h100 and trn2 outputs of one matmul pass; a bug in the Trainium output fails it.
TEST(Port, GpuAndTrainiumOutputsOfOneKernel) {
  const Fixture f;
  const core::Platform h100 = core::platform_by_name("nvidia.h100"), trn2 = core::platform_by_name("trainium.trn2");
  const Array gpu = f.on("nvidia.h100"), trn = f.on("trainium.trn2[pe_order=pairwise]");
  const cases::PortVerdict ok = cases::compare_port(gpu, trn, f.op, h100, trn2);
  EXPECT_TRUE(ok.passed) << cases::describe(ok);
  EXPECT_EQ(ok.beyond, 0u);
  Array bad = trn;
  for (std::size_t n = 0; n < 20; ++n) bad(5, n) = numeq::round_to_format(bad(5, n) * 1.01, Cast{fmts::fp32});
  const cases::PortVerdict no = cases::compare_port(gpu, bad, f.op, h100, trn2);
  EXPECT_FALSE(no.passed);
  EXPECT_GT(no.beyond, 0u);
  EXPECT_EQ(no.trainium.tier, cases::Tier::violation);
  EXPECT_NE(no.trainium.concentration.find("row 5"), std::string::npos) << no.trainium.concentration;
  EXPECT_THROW(cases::compare_port(gpu, xt::view(trn, xt::range(0, 4), xt::all()), f.op, h100, trn2), numeq::error);
}

}  // namespace

namespace {

// The verdict's passes run on threads (slices of 2^15 elements merged in slice order): on an
// output of 2^16 elements with within-bound differences, elements beyond the bound, NaNs and a
// value outside the output format planted across the slices, every field of the verdict and its
// text equal the one-thread verdict's (one slice: the serial scan).
TEST(Verdict, IsTheSameOnAnyThreadCount) {
  const Array a = generate(11, {256, 64});
  const Array b = generate(12, {64, 256});
  const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::bf16});
  const core::Platform& h100 = core::platform_by_name("nvidia.h100");
  const Array emulated = op.emulate(h100, {}).values;
  std::vector<Array> outputs;
  Array nudged = emulated;  // a bf16 ulp or two off along a stride: mostly within the bound
  for (std::size_t i = 0; i < nudged.size(); i += 97) {
    const double x = nudged.data()[i];
    nudged.data()[i] = numeq::round_to_format(x + std::abs(x) * 0x1p-7, Cast{fmts::bf16});
  }
  outputs.push_back(nudged);
  Array broken = nudged;  // beyond the bound in several slices, NaNs, and an fp32 value
  for (std::size_t i : {std::size_t{5}, std::size_t{40000}, std::size_t{60001}, std::size_t{65000}}) broken.data()[i] *= 4;
  for (std::size_t i : {std::size_t{33000}, std::size_t{50000}}) broken.data()[i] = std::nan("");
  broken.data()[62000] = 1.0 + 0x1p-20;
  outputs.push_back(broken);
  for (const Array& actual : outputs) {
    for (const cases::Tier accept : {cases::Tier::probabilistic, cases::Tier::bit_exact}) {
      cases::CompareOptions options;
      options.accept = accept;
      options.worst = 7;
      numeq::set_num_threads(1);
      const cases::Verdict one = cases::compare(actual, op, h100, options);
      for (const int threads : {2, 3}) {
        numeq::set_num_threads(threads);
        const cases::Verdict v = cases::compare(actual, op, h100, options);
        SCOPED_TRACE(std::to_string(threads) + " threads");
        EXPECT_EQ(cases::describe(v), cases::describe(one));
        using V = cases::Verdict;
        for (std::size_t V::*count : {&V::bit_exact, &V::within_bound, &V::deterministic_only, &V::violations,
                                      &V::special_mismatches, &V::nan_mismatches, &V::not_in_format, &V::failures})
          EXPECT_EQ(v.*count, one.*count);
        for (double V::*figure : {&V::worst_error_over_bound, &V::max_ulps}) EXPECT_EQ(v.*figure, one.*figure);
        EXPECT_EQ(v.concentration, one.concentration);
        EXPECT_EQ(v.diagnosis, one.diagnosis);
        ASSERT_EQ(v.worst.size(), one.worst.size());
        for (std::size_t k = 0; k < v.worst.size(); ++k) EXPECT_EQ(v.worst[k].index, one.worst[k].index);
      }
    }
  }
  numeq::set_num_threads(0);
  // The planted faults are seen (the check is not vacuous).
  numeq::set_num_threads(2);
  const cases::Verdict v = cases::compare(outputs[1], op, h100, {});
  EXPECT_EQ(v.tier, cases::Tier::violation);
  EXPECT_EQ(v.nan_mismatches, 2u);
  EXPECT_EQ(v.not_in_format, 1u);
  EXPECT_GT(v.elements - v.bit_exact, 600u);  // 65536 / 97 nudged, some back to the emulated value
  numeq::set_num_threads(0);
}

}  // namespace
