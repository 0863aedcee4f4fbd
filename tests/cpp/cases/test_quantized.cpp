// The quantised matmuls of the catalogue (cases/quantized.hpp): emulated values against an
// independent oracle (numeq::reference's exact matmul of the dequantised operands, exact in the
// long accumulator), per-element bounds never violated, their tightness printed, and planted
// kernel bugs (a wrong fp8 scale, a dropped K tile, a transposed operand) caught by the bound
// check. The blockwise emulation is also checked bit for bit against a plain loop written here
// (std::fmaf for the fp32 combine; the platform plan via core::matmul for each 128-long block).
// NUMEQ_LONG_TESTS=1 adds a run of >= 10^7 output elements per family.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "numeq/cases/generators.hpp"
#include "numeq/cases/quantized.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/references/exact.hpp"

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
using xt::xarray;

bool long_tests() {
  const char* v = std::getenv("NUMEQ_LONG_TESTS");
  return v != nullptr && std::string(v) == "1";
}

struct Target {
  const char* platform;
  const char* e4m3;  // the platform's 4-bit-exponent fp8 format name
};
// H100 raw (cuBLASLt FAST_ACCUM), H100 with DeepSeek-V3's promotion every 128, Ada, B200, trn2.
const Target kTargets[] = {{"nvidia.h100", "e4m3fn"},
                           {"nvidia.h100.fp8_promoted", "e4m3fn"},
                           {"nvidia.ada", "e4m3fn"},
                           {"nvidia.b200", "e4m3fn"},
                           {"trainium.trn2", "e4m3"}};

const cases::Fp8Scaling kScalings[] = {cases::Fp8Scaling::per_tensor, cases::Fp8Scaling::per_channel,
                                       cases::Fp8Scaling::blockwise, cases::Fp8Scaling::mx};

// Tally of one family: elements checked, bound violations, worst |err| / bound (tightness).
struct Tally {
  std::size_t elements = 0;
  std::size_t violations = 0;
  std::size_t nan_bounds = 0;
  double worst_ratio = 0;
  void print(const std::string& name) const {
    std::printf("[quantized] %-34s elements %9zu  violations %zu  NaN-bound %zu  tightness (worst err/bound) %.3g\n",
                name.c_str(), elements, violations, nan_bounds, worst_ratio);
  }
};

// |values - (hi + lo)| against bound, per element. Returns the number of violations.
std::size_t check(const xarray<double>& values, const xarray<double>& bound, const numeq::reference::ExactValues& ex,
                  Tally* tally) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double b = bound.data()[i];
    if (std::isnan(b)) {
      if (tally) ++tally->nan_bounds;
      continue;
    }
    const double err = std::fabs((values.data()[i] - ex.hi.data()[i]) - ex.lo.data()[i]);
    // A relative 2^-40 margin for the rounding of this difference itself.
    const bool violated = !(err <= b * (1 + 0x1p-40));
    bad += violated;
    if (tally) {
      ++tally->elements;
      tally->violations += violated;
      if (b > 0 && std::isfinite(b)) tally->worst_ratio = std::max(tally->worst_ratio, err / b);
    }
  }
  return bad;
}

// Positive fp32 scales with random significands over 2^-6 .. 2^6; MX: powers of two 2^-8 .. 2^8.
xarray<double> fp32_scales(const std::vector<std::size_t>& shape, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-6, 6);
  xarray<double> s = xarray<double>::from_shape(shape);
  for (double& v : s) v = static_cast<double>(static_cast<float>(std::exp2(u(g))));
  return s;
}
xarray<double> e8m0_scales(const std::vector<std::size_t>& shape, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int> e(-8, 8);
  xarray<double> s = xarray<double>::from_shape(shape);
  for (double& v : s) v = std::ldexp(1.0, e(g));
  return s;
}

struct Scaled {
  xarray<double> a, b, sa, sb;
};

std::size_t ceil_div(std::size_t x, std::size_t y) { return (x + y - 1) / y; }

