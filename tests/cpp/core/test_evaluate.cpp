// The plan evaluator: its one addition (add_rounded) against MPFR, the leaf and tree nodes against
// plain host loops written here, cuda_core.fp32 against a std::fma loop, integer accumulators,
// empty reductions and the errors. matmul's host kernels against the walk: test_matmul.cpp.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cfloat>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <random>
#include <vector>

#include <mpfr.h>
#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>

#include "numeq/core/bound.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/core/fused.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/round_and_pack.hpp"
#include "oracle/mpfr_oracle.hpp"

#include "evaluate_test_support.hpp"

namespace {

using namespace evaluate_test;  // Cast, Rounding, core, formats, random_value, plan_of

TEST(AddRounded, MatchesMpfrInEveryFormatAndMode) {
  std::mt19937_64 g(11);
  mpfr_t exact;
  mpfr_init2(exact, 2300);
  std::size_t checked = 0;
  for (const numeq::Format* f : formats::all) {
    if (f->kind != numeq::FormatKind::floating) continue;
    numeq_oracle::RoundOracle oracle(*f);
    for (int r = 0; r < 6; ++r) {
      for (const auto overflow : {numeq::Overflow::ieee, numeq::Overflow::saturate}) {
        const Cast cast{*f, static_cast<Rounding>(r), overflow};
        for (int i = 0; i < 400; ++i) {
          double x = random_value(g), y = random_value(g);
          if (i % 7 == 0) y = -x * (1 + std::ldexp(1.0, -20));  // near-cancellation
          if (i % 11 == 0) y = std::ldexp(y, -60);               // far apart: sticky bits only
          mpfr_set_d(exact, x, MPFR_RNDN);
          mpfr_add_d(exact, exact, y, MPFR_RNDN);  // exact at 2300 bits
          if (mpfr_zero_p(exact)) continue;         // zero signs: tested below
          const double want = oracle.cast_value(exact, cast).value;
          const double got = core::add_rounded(x, y, cast);
          ASSERT_TRUE(numeq_oracle::same_value(got, want))
              << f->name << " " << numeq::to_string(cast.rounding) << ": " << numeq_oracle::describe(x) << " + "
              << numeq_oracle::describe(y) << " gave " << numeq_oracle::describe(got) << ", MPFR " << numeq_oracle::describe(want);
          ++checked;
        }
      }
    }
  }
  mpfr_clear(exact);
  std::printf("[ add_rounded ] %zu sums compared with MPFR\n", checked);
}

TEST(AddRounded, SumsOfFormatValuesToNearestEvenMatchMpfr) {
  // Both operands values of the format (a narrow accumulator adding its own values and rounded
  // products): exact double sums at every distance from the format's ties, overflow and the
  // subnormal range, where the evaluator's integer nearest-even shortcut must agree with MPFR.
  std::mt19937_64 g(23);
  mpfr_t exact;
  mpfr_init2(exact, 2300);
  std::size_t checked = 0;
  for (const numeq::Format* f : formats::all) {
    if (f->kind != numeq::FormatKind::floating || f->bits() > 16) continue;
    numeq_oracle::RoundOracle oracle(*f);
    std::uniform_int_distribution<std::uint64_t> pattern(0, (std::uint64_t{1} << f->bits()) - 1);
    for (const auto overflow : {numeq::Overflow::ieee, numeq::Overflow::saturate}) {
      const Cast cast{*f, Rounding::nearest_even, overflow};
      for (int i = 0; i < 20000; ++i) {
        const double x = numeq::decode_bits(*f, pattern(g)), y0 = numeq::decode_bits(*f, pattern(g));
        const double y = i % 3 == 0 ? y0 * 0.5 : y0;  // a half-quantum apart: ties
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        mpfr_set_d(exact, x, MPFR_RNDN);
        mpfr_add_d(exact, exact, y, MPFR_RNDN);
        if (mpfr_zero_p(exact)) continue;
        const double want = oracle.cast_value(exact, cast).value;
        const double got = core::add_rounded(x, y, cast);
        ASSERT_TRUE(numeq_oracle::same_value(got, want))
            << f->name << ": " << numeq_oracle::describe(x) << " + " << numeq_oracle::describe(y) << " gave "
            << numeq_oracle::describe(got) << ", MPFR " << numeq_oracle::describe(want);
        ++checked;
      }
    }
  }
  mpfr_clear(exact);
  std::printf("[ add_rounded ] %zu sums of format values compared with MPFR\n", checked);
}

TEST(AddRounded, ZeroSignsFollowIeee) {
  const Cast nearest{formats::fp32};
  const Cast down{formats::fp32, Rounding::downward};
  EXPECT_FALSE(std::signbit(core::add_rounded(1.5, -1.5, nearest)));
  EXPECT_TRUE(std::signbit(core::add_rounded(1.5, -1.5, down)));
  EXPECT_TRUE(std::signbit(core::add_rounded(-0.0, -0.0, nearest)));
  EXPECT_FALSE(std::signbit(core::add_rounded(-0.0, 0.0, nearest)));
  EXPECT_TRUE(std::signbit(core::add_rounded(-0.0, 0.0, down)));
  EXPECT_TRUE(std::isnan(core::add_rounded(INFINITY, -INFINITY, nearest)));
  // Overflow of the exact sum past binary64's range still rounds correctly in fp64.
  EXPECT_EQ(core::add_rounded(DBL_MAX, DBL_MAX, Cast{formats::fp64, Rounding::toward_zero}), DBL_MAX);
  EXPECT_TRUE(std::isinf(core::add_rounded(DBL_MAX, DBL_MAX, Cast{formats::fp64})));
}


TEST(Evaluate, SequentialFp32IsAFloatLoop) {
  std::mt19937_64 g(3);
  const core::Arithmetic f32{Cast{formats::fp32}};
  for (std::size_t n = 1; n < 300; n += 7) {
    std::vector<double> x(n);
    float want = 0;
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = random_value(g);
      want = i == 0 ? static_cast<float>(x[i]) : want + static_cast<float>(x[i]);
    }
    EXPECT_EQ(core::evaluate(x, {}, std::nullopt, plan_of(core::sequential(f32))), static_cast<double>(want)) << n;
  }
}

