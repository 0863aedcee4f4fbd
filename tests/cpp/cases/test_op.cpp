// The catalogue object and its verdicts (cases/op.hpp). Oracles: the long accumulator's exact
// results (numeq::reference, itself checked against MPFR in tests/cpp/references), published
// format spacings (IEEE 754, OFP8), and planted bugs whose outputs a correct bound must reject.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <vector>
#include <cstdio>
#include <string>

#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include "numeq/cases/generators.hpp"
#include "numeq/cases/op.hpp"
#include "numeq/cases/verdict.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/parallel.hpp"
#include "op_test_support.hpp"

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
namespace reference = numeq::reference;
using numeq::Cast;
using Array = xt::xarray<double>;
namespace fmts = numeq::formats;
using numeq_test::generate;

template <class F>
void expect_error_mentioning(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

struct MatmulCase {
  const char* platform;
  const char* in_fmt;
  const char* out_fmt;
};

const MatmulCase kMatmulCases[] = {
    {"cuda_core.fp32", "fp32", "fp32"},  {"nvidia.h100", "bf16", "fp32"},   {"nvidia.h100", "fp16", "fp16"},
    {"nvidia.h100", "e4m3fn", "fp32"},   {"nvidia.a100", "tf32", "fp32"},   {"nvidia.v100", "fp16", "fp32"},
    {"trainium.trn1", "bf16", "fp32"},   {"trainium.trn2", "bf16", "bf16"},
};

// The emulation checked as if it were a device's output: bit-exact by construction, so the test
// is that the bound holds against the exact result on every element (zero violations).
TEST(Op, MatmulEmulationWithinItsBoundOnEveryGenerator) {
  std::size_t checked = 0;
  for (const MatmulCase& c : kMatmulCases) {
    const core::Platform p = core::platform_by_name(c.platform);
    const numeq::Format& fin = numeq::format_by_name(c.in_fmt);
    for (cases::Distribution d : cases::all_distributions()) {
      const Array a = generate(d, 1, fin, {24, 300});
      const Array b = generate(d, 2, fin, {300, 20});
      const cases::Op op = cases::matmul(a, b, nullptr, c.in_fmt, Cast{numeq::format_by_name(c.out_fmt)});
      const cases::Emulation e = op.emulate(p, {});
      const cases::Verdict v = cases::compare(e.values, op, p);
      EXPECT_TRUE(v.passed) << c.platform << " " << c.in_fmt << " " << cases::to_string(d) << ": " << v.diagnosis;
      EXPECT_EQ(v.bit_exact, v.elements);
      EXPECT_EQ(v.violations, 0u);
      checked += v.elements;
    }
  }
  std::printf("matmul elements checked: %zu\n", checked);
}

// A result that differs from the emulation by a little (another order) passes within the bound;
// planted bugs do not.
TEST(Op, MatmulVerdictsOnPlantedBugs) {
  const core::Platform p = core::platform_by_name("nvidia.h100");
  const Array a = generate(cases::Distribution::uniform, 3, fmts::bf16, {32, 512});
  const Array b = generate(cases::Distribution::uniform, 4, fmts::bf16, {512, 32});
  const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32});
  const cases::Emulation e = op.emulate(p, {});

  // One element one fp32 ulp off: within the bound, not bit-exact.
  Array nudged = e.values;
  nudged(5, 7) = std::nextafter(static_cast<float>(nudged(5, 7)), 1e30f);
  const cases::Verdict near = cases::compare(nudged, op, p);
  EXPECT_TRUE(near.passed) << near.diagnosis;
  EXPECT_EQ(near.bit_exact, near.elements - 1);
  EXPECT_EQ(near.within_bound, 1u);

  // Accumulating in bf16 instead of fp32.
  core::Plan bf16_acc = core::plan_for(p, core::Operation::matmul, "bf16", "fp32");
  bf16_acc.reduction = core::sequential(core::Arithmetic{Cast{fmts::bf16}}, true);
  const cases::Verdict bug1 = cases::compare(core::matmul(a, b, nullptr, bf16_acc), op, p);
  EXPECT_FALSE(bug1.passed);
  EXPECT_GT(bug1.violations, bug1.elements / 2) << bug1.diagnosis;

  // A dropped K tile (the last 128 products never added).
  const Array a_cut = xt::view(a, xt::all(), xt::range(0, 384));
  const Array b_cut = xt::view(b, xt::range(0, 384), xt::all());
  const cases::Verdict bug2 = cases::compare(core::matmul(a_cut, b_cut, nullptr, core::plan_for(p, core::Operation::matmul, "bf16", "fp32")), op, p);
  EXPECT_FALSE(bug2.passed);
  EXPECT_GT(bug2.violations, bug2.elements * 9 / 10);

  // A transposed operand: square inputs so that the shapes still fit.
  const Array sq = generate(cases::Distribution::normal, 5, fmts::bf16, {64, 64});
  const Array sq2 = generate(cases::Distribution::normal, 6, fmts::bf16, {64, 64});
  const cases::Op sq_op = cases::matmul(sq, sq2, nullptr, "bf16", Cast{fmts::fp32});
  const Array transposed = xt::transpose(sq2);
  const cases::Verdict bug3 =
      cases::compare(core::matmul(sq, transposed, nullptr, core::plan_for(p, core::Operation::matmul, "bf16", "fp32")), sq_op, p);
  EXPECT_FALSE(bug3.passed);
  EXPECT_GT(bug3.violations, bug3.elements * 9 / 10);
  ASSERT_FALSE(bug3.worst.empty());
  EXPECT_TRUE(bug3.worst[0].violation);
  EXPECT_EQ(bug3.worst[0].index.size(), 2u);
  std::printf("planted: bf16 accumulation %zu/%zu, dropped tile %zu/%zu, transposed %zu/%zu elements flagged\n",
              bug1.violations, bug1.elements, bug2.violations, bug2.elements, bug3.violations, bug3.elements);
}

