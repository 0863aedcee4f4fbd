// Diagnoses of failing outputs (cases/diagnosis.hpp, Verdict::diagnoses). Each planted mistake is
// written here in its textbook form, in plain double arithmetic with an explicit rounding after
// each step (a bf16 accumulator loop, a K tile left out of the sum, an output shifted by one
// row, rows scaled, an int16 accumulator wrapping, inputs saturated at a format's largest value),
// never through the diagnosis code; the verdict must name the mistake first. Correct outputs of
// another platform, failing only a bit-exact check, get no diagnosis.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xview.hpp>

#include "numeq/cases/diagnosis.hpp"
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

Array generate(std::uint64_t seed, std::vector<std::size_t> shape, const numeq::Format& f = fmts::bf16,
               double scale = 1.0) {
  return cases::generate(cases::Generator{cases::Distribution::normal, seed, scale}, f, shape);
}

double bf16(double x) { return numeq::round_to_format(x, Cast{fmts::bf16}); }
double fp32(double x) { return numeq::round_to_format(x, Cast{fmts::fp32}); }

cases::Verdict judged(const Array& device, const cases::Op& op, const std::string& platform,
                      cases::Tier accept = cases::Tier::probabilistic) {
  cases::CompareOptions o;
  o.accept = accept;
  return cases::compare(device, op, core::platform_by_name(platform), o);
}

void expect_first(const cases::Verdict& v, const std::string& kind, double at_least = 0.99) {
  ASSERT_FALSE(v.passed) << cases::describe(v);
  ASSERT_FALSE(v.diagnoses.empty()) << cases::describe(v);
  EXPECT_EQ(v.diagnoses.front().kind, kind) << cases::describe(v);
  EXPECT_GE(v.diagnoses.front().explains, at_least) << cases::describe(v);
  EXPECT_NE(cases::describe(v).find("diagnoses"), std::string::npos);
}

struct Gemm {
  std::size_t M = 24, K = 384, N = 40;
  Array a = generate(11, {24, 384}), b = generate(12, {384, 40});
  cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32});
  double product(std::size_t i, std::size_t j, std::size_t k) const { return a(i, k) * b(k, j); }
};

// for (k) acc = bf16(acc + a[i,k] * b[k,j]), acc from 0: the textbook bf16 accumulator.
TEST(Diagnosis, TextbookBf16AccumulatorIsANarrowAccumulator) {
  const Gemm g;
  Array out = xt::zeros<double>({g.M, g.N});
  for (std::size_t i = 0; i < g.M; ++i)
    for (std::size_t j = 0; j < g.N; ++j) {
      double acc = 0;
      for (std::size_t k = 0; k < g.K; ++k) acc = bf16(acc + g.product(i, j, k));
      out(i, j) = acc;
    }
  const cases::Verdict v = judged(out, g.op, "nvidia.h100");
  expect_first(v, "narrow_accumulator");
  EXPECT_NE(v.diagnoses.front().detail.find("bf16 running sum"), std::string::npos) << v.diagnoses.front().detail;
  EXPECT_NE(v.diagnoses.front().evidence.find("bit for bit"), std::string::npos);
}

// NKI's form: each 128-row K tile's product in fp32 (exact here, then rounded once: the tile's
// sum is within fp32 of the PE array's), added into a bf16 SBUF tile. The tile sums are those of
// trainium.trn2 itself, so the diagnosis reproduces them bit for bit.
TEST(Diagnosis, KTilesSummedInABf16TileAreANarrowAccumulator) {
  const Gemm g;
  const core::Platform trn2 = core::platform_by_name("trainium.trn2");
  Array out = xt::zeros<double>({g.M, g.N});
  for (std::size_t t = 0; t * 128 < g.K; ++t) {
    const Array at = xt::view(g.a, xt::all(), xt::range(t * 128, (t + 1) * 128));
    const Array bt = xt::view(g.b, xt::range(t * 128, (t + 1) * 128), xt::all());
    const Array part = cases::matmul(at, bt, nullptr, "bf16", Cast{fmts::fp32}).emulate(trn2, {}).values;
    for (std::size_t i = 0; i < out.size(); ++i) out.data()[i] = bf16(out.data()[i] + part.data()[i]);
  }
  const cases::Verdict v = judged(out, g.op, "trainium.trn2");
  expect_first(v, "narrow_accumulator");
  EXPECT_NE(v.diagnoses.front().detail.find("128 K terms"), std::string::npos) << v.diagnoses.front().detail;
}

