// matmul (matmul.cpp) against the plan walk: the host-fma path does not depend on threads and is
// the std::fma chain; every matmul kernel the CPU has (detail::set_matmul_kernel) gives the walk's
// bits on awkward shapes, special values, fused chains, Trainium's tilings and long K.

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

#include "evaluate_test_support.hpp"

namespace {

using namespace evaluate_test;  // Cast, Rounding, core, formats, random_value, plan_of

TEST(Matmul, DoesNotDependOnThreads) {
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

// ---- matmul kernels (detail::set_matmul_kernel) against the plan walk ----
//
// The kernels lay independent chains side by side in vectors and block the loops for the caches;
// these tests compare every kernel the CPU has with the element-by-element walk of the same plan
// (numeq::KernelChoice::none), bit for bit, on shapes that are not multiples of any vector or block
// width, with and without c, with subnormals, signed zeros, Inf and NaN, on 1 and 2 threads.

// Same double, or both NaN (a NaN's payload is not part of any format's result here).
bool same_value(double x, double y) {
  return (std::isnan(x) && std::isnan(y)) || std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
}

struct KernelGuard {
  ~KernelGuard() {
    core::detail::set_matmul_kernel(numeq::KernelChoice::automatic);
    numeq::set_num_threads(0);
  }
};

// The kernels this CPU can run (the walk, none, is the reference).
std::vector<numeq::KernelChoice> kernels_here() {
  using K = numeq::KernelChoice;
  std::vector<K> out;
  for (const K k : {K::portable, K::avx2, K::avx512})
    if (core::detail::set_matmul_kernel(k)) out.push_back(k);
  core::detail::set_matmul_kernel(K::automatic);
  return out;
}

double sweep_scale() {
  const char* s = std::getenv("NUMEQ_SWEEP_SCALE");
  return s ? std::max(0.01, std::atof(s)) : 1.0;
}

// matmul under `plan` with every kernel here and 1 and 2 threads, each against the walk.
void expect_kernels_match_walk(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                               const core::Plan& plan, const std::string& what) {
  KernelGuard guard;
  core::detail::set_matmul_kernel(numeq::KernelChoice::none);
  const xt::xarray<double> want = core::matmul(a, b, c, plan);
  for (const auto k : kernels_here())
    for (const int threads : {1, 2}) {
      core::detail::set_matmul_kernel(k);
      numeq::set_num_threads(threads);
      const xt::xarray<double> got = core::matmul(a, b, c, plan);
      ASSERT_EQ(got.shape(), want.shape()) << what;
      std::size_t bad = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        if (!same_value(got.data()[i], want.data()[i]) && bad++ < 5)
          ADD_FAILURE() << what << " kernel " << static_cast<int>(k) << " threads " << threads << " element " << i
                        << ": " << got.data()[i] << " vs walk " << want.data()[i];
      ASSERT_EQ(bad, 0u) << what;
    }
}

// Shapes (batch of a, M, N, K) that cut across every vector width (8, 16, 32 columns), register
// block (4, 6, 12 rows), k pass (256) and step (4 .. 32 products).
struct MatmulShape {
  std::size_t batch, M, N, K;
};
const std::vector<MatmulShape> kAwkwardShapes = {
    {1, 1, 1, 1}, {1, 1, 17, 1}, {1, 13, 1, 5}, {2, 7, 33, 31}, {1, 25, 45, 257}, {1, 12, 32, 256},
    {3, 5, 19, 17}, {1, 37, 70, 3}, {1, 2, 9, 600}};

TEST(MatmulKernels, Fp32FmaChainsMatchTheWalk) {
  const core::Plan plan = core::plan_for(core::platform_by_name("cuda_core.fp32"), core::Operation::matmul, "fp32", "fp32");
  std::mt19937_64 g(31);
  std::uniform_int_distribution<int> pick(0, 19);
  // Mostly random fp32 values; some subnormals, signed zeros, values that overflow when summed,
  // and (in `special`) Inf and NaN.
  const auto value = [&](bool special) {
    switch (pick(g)) {
      case 0: return static_cast<double>(std::numeric_limits<float>::denorm_min()) * (1 + pick(g));
      case 1: return -static_cast<double>(FLT_MIN) * 0.75;
      case 2: return 0.0;
      case 3: return -0.0;
      case 4: return static_cast<double>(pick(g) < 10 ? 3.0e38f : -3.0e38f);
      case 5: return special ? (pick(g) < 10 ? INFINITY : -INFINITY) : 1.0;
      case 6: return special ? NAN : -1.0;
      default: return random_value(g);
    }
  };
  for (const MatmulShape& s : kAwkwardShapes)
    for (const bool special : {false, true}) {
      xt::xarray<double> a = xt::xarray<double>::from_shape({s.batch, s.M, s.K});
      xt::xarray<double> b = xt::xarray<double>::from_shape({s.K, s.N});
      xt::xarray<double> c = xt::xarray<double>::from_shape({s.M, s.N});
      for (double& v : a) v = value(special);
      for (double& v : b) v = value(special);
      for (double& v : c) v = value(special);
      const std::string what = std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) +
                               (special ? " with Inf/NaN" : "");
      expect_kernels_match_walk(a, b, nullptr, plan, what);
      expect_kernels_match_walk(a, b, &c, plan, what + " + c");
    }
  // And the kernel against a plain std::fma loop, where no walk is involved at all.
  KernelGuard guard;
  xt::xarray<double> a = xt::xarray<double>::from_shape({5, 300}), b = xt::xarray<double>::from_shape({300, 37});
  for (double& v : a) v = value(false);
  for (double& v : b) v = value(false);
  for (const auto k : kernels_here()) {
    core::detail::set_matmul_kernel(k);
    const xt::xarray<double> got = core::matmul(a, b, nullptr, plan);
    for (std::size_t m = 0; m < 5; ++m)
      for (std::size_t n = 0; n < 37; ++n) {
        float acc = 0.0f;
        for (std::size_t i = 0; i < 300; ++i) acc = std::fma(static_cast<float>(a(m, i)), static_cast<float>(b(i, n)), acc);
        ASSERT_TRUE(same_value(got(m, n), static_cast<double>(acc))) << m << " " << n;
      }
  }
}

// A value of `f`: random significand bits at an exponent drawn from [lo, hi] (subnormals of f
// below its emin), sometimes a signed zero or the largest finite value.
double format_value(std::mt19937_64& g, const numeq::Format& f, int lo, int hi) {
  std::uniform_int_distribution<int> e(lo, hi), pick(0, 39);
  std::uniform_real_distribution<double> u(1.0, 2.0);
  const int p = pick(g);
  if (p == 0) return 0.0;
  if (p == 1) return -0.0;
  if (p == 2) return numeq::max_finite(f) * (pick(g) < 20 ? 1 : -1);
  const double x = std::ldexp(u(g), e(g)) * (pick(g) < 20 ? 1 : -1);
  return numeq::round_to_format(x, Cast{f, Rounding::toward_zero});
}

TEST(MatmulKernels, FusedChainsMatchTheWalk) {
  struct Case {
    std::string platform, in_fmt, out_fmt;
  };
  // bf16/fp16 steps of 16 (Hopper), 8 (Ampere), 4 (Volta), the fp16 accumulator (nearest-even
  // output, c in fp16), fp8 with the e8m13 cut and without it (B200 tcgen05: one step of 32,
  // F = 25), tf32 (an input cast), a bf16 epilogue cast.
  const std::vector<Case> cases = {{"nvidia.h100", "bf16", "fp32"},  {"nvidia.h100", "fp16", "fp32"},
                                   {"nvidia.h100", "fp16", "fp16"},  {"nvidia.h100", "e4m3fn", "fp32"},
                                   {"nvidia.h100", "fp32", "fp32"},  {"nvidia.h100", "bf16", "bf16"},
                                   {"nvidia.a100", "bf16", "fp32"},  {"nvidia.v100", "fp16", "fp32"},
                                   {"nvidia.b200.tcgen05", "e5m2", "fp32"}};
  std::mt19937_64 g(47);
  for (const Case& cs : cases) {
    const core::Plan plan = core::plan_for(core::platform_by_name(cs.platform), core::Operation::matmul, cs.in_fmt,
                                           cs.out_fmt);
    const numeq::Format& in = numeq::format_by_name(cs.in_fmt);
    const numeq::Format& out = numeq::format_by_name(cs.out_fmt);
    // Exponent spreads: ordinary values; values spread wide (terms cut away, subnormal inputs,
    // results below the output's normal range, exact cancellations of small integers); huge
    // values (results that overflow).
    const int emax = numeq::unpack_double(numeq::max_finite(in)).exponent;
    const std::vector<std::pair<int, int>> ranges = {
        {-3, 3}, {in.emin() - in.mantissa_bits, 4}, {emax - 3, emax}, {0, 1}};
    for (const MatmulShape& s : kAwkwardShapes)
      for (const auto& [lo, hi] : ranges) {
        xt::xarray<double> a = xt::xarray<double>::from_shape({s.batch, s.M, s.K});
        xt::xarray<double> b = xt::xarray<double>::from_shape({s.K, s.N});
        xt::xarray<double> c = xt::xarray<double>::from_shape({s.N});
        for (double& v : a) v = format_value(g, in, lo, hi);
        for (double& v : b) v = format_value(g, in, lo, hi);
        if (lo == 0) {  // small integers: many sums cancel to exactly zero
          std::uniform_int_distribution<int> small(-2, 2);
          for (double& v : a) v = small(g);
          for (double& v : b) v = small(g);
        }
        for (double& v : c) v = format_value(g, out, -4, 4);
        const std::string what = cs.platform + " " + cs.in_fmt + "->" + cs.out_fmt + " " + std::to_string(s.M) + "x" +
                                 std::to_string(s.N) + "x" + std::to_string(s.K) + " exponents " +
                                 std::to_string(lo) + ".." + std::to_string(hi);
        expect_kernels_match_walk(a, b, nullptr, plan, what);
        expect_kernels_match_walk(a, b, &c, plan, what + " + c");
      }
  }
}

TEST(MatmulKernels, FusedChainsWithSpecialsAndUnusualSteps) {
  std::mt19937_64 g(53);
  // Steps off the platforms' beaten path: zeros out of the maximum, IEEE zero signs (a zero sum
  // goes to the walk), an exponent floor, an odd n, F = 29, nearest-even fp32 output, c last.
  core::FusedStep odd = core::nvidia::h100_bf16;
  odd.n = 5;
  odd.fraction_bits = 29;
  odd.zeros = core::ZeroTerms::excluded;
  odd.zero_sign = core::ZeroSign::ieee;
  odd.exponent_floor = -126;
  odd.output = Cast{formats::fp32, Rounding::nearest_even};
  core::Plan last = plan_of(core::fused(core::nvidia::h100_fp16));
  last.c_placement = core::CPlacement::last;
  core::Plan initial = plan_of(core::fused(core::nvidia::a100_bf16));
  initial.initial = -0.0;
  // Operands of 23 fraction bits: the kernel's double lanes (narrower ones take float lanes).
  core::FusedStep wide = core::nvidia::h100_bf16;
  wide.a_format = formats::fp32;
  wide.b_format = formats::fp32;
  const std::vector<std::pair<core::Plan, const numeq::Format*>> plans = {{plan_of(core::fused(odd)), &formats::bf16},
                                                                         {last, &formats::fp16},
                                                                         {initial, &formats::bf16},
                                                                         {plan_of(core::fused(wide)), &formats::fp32}};
  for (const auto& [plan, in] : plans)
    for (const MatmulShape& s : kAwkwardShapes) {
      xt::xarray<double> a = xt::xarray<double>::from_shape({s.batch, s.M, s.K});
      xt::xarray<double> b = xt::xarray<double>::from_shape({s.K, s.N});
      xt::xarray<double> c = xt::xarray<double>::from_shape({s.M, s.N});
      for (double& v : a) v = format_value(g, *in, -20, 20);
      for (double& v : b) v = format_value(g, *in, -20, 20);
      for (double& v : c) v = format_value(g, formats::fp32, -20, 20);
      const std::string what = plan.reduction.fused.n == 5 ? "odd step"
                               : plan.initial               ? "initial"
                               : in == &formats::fp32       ? "fp32 operands"
                                                            : "c last";
      expect_kernels_match_walk(a, b, nullptr, plan, what);
      expect_kernels_match_walk(a, b, &c, plan, what + " + c");
      // An Inf and a NaN in the operands, and a c that is not an fp32 value of the step's
      // c_format (fp16 for the fp16 accumulator) send elements or the whole matmul to the walk.
      a.data()[0] = INFINITY;
      b.data()[b.size() - 1] = NAN;
      expect_kernels_match_walk(a, b, &c, plan, what + " Inf/NaN");
    }
  // Initial c that are not finite values of c_format: NaN and Inf (walked), and, for an fp16
  // accumulator, a c that is no fp16 value (an error, as on the walk).
  const core::Plan f16 = core::plan_for(core::platform_by_name("nvidia.h100"), core::Operation::matmul, "fp16", "fp16");
  xt::xarray<double> a = xt::xarray<double>::from_shape({3, 20}), b = xt::xarray<double>::from_shape({20, 11});
  for (double& v : a) v = format_value(g, formats::fp16, -3, 3);
  for (double& v : b) v = format_value(g, formats::fp16, -3, 3);
  xt::xarray<double> c = xt::zeros<double>({3, 11});
  c(0, 0) = NAN;
  c(1, 2) = -INFINITY;
  c(2, 10) = -0.0;
  expect_kernels_match_walk(a, b, &c, f16, "fp16 c with NaN, -Inf, -0");
  c(1, 1) = 1.0 + 0x1p-20;
  KernelGuard guard;
  for (const auto k : kernels_here()) {
    core::detail::set_matmul_kernel(k);
    EXPECT_THROW(core::matmul(a, b, &c, f16), numeq::error);
  }
}

TEST(MatmulKernels, BroadcastBatchesMatchTheWalk) {
  // Batch axes of both operands, broadcast as numpy does: each result matrix reads its own b.
  std::mt19937_64 g(61);
  xt::xarray<double> a = xt::xarray<double>::from_shape({2, 1, 5, 19}), b = xt::xarray<double>::from_shape({3, 19, 21});
  xt::xarray<double> c = xt::xarray<double>::from_shape({3, 1, 21});
  for (const auto& [platform, in] : {std::pair{"cuda_core.fp32", "fp32"}, std::pair{"nvidia.h100", "bf16"}}) {
    const numeq::Format& f = numeq::format_by_name(in);
    for (double& v : a) v = format_value(g, f, -6, 6);
    for (double& v : b) v = format_value(g, f, -6, 6);
    for (double& v : c) v = format_value(g, formats::fp32, -6, 6);
    const core::Plan plan = core::plan_for(core::platform_by_name(platform), core::Operation::matmul, in, "fp32");
    expect_kernels_match_walk(a, b, nullptr, plan, std::string(platform) + " batches");
    expect_kernels_match_walk(a, b, &c, plan, std::string(platform) + " batches + c");
  }
}

TEST(MatmulKernels, LargeFusedMatmulMatchesTheWalk) {
  // One size where tasks hold many rows and both threads work (scaled down under sanitizers).
  const auto n = static_cast<std::size_t>(std::max(24.0, 160 * sweep_scale()));
  const core::Plan plan = core::plan_for(core::platform_by_name("nvidia.h100"), core::Operation::matmul, "bf16", "fp32");
  std::mt19937_64 g(59);
  xt::xarray<double> a = xt::xarray<double>::from_shape({n, n + 3}), b = xt::xarray<double>::from_shape({n + 3, n + 5});
  for (double& v : a) v = format_value(g, formats::bf16, -8, 8);
  for (double& v : b) v = format_value(g, formats::bf16, -8, 8);
  expect_kernels_match_walk(a, b, nullptr, plan, "bf16 " + std::to_string(n));
}

// Trainium's plans (fp32 chains cut into K tiles added into PSUM, kernels::Fp32Tiling) under
// every option the Trainium tests exercise: pe_order (sequential and pairwise take the kernel,
// fused and the others the walk, which this also checks picks them), k_tile (tiles of 1, odd
// lengths, a last partial tile), psum_group, fp8 double_row, split_k and the non-default
// arithmetic. Values: ordinary, far apart (products below fp32's subnormal range), huge (sums
// that overflow), exact cancellations (a[k + 1] = -a[k], b[k + 1] = b[k]), signed zeros, and Inf
// and NaN in some operands. Each against the walk of the same plan (numeq::KernelChoice::none).
TEST(MatmulKernels, TrainiumTilesMatchTheWalk) {
  struct Case {
    std::string platform, in_fmt, out_fmt;
  };
  std::vector<Case> cases;
  for (const std::string order : {"sequential", "pairwise", "fused"})
    for (const std::string tiling : {"", "k_tile=1", "k_tile=7", "k_tile=100", "k_tile=64,psum_group=3",
                                     "k_tile=32,psum_group=1", "psum_group=2"}) {
      if (order == "fused" && tiling != "k_tile=64,psum_group=3") continue;  // the walk's: two suffice
      cases.push_back({"trainium.trn1[pe_order=" + order + (tiling.empty() ? "" : "," + tiling) + "]", "bf16", "fp32"});
    }
  for (const std::string variant : {"trainium.trn2", "trainium.trn2[pe_order=pairwise]", "trainium.trn2[split_k=2]",
                                    "trainium.trn2[products=bf16]", "trainium.trn2[psum_rounding=toward_zero]",
                                    "trainium.trn2[pe_rounding=toward_zero]", "trainium.trn2[accumulator_bits=25]"})
    cases.push_back({variant, "bf16", "fp32"});
  cases.push_back({"trainium.trn2", "bf16", "bf16"});
  cases.push_back({"trainium.trn2[pe_order=pairwise,k_tile=37]", "fp16", "fp16"});
  cases.push_back({"trainium.trn1", "fp32", "fp32"});
  cases.push_back({"trainium.trn1[pe_order=pairwise,k_tile=100]", "fp32", "fp32"});
  cases.push_back({"trainium.trn2[fp32_matmul=bf16x4]", "fp32", "fp32"});
  cases.push_back({"trainium.trn2", "e5m2", "fp32"});
  cases.push_back({"trainium.trn2[fp8_double_row=on,pe_order=pairwise,k_tile=64,psum_group=2]", "e4m3", "fp32"});
  const std::vector<MatmulShape> shapes = {{1, 1, 1, 1}, {2, 7, 33, 31}, {1, 5, 37, 129}, {1, 6, 20, 300}};
  std::mt19937_64 g(67);
  for (const Case& cs : cases) {
    const core::Plan plan = core::plan_for(core::platform_by_name(cs.platform), core::Operation::matmul, cs.in_fmt,
                                           cs.out_fmt);
    const numeq::Format& in = numeq::format_by_name(cs.in_fmt);
    const int emax = numeq::unpack_double(numeq::max_finite(in)).exponent;
    const std::vector<std::pair<int, int>> ranges = {{-3, 3}, {in.emin() - in.mantissa_bits, 4}, {emax - 3, emax}};
    for (const MatmulShape& s : shapes)
      for (std::size_t r = 0; r <= ranges.size(); ++r) {
        const bool cancel = r == ranges.size();  // exact cancellations, then Inf and NaN
        const auto [lo, hi] = ranges[cancel ? 0 : r];
        xt::xarray<double> a = xt::xarray<double>::from_shape({s.batch, s.M, s.K});
        xt::xarray<double> b = xt::xarray<double>::from_shape({s.K, s.N});
        xt::xarray<double> c = xt::xarray<double>::from_shape({s.M, s.N});
        for (double& v : a) v = format_value(g, in, lo, hi);
        for (double& v : b) v = format_value(g, in, lo, hi);
        for (double& v : c) v = format_value(g, formats::fp32, -4, 4);
        if (cancel) {
          for (std::size_t i = 0; i + 1 < a.size(); i += 2) a.data()[i + 1] = -a.data()[i];
          for (std::size_t k = 0; k + 1 < s.K; k += 2)
            for (std::size_t n = 0; n < s.N; ++n) b(k + 1, n) = b(k, n);
        }
        const std::string what = cs.platform + " " + cs.in_fmt + "->" + cs.out_fmt + " " + std::to_string(s.M) + "x" +
                                 std::to_string(s.N) + "x" + std::to_string(s.K) +
                                 (cancel ? " cancelling" : " exponents " + std::to_string(lo) + ".." + std::to_string(hi));
        expect_kernels_match_walk(a, b, nullptr, plan, what);
        expect_kernels_match_walk(a, b, &c, plan, what + " + c");
        if (cancel && s.K > 1) {
          a.data()[1] = INFINITY;
          b.data()[b.size() - 1] = NAN;
          c.data()[0] = -INFINITY;
          expect_kernels_match_walk(a, b, &c, plan, what + " Inf/NaN");
        }
      }
  }
}

// The pairwise tile's binary counter is the plan's level-by-level tree for every tile length
// (odd leaves going up unchanged): one tile of each length up to 300, every kernel.
TEST(MatmulKernels, PairwiseTilesOfEveryLength) {
  std::mt19937_64 g(71);
  for (std::size_t K = 1; K <= 300; K += K < 40 ? 1 : 13) {
    core::Plan plan = core::plan_for(core::platform_by_name("trainium.trn1[pe_order=pairwise]"), core::Operation::matmul,
                                     "bf16", "fp32");
    ASSERT_EQ(plan.reduction.kind, core::NodeKind::chunked);
    plan.reduction.chunk = K;  // one tile of K rows (tiles above 128 are no platform's, but a valid plan)
    xt::xarray<double> a = xt::xarray<double>::from_shape({std::size_t{3}, K}), b = xt::xarray<double>::from_shape({K, std::size_t{35}});
    for (double& v : a) v = format_value(g, formats::bf16, -12, 12);
    for (double& v : b) v = format_value(g, formats::bf16, -12, 12);
    expect_kernels_match_walk(a, b, nullptr, plan, "pairwise tile of " + std::to_string(K));
  }
}


// K past the fp32 chain kernels' streaming point (2^16, matmul.cpp: one PSUM group or tile of
// K at a time for products with few outputs) under every Trainium tiling: the walk's bits.
TEST(MatmulKernels, LongKWithFewOutputsStreamsBitForBit) {
  std::mt19937_64 g(2027);
  std::normal_distribution<double> normal;
  const std::size_t K = (std::size_t{1} << 16) + 1000;
  for (const char* name : {"trainium.trn2", "trainium.trn2[k_tile=64]", "trainium.trn2[k_tile=32,psum_group=3]",
                           "trainium.trn2[pe_order=pairwise,k_tile=37]", "trainium.trn1"}) {
    const std::string in = std::string(name) == "trainium.trn1" ? "fp32" : "bf16";
    const core::Plan plan = core::plan_for(core::platform_by_name(name), core::Operation::matmul, in, "fp32");
    const Cast cast{numeq::format_by_name(in)};
    for (const auto& [M, N] : {std::pair<std::size_t, std::size_t>{1, 1}, {2, 3}}) {
      xt::xarray<double> a = xt::xarray<double>::from_shape({M, K}), b = xt::xarray<double>::from_shape({K, N});
      for (double& x : a) x = numeq::round_to_format(normal(g), cast);
      for (double& x : b) x = numeq::round_to_format(normal(g), cast);
      const xt::xarray<double> c = xt::ones<double>({N}) * 0.25;
      expect_kernels_match_walk(a, b, nullptr, plan, std::string(name) + " " + std::to_string(M) + "x" + std::to_string(N));
      expect_kernels_match_walk(a, b, &c, plan, std::string(name) + " with c");
    }
  }
}

}  // namespace