TEST(Op, MatmulWithBiasAndBatches) {
  const core::Platform p = core::platform_by_name("cuda_core.fp32");
  const Array a = generate(cases::Distribution::normal, 7, fmts::fp32, {3, 8, 40});
  const Array b = generate(cases::Distribution::normal, 8, fmts::fp32, {40, 6});
  const Array bias = generate(cases::Distribution::normal, 9, fmts::fp32, {6});
  const cases::Op op = cases::matmul(a, b, &bias, "fp32", Cast{fmts::fp32});
  const cases::Emulation e = op.emulate(p, {});
  ASSERT_EQ(e.values.shape(), (std::vector<std::size_t>{3, 8, 6}));
  const cases::Verdict v = cases::compare(e.values, op, p);
  EXPECT_TRUE(v.passed) << v.diagnosis;
  // The reference is the exact result rounded once: within half an fp32 ulp of hi + lo.
  const numeq::reference::ExactValues ex = op.exact();
  const Array ref = op.reference();
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double exact = ex.hi.data()[i] + ex.lo.data()[i];
    EXPECT_LE(std::abs(ref.data()[i] - exact), cases::ulp_of(exact, fmts::fp32) / 2 * (1 + 0x1p-40));
  }
}

TEST(Op, ReductionsWithinBoundAndMeanAsNumpyDivides) {
  std::size_t checked = 0;
  for (const char* name : {"numpy", "cuda_core.fp32", "nvidia.h100", "trainium.trn1"}) {
    const core::Platform p = core::platform_by_name(name);
    for (cases::Distribution d : cases::all_distributions()) {
      for (const numeq::Format* f : {&fmts::fp32, &fmts::bf16}) {
        const Array x = generate(d, 11, *f, {16, 1000});
        for (cases::Reduction r : {cases::Reduction::sum, cases::Reduction::mean, cases::Reduction::max}) {
          const cases::Op op = cases::reduce(r, x, -1, f->name, Cast{*f});
          const cases::Emulation e = op.emulate(p, {});
          const cases::Verdict v = cases::compare(e.values, op, p);
          EXPECT_TRUE(v.passed) << name << " " << cases::to_string(r) << " " << f->name << " " << cases::to_string(d)
                                << ": " << v.diagnosis;
          checked += v.elements;
          if (r == cases::Reduction::max) {
            for (std::size_t i = 0; i < 16; ++i) {
              double m = x(i, 0);
              for (std::size_t k = 1; k < 1000; ++k) m = std::max(m, x(i, k));
              EXPECT_EQ(e.values(i), m);
            }
          }
        }
      }
    }
  }
  // numpy's mean of float32: the float32 sum divided in float64 by the count, cast back.
  const core::Platform np = core::platform_by_name("numpy");
  const Array x = generate(cases::Distribution::lognormal, 12, fmts::fp32, {8, 777});
  const cases::Emulation mean = cases::reduce(cases::Reduction::mean, x, 1, "fp32", Cast{fmts::fp32}).emulate(np, {});
  const Array sums = core::sum(x, 1, core::plan_for(np, core::Operation::sum, "fp32", "fp32"));
  for (std::size_t i = 0; i < 8; ++i)
    EXPECT_EQ(mean.values(i), static_cast<double>(static_cast<float>(sums(i) / 777.0)));
  std::printf("reduction elements checked: %zu\n", checked);
}