// A K loop that stops one tile short: the last 128 rows of K never accumulated.
TEST(Diagnosis, ALoopOneTileShortIsAMissingKTile) {
  const Gemm g;
  Array a = g.a;
  xt::view(a, xt::all(), xt::range(256, 384)) = 0.0;
  const Array out = cases::matmul(a, g.b, nullptr, "bf16", Cast{fmts::fp32})
                        .emulate(core::platform_by_name("nvidia.h100"), {}).values;
  const cases::Verdict v = judged(out, g.op, "nvidia.h100");
  expect_first(v, "missing_k_tile");
  EXPECT_NE(v.diagnoses.front().detail.find("the last K tile (rows 256..383"), std::string::npos)
      << v.diagnoses.front().detail;
}

// A K tile added twice, in double arithmetic (the mistaken kernel's order is unknown): within the bound.
TEST(Diagnosis, ATileAddedTwiceIsAnExtraKTile) {
  const Gemm g;
  Array out = xt::zeros<double>({g.M, g.N});
  for (std::size_t i = 0; i < g.M; ++i)
    for (std::size_t j = 0; j < g.N; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < g.K; ++k) s += g.product(i, j, k) * (k >= 128 && k < 256 ? 2 : 1);
      out(i, j) = fp32(s);
    }
  const cases::Verdict v = judged(out, g.op, "nvidia.h100");
  expect_first(v, "extra_k_tile", 0.9);
  EXPECT_NE(v.diagnoses.front().detail.find("K tile 1 (rows 128..255"), std::string::npos)
      << v.diagnoses.front().detail;
}

// out[i] = c[i + 1]: an off-by-one row index; rows scaled by a per-row factor.
// A sum (and a sum of squares) whose loop stops one tile short: the last 128 terms of each row
// never added, computed in double (the mistaken kernel's order is unknown): named within the bound.
TEST(Diagnosis, ASumOneTileShortIsAMissingKTile) {
  const Array x = generate(21, {16, 300}, fmts::fp32);
  const cases::Op sum = cases::reduce(cases::Reduction::sum, x, -1, "fp32", Cast{fmts::fp32});
  Array out = xt::zeros<double>({16});
  for (std::size_t r = 0; r < 16; ++r) {
    double s = 0;
    for (std::size_t k = 0; k < 256; ++k) s += x(r, k);
    out(r) = fp32(s);
  }
  for (const char* platform : {"trainium.trn2", "nvidia.h100", "numpy"}) {
    const cases::Verdict v = judged(out, sum, platform);
    expect_first(v, "missing_k_tile");
    if (v.diagnoses.empty()) continue;  // expect_first has failed the test
    EXPECT_NE(v.diagnoses.front().detail.find("the last K tile (terms 256..299"), std::string::npos)
        << v.diagnoses.front().detail;
  }
  const cases::Op squares = cases::sum_of_squares(generate(22, {16, 512}), "bf16", Cast{fmts::fp32});
  const Array y = generate(22, {16, 512});
  Array short_out = xt::zeros<double>({16});
  for (std::size_t r = 0; r < 16; ++r) {
    double s = 0;
    for (std::size_t k = 0; k < 384; ++k) s += y(r, k) * y(r, k);
    short_out(r) = fp32(s);
  }
  expect_first(judged(short_out, squares, "trainium.trn2"), "missing_k_tile");
}

