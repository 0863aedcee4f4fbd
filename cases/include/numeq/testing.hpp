#pragma once
// GoogleTest helpers for kernel test binaries: judge a kernel's output against an operation of
// the catalogue on a platform (numeq::cases::compare, the verdict ladder of verdict.hpp) and
// report the verdict in the failure message, worst elements included.
//
// Matchers (GoogleMock; the failure message is cases::describe(verdict), Python's str(verdict)):
//   const auto op = numeq::cases::matmul(a, b, nullptr, "bf16", numeq::Cast{numeq::formats::fp32});
//   EXPECT_THAT(out, numeq::testing::IsExplainedBy(op, "trainium.trn2"));   // probabilistic or stronger
//   EXPECT_THAT(out, IsExplainedBy(op, "trainium.trn2", numeq::cases::Tier::variant));
//   EXPECT_THAT(out, IsBitExactWith(op, "nvidia.h100"));
//   EXPECT_THAT(trainium_out, IsPortOf(gpu_out, op, "nvidia.h100", "trainium.trn2"));
// Each takes an optional cases::CompareOptions (or just the accepted Tier). The output may be an
// xtensor expression of any arithmetic value type (xt::xarray<float>, xt::xtensor<double, 2>, ...),
// whose shape must be the op's result shape, or a flat range of arithmetic values
// (std::vector<float>, std::span<const double>, ...) in C order, which is read in the result's
// shape (finding that shape costs one exact evaluation of the op; pass an xtensor expression to
// avoid it). Platform names are resolved when the matcher is made (core::platform_by_name): an
// unknown name throws numeq::error naming `platform` and listing the valid ones.
//
// AssertionResult helpers and macros (the same checks for EXPECT_TRUE):
//   EXPECT_TRUE(numeq::testing::explained_by(device_output, op, "trainium.trn1"));
//   EXPECT_NUMEQ_EXPLAINED(device_output, op, "nvidia.h100");        // the same, as a macro
//   EXPECT_TRUE(numeq::testing::bit_exact_with(device_output, op, "nvidia.h100"));
//
// Header-only; needs GoogleTest and GoogleMock (<gmock/gmock.h>, CMake target GTest::gmock). It is
// not part of the numeq libraries, so linking numeq never pulls GoogleTest in.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <ostream>
#include <ranges>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xexpression.hpp>
#include <xtensor/xoperation.hpp>

#include "numeq/cases/op.hpp"
#include "numeq/cases/port.hpp"
#include "numeq/cases/verdict.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/error.hpp"

namespace numeq::testing {

// The verdict as text (cases::describe): verdict and tier, counts, where failures lie, worst elements.
using cases::describe;

namespace detail {

template <class T>
concept arithmetic_range = std::ranges::input_range<T> && std::is_arithmetic_v<std::ranges::range_value_t<T>>;

// `actual` as float64 values of the op's result shape (see the header comment). Values of
// float, int, ... convert to double exactly (every format numeq emulates fits in binary64).
template <class T>
xt::xarray<double> as_result(const T& actual, const cases::Op& op) {
  if constexpr (xt::is_xexpression<T>::value) {
    return xt::xarray<double>(xt::cast<double>(actual));
  } else if constexpr (arithmetic_range<T>) {
    std::vector<double> values;
    for (const auto& x : actual) values.push_back(static_cast<double>(x));
    const auto shape = op.exact().hi.shape();
    std::size_t size = 1;
    for (const std::size_t n : shape) size *= n;
    if (values.size() != size)
      throw numeq::error("actual: " + std::to_string(values.size()) + " values, but the result of " + op.signature +
                         " holds " + std::to_string(size));
    // xt::xarray's default layout is row-major: C order, as the values come.
    xt::xarray<double> result = xt::xarray<double>::from_shape(shape);
    std::copy(values.begin(), values.end(), result.data());
    return result;
  } else {
    static_assert(arithmetic_range<T>,
                  "numeq::testing: the output must be an xtensor expression or a range of arithmetic values");
    return {};
  }
}

// An xt::xarray<double> is judged as it is (no copy).
inline const xt::xarray<double>& as_result(const xt::xarray<double>& actual, const cases::Op&) { return actual; }

inline std::string tier_phrase(const cases::CompareOptions& options) {
  std::string s = "(";
  s += cases::to_string(options.accept);
  s += options.accept == cases::Tier::bit_exact ? ")" : " or stronger)";
  return s;
}

// IsExplainedBy / IsBitExactWith: compare() against one platform.
class VerdictMatcher {
 public:
  VerdictMatcher(const cases::Op& op, std::string_view platform, const cases::CompareOptions& options, bool bit_exact)
      : op_(std::make_shared<const cases::Op>(op)),
        platform_(std::make_shared<const core::Platform>(core::platform_by_name(platform))),
        options_(options),
        bit_exact_(bit_exact) {
    if (bit_exact_) options_.accept = cases::Tier::bit_exact;
  }