// The exact mean is correctly rounded even where the double quotient sits on a tie of the output
// format: sum = 3 * 2^-24 + ... chosen so that hi / n lands on an fp32 midpoint.
TEST(Op, MeanReferenceRoundsTheExactQuotient) {
  // x = {1 + 2^-23, 2^-24 * 3}: exact sum 1 + 2^-23 + 3 * 2^-24 = 1 + 5 * 2^-24; n = 2: the mean
  // 0.5 + 5 * 2^-25 is exactly a midpoint of fp32 near 0.5 (spacing 2^-24): ties to even.
  Array x = {{1.0 + 0x1p-23, 3 * 0x1p-24}};
  const cases::Op op = cases::reduce(cases::Reduction::mean, x, 1, "fp32", Cast{fmts::fp32});
  const Array r = op.reference();
  // 0.5 + 5 * 2^-25 = 0.5 + 2.5 * 2^-24: neighbours 0.5 + 2 * 2^-24 (even) and 0.5 + 3 * 2^-24.
  EXPECT_EQ(r(0), 0.5 + 2 * 0x1p-24);
  const cases::Op up = cases::reduce(cases::Reduction::mean, x, 1, "fp32", Cast{fmts::fp32, numeq::Rounding::upward});
  EXPECT_EQ(up.reference()(0), 0.5 + 3 * 0x1p-24);
}

TEST(Op, UlpOfMatchesPublishedSpacings) {
  EXPECT_EQ(cases::ulp_of(1.0, fmts::fp32), 0x1p-23);
  EXPECT_EQ(cases::ulp_of(1.0, fmts::bf16), 0x1p-7);
  EXPECT_EQ(cases::ulp_of(1.0, fmts::fp16), 0x1p-10);
  EXPECT_EQ(cases::ulp_of(448.0, fmts::e4m3fn), 32.0);     // OFP8: 448 = 1.75 * 2^8, 3 fraction bits
  EXPECT_EQ(cases::ulp_of(57344.0, fmts::e5m2), 8192.0);   // 1.75 * 2^15, 2 fraction bits
  EXPECT_EQ(cases::ulp_of(0.0, fmts::fp32), 0x1p-149);     // subnormal spacing
  EXPECT_EQ(cases::ulp_of(1e-40, fmts::fp32), 0x1p-149);
  EXPECT_EQ(cases::ulp_of(0.0, fmts::e4m3fn), 0x1p-9);     // OFP8 E4M3 smallest subnormal
  EXPECT_EQ(cases::ulp_of(1e39, fmts::fp32), 0x1p104);     // capped at max_finite's binade
}

// The input check (every element not NaN must round to itself in in_fmt) against its
// definition, element by element: for every floating format, arrays of its values with one
// planted element (a non-value, -0, +-Inf, NaN, a binary64 subnormal) at several places,
// long enough for the threaded scan; the op is refused exactly when the definition says so,
// naming the planted element.
TEST(Op, InputCheckIsRoundingToItself) {
  const double inf = std::numeric_limits<double>::infinity();
  for (const numeq::Format* f : numeq::all_formats()) {
    if (f->is_integer()) continue;
    const Cast nearest{*f};
    const std::size_t n = 3 * 65536 + 7;
    Array x = xt::zeros<double>({n});
    for (std::size_t i = 0; i < n; ++i)
      x(i) = numeq::round_to_format(std::ldexp(1.0 + static_cast<double>(i % 61) / 64, static_cast<int>(i % 5) - 2), nearest);
    for (const double planted : {1.0 + 0x1p-30, -0.0, inf, -inf, std::nan(""), 0x1p-1070, numeq::max_finite(*f) * 2}) {
      for (const std::size_t at : {std::size_t{0}, std::size_t{70000}, n - 1}) {
        Array y = x;
        y(at) = planted;
        const bool nan = std::isnan(planted);
        const bool refused_by_definition = !nan && numeq::round_to_format(planted, nearest) != planted;
        try {
          (void)cases::softmax(y, -1, f->name, Cast{numeq::formats::fp32});
          EXPECT_FALSE(refused_by_definition) << f->name << " " << planted << " at " << at;
        } catch (const numeq::error& e) {
          EXPECT_TRUE(refused_by_definition) << f->name << " " << planted << " at " << at << ": " << e.what();
          EXPECT_NE(std::string(e.what()).find("element " + std::to_string(at) + " "), std::string::npos) << e.what();
        }
      }
    }
  }
}