TEST(Evaluate, LanesAndPairwiseFollowNumpysLoop) {
  // numpy's pairwise_sum, written out here with floats: n < 8 from 0; else 8 lanes, combined
  // ((0+1)+(2+3))+((4+5)+(6+7)), tail in order; above 128, halves at a multiple of 8.
  std::function<float(const float*, std::size_t)> numpy_sum = [&](const float* a, std::size_t n) -> float {
    if (n < 8) {
      float res = 0;
      for (std::size_t i = 0; i < n; ++i) res += a[i];
      return res;
    }
    if (n <= 128) {
      float r[8];
      for (int j = 0; j < 8; ++j) r[j] = a[j];
      std::size_t i = 8;
      for (; i < n - n % 8; i += 8)
        for (int j = 0; j < 8; ++j) r[j] += a[i + static_cast<std::size_t>(j)];
      float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
      for (; i < n; ++i) res += a[i];
      return res;
    }
    std::size_t n2 = n / 2;
    n2 -= n2 % 8;
    return numpy_sum(a, n2) + numpy_sum(a + n2, n - n2);
  };
  const core::Plan numpy = core::plan_for(core::platform_by_name("numpy"), core::Operation::sum, "fp32", "fp32");
  std::mt19937_64 g(5);
  for (std::size_t n : {1u, 2u, 7u, 8u, 9u, 15u, 16u, 17u, 127u, 128u, 129u, 255u, 1000u, 4097u, 70001u}) {
    std::vector<float> xf(n);
    std::vector<double> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = xf[i] = static_cast<float>(random_value(g));
    const float want = 0.0f + numpy_sum(xf.data(), n);
    EXPECT_EQ(core::evaluate(x, {}, std::nullopt, numpy), static_cast<double>(want)) << n;
  }
}

TEST(Evaluate, TreeAndSplit) {
  const core::Arithmetic f32{Cast{formats::fp32}};
  const std::vector<double> x{1.0, 0x1p-24, 0x1p-24, 0x1p-24, 1.0, 0x1p-25};
  // tree(2): ((x0 + x1) + (x2 + x3)) + (x4 + x5), in floats
  const float f0 = 1.0f, f1 = 0x1p-24f;
  const float want_tree = ((f0 + f1) + (f1 + f1)) + (f0 + 0x1p-25f);
  EXPECT_EQ(core::evaluate(x, {}, std::nullopt, plan_of(core::tree(2, f32))), static_cast<double>(want_tree));
  // split into 2 serial parts through bf16: the first partial is rounded to bf16 before the second continues.
  const core::Plan serial = plan_of(core::split(2, core::SplitMode::serial, Cast{formats::bf16}, core::sequential(f32)));
  const float part1 = ((f0 + f1) + f1);
  const auto through = static_cast<float>(numeq_oracle::round_oracle(part1, Cast{formats::bf16}).value);
  const float want_serial = ((through + f1) + f0) + 0x1p-25f;
  const double got_serial = core::evaluate(x, {}, std::nullopt, serial);
  const double rounded_serial = numeq_oracle::round_oracle(want_serial, Cast{formats::bf16}).value;
  EXPECT_EQ(got_serial, rounded_serial);
}

TEST(Evaluate, CudaCoreFp32IsAnFmaLoop) {
  const core::Platform cuda = core::platform_by_name("cuda_core.fp32");
  const core::Plan plan = core::plan_for(cuda, core::Operation::dot, "fp32", "fp32");
  std::mt19937_64 g(9);
  for (std::size_t n = 1; n < 400; n += 13) {
    std::vector<double> a(n), b(n);
    float acc = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = random_value(g);
      b[i] = random_value(g);
      acc = std::fma(static_cast<float>(a[i]), static_cast<float>(b[i]), acc);
    }
    const float c = static_cast<float>(random_value(g));
    EXPECT_EQ(core::evaluate(a, b, static_cast<double>(c), plan), static_cast<double>(acc + c)) << n;
  }
}