TEST(Diagnosis, ShiftedRowsAndScaledRowsAreNamed) {
  const Gemm g;
  const Array good = g.op.emulate(core::platform_by_name("nvidia.h100"), {}).values;
  Array shifted = good;
  for (std::size_t i = 0; i + 1 < g.M; ++i)
    for (std::size_t j = 0; j < g.N; ++j) shifted(i, j) = good(i + 1, j);
  expect_first(judged(shifted, g.op, "nvidia.h100"), "shifted_tile");
  Array scaled = good;
  for (const std::size_t i : {3u, 7u, 19u})
    for (std::size_t j = 0; j < g.N; ++j) scaled(i, j) = fp32(good(i, j) * (1.0 + 0.25 * static_cast<double>(i)));
  const cases::Verdict v = judged(scaled, g.op, "nvidia.h100");
  expect_first(v, "row_scale");
  EXPECT_NE(v.diagnoses.front().detail.find("3 rows"), std::string::npos) << v.diagnoses.front().detail;
  EXPECT_EQ(v.concentration, "all " + std::to_string(v.failures) + " failures lie in rows 3, 7, 19");
}

// The output stored as bf16 where the op writes fp32.
TEST(Diagnosis, ANarrowedOutputIsTheWrongOutputFormat) {
  const Gemm g;
  Array out = g.op.emulate(core::platform_by_name("nvidia.h100"), {}).values;
  for (double& x : out) x = bf16(x);
  expect_first(judged(out, g.op, "nvidia.h100"), "wrong_output_format");
}

// int8 x int8 summed in an int16 that wraps: errors are multiples of 65536, said in integers.
TEST(Diagnosis, AnInt16AccumulatorWraps) {
  const std::size_t M = 8, K = 512, N = 6;
  Array a(std::vector<std::size_t>{M, K}), b(std::vector<std::size_t>{K, N});
  std::uint64_t s = 7;
  const auto next = [&s] { s = s * 6364136223846793005ULL + 1442695040888963407ULL; return static_cast<double>(static_cast<int>(s >> 56) - 128); };
  for (double& x : a) x = next();
  for (double& x : b) x = next();
  const cases::Op op = cases::integer_matmul(a, b);
  Array out = xt::zeros<double>({M, N});
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      std::int16_t acc = 0;
      for (std::size_t k = 0; k < K; ++k) acc = static_cast<std::int16_t>(acc + static_cast<int>(a(i, k) * b(k, j)));
      out(i, j) = acc;
    }
  const cases::Verdict v = judged(out, op, "trainium.trn2");
  expect_first(v, "integer_wrap", 0.9);
  EXPECT_NE(v.diagnoses.front().detail.find("2^16"), std::string::npos) << v.diagnoses.front().detail;
  EXPECT_TRUE(v.integer_output);
  EXPECT_EQ(cases::describe(v).find(" ulps"), std::string::npos) << cases::describe(v);
}

// fp8 inputs the op holds saturated at Trainium e4m3's 240 where the kernel kept e4m3fn's wider
// range: the failures are exactly the output rows and columns of those inputs.
TEST(Diagnosis, InputsAtTheFormatsLargestValueAreTheInputRange) {
  const std::size_t M = 64, K = 64, N = 48;
  Array a = generate(21, {M, K}, fmts::e4m3, 8.0), b = generate(22, {K, N}, fmts::e4m3, 8.0);
  for (double& x : a) x = std::min(std::max(x, -224.0), 224.0);
  for (double& x : b) x = std::min(std::max(x, -224.0), 224.0);
  Array a_wide = a, b_wide = b;
  a(9, 4) = 240, a_wide(9, 4) = 416;    // the kernel's e4m3fn value, the op's saturated one
  b(30, 17) = -240, b_wide(30, 17) = -320;
  const cases::Op op = cases::matmul(a, b, nullptr, "e4m3", Cast{fmts::fp32});
  Array out = xt::zeros<double>({M, N});
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < K; ++k) s += a_wide(i, k) * b_wide(k, j);
      out(i, j) = fp32(s);
    }
  const cases::Verdict v = judged(out, op, "trainium.trn2");
  expect_first(v, "input_range", 0.9);
  EXPECT_NE(v.diagnoses.front().detail.find("rows of a 9 and columns of b 17"), std::string::npos)
      << v.diagnoses.front().detail;
  EXPECT_NE(v.diagnoses.front().detail.find("e4m3fn (max 448)"), std::string::npos);
  EXPECT_EQ(v.concentration, "all " + std::to_string(v.failures) + " failures lie in row 9 and column 17");
}