Scaled make_case(cases::Fp8Scaling s, const numeq::Format& fmt, cases::Distribution d, std::size_t M, std::size_t K,
                 std::size_t N, std::uint64_t seed) {
  Scaled c;
  c.a = cases::generate({d, seed, 1.0}, fmt, {M, K});
  c.b = cases::generate({d, seed + 1000, 1.0}, fmt, {K, N});
  switch (s) {
    case cases::Fp8Scaling::per_tensor:
      c.sa = fp32_scales({1}, seed + 1);
      c.sb = fp32_scales({1}, seed + 2);
      break;
    case cases::Fp8Scaling::per_channel:
      c.sa = fp32_scales({M}, seed + 1);
      c.sb = fp32_scales({N}, seed + 2);
      break;
    case cases::Fp8Scaling::blockwise:
      c.sa = fp32_scales({M, K / 128}, seed + 1);
      c.sb = fp32_scales({K / 128, ceil_div(N, 128)}, seed + 2);
      break;
    case cases::Fp8Scaling::mx:
      c.sa = e8m0_scales({M, K / 32}, seed + 1);
      c.sb = e8m0_scales({K / 32, N}, seed + 2);
      break;
  }
  return c;
}

// The dequantised operands: every element times its scale (exact in binary64: an fp8 value has
// at most 4 significant bits, an fp32 scale 24).
double scale_of_a(const Scaled& c, cases::Fp8Scaling s, std::size_t i, std::size_t k) {
  switch (s) {
    case cases::Fp8Scaling::per_tensor: return c.sa.data()[0];
    case cases::Fp8Scaling::per_channel: return c.sa.data()[i];
    case cases::Fp8Scaling::blockwise: return c.sa(i, k / 128);
    case cases::Fp8Scaling::mx: return c.sa(i, k / 32);
  }
  return 0;
}
double scale_of_b(const Scaled& c, cases::Fp8Scaling s, std::size_t k, std::size_t j) {
  switch (s) {
    case cases::Fp8Scaling::per_tensor: return c.sb.data()[0];
    case cases::Fp8Scaling::per_channel: return c.sb.data()[j];
    case cases::Fp8Scaling::blockwise: return c.sb(k / 128, j / 128);
    case cases::Fp8Scaling::mx: return c.sb(k / 32, j);
  }
  return 0;
}

numeq::reference::ExactValues oracle(const Scaled& c, cases::Fp8Scaling s) {
  const std::size_t M = c.a.shape()[0], K = c.a.shape()[1], N = c.b.shape()[1];
  xarray<double> da = xarray<double>::from_shape({M, K}), db = xarray<double>::from_shape({K, N});
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t k = 0; k < K; ++k) da(i, k) = c.a(i, k) * scale_of_a(c, s, i, k);
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t j = 0; j < N; ++j) db(k, j) = c.b(k, j) * scale_of_b(c, s, k, j);
  return numeq::reference::matmul_exact(da, db);
}

xarray<double> slice_cols(const xarray<double>& a, std::size_t k0, std::size_t k1) {
  xarray<double> out = xarray<double>::from_shape({a.shape()[0], k1 - k0});
  for (std::size_t i = 0; i < a.shape()[0]; ++i)
    for (std::size_t k = k0; k < k1; ++k) out(i, k - k0) = a(i, k);
  return out;
}
xarray<double> slice_rows(const xarray<double>& b, std::size_t k0, std::size_t k1) {
  xarray<double> out = xarray<double>::from_shape({k1 - k0, b.shape()[1]});
  for (std::size_t k = k0; k < k1; ++k)
    for (std::size_t j = 0; j < b.shape()[1]; ++j) out(k - k0, j) = b(k, j);
  return out;
}

// An independent blockwise loop: the platform plan per 128-long block (core::matmul), then
// s = fp32(sa * sb) and acc = fmaf(s, p, acc) (NVIDIA) or acc = fp32(fp32(s * p) + acc). `bug`
// plants a kernel fault: 1 = block kb uses the scale of block kb + 1 (the wrong block's scale),
// 2 = the last K tile dropped.
xarray<double> blockwise_loop(const Scaled& c, const core::Plan& plan, bool fma, int bug = 0) {
  const std::size_t M = c.a.shape()[0], K = c.a.shape()[1], N = c.b.shape()[1], nb = K / 128;
  std::vector<float> acc(M * N, 0.0f);
  for (std::size_t kb = 0; kb < nb; ++kb) {
    if (bug == 2 && kb == nb - 1) break;
    const xarray<double> p = core::matmul(slice_cols(c.a, kb * 128, kb * 128 + 128),
                                          slice_rows(c.b, kb * 128, kb * 128 + 128), nullptr, plan);
    const std::size_t sk = bug == 1 ? (kb + 1) % nb : kb;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        const float s = static_cast<float>(c.sa(i, sk)) * static_cast<float>(c.sb(sk, j / 128));
        const float pf = static_cast<float>(p(i, j));
        float& x = acc[i * N + j];
        if (fma) {
          x = std::fmaf(s, pf, x);
        } else {
          const float m = s * pf;
          x = m + x;
        }
      }
  }
  xarray<double> out = xarray<double>::from_shape({M, N});
  for (std::size_t i = 0; i < M * N; ++i) out.data()[i] = acc[i];
  return out;
}

