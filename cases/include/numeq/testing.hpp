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
#include "numeq/core/platform.hpp"

namespace numeq::testing {

// The verdict as text: the first line says pass or fail and why, then counts and worst elements.
inline std::string describe(const cases::Verdict& v) {
  std::ostringstream s;
  s.precision(17);
  s << (v.passed ? "PASS: " : "FAIL: ") << v.diagnosis << "\n  elements " << v.elements << ", bit-exact "
    << v.bit_exact << ", within bound " << v.within_bound << ", violations " << v.violations
    << "; bound as tolerance: rtol " << v.tolerance.rtol << " atol " << v.tolerance.atol << ", max "
    << v.tolerance.max_ulps << " ulps";
  for (const cases::WorstElement& w : v.worst) {
    s << "\n  " << (w.violation ? "! [" : "  [");
    for (std::size_t d = 0; d < w.index.size(); ++d) s << (d ? "," : "") << w.index[d];
    s << "] got " << w.got << ", emulated " << w.emulated << ", reference " << w.reference << ", bound " << w.bound
      << ", error " << w.error << ", " << w.ulps << " ulps";
  }
  return s.str();
}

// Success when every element of `actual` lies within the platform's bound of the exact result.
inline ::testing::AssertionResult explained_by(const xt::xarray<double>& actual, const cases::Op& op,
                                               std::string_view platform, const cases::CompareOptions& options = {}) {
  const cases::Verdict v = cases::compare(actual, op, core::platform_by_name(platform), options);
  return (v.passed ? ::testing::AssertionSuccess() : ::testing::AssertionFailure())
         << op.signature << " on " << platform << ": " << describe(v);
}

// Success when `actual` equals the platform's emulation bit for bit (NaNs alike, zeros by sign).
inline ::testing::AssertionResult bit_exact_with(const xt::xarray<double>& actual, const cases::Op& op,
                                                 std::string_view platform) {
  const cases::Verdict v = cases::compare(actual, op, core::platform_by_name(platform));
  return (v.bit_exact == v.elements ? ::testing::AssertionSuccess() : ::testing::AssertionFailure())
         << op.signature << " on " << platform << ": " << describe(v);
}

}  // namespace numeq::testing

#define EXPECT_NUMEQ_EXPLAINED(actual, op, platform) EXPECT_TRUE(::numeq::testing::explained_by((actual), (op), (platform)))
#define ASSERT_NUMEQ_EXPLAINED(actual, op, platform) ASSERT_TRUE(::numeq::testing::explained_by((actual), (op), (platform)))