// An Inf where the exact result is finite and beyond fp16's range: an intermediate overflowed.
TEST(Diagnosis, InfinitiesTracedToAnOverflow) {
  const Gemm g;
  const Array a = g.a * 256.0, b = g.b * 256.0;
  const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32});
  Array out = op.emulate(core::platform_by_name("nvidia.h100"), {}).values;
  const Array exact = op.exact_values().hi;
  std::size_t planted = 0;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (std::abs(exact.data()[i]) > 65504) out.data()[i] = std::copysign(INFINITY, exact.data()[i]), ++planted;
  ASSERT_GT(planted, 0u);
  const cases::Verdict v = judged(out, op, "nvidia.h100");
  expect_first(v, "special_values");
  EXPECT_NE(v.diagnoses.front().detail.find("fp16 (max 65504)"), std::string::npos) << v.diagnoses.front().detail;
}

// A softmax of raw logits, exp(x_j) / sum exp(x_l) in fp32 (no max subtracted): it overflows in
// the rows with large logits; the diagnosis names the missing subtraction bit for bit.
TEST(Diagnosis, ASoftmaxWithoutItsMaxIsNamed) {
  Array x = generate(31, {6, 48}, fmts::fp32, 4.0);
  for (std::size_t r = 0; r < 3; ++r) x(r, 7 * r) = 100.0;  // e^100 overflows fp32 (its max is e^88.7)
  const cases::Op op = cases::softmax(x, -1, "fp32", Cast{fmts::fp32});
  Array out = xt::zeros<double>({6, 48});
  for (std::size_t r = 0; r < 6; ++r) {
    float sum = 0;
    std::vector<float> e(48);
    for (std::size_t j = 0; j < 48; ++j) sum += e[j] = std::exp(static_cast<float>(x(r, j)));
    for (std::size_t j = 0; j < 48; ++j) out(r, j) = e[j] / sum;
  }
  const cases::Verdict v = judged(out, op, "trainium.trn2");
  ASSERT_GT(v.special_mismatches, 0u) << cases::describe(v);
  expect_first(v, "missing_max_subtraction", 0.5);
}

// Correct outputs get no diagnosis: another platform's output judged bit-exact (it fails, its
// differences lie within the bound), and a passing check.
TEST(Diagnosis, CorrectOutputsGetNone) {
  const Gemm g;
  const Array trn2 = g.op.emulate(core::platform_by_name("trainium.trn2"), {}).values;
  const cases::Verdict strict = judged(trn2, g.op, "nvidia.h100", cases::Tier::bit_exact);
  ASSERT_FALSE(strict.passed);
  EXPECT_TRUE(strict.diagnoses.empty()) << cases::describe(strict);
  const cases::Verdict ok = judged(trn2, g.op, "nvidia.h100");
  EXPECT_TRUE(ok.passed);
  EXPECT_TRUE(ok.diagnoses.empty());
}

// A scale applied twice, or missing (a dequantisation scale of 8): the exact product times one
// factor, said as a scale mistake with that factor (not "each row off by a factor").
TEST(Diagnosis, AScaleTwiceOrMissingIsNamedWithItsFactor) {
  const Gemm g;
  const Array exact = g.op.exact_values().hi;
  for (const auto& [factor, words] : {std::pair{2.0, std::string("factor 2 ")}, std::pair{0.125, std::string("factor 0.125 ")}}) {
    const Array out = exact * factor;
    const cases::Verdict v = judged(out, g.op, "nvidia.h100");
    expect_first(v, "wrong_scale");
    EXPECT_NE(v.diagnoses.front().detail.find(words), std::string::npos) << v.diagnoses.front().detail;
    for (const cases::Diagnosis& d : v.diagnoses) EXPECT_NE(d.kind, "row_scale");
  }
}