TEST(Evaluate, Int32AccumulatorsAreExactAndRefuseOverflow) {
  // An int8 GEMM accumulates in int32: products of int8 values summed exactly ...
  core::Plan plan = plan_of(core::sequential(core::Arithmetic{Cast{formats::int32}}, true), Cast{formats::int32});
  std::vector<double> a(1000, -128.0), b(1000, 127.0);
  EXPECT_EQ(core::evaluate(a, b, std::nullopt, plan), -128.0 * 127.0 * 1000);
  // ... and a K whose partial sums leave int32 is an error, not a wrapped value.
  std::vector<double> big(140000, -128.0), other(140000, -128.0);
  try {
    core::evaluate(big, other, std::nullopt, plan);
    FAIL() << "int32 overflow not detected";
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("int32 accumulator overflows"), std::string::npos) << e.what();
  }
}

TEST(Evaluate, ErrorsNameTheArgument) {
  const core::Plan plan = core::plan_for(core::platform_by_name("cuda_core.fp32"), core::Operation::matmul, "fp32", "fp32");
  const xt::xarray<double> a = xt::zeros<double>({3, 4}), b = xt::zeros<double>({5, 2});
  try {
    core::matmul(a, b, nullptr, plan);
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("b:", 0), 0u) << e.what();
  }
  const std::vector<double> wide{1.0 + 0x1p-40}, other{1.0 + 0x1p-30};
  EXPECT_THROW(core::evaluate(wide, other, std::nullopt, plan), numeq::error);  // product not exact in binary64
  try {
    core::platform_by_name("nvidia.x999");
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda_core.fp32"), std::string::npos) << e.what();
  }
  try {
    core::plan_for(core::platform_by_name("numpy"), core::Operation::matmul, "fp32", "fp32");
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("in_fmt:", 0), 0u) << e.what();
  }
}

// K = 0 is a valid matmul and dot product: no products, so the result is c as the platform
// places it (c here holds small integers, exact in every output format, so any placement and cast
// leave them unchanged) or, without c, +0 (numpy: np.zeros((8, 0)) @ np.zeros((0, 16)) is all
// +0). It once crashed cuda_core.fp32 and trainium.trn2 (SIGSEGV) and refused nvidia.h100. The
// bound walker has nothing to bound: 0. Every built-in platform, every matmul and dot plan;
// sums over an empty axis likewise give +0.
TEST(Evaluate, EmptyReductionsGiveCOrZero) {
  std::size_t checked = 0;
  for (const std::string& name : core::platform_names()) {
    const core::Platform platform = core::platform_by_name(name);
    for (const core::PlanEntry& e : platform.plans) {
      const std::string what = name + " " + std::string(core::to_string(e.op)) + " " + e.in_fmt + " -> " + e.out_fmt;
      if (e.op == core::Operation::sum) {
        const xt::xarray<double> x = xt::zeros<double>({std::size_t{3}, std::size_t{0}});
        const xt::xarray<double> r = core::sum(x, 1, e.plan);
        ASSERT_EQ(r.size(), 3u) << what;
        for (const double v : r) EXPECT_TRUE(v == 0 && !std::signbit(v)) << what << ": " << v;
        const xt::xarray<double> w = core::sum_bound(x, 1, e.plan, r);
        for (const double v : w) EXPECT_EQ(v, 0.0) << what;
        ++checked;
        continue;
      }
      const xt::xarray<double> a = xt::zeros<double>({std::size_t{8}, std::size_t{0}});
      const xt::xarray<double> b = xt::zeros<double>({std::size_t{0}, std::size_t{16}});
      xt::xarray<double> c = xt::zeros<double>({std::size_t{8}, std::size_t{16}});
      for (std::size_t i = 0; i < c.size(); ++i) c.data()[i] = (i % 3 == 0) ? 1.0 : (i % 3 == 1 ? -2.0 : 3.0);  // integers: int32 accumulators take them
      const xt::xarray<double> plain = core::matmul(a, b, nullptr, e.plan);
      ASSERT_EQ(plain.size(), 8u * 16u) << what;
      for (const double v : plain) EXPECT_TRUE(v == 0 && !std::signbit(v)) << what << ": " << v;
      const xt::xarray<double> with_c = core::matmul(a, b, &c, e.plan);
      for (std::size_t i = 0; i < c.size(); ++i) EXPECT_EQ(with_c.data()[i], c.data()[i]) << what << " at " << i;
      for (const double v : core::matmul_bound(a, b, nullptr, e.plan, plain)) EXPECT_EQ(v, 0.0) << what;
      const xt::xarray<double> da = xt::zeros<double>({std::size_t{5}, std::size_t{0}});
      const xt::xarray<double> dots = core::dot(da, da, nullptr, e.plan);
      ASSERT_EQ(dots.size(), 5u) << what;
      for (const double v : dots) EXPECT_TRUE(v == 0 && !std::signbit(v)) << what << ": " << v;
      for (const double v : core::dot_bound(da, da, nullptr, e.plan, dots)) EXPECT_EQ(v, 0.0) << what;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20u);
}

}  // namespace