// A run over targets x formats x scalings x distributions. Returns tallies per scaling.
struct SweepSizes {
  std::size_t M, K, N;
  std::size_t repeats;
};

std::map<std::string, Tally> sweep(const SweepSizes& z, std::uint64_t seed0) {
  std::map<std::string, Tally> t;
  std::uint64_t seed = seed0;
  for (std::size_t rep = 0; rep < z.repeats; ++rep)
    for (const Target& target : kTargets) {
      const core::Platform platform = core::platform_by_name(target.platform);
      for (const char* fmt_name : {target.e4m3, "e5m2"}) {
        const numeq::Format& fmt = numeq::format_by_name(fmt_name);
        for (const cases::Fp8Scaling s : kScalings)
          for (const cases::Distribution d : cases::all_distributions()) {
            ++seed;
            const Scaled c = make_case(s, fmt, d, z.M, z.K, z.N, seed * 7919);
            cases::ScaledMatmulOptions o;
            o.scaling = s;
            o.out_fmt = (seed % 2 == 0) ? "fp32" : "bf16";
            if (s == cases::Fp8Scaling::per_tensor || s == cases::Fp8Scaling::per_channel) {
              // A third of these cases as split-K 2 (serial or parallel, CUTLASS's two kinds).
              o.split_k = seed % 3 == 0 ? 2 : 1;
              o.split_mode = seed % 2 ? core::SplitMode::serial : core::SplitMode::parallel;
            }
            const cases::Emulation e = cases::scaled_fp8_matmul(c.a, c.b, c.sa, c.sb, platform, fmt_name, o);
            // Tallied per output format: with bf16 outputs the final rounding dominates the bound.
            const std::size_t bad =
                check(e.values, e.bound, oracle(c, s), &t[std::string(cases::to_string(s)) + " -> " + o.out_fmt]);
            EXPECT_EQ(bad, 0u) << target.platform << " " << fmt_name << " " << cases::to_string(s) << " "
                               << cases::to_string(d) << " out " << o.out_fmt;
          }
      }
    }
  return t;
}

TEST(ScaledFp8Matmul, BoundsHoldAgainstTheExactOracle) {
  const std::map<std::string, Tally> t = sweep({16, 256, 160, 1}, 1);
  for (const auto& [name, tally] : t) {
    tally.print(name);
    EXPECT_EQ(tally.violations, 0u) << name;
    EXPECT_GT(tally.elements, 0u);
    EXPECT_GT(tally.worst_ratio, 0.0) << name << ": a bound that nothing approaches";
  }
}

TEST(ScaledFp8Matmul, LongRun) {
  if (!long_tests()) GTEST_SKIP() << "set NUMEQ_LONG_TESTS=1";
  // 5 targets x 2 formats x 8 distributions = 80 cases per scaling and repeat; 64 x 256 = 16384
  // outputs each: 8 repeats give 10.5 million outputs per scaling family.
  const std::map<std::string, Tally> t = sweep({64, 128, 256, 8}, 100000);
  for (const auto& [name, tally] : t) {
    tally.print("long " + name);
    EXPECT_EQ(tally.violations, 0u) << name;
    EXPECT_GE(tally.elements + tally.nan_bounds, 5000000u) << name;  // two output formats: >= 10^7 per scaling
  }
}

TEST(ScaledFp8Matmul, BlockwiseMatchesAnIndependentLoopBitForBit) {
  for (const Target& target : kTargets) {
    const core::Platform platform = core::platform_by_name(target.platform);
    for (const char* fmt_name : {target.e4m3, "e5m2"}) {
      const core::Plan plan = core::plan_for(platform, core::Operation::matmul, fmt_name, "fp32");
      const bool nvidia = std::string(target.platform).rfind("nvidia.", 0) == 0;
      for (const cases::Distribution d : cases::all_distributions()) {
        const Scaled c = make_case(cases::Fp8Scaling::blockwise, numeq::format_by_name(fmt_name), d, 8, 384, 136, 77);
        cases::ScaledMatmulOptions o;
        o.scaling = cases::Fp8Scaling::blockwise;
        const cases::Emulation e = cases::scaled_fp8_matmul(c.a, c.b, c.sa, c.sb, platform, fmt_name, o);
        const xarray<double> want = blockwise_loop(c, plan, nvidia);
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(e.values.data()[i], want.data()[i]) << target.platform << " " << fmt_name << " "
                                                        << cases::to_string(d) << " element " << i;
        // The other combine, asked for explicitly, matches the loop's other branch.
        o.combine = nvidia ? cases::BlockCombine::multiply_add : cases::BlockCombine::fma;
        const cases::Emulation e2 = cases::scaled_fp8_matmul(c.a, c.b, c.sa, c.sb, platform, fmt_name, o);
        const xarray<double> want2 = blockwise_loop(c, plan, !nvidia);
        for (std::size_t i = 0; i < want2.size(); ++i) ASSERT_EQ(e2.values.data()[i], want2.data()[i]);
      }
    }
  }
}