TEST(Op, CrossPlatformBoundCoversTheDifference) {
  const Array a = generate(cases::Distribution::outlier_channels, 15, fmts::bf16, {16, 1024});
  const Array b = generate(cases::Distribution::normal, 16, fmts::bf16, {1024, 16});
  const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32});
  const char* names[] = {"nvidia.h100", "nvidia.a100", "trainium.trn1", "trainium.trn1[pe_order=pairwise]"};
  for (const char* x : names)
    for (const char* y : names) {
      const cases::Emulation ex = op.emulate(core::platform_by_name(x), {});
      const cases::Emulation ey = op.emulate(core::platform_by_name(y), {});
      const Array cross = cases::cross_platform_bound(ex, ey);
      for (std::size_t i = 0; i < cross.size(); ++i)
        EXPECT_LE(std::abs(ex.values.data()[i] - ey.values.data()[i]), cross.data()[i]) << x << " vs " << y;
    }
}

TEST(Op, BadInputNamesTheArgument) {
  const Array a = generate(cases::Distribution::normal, 17, fmts::fp32, {4, 8});
  const Array b = generate(cases::Distribution::normal, 18, fmts::fp32, {8, 4});
  expect_error_mentioning([&] { cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32}); }, "a: element");
  expect_error_mentioning([&] { cases::matmul(a, b, nullptr, "fp33", Cast{fmts::fp32}); }, "in_fmt");
  expect_error_mentioning([&] { cases::matmul(a, b, nullptr, "int8", Cast{fmts::fp32}); }, "integer format");
  expect_error_mentioning([&] { cases::matmul(a, a, nullptr, "fp32", Cast{fmts::fp32}); }, "inner dimensions");
  const Array bad_c = xt::zeros<double>({5});
  expect_error_mentioning([&] { cases::matmul(a, b, &bad_c, "fp32", Cast{fmts::fp32}); }, "c: shape");
  expect_error_mentioning([&] { cases::reduce(cases::Reduction::sum, a, 2, "fp32", Cast{fmts::fp32}); }, "axis");
  expect_error_mentioning([] { cases::reduction_by_name("median"); }, "valid: sum, mean, max");
  const cases::Op op = cases::matmul(a, b, nullptr, "fp32", Cast{fmts::fp32});
  expect_error_mentioning([&] { cases::compare(xt::zeros<double>({4, 5}), op, core::platform_by_name("cuda_core.fp32")); },
                          "actual: shape");
  // A format the platform has no plan for: the error lists what it has.
  const Array a8 = generate(cases::Distribution::normal, 19, fmts::e4m3fn, {4, 8});
  const Array b8 = generate(cases::Distribution::normal, 20, fmts::e4m3fn, {8, 4});
  const cases::Op op8 = cases::matmul(a8, b8, nullptr, "e4m3fn", Cast{fmts::fp32});
  EXPECT_THROW(op8.emulate(core::platform_by_name("nvidia.a100"), {}), numeq::error);
}

}  // namespace

namespace {

// Functions, softmax and normalisations through the catalogue object: the emulation, judged as
// a device's output, passes against MPFR's exact values on every generator.
TEST(Op, CompositeOpsPassTheirOwnEmulation) {
  std::size_t checked = 0;
  for (const char* name : {"nvidia.h100", "trainium.trn1", "numpy"}) {
    const core::Platform p = core::platform_by_name(name);
    for (cases::Distribution d : {cases::Distribution::normal, cases::Distribution::lognormal,
                                  cases::Distribution::outlier_channels, cases::Distribution::cancellation}) {
      const Array x = generate(d, 21, fmts::bf16, {6, 256});
      const Array gamma = generate(cases::Distribution::uniform, 22, fmts::bf16, {256});
      cases::SoftmaxOptions online;
      online.variant = cases::SoftmaxVariant::online;
      online.block = 64;
      const cases::Op ops[] = {
          cases::function(numeq::reference::Function::exp, x, "bf16", Cast{fmts::fp32}),
          cases::function(numeq::reference::Function::gelu_tanh, x, "bf16", Cast{fmts::bf16}),
          cases::softmax(x, -1, "bf16", Cast{fmts::bf16}),
          cases::softmax(x, -1, "bf16", Cast{fmts::fp32}, online),
          cases::softmax(x, 1, "bf16", Cast{fmts::fp32}, {}, true),
          cases::layernorm(x, &gamma, nullptr, 1e-5, "bf16", Cast{fmts::bf16}),
          cases::rmsnorm(x, &gamma, &gamma, 1e-6, "bf16", Cast{fmts::fp32}),
      };
      for (const cases::Op& op : ops) {
        const cases::Verdict v = cases::compare(op.emulate(p, {}).values, op, p);
        EXPECT_TRUE(v.passed) << name << " " << op.signature << " " << cases::to_string(d) << ": " << v.diagnosis;
        EXPECT_EQ(v.bit_exact, v.elements);
        checked += v.elements;
      }
    }
  }
  std::printf("composite elements checked: %zu\n", checked);
}

// Planted: softmax without max subtraction on large logits, judged against the max-subtracted op.
TEST(Op, SoftmaxWithoutMaxSubtractionIsFlagged) {
  const core::Platform p = core::platform_by_name("nvidia.h100");
  const Array x = cases::generate(cases::Generator{cases::Distribution::normal, 23, 40.0}, fmts::fp32, {16, 128});
  const cases::Op good = cases::softmax(x, -1, "fp32", Cast{fmts::fp32});
  cases::SoftmaxOptions plain;
  plain.variant = cases::SoftmaxVariant::plain;
  const cases::Op bad = cases::softmax(x, -1, "fp32", Cast{fmts::fp32}, plain);
  const cases::Verdict v = cases::compare(bad.emulate(p, {}).values, good, p);
  EXPECT_FALSE(v.passed);
  EXPECT_GT(v.violations, 0u);
  std::printf("softmax without max subtraction: %zu of %zu elements flagged\n", v.violations, v.elements);
}

TEST(Op, CompositeBadInput) {
  const Array x = generate(cases::Distribution::normal, 24, fmts::fp32, {4, 8});
  const Array wrong = xt::zeros<double>({7});
  expect_error_mentioning([&] { cases::layernorm(x, &wrong, nullptr, 1e-5, "fp32", Cast{fmts::fp32}); }, "gamma");
  expect_error_mentioning([&] { cases::rmsnorm(x, nullptr, nullptr, -1.0, "fp32", Cast{fmts::fp32}); }, "eps");
  expect_error_mentioning([&] { cases::softmax(x, 3, "fp32", Cast{fmts::fp32}); }, "axis");
  expect_error_mentioning([&] { cases::function(numeq::reference::Function::exp, x, "e4m3fn", Cast{fmts::fp32}); }, "x: element");
}

}  // namespace

