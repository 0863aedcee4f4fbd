// numeq::core::fused_step / fused_chain's fast path (every kernel this CPU runs) against the
// general path (detail::fused_step_reference, the 768-bit sum) as the oracle, bit for bit or the
// same error; and the general path alone against the GPU-measured vectors (fused_test_support.hpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fused_test_support.hpp"
#include "numeq/core/fused.hpp"
#include "numeq/core/trainium.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"

namespace {

using numeq::Cast;
using numeq::Rounding;
using numeq::core::FusedStep;
using numeq::core::fused_chain;
using numeq::core::fused_step;
namespace nv = numeq::core::nvidia;
namespace fmts = numeq::formats;
using numeq_test::fused::Count;
using numeq_test::fused::Expected;
using numeq_test::fused::chain;
using numeq_test::fused::count;
using numeq_test::fused::expected_sets;
using numeq_test::fused::load;
using numeq_test::fused::name;

constexpr double inf = std::numeric_limits<double>::infinity();
const double qnan = std::numeric_limits<double>::quiet_NaN();

// ---- the fast path against the general path -----------------------------------------------------
//
// fused_step / fused_chain take a fast path for the common parameters (fused.hpp); the general
// path (detail::fused_step_reference, the 768-bit sum) is the oracle here. Every comparison is of
// the whole outcome: the result's binary64 pattern (zero signs and NaN included), or the error
// and its message.

namespace detail = numeq::core::detail;
using numeq::KernelChoice;

struct Outcome {
  bool threw = false;
  std::string what;
  std::uint64_t bits = 0;
  bool operator==(const Outcome&) const = default;
};

template <class F> Outcome outcome(F&& f) {
  Outcome o;
  try {
    o.bits = std::bit_cast<std::uint64_t>(f());
  } catch (const numeq::error& e) {
    o.threw = true;
    o.what = e.what();
  }
  return o;
}

std::string show(const Outcome& o) {
  if (o.threw) return "error: " + o.what;
  std::ostringstream s;
  s.precision(17);
  s << std::bit_cast<double>(o.bits) << " (0x" << std::hex << o.bits << ")";
  return s.str();
}

std::string show(const std::vector<double>& v) {
  std::ostringstream s;
  s.precision(17);
  for (double x : v) s << x << " ";
  return s.str();
}

// The fast-path kernels this CPU runs (the portable one always); leaves the automatic choice set.
std::vector<numeq::KernelChoice> fast_kernels() {
  std::vector<numeq::KernelChoice> k;
  for (numeq::KernelChoice x : {numeq::KernelChoice::portable, numeq::KernelChoice::avx2, numeq::KernelChoice::avx512})
    if (detail::set_fused_kernel(x)) k.push_back(x);
  detail::set_fused_kernel(numeq::KernelChoice::automatic);
  return k;
}

const char* kernel_name(numeq::KernelChoice k) {
  switch (k) {
    case numeq::KernelChoice::automatic: return "automatic";
    case numeq::KernelChoice::none: return "none";
    case numeq::KernelChoice::portable: return "portable";
    case numeq::KernelChoice::avx2: return "avx2";
    case numeq::KernelChoice::avx512: return "avx512";
  }
  return "?";
}

struct KernelGuard {
  ~KernelGuard() { detail::set_fused_kernel(numeq::KernelChoice::automatic); }
};

// Operands of every kind for a format: values of every magnitude (raw patterns), the format's
// extremes and specials, subnormals, zeros of both signs, moderate values (the common case), and
// rarely a double that is not a value of the format (both paths must throw the same error).
class Draw {
 public:
  explicit Draw(std::uint64_t seed) : rng_(seed) {}