TEST(ScaledFp8Matmul, PerTensorAndMxMatchTheirEpilogues) {
  // per-tensor: fp32(sa * fp32(sb * acc)) after the platform's own matmul; MX: each 32-block's
  // fp32 partial times 2^(ea+eb), added with one fp32 rounding (the named assumption).
  const core::Platform platform = core::platform_by_name("nvidia.h100");
  const core::Plan plan = core::plan_for(platform, core::Operation::matmul, "e4m3fn", "fp32");
  const Scaled c = make_case(cases::Fp8Scaling::per_tensor, numeq::formats::e4m3fn, cases::Distribution::normal, 8, 256, 24, 5);
  const xarray<double> acc = core::matmul(c.a, c.b, nullptr, plan);
  cases::ScaledMatmulOptions o;
  const cases::Emulation e = cases::scaled_fp8_matmul(c.a, c.b, c.sa, c.sb, platform, "e4m3fn", o);
  for (std::size_t i = 0; i < acc.size(); ++i) {
    const float t = static_cast<float>(c.sb.data()[0]) * static_cast<float>(acc.data()[i]);
    ASSERT_EQ(e.values.data()[i], static_cast<double>(static_cast<float>(c.sa.data()[0]) * t));
  }
  // Split-K: the platform plan under core::with_split_k, then the same epilogue.
  o.split_k = 2;
  o.split_mode = core::SplitMode::parallel;
  const xarray<double> acc2 = core::matmul(c.a, c.b, nullptr, core::with_split_k(plan, 2, core::SplitMode::parallel, numeq::Cast{}));
  const cases::Emulation e2 = cases::scaled_fp8_matmul(c.a, c.b, c.sa, c.sb, platform, "e4m3fn", o);
  for (std::size_t i = 0; i < acc2.size(); ++i) {
    const float t = static_cast<float>(c.sb.data()[0]) * static_cast<float>(acc2.data()[i]);
    ASSERT_EQ(e2.values.data()[i], static_cast<double>(static_cast<float>(c.sa.data()[0]) * t));
  }
  o.split_k = 1;
  const Scaled m = make_case(cases::Fp8Scaling::mx, numeq::formats::e4m3fn, cases::Distribution::lognormal, 8, 256, 24, 6);
  o.scaling = cases::Fp8Scaling::mx;
  const cases::Emulation em = cases::scaled_fp8_matmul(m.a, m.b, m.sa, m.sb, platform, "e4m3fn", o);
  std::vector<double> want(8 * 24, 0.0);
  for (std::size_t kb = 0; kb < 8; ++kb) {
    const xarray<double> p = core::matmul(slice_cols(m.a, kb * 32, kb * 32 + 32), slice_rows(m.b, kb * 32, kb * 32 + 32), nullptr, plan);
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 24; ++j)
        want[i * 24 + j] = core::add_rounded(want[i * 24 + j], m.sa(i, kb) * m.sb(kb, j) * p(i, j), numeq::Cast{});
  }
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(em.values.data()[i], want[i]);
  EXPECT_NE(std::string(cases::mx_assumption()).find("assumed"), std::string::npos);
}