namespace {

TEST(Op, AttentionAndQuantisedMatmulsThroughTheCatalogue) {
  // Attention: naive and flash, each judged against MPFR's exact values.
  const Array q = generate(cases::Distribution::normal, 31, fmts::bf16, {2, 64, 32});
  const Array k = generate(cases::Distribution::normal, 32, fmts::bf16, {2, 128, 32});
  const Array v = generate(cases::Distribution::uniform, 33, fmts::bf16, {2, 128, 16});
  cases::AttentionOptions flash;
  flash.variant = cases::AttentionVariant::flash;
  flash.block_rows = 32;
  flash.block_cols = 32;
  for (const char* name : {"nvidia.h100", "trainium.trn1"}) {
    const core::Platform p = core::platform_by_name(name);
    for (const cases::AttentionOptions& o : {cases::AttentionOptions{}, flash}) {
      const cases::Op op = cases::attention(q, k, v, nullptr, true, std::nullopt, "bf16", Cast{fmts::bf16}, o);
      const cases::Verdict verdict = cases::compare(op.emulate(p, {}).values, op, p);
      EXPECT_TRUE(verdict.passed) << name << " " << op.signature << ": " << verdict.diagnosis;
      EXPECT_EQ(verdict.bit_exact, verdict.elements);
    }
  }

  // Scaled fp8: every layout passes its own emulation; a scale twice too large does not.
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  const Array a = generate(cases::Distribution::normal, 34, fmts::e4m3fn, {16, 256});
  const Array b = generate(cases::Distribution::normal, 35, fmts::e4m3fn, {256, 8});
  struct Layout {
    cases::Fp8Scaling scaling;
    std::vector<std::size_t> sa, sb;
  };
  const Layout layouts[] = {{cases::Fp8Scaling::per_tensor, {1}, {1}},
                            {cases::Fp8Scaling::per_channel, {16}, {8}},
                            {cases::Fp8Scaling::blockwise, {16, 2}, {2, 1}},
                            {cases::Fp8Scaling::mx, {16, 8}, {8, 8}}};
  for (const Layout& l : layouts) {
    Array sa = cases::generate({cases::Distribution::uniform, 36, 1.0}, fmts::fp32, l.sa);
    Array sb = cases::generate({cases::Distribution::uniform, 37, 1.0}, fmts::fp32, l.sb);
    sa = xt::abs(sa) + 0.5;
    sb = xt::abs(sb) + 0.25;
    for (double& s : sa) s = numeq::round_to_format(s, Cast{fmts::fp32});  // scales are fp32 values
    for (double& s : sb) s = numeq::round_to_format(s, Cast{fmts::fp32});
    if (l.scaling == cases::Fp8Scaling::mx) {  // powers of two (e8m0)
      for (double& s : sa) s = std::exp2(std::round(std::log2(s)));
      for (double& s : sb) s = std::exp2(std::round(std::log2(s)));
    }
    cases::ScaledMatmulOptions o;
    o.scaling = l.scaling;
    const cases::Op op = cases::scaled_fp8_matmul(a, b, sa, sb, "e4m3fn", o);
    const cases::Emulation e = op.emulate(h100, {});
    const cases::Verdict good = cases::compare(e.values, op, h100);
    EXPECT_TRUE(good.passed) << op.signature << ": " << good.diagnosis;
    const Array doubled = e.values * 2.0;
    const cases::Verdict bad = cases::compare(doubled, op, h100);
    EXPECT_FALSE(bad.passed) << op.signature;
  }
  expect_error_mentioning(
      [&] { cases::scaled_fp8_matmul(a, b, xt::zeros<double>({1}), xt::ones<double>({1}), "e4m3fn"); }, "scale_a");
  cases::ScaledMatmulOptions blockwise;
  blockwise.scaling = cases::Fp8Scaling::blockwise;
  expect_error_mentioning(
      [&] { cases::scaled_fp8_matmul(a, b, xt::ones<double>({16, 3}), xt::ones<double>({2, 1}), "e4m3fn", blockwise); },
      "scale_a: shape");

  // int8 with int32 accumulation: exact.
  // small integers in [-64, 64] (fp32 values that are int8 codes)
  const Array ia = cases::generate({cases::Distribution::small_integers, 38, 8.0}, fmts::fp32, {8, 300});
  const Array ib = cases::generate({cases::Distribution::small_integers, 39, 8.0}, fmts::fp32, {300, 4});
  const cases::Op iop = cases::integer_matmul(ia, ib);
  const cases::Emulation ie = iop.emulate(h100, {});
  const cases::Verdict iv = cases::compare(ie.values, iop, h100);
  EXPECT_TRUE(iv.passed) << iv.diagnosis;
  EXPECT_EQ(xt::amax(ie.bound)(), 0.0);
  Array off = ie.values;
  off(0, 0) += 1;
  EXPECT_FALSE(cases::compare(off, iop, h100).passed);

  // Requantised to int8: the emulated codes lie within their bound of clamp(acc m + z).
  cases::Requantization rq;
  rq.multiplier = 0x1p-9 * 1.3;
  rq.zero_point = -5;
  const cases::Op qop = cases::integer_matmul_requantized(ia, ib, rq);
  const cases::Verdict qv = cases::compare(qop.emulate(h100, {}).values, qop, h100);
  EXPECT_TRUE(qv.passed) << qv.diagnosis;
  rq.quant.rounding = numeq::Rounding::stochastic;
  expect_error_mentioning([&] { cases::integer_matmul_requantized(ia, ib, rq); }, "rounding");
}

TEST(Op, SpecialValuesMustBeThePlatformsOwn) {
  // fp32 exp(100) overflows (host expf: +Inf); 1/+0 = +Inf, 1/-0 = -Inf (IEEE 754 s7.3).
  const core::Platform trn1 = core::platform_by_name("trainium.trn1");
  const cases::Op exp_op = cases::function(numeq::reference::Function::exp, Array{100.0, 1.0}, "fp32", Cast{fmts::fp32});
  const Array device{static_cast<double>(std::exp(100.0f)), static_cast<double>(std::exp(1.0f))};
  ASSERT_TRUE(std::isinf(device(0)));
  EXPECT_TRUE(cases::compare(device, exp_op, trn1).passed);
  Array zero = device;
  zero(0) = 0.0;
  const cases::Verdict v = cases::compare(zero, exp_op, trn1);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.special_mismatches, 1u);
  EXPECT_NE(v.diagnosis.find("special value differs"), std::string::npos) << v.diagnosis;
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  const cases::Op rcp = cases::function(numeq::reference::Function::reciprocal, Array{0.0, -0.0}, "fp32", Cast{fmts::fp32});
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(cases::compare(Array{inf, -inf}, rcp, h100).passed);
  EXPECT_FALSE(cases::compare(Array{-inf, -inf}, rcp, h100).passed);
  EXPECT_FALSE(cases::compare(Array{inf, 0.0}, rcp, h100).passed);
}