  // profile 0..4 as below; `valid`: only finite values of f.
  double operator()(const numeq::Format& f, int profile, bool valid = false) {
    const int r = static_cast<int>(rng_() % 1000);
    if (r < 2 && !valid) return invalid(f);
    switch (profile) {
      case 0:  // moderate: the matmul case
        return moderate(f, 0);
      case 1:  // huge exponent spreads (finite)
        return r < 100 ? special(f, true) : any_pattern(f, true);
      case 2:  // zeros, subnormals and extremes (finite)
        if (r < 300) return (rng_() & 1) ? 0.0 : -0.0;
        if (r < 600) return subnormal(f);
        if (r < 700) return special(f, true);
        return moderate(f, static_cast<int>(rng_() % 41) - 20);
      case 3:  // anything, NaN and Inf included
        return r < 200 ? special(f, valid) : any_pattern(f, valid);
      default:  // moderate with a wide common scale
        return moderate(f, static_cast<int>(rng_() % 21) - 10);
    }
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  double any_pattern(const numeq::Format& f, bool finite_only) {
    for (;;) {
      const double v = numeq::decode(rng_() & numeq::pattern_mask(f), f);
      if (!finite_only || std::isfinite(v)) return v;
    }
  }
  double moderate(const numeq::Format& f, int scale) {
    std::normal_distribution<double> nd;
    const double v = std::ldexp(nd(rng_), scale);
    return numeq::round_to_format(v, Cast{f, Rounding::nearest_even, numeq::Overflow::saturate});
  }
  double subnormal(const numeq::Format& f) {
    const std::uint64_t frac = rng_() & ((std::uint64_t{1} << f.mantissa_bits) - 1);
    const std::uint64_t sign = (rng_() & 1) ? f.sign_bit() : 0;
    return numeq::decode((sign | frac) << f.storage_shift, f);
  }
  double special(const numeq::Format& f, bool finite) {
    std::vector<double> s = {0.0, -0.0, numeq::max_finite(f), -numeq::max_finite(f), numeq::min_normal(f),
                             -numeq::min_subnormal(f), numeq::min_subnormal(f), 1.0, -1.0};
    if (f.has_inf() && !finite) {
      s.push_back(inf);
      s.push_back(-inf);
    }
    if (f.has_nan() && !finite) s.push_back(qnan);
    return s[rng_() % s.size()];
  }
  double invalid(const numeq::Format& f) {
    switch (rng_() % 5) {
      case 0: return 1.0 + std::ldexp(1.0, -f.mantissa_bits - 1);  // off the grid
      case 1: return numeq::max_finite(f) * (1.0 + std::ldexp(1.0, -f.mantissa_bits));  // beyond max
      case 2: return numeq::min_subnormal(f) / 2;  // below the smallest subnormal
      case 3: return f.has_inf() ? std::ldexp(1.0, 600) : inf;  // out of range, or no Inf
      default: return f.has_nan() ? std::ldexp(1.0, -700) : qnan;
    }
  }
  std::mt19937_64 rng_;
};

// Compares fused_chain (and fused_step on single steps) with the general path for `chains`
// random chains under `step`; returns the number of fused steps compared.
long compare_chains(const FusedStep& step, int chains, std::uint64_t seed, const std::string& what) {
  Draw draw(seed);
  auto& rng = draw.rng();
  long steps = 0;
  const auto n = static_cast<std::size_t>(step.n);
  for (int t = 0; t < chains; ++t) {
    const int profile = static_cast<int>(rng() % 5);
    const int c_profile = static_cast<int>(rng() % 5);
    // K: mostly whole steps, often a short last one, sometimes none at all.
    const std::size_t K = (rng() % 4 == 0) ? rng() % (3 * n + 2) : n * (1 + rng() % 3);
    std::vector<double> a(K), b(K);
    for (std::size_t i = 0; i < K; ++i) {
      a[i] = draw(step.a_format, profile);
      b[i] = draw(step.b_format, profile);
    }
    const double c = draw(step.c_format, c_profile);
    const Outcome want = outcome([&] { return detail::fused_chain_reference(a, b, c, K, step); });
    const Outcome got = outcome([&] { return fused_chain(a, b, c, K, step); });
    EXPECT_EQ(got, want) << what << " chain " << t << " K=" << K << ": fast " << show(got) << ", general "
                         << show(want) << "\n  a = " << show(a) << "\n  b = " << show(b) << "\n  c = " << c;
    if (!(got == want)) return steps;
    steps += static_cast<long>(K == 0 ? 1 : (K + n - 1) / n);
    if (K <= n) {
      const Outcome one = outcome([&] { return fused_step(a, b, c, step); });
      const Outcome ref = outcome([&] { return detail::fused_step_reference(a, b, c, step); });
      EXPECT_EQ(one, ref) << what << " step " << t;
    }
  }
  return steps;
}

struct NamedStep {
  const char* name;
  FusedStep step;
};

const std::vector<NamedStep>& named_steps() {
  static const std::vector<NamedStep> all = {
      {"v100_fp16", nv::v100_fp16}, {"v100_fp16_f16", nv::v100_fp16_f16}, {"t4_fp16", nv::t4_fp16},
      {"t4_fp16_f16", nv::t4_fp16_f16}, {"a100_fp16", nv::a100_fp16}, {"a100_fp16_f16", nv::a100_fp16_f16},
      {"a100_bf16", nv::a100_bf16}, {"a100_tf32", nv::a100_tf32}, {"ada_fp16", nv::ada_fp16},
      {"ada_fp16_f16", nv::ada_fp16_f16}, {"ada_bf16", nv::ada_bf16}, {"ada_tf32", nv::ada_tf32},
      {"ada_e4m3", nv::ada_e4m3}, {"ada_e5m2", nv::ada_e5m2}, {"ada_e4m3_f16", nv::ada_e4m3_f16},
      {"ada_e5m2_f16", nv::ada_e5m2_f16}, {"h100_fp16", nv::h100_fp16}, {"h100_fp16_f16", nv::h100_fp16_f16},
      {"h100_bf16", nv::h100_bf16}, {"h100_tf32", nv::h100_tf32}, {"h100_e4m3", nv::h100_e4m3},
      {"h100_e5m2", nv::h100_e5m2}, {"h100_e4m3_f16", nv::h100_e4m3_f16}, {"h100_e5m2_f16", nv::h100_e5m2_f16},
      {"h100_mma_sync_e4m3_f16_half", nv::h100_mma_sync_e4m3_f16_half},
      {"h100_mma_sync_e5m2_f16_half", nv::h100_mma_sync_e5m2_f16_half}, {"fp16_add", nv::fp16_add},
      {"b200_fp16", nv::b200_fp16}, {"b200_fp16_f16", nv::b200_fp16_f16}, {"b200_bf16", nv::b200_bf16},
      {"b200_tf32", nv::b200_tf32}, {"b200_e4m3", nv::b200_e4m3}, {"b200_e5m2", nv::b200_e5m2},
      {"b200_e4m3_f16", nv::b200_e4m3_f16}, {"b200_e5m2_f16", nv::b200_e5m2_f16},
      {"b200_mma_sync_e4m3_half", nv::b200_mma_sync_e4m3_half},
      {"b200_mma_sync_e5m2_half", nv::b200_mma_sync_e5m2_half},
  };
  return all;
}

TEST(FusedFastPath, CoversEveryNamedSetButTheWideAdd) {
  for (const NamedStep& s : named_steps()) {
    // fp16_add keeps F = 64 bits (an exact fp16 addition): beyond the fast path's 29.
    EXPECT_EQ(detail::fused_fast_path_applies(s.step), std::string(s.name) != "fp16_add") << s.name;
  }
  FusedStep s = nv::h100_bf16;
  s.alignment = numeq::core::Alignment::nearest_even;
  EXPECT_FALSE(detail::fused_fast_path_applies(s));
  s = nv::h100_bf16;
  s.max_exponent = numeq::core::MaxExponent::normalized;
  EXPECT_FALSE(detail::fused_fast_path_applies(s));
  s = nv::h100_bf16;
  s.fraction_bits = 30;
  EXPECT_FALSE(detail::fused_fast_path_applies(s));
  s.fraction_bits = 29;
  s.n = 65;
  EXPECT_FALSE(detail::fused_fast_path_applies(s));
  s = nv::h100_bf16;
  s.c_format = fmts::fp64;  // exponents beyond the fast path's +-400
  EXPECT_FALSE(detail::fused_fast_path_applies(s));
  EXPECT_TRUE(detail::set_fused_kernel(numeq::KernelChoice::portable));
  EXPECT_TRUE(detail::set_fused_kernel(numeq::KernelChoice::none));
  EXPECT_TRUE(detail::set_fused_kernel(numeq::KernelChoice::automatic));
}

TEST(FusedFastPath, EveryNamedSetMatchesTheGeneralPath) {
  KernelGuard guard;
  long steps = 0, served = 0;
  for (numeq::KernelChoice kern : fast_kernels()) {
    ASSERT_TRUE(detail::set_fused_kernel(kern));
    std::uint64_t seed = 1;
    for (const NamedStep& s : named_steps()) {
      const std::uint64_t general_before = detail::fused_general_steps();
      const long n = compare_chains(s.step, 1000, seed++, std::string(kernel_name(kern)) + " " + s.name);
      steps += n;
      if (detail::fused_fast_path_applies(s.step))
        served += n - static_cast<long>(detail::fused_general_steps() - general_before);
    }
  }
  std::cout << "[ fast     ] named sets: " << steps << " steps identical to the general path (" << served
            << " computed by the fast path, the rest handed by it to the general path: NaN, Inf, "
               "invalid operands, fp16_add's F = 64)\n";
  EXPECT_GT(served, steps / 2);
  EXPECT_GT(steps, 10000);
}

TEST(FusedFastPath, VariantsMatchTheGeneralPath) {
  // Every parameter the fast path reads, varied around a few named sets.
  KernelGuard guard;
  using numeq::core::OverflowRule;
  using numeq::core::ZeroSign;
  using numeq::core::ZeroTerms;
  std::vector<std::pair<std::string, FusedStep>> variants;
  const std::vector<NamedStep> bases = {{"h100_bf16", nv::h100_bf16}, {"h100_fp16_f16", nv::h100_fp16_f16},
                                        {"h100_e4m3", nv::h100_e4m3}, {"a100_tf32", nv::a100_tf32},
                                        {"v100_fp16", nv::v100_fp16}, {"b200_e5m2_f16", nv::b200_e5m2_f16}};
  for (const NamedStep& b : bases) {
    const std::string base = b.name;
    auto add = [&](const std::string& what, auto change) {
      FusedStep s = b.step;
      change(s);
      variants.push_back({base + ", " + what, s});
    };
    add("zeros excluded", [](FusedStep& s) { s.zeros = ZeroTerms::excluded; });
    add("floor -126", [](FusedStep& s) { s.exponent_floor = -126; });
    add("floor 3", [](FusedStep& s) { s.exponent_floor = 3; });
    add("zeros excluded, floor -20", [](FusedStep& s) { s.zeros = ZeroTerms::excluded; s.exponent_floor = -20; });
    add("overflow by the cast", [](FusedStep& s) { s.overflow = OverflowRule::cast; });
    add("IEEE zero signs", [](FusedStep& s) { s.zero_sign = ZeroSign::ieee; });
    add("IEEE zero signs, downward", [](FusedStep& s) {
      s.zero_sign = ZeroSign::ieee;
      s.output.rounding = Rounding::downward;
    });
    for (Rounding r : {Rounding::nearest_even, Rounding::nearest_away, Rounding::toward_zero, Rounding::upward,
                       Rounding::downward, Rounding::odd})
      add(std::string("rounding ") + std::string(numeq::to_string(r)), [r](FusedStep& s) { s.output.rounding = r; });
    add("saturating output", [](FusedStep& s) {
      s.output.overflow = numeq::Overflow::saturate;
      s.overflow = OverflowRule::cast;
    });
    add("flushed outputs", [](FusedStep& s) { s.output.subnormals = numeq::Subnormals::flush_both; });
    for (const numeq::Format* f : {&fmts::fp32, &nv::e8m13, &fmts::bf16, &fmts::fp16, &fmts::e4m3fn, &fmts::tf32,
                                   &fmts::fp64})
      add(std::string("output ") + std::string(f->name), [f](FusedStep& s) { s.output.format = *f; });
    for (int F : {0, 1, 2, 13, 24, 28, 29})
      add("F = " + std::to_string(F), [F](FusedStep& s) { s.fraction_bits = F; });
    for (int n : {1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 31, 32, 33, 48, 64})
      add("n = " + std::to_string(n), [n](FusedStep& s) { s.n = n; });
    for (const numeq::Format* f : {&fmts::fp16, &fmts::bf16, &fmts::e4m3fn, &fmts::e2m1fn})
      add(std::string("c_format ") + std::string(f->name), [f](FusedStep& s) {
        s.c_format = *f;
        s.output.format = *f;
      });
    for (const numeq::Format* f : {&fmts::e4m3, &fmts::e4m3fnuz, &fmts::e5m2fnuz, &fmts::e3m2fn, &fmts::e2m3fn,
                                   &fmts::e2m1fn, &fmts::fp32})
      add(std::string("operands ") + std::string(f->name), [f](FusedStep& s) { s.a_format = s.b_format = *f; });
    add("a fp16, b e5m2", [](FusedStep& s) {
      s.a_format = fmts::fp16;
      s.b_format = fmts::e5m2;
    });
  }
  long steps = 0;
  for (numeq::KernelChoice kern : fast_kernels()) {
    ASSERT_TRUE(detail::set_fused_kernel(kern));
    std::uint64_t seed = 1000;
    for (const auto& [what, s] : variants)
      steps += compare_chains(s, 60, seed++, std::string(kernel_name(kern)) + " " + what);
  }
  std::cout << "[ fast     ] " << variants.size() << " variants: " << steps
            << " steps identical to the general path\n";
  EXPECT_GT(steps, 10000);
}

// Steps whose F keeps every bit (Trainium's fused PE column: the exact sum of a tile's products
// rounded once; the fp8 double_row pair): computed in binary64 where that sum is exact, else by
// the general path. Against the general path on every operand kind the draws give (zeros,
// subnormals, extremes, cancellations, NaN, Inf, doubles that are no value of the format: the
// same errors), under every output rounding, overflow rule and zero-sign rule, and a step whose F
// is one bit short of keeping everything (so not served here, yet still equal).
TEST(FusedFastPath, StepsKeepingEveryBitMatchTheGeneralPath) {
  KernelGuard guard;
  using numeq::core::OverflowRule;
  using numeq::core::ZeroSign;
  std::vector<std::pair<std::string, FusedStep>> steps;
  for (const numeq::Format* in : {&fmts::bf16, &fmts::fp16, &fmts::e4m3, &fmts::e5m2, &fmts::fp32})
    for (const numeq::Format* out : {&fmts::fp32, &numeq::core::trainium::e8m25, &numeq::core::trainium::e8m31})
      for (const Rounding r : {Rounding::nearest_even, Rounding::toward_zero, Rounding::downward, Rounding::upward})
        for (const int n : {2, 7, 128}) {
          FusedStep s;
          s.n = n;
          s.fraction_bits = numeq::core::max_fraction_bits;
          s.a_format = s.b_format = *in;
          s.c_format = fmts::fp32;
          s.output = Cast{*out, r};
          s.overflow = n == 7 ? OverflowRule::infinity : OverflowRule::cast;
          s.zero_sign = n == 2 ? ZeroSign::positive : ZeroSign::ieee;
          steps.push_back({std::string(in->name) + " -> " + std::string(out->name) + " " +
                               std::string(numeq::to_string(r)) + " n = " + std::to_string(n), s});
        }
  // fp32 operands need F = 256 + 298 (products from 2^-298 to below 2^256): one bit less cuts.
  FusedStep short_f = steps.back().second;
  short_f.fraction_bits = 553;
  steps.push_back({"fp32, F one bit short", short_f});
  long compared = 0;
  std::uint64_t seed = 5000;
  for (const auto& [what, s] : steps) compared += compare_chains(s, 40, seed++, what);
  EXPECT_GT(compared, 3000);
  // Terms 2^550 apart whose double sums are exact (the huge ones cancel): only an F that keeps
  // every bit keeps the tiny one, which rounding upward then shows.
  const std::vector<double> a = {0x1.8p127, -0x1.8p127, 0x1p-149}, b = {0x1p127, 0x1p127, 0x1p-149};
  for (const auto& [what, s] : steps) {
    if (s.a_format != fmts::fp32 || s.n < 3) continue;
    const Outcome want = outcome([&] { return detail::fused_chain_reference(a, b, 0.0, 3, s); });
    EXPECT_EQ(outcome([&] { return fused_chain(a, b, 0.0, 3, s); }), want) << what << ": " << show(want);
  }
}

TEST(FusedFastPath, OperandChecksMatchTheGeneralPath) {
  // Which doubles each path takes as values of a format: every pattern of the 8-bit formats, and
  // of the wider ones every pattern with an extreme exponent field (zero and subnormals, the
  // smallest normals, the largest finite values, Inf/NaN) plus random ones; each also nudged off
  // its grid, scaled and pushed past the range, as a (every kernel) and as c.
  KernelGuard guard;
  std::mt19937_64 rng(7);
  long compared = 0;
  const numeq::Format* formats[] = {&fmts::fp16, &fmts::bf16, &fmts::e4m3fn, &fmts::e5m2, &fmts::e4m3,
                                    &fmts::e4m3fnuz, &fmts::e5m2fnuz, &fmts::e3m2fn, &fmts::e2m3fn,
                                    &fmts::e2m1fn, &fmts::tf32, &fmts::fp32};
  const std::vector<numeq::KernelChoice> kernels = fast_kernels();
  for (const numeq::Format* f : formats) {
    std::vector<std::uint64_t> patterns;
    if (f->bits() <= 8) {
      for (std::uint64_t p = 0; p < (std::uint64_t{1} << f->bits()); ++p) patterns.push_back(p);
    } else {
      const std::uint64_t top = (std::uint64_t{1} << f->exponent_bits) - 1;
      const std::uint64_t fractions = std::uint64_t{1} << f->mantissa_bits;
      for (std::uint64_t field : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{2}, top - 1, top})
        for (std::uint64_t sign : {std::uint64_t{0}, std::uint64_t{1}})
          for (std::uint64_t i = 0; i < std::min<std::uint64_t>(fractions, 512); ++i) {
            const std::uint64_t fraction = fractions <= 512 ? i : rng() % fractions;
            patterns.push_back(sign << (f->bits() - 1) | field << f->mantissa_bits | fraction);
          }
      for (int i = 0; i < 3000; ++i) patterns.push_back(rng() & ((std::uint64_t{1} << f->bits()) - 1));
    }
    FusedStep s = nv::h100_bf16;
    s.n = 1;
    s.a_format = s.b_format = s.c_format = *f;
    s.output = Cast{fmts::fp64, Rounding::toward_zero};
    s.overflow = numeq::core::OverflowRule::cast;
    ASSERT_TRUE(detail::fused_fast_path_applies(s)) << f->name;
    const double one[1] = {1.0};
    for (std::uint64_t pattern : patterns) {
      const double x = numeq::decode(pattern << f->storage_shift, *f);
      for (double v : {x, std::nextafter(x, inf), x * 1.5, std::ldexp(x, 1), std::ldexp(x, -1),
                       x + std::ldexp(1.0, -30)}) {
        const double xs[1] = {v};
        const Outcome want_a = outcome([&] { return detail::fused_step_reference(xs, one, 0.0, s); });
        for (numeq::KernelChoice kern : kernels) {
          ASSERT_TRUE(detail::set_fused_kernel(kern));
          const Outcome got = outcome([&] { return fused_step(xs, one, 0.0, s); });
          ASSERT_EQ(got, want_a) << kernel_name(kern) << " " << f->name << " a = " << v << ": fast " << show(got)
                                 << ", general " << show(want_a);
          ++compared;
        }
        const Outcome want_c = outcome([&] { return detail::fused_step_reference(one, one, v, s); });
        const Outcome got_c = outcome([&] { return fused_step(one, one, v, s); });
        ASSERT_EQ(got_c, want_c) << f->name << " c = " << v << ": fast " << show(got_c) << ", general "
                                 << show(want_c);
        ++compared;
      }
    }
  }
  std::cout << "[ fast     ] operand checks: " << compared << " steps identical to the general path\n";
}

TEST(FusedFastPath, AdversarialCases) {
  // Hand-picked edges, on every kernel: products that underflow binary64 once scaled, a product
  // and c far apart, exact cancellation, zeros of both signs, sums that overflow the output, c at
  // the maximum, all terms below the grid, and the largest sums the int64 lanes hold.
  KernelGuard guard;
  const double bmax = numeq::max_finite(fmts::bf16), bsub = numeq::min_subnormal(fmts::bf16);
  const double hmax = 65504.0, hsub = std::ldexp(1.0, -24);
  const double emax = 448.0, esub = std::ldexp(1.0, -9);
  const float fmax = std::numeric_limits<float>::max(), fden = std::numeric_limits<float>::denorm_min();
  struct Case {
    const char* what;
    FusedStep step;
    std::vector<double> a, b;
    double c;
  };
  std::vector<Case> cases = {
      {"bf16 max^2 and min^2", nv::h100_bf16, {bmax, bsub}, {bmax, -bsub}, 0.0},
      {"bf16 tiny products under a huge c", nv::h100_bf16, {bsub, bsub, -bsub}, {bsub, 1.0, 1.0}, fmax},
      {"bf16 tiny c under huge products", nv::h100_bf16, {bmax, -bmax}, {1.0, 1.0}, fden},
      {"bf16 overflow", nv::h100_bf16, std::vector<double>(16, bmax), std::vector<double>(16, bmax), 0.0},
      {"bf16 cancellation to zero", nv::h100_bf16, {1.0, -1.0}, {3.0, 3.0}, 0.0},
      {"bf16 negative zeros", nv::h100_bf16, {-0.0, -0.0}, {1.0, -0.0}, -0.0},
      {"bf16 zero times huge (fp32_emin)", nv::h100_bf16, {0.0, std::ldexp(1.0, -60)},
       {std::ldexp(1.0, 127), std::ldexp(1.0, -60)}, 0.0},
      {"bf16 c = -max", nv::h100_bf16, {1.0}, {1.0}, -static_cast<double>(fmax)},
      {"bf16 c subnormal only", nv::h100_bf16, {}, {}, fden},
      {"fp16 all terms below the grid", nv::h100_fp16, {hsub, -hsub}, {hsub, hsub}, 1.0},
      {"fp16 64 max products", [] { FusedStep s = nv::h100_fp16; s.n = 64; s.fraction_bits = 29; return s; }(),
       std::vector<double>(64, hmax), std::vector<double>(64, -hmax), -static_cast<double>(fmax)},
      {"fp16 f16 overflow", nv::h100_fp16_f16, std::vector<double>(16, hmax), std::vector<double>(16, hmax), 0.0},
      {"fp16 f16 subnormal result", nv::h100_fp16_f16, {hsub, hsub}, {0.5, 1.0}, 0.0},
      {"e4m3 32 max products", nv::h100_e4m3, std::vector<double>(32, emax), std::vector<double>(32, emax), 0.0},
      {"e4m3 subnormals", nv::h100_e4m3, {esub, -esub, esub}, {esub, esub, 448.0}, 0.0},
      {"tf32 spread", nv::h100_tf32, {std::ldexp(1.0, 127), std::ldexp(1.0, -126)}, {2.0, std::ldexp(1.0, -10)},
       std::ldexp(1.0, -149)},
  };
  for (numeq::KernelChoice kern : fast_kernels()) {
    ASSERT_TRUE(detail::set_fused_kernel(kern));
    for (const Case& k : cases) {
      for (bool ieee_zeros : {false, true}) {
        FusedStep s = k.step;
        if (ieee_zeros) s.zero_sign = numeq::core::ZeroSign::ieee;
        const Outcome got = outcome([&] { return fused_chain(k.a, k.b, k.c, s); });
        const Outcome want = outcome([&] { return detail::fused_chain_reference(k.a, k.b, k.c, k.a.size(), s); });
        EXPECT_EQ(got, want) << kernel_name(kern) << " " << k.what << ": fast " << show(got) << ", general "
                             << show(want);
      }
    }
  }
}

TEST(FusedFastPath, LongChainsAsInAMatmul) {
  // K = 1024 bf16 and fp8 products (the emulated GEMM's inner loop), c growing along the chain.
  KernelGuard guard;
  Draw draw(99);
  long steps = 0;
  for (numeq::KernelChoice kern : fast_kernels()) {
    ASSERT_TRUE(detail::set_fused_kernel(kern));
    for (const auto* step : {&nv::h100_bf16, &nv::h100_fp16, &nv::h100_e4m3, &nv::h100_tf32, &nv::a100_bf16,
                             &nv::h100_fp16_f16}) {
      for (int t = 0; t < 30; ++t) {
        const std::size_t K = 1024 + static_cast<std::size_t>(t % 3) * 5;
        std::vector<double> a(K), b(K);
        for (std::size_t i = 0; i < K; ++i) {
          a[i] = draw(step->a_format, t % 5 == 4 ? 2 : 0, true);
          b[i] = draw(step->b_format, 0, true);
        }
        const std::uint64_t general_before = detail::fused_general_steps();
        const Outcome got = outcome([&] { return fused_chain(a, b, 0.0, *step); });
        // Moderate finite values: the fast path computes every step itself. (The extremes of the
        // other chains overflow the output, and an Inf c goes to the general path.)
        if (t % 5 != 4) {
          EXPECT_EQ(detail::fused_general_steps(), general_before) << kernel_name(kern) << " chain " << t;
        }
        const Outcome want = outcome([&] { return detail::fused_chain_reference(a, b, 0.0, K, *step); });
        EXPECT_EQ(got, want) << kernel_name(kern) << " " << step->a_format.name << " chain " << t;
        steps += static_cast<long>((K + static_cast<std::size_t>(step->n) - 1) / static_cast<std::size_t>(step->n));
      }
    }
  }
  std::cout << "[ fast     ] long chains: " << steps << " steps identical to the general path\n";
}

TEST(FusedFastPath, WithoutTheFastPathTheVectorsStillReproduce) {
  // The general path alone (numeq::KernelChoice::none) still reproduces the measured vectors: the
  // reference the fast path is compared with is itself checked against the GPU.
  KernelGuard guard;
  ASSERT_TRUE(detail::set_fused_kernel(numeq::KernelChoice::none));
  for (const Expected& e : expected_sets()) {
    const Count r = count(load(e.gpu, e.fmt), e.out, e.c_mode, chain(e.step));
    EXPECT_EQ(r.reproduced, r.total) << name(e);
  }
}

}  // namespace