// Planted bugs: the buggy kernel's output checked against the correct kernel's bound and the
// exact oracle; a case is detected when some element lies outside its bound.
TEST(ScaledFp8Matmul, PlantedBugsAreDetected) {
  struct Rate {
    std::size_t cases = 0, detected = 0, elements = 0, flagged = 0;
  };
  std::map<std::string, Rate> rates;
  const auto record = [&](const std::string& bug, const xarray<double>& buggy, const cases::Emulation& good,
                          const numeq::reference::ExactValues& ex) {
    Rate& r = rates[bug];
    const std::size_t flagged = check(buggy, good.bound, ex, nullptr);
    ++r.cases;
    r.detected += flagged > 0;
    r.elements += buggy.size();
    r.flagged += flagged;
  };
  std::uint64_t seed = 500;
  for (const Target& target : kTargets) {
    const core::Platform platform = core::platform_by_name(target.platform);
    const bool nvidia = std::string(target.platform).rfind("nvidia.", 0) == 0;
    for (const char* fmt_name : {target.e4m3, "e5m2"}) {
      const numeq::Format& fmt = numeq::format_by_name(fmt_name);
      const core::Plan plan = core::plan_for(platform, core::Operation::matmul, fmt_name, "fp32");
      for (const cases::Distribution d : cases::all_distributions()) {
        ++seed;
        // Blockwise: the wrong block's scale, and a dropped K tile.
        {
          const Scaled c = make_case(cases::Fp8Scaling::blockwise, fmt, d, 8, 256, 64, seed * 31);
          cases::ScaledMatmulOptions o;
          o.scaling = cases::Fp8Scaling::blockwise;
          const cases::Emulation good = cases::scaled_fp8_matmul(c.a, c.b, c.sa, c.sb, platform, fmt_name, o);
          const auto ex = oracle(c, o.scaling);
          record("blockwise: scale of the wrong block", blockwise_loop(c, plan, nvidia, 1), good, ex);
          record("blockwise: last K tile dropped", blockwise_loop(c, plan, nvidia, 2), good, ex);
        }
        // Per-tensor: scale 2x, a dropped K tile, a transposed b (square: K = N).
        {
          const Scaled c = make_case(cases::Fp8Scaling::per_tensor, fmt, d, 8, 256, 256, seed * 37);
          cases::ScaledMatmulOptions o;
          const cases::Emulation good = cases::scaled_fp8_matmul(c.a, c.b, c.sa, c.sb, platform, fmt_name, o);
          const auto ex = oracle(c, o.scaling);
          xarray<double> twice = good.values * 2.0;
          record("per_tensor: scale 2x", twice, good, ex);
          const Scaled dropped{slice_cols(c.a, 0, 128), slice_rows(c.b, 0, 128), c.sa, c.sb};
          record("per_tensor: last K tile dropped",
                 cases::scaled_fp8_matmul(dropped.a, dropped.b, c.sa, c.sb, platform, fmt_name, o).values, good, ex);
          const xarray<double> bt = xt::transpose(c.b);
          record("per_tensor: b transposed", cases::scaled_fp8_matmul(c.a, bt, c.sa, c.sb, platform, fmt_name, o).values,
                 good, ex);
        }
      }
    }
  }
  for (const auto& [bug, r] : rates) {
    std::printf("[quantized] planted bug %-38s detected in %zu / %zu cases (%.1f%%), %zu / %zu elements flagged (%.1f%%)\n",
                bug.c_str(), r.detected, r.cases, 100.0 * static_cast<double>(r.detected) / static_cast<double>(r.cases),
                r.flagged, r.elements, 100.0 * static_cast<double>(r.flagged) / static_cast<double>(r.elements));
    // Every distribution has non-zero outputs on every target, so each fault must show somewhere.
    EXPECT_GE(r.detected * 10, r.cases * 9) << bug;
  }
}

// ---- bad input ----

void expect_error(const std::function<void()>& f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no numeq::error; expected one mentioning " << words.front();
  } catch (const numeq::error& e) {
    const std::string m = e.what();
    for (const std::string& w : words) EXPECT_NE(m.find(w), std::string::npos) << "'" << w << "' missing in: " << m;
  }
}