TEST(Op, ValuesOutsideTheOutputFormatAreViolations) {
  // 1 + 2^-10 is an fp32 value but no bf16 value (8 significand bits).
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  const cases::Op op = cases::conversion(Array{1.0 + 0x1p-10, 2.0}, "fp32", Cast{fmts::bf16});
  const cases::Verdict v = cases::compare(Array{1.0 + 0x1p-10, 2.0}, op, h100);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.not_in_format, 1u);
  EXPECT_NE(v.diagnosis.find("not values of the output format bf16"), std::string::npos) << v.diagnosis;
  EXPECT_TRUE(cases::compare(Array{1.0, 2.0}, op, h100).passed);
}

TEST(Op, WorstRanksByErrorOverBound) {
  // Small integers: the exact sums are plain doubles; errors of chosen multiples of each bound.
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  Array a = xt::zeros<double>({4, 8}), b = xt::zeros<double>({8, 3});
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = static_cast<double>(static_cast<int>(i % 7) - 3) * 0.5;
  for (std::size_t i = 0; i < b.size(); ++i) b.data()[i] = static_cast<double>(static_cast<int>(i % 5) - 2);
  const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32});
  const cases::Emulation e = op.emulate(h100, {});
  Array got = e.values;
  // (flat index, how many ulps of fp32 off): ranked by error / bound, not by index.
  const std::vector<std::pair<std::size_t, double>> planted = {{1, 2}, {4, 64}, {7, 8}, {10, 512}};
  for (const auto& [i, k] : planted) {
    const double x = got.data()[i];
    got.data()[i] = x + k * cases::ulp_of(x == 0 ? 1.0 : x, fmts::fp32);
  }
  const cases::Verdict v = cases::compare(got, op, h100, {.accept = cases::Tier::deterministic, .search_variants = false, .worst = 4});
  ASSERT_EQ(v.worst.size(), 4u);
  const reference::ExactValues ex = op.exact();
  std::vector<std::pair<double, std::size_t>> want;
  for (const auto& [i, k] : planted) {
    const double err = std::abs(got.data()[i] - ex.hi.data()[i] - ex.lo.data()[i]), B = e.bound.data()[i];
    want.push_back({B > 0 ? err / B : std::numeric_limits<double>::infinity(), i});
  }
  std::sort(want.begin(), want.end(), [](auto x, auto y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
  for (std::size_t j = 0; j < 4; ++j) {
    std::size_t flat = v.worst[j].index[0] * 3 + v.worst[j].index[1];
    EXPECT_EQ(flat, want[j].second) << "rank " << j;
  }
}

TEST(Op, MatmulReferenceFromTheExactValueEqualsTheRoundedAccumulator) {
  // compare rounds matmul's exact (hi, lo) itself (round to odd by lo's sign, then into out); the
  // reference's own path rounds the long accumulator once. They must agree on every element, for
  // every output format and rounding the shortcut takes (cancellation data: many exact zeros and
  // values close to rounding boundaries).
  for (const char* in : {"bf16", "e4m3fn", "fp32"}) {
    const numeq::Format& fin = numeq::format_by_name(in);
    const Array a = generate(cases::Distribution::cancellation, 3, fin, {9, 40});
    const Array b = generate(cases::Distribution::normal, 4, fin, {40, 7});
    for (const numeq::Format* f : {&fmts::fp32, &fmts::bf16, &fmts::fp16, &fmts::tf32}) {
      for (numeq::Rounding r : {numeq::Rounding::nearest_even, numeq::Rounding::nearest_away,
                                numeq::Rounding::toward_zero, numeq::Rounding::upward, numeq::Rounding::downward}) {
        const cases::Op op = cases::matmul(a, b, nullptr, in, Cast{*f, r});
        if (r == numeq::Rounding::downward) {
          EXPECT_FALSE(op.reference_from_exact) << "downward: the sign of an exact zero is not in hi";
          continue;
        }
        ASSERT_TRUE(op.reference_from_exact);
        const reference::ExactValues ex = op.exact();
        const Array ref = op.reference();
        for (std::size_t i = 0; i < ref.size(); ++i) {
          const double got = op.reference_from_exact(ex.hi.data()[i], ex.lo.data()[i], 0).value();
          EXPECT_TRUE(got == ref.data()[i] && std::signbit(got) == std::signbit(ref.data()[i]))
              << in << " -> " << f->name << " " << numeq::to_string(r) << " element " << i << ": " << got << " vs "
              << ref.data()[i];
        }
      }
    }
  }
}

// The MPFR-certified ops (functions, softmax, log-softmax, layernorm, rmsnorm, attention) take
// their reference from the exact value where its neighbours round alike (Op::reference_values);
// the oracle is the op's own reference(), MPFR rounding straight into out. Data with exact zeros
// (constant rows: layernorm 0, log-softmax of one element 0), values on out's grid (softmax of
// equal elements: 1/4) and every deterministic rounding, so that the fallback is taken too.
TEST(Op, CertifiedReferenceFromTheExactValueEqualsMpfrs) {
  Array x = generate(cases::Distribution::normal, 21, fmts::bf16, {6, 4});
  for (std::size_t j = 0; j < 4; ++j) x(0, j) = 1.5, x(1, j) = j < 2 ? -2.0 : 2.0;  // constant; two values
  const Array one = generate(cases::Distribution::normal, 22, fmts::bf16, {3, 1});
  const Array q = generate(cases::Distribution::normal, 23, fmts::bf16, {3, 4});
  const Array k = generate(cases::Distribution::normal, 24, fmts::bf16, {5, 4});
  const Array v = generate(cases::Distribution::normal, 25, fmts::bf16, {5, 4});
  std::size_t from_exact = 0, whole = 0;
  for (const numeq::Format* f : {&fmts::bf16, &fmts::fp16, &fmts::fp32, &fmts::e4m3fn}) {
    for (numeq::Rounding r : {numeq::Rounding::nearest_even, numeq::Rounding::nearest_away, numeq::Rounding::toward_zero,
                              numeq::Rounding::upward, numeq::Rounding::downward, numeq::Rounding::odd}) {
      const Cast out{*f, r};
      const std::vector<cases::Op> ops = {
          cases::function(reference::Function::exp, x, "bf16", out),
          cases::function(reference::Function::tanh, x, "bf16", out),
          cases::softmax(x, -1, "bf16", out),
          cases::softmax(x, -1, "bf16", out, {}, true),
          cases::softmax(one, -1, "bf16", out, {}, true),
          cases::layernorm(x, nullptr, nullptr, 1e-5, "bf16", out),
          cases::rmsnorm(x, nullptr, nullptr, 1e-6, "bf16", out),
          cases::attention(q, k, v, nullptr, false, std::nullopt, "bf16", out),
      };
      for (const cases::Op& op : ops) {
        ASSERT_TRUE(op.reference_from_exact) << op.signature;
        const Array want = op.reference();  // MPFR into out, not through the exact value
        const Array& got = op.reference_values();
        ASSERT_EQ(got.shape(), want.shape());
        bool all = true;
        for (std::size_t i = 0; i < want.size(); ++i) {
          const double g = got.data()[i], w = want.data()[i];
          EXPECT_TRUE((std::isnan(g) && std::isnan(w)) || (g == w && std::signbit(g) == std::signbit(w)))
              << op.signature << " " << numeq::to_string(r) << " element " << i << ": " << g << " vs " << w;
          all = all && op.reference_from_exact(op.exact_values().hi.data()[i], 0, 0).has_value();
        }
        ++(all ? from_exact : whole);
      }
    }
  }
  // Both paths taken: most ops from the exact value, some (exact zeros under directed roundings) whole.
  EXPECT_GT(from_exact, 0u);
  EXPECT_GT(whole, 0u);
  // Stochastic rounding draws per element: always the op's own reference().
  EXPECT_FALSE(cases::softmax(x, -1, "bf16", Cast{fmts::bf16, numeq::Rounding::stochastic}).reference_from_exact);
}

}  // namespace

