// Where a bound comes from (cases/bound_source.hpp). Oracles: the per-element bound of the op's
// emulation (the blocked GEMM bound walker, another code path than the one-element shares), and
// Higham's closed-form bound of recursive summation, (n - 1) u sum_k |a_k b_k| for n additions in
// a row (Higham 2002, s3.1; a chunked sum adds within a chunk, then the chunks), against the
// output format's half ulp, computed here from the data alone.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "numeq/cases/bound_source.hpp"
#include "numeq/cases/generators.hpp"
#include "numeq/cases/op.hpp"
#include "numeq/cases/verdict.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/cast.hpp"

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
namespace fmts = numeq::formats;
using numeq::Cast;
using Array = xt::xarray<double>;

Array generate(std::uint64_t seed, std::vector<std::size_t> shape) {
  return cases::generate(cases::Generator{cases::Distribution::normal, seed, 1.0}, fmts::bf16, shape);
}

double total(const std::vector<cases::BoundShare>& shares) {
  double t = 0;
  for (const cases::BoundShare& s : shares) t += s.amount;
  return t;
}

const cases::BoundShare& largest(const std::vector<cases::BoundShare>& shares) {
  const cases::BoundShare* best = &shares.front();
  for (const cases::BoundShare& s : shares)
    if (s.amount > best->amount) best = &s;
  return *best;
}

// The shares add up to the element's deterministic bound as the emulation states it, on every
// platform's matmul plan (fused tensor-core steps, chunked PSUM, sequential fp32).
TEST(BoundSource, SharesAddUpToTheElementsBound) {
  const Array a = generate(1, {6, 512}), b = generate(2, {512, 5}), c = generate(3, {5});
  for (const bool with_c : {false, true}) {
    const cases::Op op = cases::matmul(a, b, with_c ? &c : nullptr, "bf16", Cast{fmts::fp32});
    ASSERT_TRUE(op.bound_sources);
    for (const std::string name : {"cuda_core.fp32", "nvidia.a100", "nvidia.h100", "trainium.trn2"}) {
      const core::Platform p = core::platform_by_name(name);
      const cases::Emulation em = op.emulate(p, {});
      for (std::size_t i = 0; i < em.values.size(); ++i) {
        const auto shares = op.bound_sources(p, i, em.values.data()[i]);
        const double bound = em.bound.data()[i];
        EXPECT_NEAR(total(shares), bound, 0.02 * bound) << name << " element " << i;
        bool has_c = false;
        for (const auto& s : shares) {
          EXPECT_GE(s.amount, 0.0);
          has_c = has_c || s.step == "the addition of c";
        }
        EXPECT_EQ(has_c, with_c) << name;
      }
    }
  }
}

// Which step dominates follows the arithmetic: on trainium.trn2 (fp32 fma within K tiles of 128,
// then across them), the accumulation dominates exactly where Higham's bound exceeds the output
// format's half ulp.
TEST(BoundSource, TheDominantStepIsTheOneHighamsBoundPredicts) {
  const core::Platform p = core::platform_by_name("trainium.trn2");
  std::size_t accumulation_first = 0, rounding_first = 0;  // elements of each kind checked
  for (const std::size_t K : {4u, 4096u}) {
    for (const auto* out : {&fmts::bf16, &fmts::fp32}) {
      const Array a = generate(10 + K, {3, K}), b = generate(20 + K, {K, 4});
      const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{*out});
      const cases::Emulation em = op.emulate(p, {});
      for (std::size_t i = 0; i < em.values.size(); ++i) {
        const std::size_t r = i / 4, col = i % 4;
        double sum_abs = 0;
        for (std::size_t k = 0; k < K; ++k) sum_abs += std::fabs(a(r, k) * b(k, col));
        const std::size_t additions = std::min<std::size_t>(K, 128) - 1 + (K + 127) / 128 - 1;
        const double higham = static_cast<double>(additions) * std::ldexp(1.0, -24) * sum_abs;
        const double v = std::fabs(em.values.data()[i]);
        const double half_ulp = std::ldexp(1.0, std::ilogb(v) - out->mantissa_bits - 1);
        if (std::max(higham, half_ulp) < 4 * std::min(higham, half_ulp)) continue;  // too close to call
        const std::string step = largest(op.bound_sources(p, i, em.values.data()[i])).step;
        const std::string expected = higham > half_ulp ? "accumulation" : "output rounding";
        EXPECT_EQ(step.substr(0, expected.size()), expected) << "K=" << K << " out=" << out->name << " element " << i;
        ++(higham > half_ulp ? accumulation_first : rounding_first);
      }
    }
  }
  EXPECT_GE(accumulation_first, 12u);
  EXPECT_GE(rounding_first, 12u);
}

// Ops without their own sources: the output rounding and the stages before it, adding up to the
// element's bound.
TEST(BoundSource, OutputRoundingAndTheRest) {
  const auto shares = cases::output_rounding_shares(Cast{fmts::bf16}, 1.0, 0.01);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_DOUBLE_EQ(total(shares), 0.01);
  // Half an ulp of bf16 at 1 (and a hair more: a value that rounds to 1 may lie just above it).
  EXPECT_GE(shares[0].amount, std::ldexp(1.0, -8));
  EXPECT_LE(shares[0].amount, std::ldexp(1.0, -8) * (1 + std::ldexp(1.0, -7)));
  EXPECT_TRUE(cases::output_rounding_shares(Cast{fmts::bf16}, 1.0, INFINITY).empty());
  EXPECT_EQ(cases::describe(std::vector<cases::BoundShare>{{"x", 1}, {"y", 3}, {"z", 0.001}}), "y 75%, x 25%, z <1%");
}

// The verdict names the dominant step for its first worst element, and says nothing of it when
// the output is the platform's own.
TEST(BoundSource, TheVerdictStatesIt) {
  const Array a = generate(1, {8, 1024}), b = generate(2, {1024, 8});
  const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32});
  const core::Platform p = core::platform_by_name("trainium.trn2");
  Array got = op.emulate(p, {}).values;
  EXPECT_TRUE(cases::compare(got, op, p, {}).bound_source.empty());
  got(3, 4) = static_cast<float>(got(3, 4) * (1 + 1e-3));  // far beyond any bound: the worst element
  const cases::Verdict v = cases::compare(got, op, p, {});
  EXPECT_EQ(v.bound_source.rfind("at [3,4]: accumulation chunked(128", 0), 0u) << v.bound_source;
  EXPECT_NE(cases::describe(v).find("bound's source at [3,4]"), std::string::npos) << cases::describe(v);
}

}  // namespace