TEST(ScaledFp8Matmul, BadInputIsRefusedNamingTheArgument) {
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  const Scaled c = make_case(cases::Fp8Scaling::per_tensor, numeq::formats::e4m3fn, cases::Distribution::normal, 4, 256, 8, 9);
  cases::ScaledMatmulOptions o;
  const auto run = [&](const xarray<double>& a, const xarray<double>& b, const xarray<double>& sa, const xarray<double>& sb,
                       const core::Platform& p, const char* fmt, const cases::ScaledMatmulOptions& opt) {
    return [=] { cases::scaled_fp8_matmul(a, b, sa, sb, p, fmt, opt); };
  };
  expect_error(run(c.a, slice_rows(c.b, 0, 100), c.sa, c.sb, h100, "e4m3fn", o), {"b:", "256"});
  for (const double bad : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    expect_error(run(c.a, c.b, xarray<double>{bad}, c.sb, h100, "e4m3fn", o), {"scale_a", "> 0"});
    expect_error(run(c.a, c.b, c.sa, xarray<double>{bad}, h100, "e4m3fn", o), {"scale_b", "> 0"});
  }
  expect_error(run(c.a, c.b, xarray<double>{0.1}, c.sb, h100, "e4m3fn", o), {"scale_a", "fp32"});
  // A format the platform lacks: its twin computes values up to 240 (e4m3 and e4m3fn share them),
  // anything beyond is refused naming the limit; no twin at all lists the fp8 formats it has.
  EXPECT_NO_THROW(run(c.a, c.b, c.sa, c.sb, h100, "e4m3", o)());
  xarray<double> wide = c.a;
  wide(0, 0) = 448;
  expect_error(run(wide, c.b, c.sa, c.sb, core::platform_by_name("trainium.trn2"), "e4m3fn", o),
               {"in_fmt", "up to 240", "448"});
  expect_error(run(c.a, c.b, c.sa, c.sb, core::platform_by_name("nvidia.a100"), "e4m3fn", o), {"in_fmt", "nvidia.a100", "none"});
  expect_error(run(c.a, c.b, c.sa, c.sb, h100, "bf16", o), {"in_fmt", "8-bit"});
  EXPECT_NO_THROW(run(c.a, c.b, c.sa, c.sb, core::platform_by_name("trainium.trn2"), "e4m3fn", o)());
  // Values not of the format.
  xarray<double> off = c.a;
  off(0, 3) = 0.3;
  expect_error(run(off, c.b, c.sa, c.sb, h100, "e4m3fn", o), {"a:", "element 3", "e4m3fn"});
  // Blockwise / MX: K divisibility, shapes, MX scales powers of two.
  cases::ScaledMatmulOptions ob;
  ob.scaling = cases::Fp8Scaling::blockwise;
  const xarray<double> a200 = slice_cols(c.a, 0, 200), b200 = slice_rows(c.b, 0, 200);
  expect_error(run(a200, b200, fp32_scales({4, 1}, 1), fp32_scales({1, 1}, 2), h100, "e4m3fn", ob), {"K divisible by 128", "200"});
  expect_error(run(c.a, c.b, fp32_scales({4, 3}, 1), fp32_scales({2, 1}, 2), h100, "e4m3fn", ob), {"scale_a", "(4, 2)"});
  expect_error(run(c.a, c.b, fp32_scales({4, 2}, 1), fp32_scales({2, 8}, 2), h100, "e4m3fn", ob), {"scale_b", "(2, 1)"});
  cases::ScaledMatmulOptions om;
  om.scaling = cases::Fp8Scaling::mx;
  const xarray<double> a100 = slice_cols(c.a, 0, 100), b100 = slice_rows(c.b, 0, 100);
  expect_error(run(a100, b100, e8m0_scales({4, 3}, 1), e8m0_scales({3, 8}, 2), h100, "e4m3fn", om), {"K divisible by 32", "100"});
  xarray<double> not_pow2 = e8m0_scales({4, 8}, 1);
  not_pow2(1, 1) = 3.0;
  expect_error(run(c.a, c.b, not_pow2, e8m0_scales({8, 8}, 2), h100, "e4m3fn", om), {"scale_a", "E8M0"});
  cases::ScaledMatmulOptions oc;
  oc.scaling = cases::Fp8Scaling::per_channel;
  expect_error(run(c.a, c.b, fp32_scales({5}, 1), fp32_scales({8}, 2), h100, "e4m3fn", oc), {"scale_a", "row"});
  cases::ScaledMatmulOptions os;
  os.split_k = 0;
  expect_error(run(c.a, c.b, c.sa, c.sb, h100, "e4m3fn", os), {"split_k"});
  os.split_k = 2;
  os.scaling = cases::Fp8Scaling::mx;
  expect_error(run(c.a, c.b, e8m0_scales({4, 8}, 1), e8m0_scales({8, 8}, 2), h100, "e4m3fn", os), {"split_k", "per_tensor"});
  cases::ScaledMatmulOptions oo;
  oo.out_fmt = "e4m3fn";
  expect_error(run(c.a, c.b, c.sa, c.sb, h100, "e4m3fn", oo), {"out_fmt"});
  expect_error([] { cases::fp8_scaling_by_name("tensorwise"); }, {"scaling", "per_tensor", "mx"});
}

// ---- int8 ----

xarray<double> mat(std::size_t r, std::size_t c, const std::vector<double>& v) {
  xarray<double> m = xarray<double>::from_shape({r, c});
  std::copy(v.begin(), v.end(), m.begin());
  return m;
}