namespace {

// reference_at of the row-wise ops (softmax, log_softmax, layernorm, rmsnorm: each row alone) gives
// the whole reference's values at the elements asked, in their order; and reference_values(),
// which takes it for the few elements the enclosure leaves open, equals the whole reference.
// Oracle: reference(), the op's whole reference computed at once (reference::softmax ... into out).
TEST(Op, RowWiseReferenceAtIsTheWholeReferencesValues) {
  std::mt19937_64 rng(21);
  std::normal_distribution<double> normal(0, 3);
  Array x = Array::from_shape({64, 96});
  for (double& v : x) v = numeq::round_to_format(normal(rng), Cast{fmts::bf16});
  Array gamma = Array::from_shape({96});
  for (double& v : gamma) v = numeq::round_to_format(1 + 0.1 * normal(rng), Cast{fmts::bf16});
  const Cast out{fmts::bf16};
  const std::vector<cases::Op> ops{cases::softmax(x, -1, "bf16", out), cases::softmax(x, -1, "bf16", out, {}, true),
                                   cases::layernorm(x, &gamma, nullptr, 1e-5, "bf16", out),
                                   cases::rmsnorm(x, &gamma, nullptr, 1e-6, "bf16", out)};
  std::uniform_int_distribution<std::size_t> pick(0, x.size() - 1);
  for (const cases::Op& op : ops) {
    ASSERT_TRUE(op.reference_at) << op.signature;
    const Array whole = op.reference();
    std::vector<std::size_t> elements;
    for (int i = 0; i < 40; ++i) elements.push_back(pick(rng));
    const std::vector<double> at = op.reference_at(elements);
    ASSERT_EQ(at.size(), elements.size());
    for (std::size_t i = 0; i < elements.size(); ++i)
      EXPECT_EQ(at[i], whole.data()[elements[i]]) << op.signature << " element " << elements[i];
    const Array& kept = op.reference_values();
    for (std::size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(kept.data()[i], whole.data()[i]) << op.signature << " " << i;
  }
}

}  // namespace