// The ranking rule on its own: a diagnosis that reproduces elements bit for bit ranks before one
// that fits within a bound or shows a pattern, even one explaining a larger share; shares order
// each group; one under the threshold is never reported.
TEST(Diagnosis, RankedByEvidenceThenShare) {
  std::vector<cases::Diagnosis> found = {
      {"row_scale", 1.0, "", "pattern: each row's median ratio"},
      {"missing_k_tile", 0.9, "", "within the platform's bound: the exact result less the tile"},
      {"narrow_accumulator", 0.6, "", "bit for bit: the platform's plan with its sum kept so"},
      {"transposed_tile", 0.8, "", "bit for bit: the platform's plan on b^T"},
      {"integer_wrap", 0.3, "", "pattern: every failing element's integer error"}};
  cases::rank(found);
  std::vector<std::string> kinds;
  for (const cases::Diagnosis& d : found) kinds.push_back(d.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"transposed_tile", "narrow_accumulator", "row_scale", "missing_k_tile"}));
}

// A kernel that hands the PE array each 32 x 32 tile of a untransposed (or transposes it twice):
// a's tiles read transposed in place, named with the tile size. The oracle: the product of the
// tile-transposed a in binary64 loops, rounded once to fp32.
TEST(Diagnosis, ATileTransposedInPlaceIsNamedWithItsSize) {
  const Array a = generate(31, {64, 128}), b = generate(32, {128, 24});
  const cases::Op op = cases::matmul(a, b, nullptr, "bf16", Cast{fmts::fp32});
  Array out = xt::zeros<double>({64, 24});
  for (std::size_t i = 0; i < 64; ++i)
    for (std::size_t j = 0; j < 24; ++j) {
      double acc = 0;
      for (std::size_t k = 0; k < 128; ++k) acc += a(i / 32 * 32 + k % 32, k / 32 * 32 + i % 32) * b(k, j);
      out(i, j) = fp32(acc);
    }
  const cases::Verdict v = judged(out, op, "trainium.trn2");
  expect_first(v, "transposed_tile", 0.9);
  EXPECT_NE(v.diagnoses.front().detail.find("each 32 x 32 tile of a"), std::string::npos) << v.diagnoses.front().detail;
}

// A layernorm with eps added outside the square root, (x - mean) / (sqrt(var) + eps), on rows of
// small spread (where eps shows): named wrong_eps, saying where eps went. The oracle: binary64 loops.
TEST(Diagnosis, EpsOutsideTheSquareRootIsNamed) {
  Array x = generate(41, {16, 256}, fmts::fp32, 0.01);
  const double eps = 1e-5;
  const cases::Op op = cases::layernorm(x, nullptr, nullptr, eps, "fp32", Cast{fmts::fp32});
  Array out = xt::zeros<double>({16, 256});
  for (std::size_t r = 0; r < 16; ++r) {
    double mean = 0, var = 0;
    for (std::size_t c = 0; c < 256; ++c) mean += x(r, c) / 256;
    for (std::size_t c = 0; c < 256; ++c) var += (x(r, c) - mean) * (x(r, c) - mean) / 256;
    for (std::size_t c = 0; c < 256; ++c) out(r, c) = fp32((x(r, c) - mean) / (std::sqrt(var) + eps));
  }
  const cases::Verdict v = judged(out, op, "trainium.trn2");
  ASSERT_FALSE(v.passed);
  bool named = false;
  for (const cases::Diagnosis& d : v.diagnoses)
    named = named || (d.kind == "wrong_eps" && d.detail.find("outside the square root") != std::string::npos);
  EXPECT_TRUE(named) << cases::describe(v);
}