  template <class T>
  bool MatchAndExplain(const T& actual, ::testing::MatchResultListener* listener) const {
    const cases::Verdict v = cases::compare(as_result(actual, *op_), *op_, *platform_, options_);
    *listener << cases::describe(v);
    return v.passed;
  }

  void DescribeTo(std::ostream* os) const { *os << what(true); }
  void DescribeNegationTo(std::ostream* os) const { *os << what(false); }

 private:
  std::string what(bool positive) const {
    const std::string is = positive ? "is " : "is not ";
    if (bit_exact_) return is + "bit-exact with " + platform_->name + "'s " + op_->signature;
    return is + "explained by " + platform_->name + " " + tier_phrase(options_) + " as " + op_->signature;
  }

  std::shared_ptr<const cases::Op> op_;  // shared: gmock copies matchers freely
  std::shared_ptr<const core::Platform> platform_;
  cases::CompareOptions options_;
  bool bit_exact_;
};

// IsPortOf: compare_port() of a GPU output (held) and the Trainium output matched.
class PortMatcher {
 public:
  PortMatcher(xt::xarray<double> gpu, const cases::Op& op, std::string_view gpu_platform,
              std::string_view trainium_platform, const cases::CompareOptions& options)
      : gpu_(std::make_shared<const xt::xarray<double>>(std::move(gpu))),
        op_(std::make_shared<const cases::Op>(op)),
        gpu_platform_(std::make_shared<const core::Platform>(core::platform_by_name(gpu_platform, "gpu_platform"))),
        trainium_platform_(
            std::make_shared<const core::Platform>(core::platform_by_name(trainium_platform, "trainium_platform"))),
        options_(options) {}

  template <class T>
  bool MatchAndExplain(const T& trainium, ::testing::MatchResultListener* listener) const {
    const cases::PortVerdict v =
        cases::compare_port(*gpu_, as_result(trainium, *op_), *op_, *gpu_platform_, *trainium_platform_, options_);
    *listener << cases::describe(v);
    return v.passed;
  }

  void DescribeTo(std::ostream* os) const { *os << what(true); }
  void DescribeNegationTo(std::ostream* os) const { *os << what(false); }

 private:
  std::string what(bool positive) const {
    return std::string(positive ? "is " : "is not ") + "a port to " + trainium_platform_->name + " of the " +
           gpu_platform_->name + " output of " + op_->signature + ": each explained by its platform " +
           tier_phrase(options_) + ", their difference within the cross-platform bound";
  }

  std::shared_ptr<const xt::xarray<double>> gpu_;
  std::shared_ptr<const cases::Op> op_;
  std::shared_ptr<const core::Platform> gpu_platform_, trainium_platform_;
  cases::CompareOptions options_;
};

inline cases::CompareOptions accepting(cases::Tier accept) {
  cases::CompareOptions o;
  o.accept = accept;
  return o;
}

}  // namespace detail

// Matches an output whose verdict against `platform` is options.accept or stronger (default:
// probabilistic). The explanation is the verdict's message, pass or fail.
inline ::testing::PolymorphicMatcher<detail::VerdictMatcher> IsExplainedBy(const cases::Op& op, std::string_view platform,
                                                                           const cases::CompareOptions& options = {}) {
  return ::testing::MakePolymorphicMatcher(detail::VerdictMatcher(op, platform, options, false));
}
inline ::testing::PolymorphicMatcher<detail::VerdictMatcher> IsExplainedBy(const cases::Op& op, std::string_view platform,
                                                                           cases::Tier accept) {
  return IsExplainedBy(op, platform, detail::accepting(accept));
}

// Matches an output equal to the platform's emulation bit for bit (NaNs alike, zeros by sign).
// options.accept is ignored (always bit_exact); the rest (variant search for the message's
// nearest variant, how many worst elements) applies.
inline ::testing::PolymorphicMatcher<detail::VerdictMatcher> IsBitExactWith(const cases::Op& op, std::string_view platform,
                                                                            const cases::CompareOptions& options = {}) {
  return ::testing::MakePolymorphicMatcher(detail::VerdictMatcher(op, platform, options, true));
}

// Matches a Trainium output that is a port of `gpu_output` (cases::compare_port): each output
// explained by its own platform at options.accept or stronger, and their difference within the
// cross-platform bound. gpu_output converts as the matched output does.
template <class G>
::testing::PolymorphicMatcher<detail::PortMatcher> IsPortOf(const G& gpu_output, const cases::Op& op,
                                                            std::string_view gpu_platform,
                                                            std::string_view trainium_platform,
                                                            const cases::CompareOptions& options = {}) {
  return ::testing::MakePolymorphicMatcher(
      detail::PortMatcher(xt::xarray<double>(detail::as_result(gpu_output, op)), op, gpu_platform, trainium_platform, options));
}
template <class G>
::testing::PolymorphicMatcher<detail::PortMatcher> IsPortOf(const G& gpu_output, const cases::Op& op,
                                                            std::string_view gpu_platform,
                                                            std::string_view trainium_platform, cases::Tier accept) {
  return IsPortOf(gpu_output, op, gpu_platform, trainium_platform, detail::accepting(accept));
}

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
