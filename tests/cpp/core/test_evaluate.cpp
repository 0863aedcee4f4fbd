// The plan evaluator: its one addition (add_rounded) against MPFR, the leaf and tree nodes against
// plain host loops written here, cuda_core.fp32 against a std::fma loop, thread independence,
// and the errors.

#include <gtest/gtest.h>

#include <cmath>
#include <cfloat>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <mpfr.h>
#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>

#include "numeq/core/evaluate.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "oracle/mpfr_oracle.hpp"

namespace {

using numeq::Cast;
using numeq::Rounding;
namespace core = numeq::core;
namespace formats = numeq::formats;

// Doubles spread over many binades, values of fp32 (so that sums land near every format's range).
double random_value(std::mt19937_64& g) {
  std::uniform_int_distribution<int> e(-30, 30);
  std::normal_distribution<double> n;
  const double v = std::ldexp(n(g), e(g));
  return static_cast<double>(static_cast<float>(v));
}

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

core::Plan plan_of(core::PlanNode node, const Cast& out = Cast{formats::fp32}) {
  core::Plan p;
  p.reduction = std::move(node);
  p.output = out;
  return p;
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

TEST(Evaluate, MatmulDoesNotDependOnThreads) {
  std::mt19937_64 g(21);
  xt::xarray<double> a = xt::xarray<double>::from_shape({2, 17, 33}), b = xt::xarray<double>::from_shape({33, 9});
  for (double& v : a) v = random_value(g);
  for (double& v : b) v = random_value(g);
  const core::Plan plan = core::plan_for(core::platform_by_name("cuda_core.fp32"), core::Operation::matmul, "fp32", "fp32");
  numeq::set_num_threads(1);
  const xt::xarray<double> one = core::matmul(a, b, nullptr, plan);
  numeq::set_num_threads(2);
  const xt::xarray<double> two = core::matmul(a, b, nullptr, plan);
  numeq::set_num_threads(0);
  ASSERT_EQ(one.shape(), two.shape());
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one.data()[i], two.data()[i]);
  // and element (1, 3, 4) is the fma chain of row 3 of matrix 1 with column 4
  float acc = 0;
  for (std::size_t k = 0; k < 33; ++k) acc = std::fma(static_cast<float>(a(1, 3, k)), static_cast<float>(b(k, 4)), acc);
  EXPECT_EQ(one(1, 3, 4), static_cast<double>(acc));
  // With c (broadcast along rows): the matmul's host-fma path against the evaluator's generic
  // walk of the same plan, element by element.
  xt::xarray<double> c = xt::xarray<double>::from_shape({9});
  for (double& v : c) v = random_value(g);
  const xt::xarray<double> with_c = core::matmul(a, b, &c, plan);
  for (std::size_t t = 0; t < 2; ++t)
    for (std::size_t m = 0; m < 17; ++m)
      for (std::size_t n = 0; n < 9; ++n) {
        std::vector<double> row(33), col(33);
        for (std::size_t k = 0; k < 33; ++k) {
          row[k] = a(t, m, k);
          col[k] = b(k, n);
        }
        ASSERT_EQ(with_c(t, m, n), core::evaluate(row, col, c(n), plan)) << t << " " << m << " " << n;
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

}  // namespace
