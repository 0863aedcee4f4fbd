#pragma once
// GoogleTest helpers for kernel test binaries: judge a kernel's output against an operation of
// the catalogue on a platform (numeq::cases::compare) and report the verdict in the failure
// message, worst elements included.
//
//   const auto op = numeq::cases::matmul(a, b, nullptr, "bf16", numeq::Cast{numeq::formats::fp32});
//   EXPECT_TRUE(numeq::testing::explained_by(device_output, op, "trainium.trn1"));
//   EXPECT_NUMEQ_EXPLAINED(device_output, op, "nvidia.h100");        // the same, as a macro
//   EXPECT_TRUE(numeq::testing::bit_exact_with(device_output, op, "nvidia.h100"));
//
// Header-only; needs <gtest/gtest.h> (it is not part of the numeq libraries, so linking numeq
// never pulls GoogleTest in).

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <string_view>

#include <xtensor/xarray.hpp>

#include "numeq/cases/op.hpp"
#include "numeq/cases/verdict.hpp"
#include "numeq/core/platform.hpp"

namespace numeq::testing {

// The verdict as text (cases::describe): verdict and tier, counts, where failures lie, worst elements.
using cases::describe;

// Success when the verdict's tier is options.accept or stronger (default: probabilistic).
inline ::testing::AssertionResult explained_by(const xt::xarray<double>& actual, const cases::Op& op,
                                               std::string_view platform, const cases::CompareOptions& options = {}) {
  const cases::Verdict v = cases::compare(actual, op, core::platform_by_name(platform), options);
  return (v.passed ? ::testing::AssertionSuccess() : ::testing::AssertionFailure())
         << describe(v);
}

// Success when `actual` equals the platform's emulation bit for bit (NaNs alike, zeros by sign).
inline ::testing::AssertionResult bit_exact_with(const xt::xarray<double>& actual, const cases::Op& op,
                                                 std::string_view platform) {
  cases::CompareOptions o;
  o.accept = cases::Tier::bit_exact;
  const cases::Verdict v = cases::compare(actual, op, core::platform_by_name(platform), o);
  return (v.passed ? ::testing::AssertionSuccess() : ::testing::AssertionFailure())
         << describe(v);
}

}  // namespace numeq::testing

#define EXPECT_NUMEQ_EXPLAINED(actual, op, platform) EXPECT_TRUE(::numeq::testing::explained_by((actual), (op), (platform)))
#define ASSERT_NUMEQ_EXPLAINED(actual, op, platform) ASSERT_TRUE(::numeq::testing::explained_by((actual), (op), (platform)))