xarray<double> int8_values(const std::vector<std::size_t>& shape, std::uint64_t seed, int lo = -128, int hi = 127) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int> u(lo, hi);
  xarray<double> x = xarray<double>::from_shape(shape);
  for (double& v : x) v = u(g);
  return x;
}

TEST(Int8Matmul, ExactInt32AndRequantisationWithinBound) {
  Tally acc_t, req_t;
  const std::size_t reps = long_tests() ? 160 : 8;
  for (std::size_t rep = 0; rep < reps; ++rep) {
    const std::size_t M = 64, K = 512 + 64 * (rep % 4), N = long_tests() ? 1024 : 96;
    const xarray<double> a = int8_values({M, K}, 10 + rep), b = int8_values({K, N}, 20 + rep);
    const cases::Emulation e = cases::int8_matmul(a, b);
    const auto ex = numeq::reference::matmul_exact(a, b);
    EXPECT_EQ(check(e.values, e.bound, ex, &acc_t), 0u);
    for (std::size_t i = 0; i < e.values.size(); ++i) ASSERT_EQ(e.bound.data()[i], 0.0);
    // Requantisation: the multiplier maps the accumulator's spread onto int8's range.
    cases::Requantization r;
    r.multiplier = 1.0 / (400.0 * std::sqrt(static_cast<double>(K))) * (1 + 0.1 * static_cast<double>(rep % 3));
    r.zero_point = static_cast<std::int64_t>(rep % 5) - 2;
    if (rep % 2) r.quant.format = numeq::formats::uint8, r.zero_point = 128;
    if (rep % 3 == 1) r.quant.rounding = numeq::Rounding::toward_zero;
    const cases::Emulation q = cases::int8_matmul_requantized(a, b, r);
    numeq::reference::ExactValues qx{xarray<double>::from_shape({M, N}), xarray<double>::from_shape({M, N})};
    const double qmin = static_cast<double>(r.quant.qmin()), qmax = static_cast<double>(r.quant.qmax());
    for (std::size_t i = 0; i < M * N; ++i) {
      // clamp(acc * multiplier + zero_point): acc * multiplier as hi + lo exactly (TwoProduct).
      const double p = ex.hi.data()[i] * r.multiplier;
      const double pl = std::fma(ex.hi.data()[i], r.multiplier, -p);
      const double v = p + static_cast<double>(r.zero_point);
      qx.hi.data()[i] = std::clamp(v, qmin, qmax);
      qx.lo.data()[i] = (v > qmin && v < qmax) ? pl : 0.0;  // (the rounding of p + zp is far below the margin)
    }
    EXPECT_EQ(check(q.values, q.bound, qx, &req_t), 0u);
  }
  acc_t.print("int8 matmul int32 (exact)");
  req_t.print("int8 matmul requantised");
  if (long_tests()) {
    EXPECT_GE(acc_t.elements, 10000000u);
    EXPECT_GE(req_t.elements, 10000000u);
  }
  EXPECT_EQ(acc_t.violations + req_t.violations, 0u);
}

TEST(Int8Matmul, Int32OverflowIsAnErrorNamingIndexAndK) {
  // -128 * -128 = 2^14 per product: the partial sum passes 2^31 - 1 at the 2^17-th product.
  const std::size_t K = 140000;
  xarray<double> a = xarray<double>::from_shape({2, K});
  a.fill(0.0);
  xarray<double> b = xt::full_like(xarray<double>::from_shape({K, 3}), -128.0);
  for (std::size_t k = 0; k < K; ++k) a(1, k) = -128;
  expect_error([&] { cases::int8_matmul(a, b); }, {"a, b", "overflow", "[1, 0]", "row-major index 3", "k = 0..131071", "K = 140000"});
  const cases::Emulation w = cases::int8_matmul(a, b, cases::Int32Overflow::wrap);
  const double exact = 16384.0 * K;
  EXPECT_EQ(w.values(1, 0), exact - 0x1p32);
  EXPECT_EQ(w.bound(1, 0), 0x1p32);
  EXPECT_EQ(w.values(0, 0), 0.0);
  EXPECT_EQ(w.bound(0, 0), 0.0);
  expect_error([] { cases::int8_matmul(mat(1, 1, {1.5}), mat(1, 1, {1.0})); }, {"a:", "int8"});
  expect_error([] { cases::int8_matmul(mat(1, 1, {200.0}), mat(1, 1, {1.0})); }, {"a:", "int8"});
  expect_error([] { cases::int8_matmul(mat(1, 2, {1.0, 2.0}), mat(1, 1, {1.0})); }, {"b:", "rows"});
  cases::Requantization r;
  r.multiplier = 0;
  expect_error([&] { cases::requantize(xarray<double>{1.0}, r); }, {"multiplier"});
  r.multiplier = 1;
  r.quant.format = numeq::formats::int32;
  expect_error([&] { cases::requantize(xarray<double>{1.0}, r); }, {"quant.format"});
}