// Causal attention over one batch, in binary64 loops written here (the test's oracle, not numeq's
// reference): scores q k^T times `scale`, key j kept for query i where j <= i + shift, softmax with
// its maximum subtracted, times v; rounded to fp32.
Array loop_attention(const Array& q, const Array& k, const Array& v, double scale, int shift) {
  const std::size_t lq = q.shape()[0], lk = k.shape()[0], d = q.shape()[1], dv = v.shape()[1];
  Array out = xt::zeros<double>({lq, dv});
  for (std::size_t i = 0; i < lq; ++i) {
    std::vector<double> s(lk, -INFINITY);
    double top = -INFINITY;
    for (std::size_t j = 0; j < lk; ++j) {
      if (static_cast<long long>(j) > static_cast<long long>(i) + shift) continue;
      double dot = 0;
      for (std::size_t c = 0; c < d; ++c) dot += q(i, c) * k(j, c);
      s[j] = dot * scale;
      top = std::max(top, s[j]);
    }
    double total = 0;
    for (double& x : s) total += (x = std::isinf(x) ? 0.0 : std::exp(x - top));
    for (std::size_t c = 0; c < dv; ++c) {
      double acc = 0;
      for (std::size_t j = 0; j < lk; ++j) acc += s[j] * v(j, c);
      out(i, c) = fp32(acc / total);
    }
  }
  return out;
}

// An attention kernel's scale applied twice or never, and its causal mask shifted by one key:
// each named (wrong_scale with its factor, shifted_mask with its direction), first.
TEST(Diagnosis, AttentionScaleAndMaskMistakesAreNamed) {
  const Array q = generate(21, {48, 16}, fmts::fp32), k = generate(22, {48, 16}, fmts::fp32),
              v = generate(23, {48, 16}, fmts::fp32);
  const double s = 0.25;  // 1 / sqrt(16)
  const cases::Op op = cases::attention(q, k, v, nullptr, true, std::nullopt, "fp32", Cast{fmts::fp32});
  const Array right = loop_attention(q, k, v, s, 0);
  EXPECT_TRUE(judged(right, op, "cuda_core.fp32").passed) << cases::describe(judged(right, op, "cuda_core.fp32"));
  for (const auto& [scale, words] : {std::pair{s * s, std::string("applied twice")},
                                     std::pair{1.0, std::string("never applied")}}) {
    const cases::Verdict v2 = judged(loop_attention(q, k, v, scale, 0), op, "cuda_core.fp32");
    expect_first(v2, "wrong_scale", 0.9);
    EXPECT_NE(v2.diagnoses.front().detail.find(words), std::string::npos) << v2.diagnoses.front().detail;
  }
  {  // P handed to the second matmul untransposed: P^T V (the loops' P, transposed)
    Array pt = xt::zeros<double>({48, 16});
    const Array ones = xt::eye<double>(48);
    const Array p = loop_attention(q, k, ones, s, 0);  // P itself: attention of the identity values
    for (std::size_t i = 0; i < 48; ++i)
      for (std::size_t c = 0; c < 16; ++c) {
        double acc = 0;
        for (std::size_t r = 0; r < 48; ++r) acc += p(r, i) * v(r, c);
        pt(i, c) = fp32(acc);
      }
    const cases::Verdict v2 = judged(pt, op, "cuda_core.fp32");
    expect_first(v2, "transposed_tile", 0.9);
    EXPECT_NE(v2.diagnoses.front().detail.find("P^T V"), std::string::npos) << v2.diagnoses.front().detail;
  }
  for (const auto& [shift, words] : {std::pair{-1, std::string("own key masked")},
                                     std::pair{1, std::string("one key past")}}) {
    const cases::Verdict v2 = judged(loop_attention(q, k, v, s, shift), op, "cuda_core.fp32");
    expect_first(v2, "shifted_mask", 0.9);
    EXPECT_NE(v2.diagnoses.front().detail.find(words), std::string::npos) << v2.diagnoses.front().detail;
  }
}

}  // namespace
