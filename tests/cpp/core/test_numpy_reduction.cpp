// Reductions over several axes (gather_reduced, normalise_axes) against index loops written here,
// and numpy_reduction's order against what numpy 2.4's iterator does for simple layouts, read
// from its source (numpy/_core/src/multiarray/nditer_constr.c; the bit-for-bit checks against
// numpy itself are in tests/python/test_numpy_order.py), and float32 host loops in that order.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/core/evaluate.hpp"
#include "numeq/core/numpy_reduction.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"

namespace {

namespace core = numeq::core;
namespace formats = numeq::formats;

TEST(GatherReduced, KeptAxesFirstThenTheReducedAxesInTheGivenOrder) {
  xt::xarray<double> x = xt::xarray<double>::from_shape({2, 3, 4});
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<double>(i);
  const xt::xarray<double> g = core::gather_reduced(x, {2, 0});
  ASSERT_EQ(g.dimension(), 2u);
  EXPECT_EQ(g.shape()[0], 3u);
  EXPECT_EQ(g.shape()[1], 8u);
  for (std::size_t j = 0; j < 3; ++j)
    for (std::size_t k = 0; k < 4; ++k)      // axis 2 outermost
      for (std::size_t i = 0; i < 2; ++i)    // axis 0 innermost
        EXPECT_EQ(g(j, k * 2 + i), x(i, j, k));
  const xt::xarray<double> none = core::gather_reduced(x, {});
  EXPECT_EQ(none.dimension(), 4u);
  EXPECT_EQ(none.shape()[3], 1u);
  EXPECT_THROW(core::gather_reduced(x, {1, 1}), numeq::error);
}

TEST(NormaliseAxes, NegativeAxesCountFromTheEndAndErrorsNameTheParameter) {
  EXPECT_EQ(core::normalise_axes({-1, 0}, 3), (std::vector<std::size_t>{2, 0}));
  try {
    core::normalise_axes({3}, 3);
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("axis: 3 is out of range"), std::string::npos) << e.what();
  }
  try {
    core::normalise_axes({1, -2}, 3);
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("given more than once"), std::string::npos) << e.what();
  }
}

// numpy's float32 loop over a row of terms from +0, one addition each (the kept-axis-innermost
// case: loops_arithm_fp.dispatch.c.src adds out[j] += x[i, j] call after call).
float host_chain(const std::vector<float>& terms) {
  float acc = 0.0f;
  for (const float t : terms) acc += t;
  return acc;
}

TEST(NumpyReduction, KeptInnermostAxisAddsElementByElement) {
  // C order (4, 5): axis 1 has the smaller stride, so it is innermost and kept when summing axis 0.
  const core::ReductionOrder r = core::numpy_reduction({4, 5}, {20, 4}, {0}, formats::fp32, formats::fp32);
  EXPECT_EQ(r.axes, (std::vector<std::size_t>{0}));
  std::mt19937 g(3);
  std::normal_distribution<float> d(0.0f, 1000.0f);
  xt::xarray<double> x = xt::xarray<double>::from_shape({4, 5});
  for (double& v : x) v = static_cast<double>(d(g) * static_cast<float>(1 << (g() % 20)));
  const xt::xarray<double> s = core::sum(core::gather_reduced(x, r.axes), -1, r.plan);
  for (std::size_t j = 0; j < 5; ++j) {
    std::vector<float> col;
    for (std::size_t i = 0; i < 4; ++i) col.push_back(static_cast<float>(x(i, j)));
    EXPECT_EQ(s(j), static_cast<double>(host_chain(col)));
  }
}

TEST(NumpyReduction, StridesDecideTheOrderOfReducedAxes) {
  // Fortran order (4, 5, 6): axis 0 innermost, so over axes (0, 2) the terms run axis 2 outermost.
  EXPECT_EQ(core::numpy_reduction({4, 5, 6}, {4, 16, 80}, {0, 2}, formats::fp32, formats::fp32).axes,
            (std::vector<std::size_t>{2, 0}));
  EXPECT_EQ(core::numpy_reduction({4, 5, 6}, {120, 24, 4}, {2, 0}, formats::fp32, formats::fp32).axes,
            (std::vector<std::size_t>{0, 2}));
  // Negative strides are not flipped (NPY_ITER_DONT_NEGATE_STRIDES): |stride| orders the axes.
  EXPECT_EQ(core::numpy_reduction({4, 5}, {-4, 16}, {0, 1}, formats::fp32, formats::fp32).axes,
            (std::vector<std::size_t>{1, 0}));
}

TEST(NumpyReduction, ACastCopiesThroughTheBufferInRunsOfBufsize) {
  // np.sum(float16 array, dtype=float32) of 20000 contiguous terms: runs of 8192, 8192, 3616.
  const core::ReductionOrder r = core::numpy_reduction({20000}, {2}, {0}, formats::fp16, formats::fp32);
  EXPECT_EQ(r.plan.reduction.kind, core::NodeKind::chunked);
  EXPECT_EQ(r.plan.reduction.chunk, 8192u);
  // Without a cast the contiguous run is summed pairwise in one call.
  EXPECT_EQ(core::numpy_reduction({20000}, {2}, {0}, formats::fp16, formats::fp16).plan.reduction.kind,
            core::NodeKind::split);  // float16: half(float(0) + pairwise): one part through fp16
  EXPECT_EQ(core::numpy_reduction({20000}, {4}, {0}, formats::fp32, formats::fp32).plan.reduction.kind,
            core::NodeKind::pairwise);
}

TEST(NumpyReduction, ErrorsNameTheParameter) {
  const auto message = [](auto f) {
    try {
      f();
    } catch (const numeq::error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message([] { core::numpy_reduction({2, 3}, {3}, {0}, formats::fp32, formats::fp32); }).rfind("strides:", 0), 0u);
  EXPECT_EQ(message([] { core::numpy_reduction({2, 3}, {3, 1}, {0}, formats::fp32, formats::bf16); }).rfind("compute:", 0), 0u);
  EXPECT_EQ(message([] { core::numpy_reduction({2, 3}, {3, 1}, {2}, formats::fp32, formats::fp32); }).rfind("axis:", 0), 0u);
}

}  // namespace