// ---- cast / quantize / dequantize ----

TEST(QuantCatalogue, CastQuantizeDequantizeWithinBound) {
  Tally cast_t, quant_t, deq_t;
  std::mt19937_64 g(3);
  std::normal_distribution<double> n(0, 1);
  const std::size_t count = long_tests() ? 10000000 : 200000;
  xarray<double> x = xarray<double>::from_shape({count});
  for (double& v : x) v = n(g) * std::exp2(std::round(n(g) * 6));
  const numeq::Cast casts[] = {
      {numeq::formats::e4m3fn, numeq::Rounding::nearest_even, numeq::Overflow::saturate},
      {numeq::formats::e5m2, numeq::Rounding::toward_zero, numeq::Overflow::saturate},
      {numeq::formats::bf16},
      {numeq::formats::e4m3, numeq::Rounding::stochastic, numeq::Overflow::saturate, numeq::Subnormals::keep, 7},
      {numeq::formats::fp16, numeq::Rounding::nearest_even, numeq::Overflow::saturate, numeq::Subnormals::flush_outputs}};
  const numeq::reference::ExactValues zero_lo{x, xt::zeros<double>({count})};
  for (const numeq::Cast& c : casts) {
    const cases::Emulation e = cases::cast(x, c);
    EXPECT_EQ(check(e.values, e.bound, zero_lo, &cast_t), 0u) << c.format.name;
  }
  // Quantize per channel of 4 channels (axis 1 of [count/4, 4]) and dequantize.
  const xarray<double> x2 = xt::reshape_view(x, {count / 4, std::size_t{4}});
  const xarray<double> scale = {{0.01, 0.5, 3.0, 0.0625}};
  const xt::xarray<std::int64_t> zp = {{0, 3, -5, 1}};
  for (const numeq::Rounding rnd : {numeq::Rounding::nearest_even, numeq::Rounding::toward_zero}) {
    numeq::Quantization q;
    q.rounding = rnd;
    const cases::Emulation e = cases::quantize(x2, q, scale, zp, 1, 1);
    numeq::reference::ExactValues qx{xarray<double>::from_shape(e.values.shape()), xt::zeros<double>(e.values.shape())};
    for (std::size_t i = 0; i < x2.size(); ++i) {
      // clamp(x / scale + zp): the quotient is rounded in binary64 here; the margin below covers it.
      const double v = x2.data()[i] / scale.data()[i % 4] + static_cast<double>(zp.data()[i % 4]);
      qx.hi.data()[i] = std::clamp(v, -128.0, 127.0);
    }
    xarray<double> widened = e.bound * (1 + 1e-12);
    EXPECT_EQ(check(e.values, widened, qx, &quant_t), 0u);
    const cases::Emulation d = cases::dequantize(e.values, q, scale, zp, 1, 1, numeq::Cast{numeq::formats::bf16});
    numeq::reference::ExactValues dx{xarray<double>::from_shape(d.values.shape()), xt::zeros<double>(d.values.shape())};
    for (std::size_t i = 0; i < x2.size(); ++i)
      dx.hi.data()[i] = (e.values.data()[i] - static_cast<double>(zp.data()[i % 4])) * scale.data()[i % 4];  // exact
    EXPECT_EQ(check(d.values, d.bound, dx, &deq_t), 0u);
  }
  cast_t.print("cast");
  quant_t.print("quantize");
  deq_t.print("dequantize");
  EXPECT_EQ(cast_t.violations + quant_t.violations + deq_t.violations, 0u);
  expect_error([&] { cases::quantize(x2, numeq::Quantization{}, xarray<double>{{0.0, 1.0, 1.0, 1.0}}, zp, 1, 1); }, {"scale"});
  expect_error([&] { cases::dequantize(mat(1, 1, {300.0}), numeq::Quantization{}, mat(1, 1, {1.0}),
                                       xt::xarray<std::int64_t>(std::vector<std::size_t>{1, 1}, 0), 1, 1); },
               {"codes", "int8"});
}

}  // namespace
