// The fast path of the certified functions (a double enclosure with a proven error bound, rounded
// at both ends) against the MPFR path (FunctionPath::mpfr), which test_functions checks against
// MPFR at 2000 bits and which never runs the fast path's arithmetic: bit for bit, on every bf16,
// fp16, e4m3fn and e5m2 input into bf16, fp16, fp32 and the input's own format, in four directed
// and nearest modes and stochastic rounding with several draws, and on random fp32 inputs.
//
// The default run takes every kDefaultStride-th 16-bit pattern and 2 * 10^4 random fp32 inputs
// per function; NUMEQ_LONG_TESTS=1 takes every pattern and 10^8 random fp32 inputs in all.
// The counts printed include how often the fast path's rounding test failed and MPFR decided.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/functions.hpp"

namespace {

using numeq::Cast;
using numeq::Format;
using numeq::Rounding;
using numeq::reference::Function;
using numeq::reference::FunctionPath;

constexpr std::size_t kDefaultStride = 7;
constexpr std::size_t kDefaultRandom = 20000;            // per function
constexpr std::size_t kLongRandomTotal = 100'000'000;    // over all functions
constexpr int kMaxReports = 8;

// NUMEQ_SWEEP_SCALE (as in test_functions; e.g. 0.05 under sanitizers) thins the default sweeps:
// every (kDefaultStride / scale)-th 16-bit pattern, scale * kDefaultRandom random inputs.
double sweep_scale() {
  const char* s = std::getenv("NUMEQ_SWEEP_SCALE");
  const double v = s == nullptr ? 1.0 : std::atof(s);
  return v > 0 ? std::min(v, 1.0) : 1.0;
}

bool long_tests() {
  const char* v = std::getenv("NUMEQ_LONG_TESTS");
  return v != nullptr && std::string(v) == "1";
}

// Every value of fmt (NaN patterns included once each: they take the special-value path).
std::vector<double> all_values(const Format& fmt, std::size_t stride) {
  std::vector<double> xs;
  const std::uint64_t n = std::uint64_t{1} << fmt.bits();
  for (std::uint64_t b = 0; b < n; b += stride)
    xs.push_back(numeq::decode_bits(fmt, b << fmt.storage_shift));
  return xs;
}

std::vector<Cast> casts_into(const Format& out) {
  std::vector<Cast> cs;
  for (Rounding r : {Rounding::nearest_even, Rounding::toward_zero, Rounding::upward, Rounding::downward}) {
    Cast c;
    c.format = out;
    c.rounding = r;
    cs.push_back(c);
  }
  // Stochastic with the default 32 random bits (looked at: 40 for bf16, beyond the fast path's
  // reach for fp16 and fp32, which then test its hand-over to MPFR) and with 8.
  for (int bits : {numeq::default_random_bits, 8}) {
    Cast c;
    c.format = out;
    c.rounding = Rounding::stochastic;
    c.random_bits = bits;
    cs.push_back(c);
  }
  return cs;
}

struct Tally {
  std::atomic<std::size_t> compared{0};
  std::atomic<std::size_t> mismatches{0};
  std::size_t fast_mpfr = 0;   // elements the fast path handed to MPFR (not suited, no enclosure, fallback)
  std::size_t fallbacks = 0;   // of which: the rounding test failed
};

struct Result {
  std::uint64_t bits = 0;
  std::string error;
};

// One path over xs into c, draw d of stochastic rounding per element.
std::vector<Result> run(FunctionPath path, Function f, const std::vector<double>& xs, const Cast& c, int d) {
  std::vector<Result> out(xs.size());
  const bool stochastic = c.rounding == Rounding::stochastic;
  const std::uint64_t key = numeq::random_stream_key(0x5eed + static_cast<std::uint64_t>(d));
  numeq::parallel_for(
      xs.size(),
      [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) {
          const std::uint64_t random = stochastic ? numeq::random_bits_at(key, i) : 0;
          try {
            out[i].bits = numeq::reference::evaluate_bits_with(path, f, xs[i], c, random);
          } catch (const std::exception& e) {
            out[i].error = e.what();
          }
        }
      },
      256);
  return out;
}

// Compares both paths on xs into c; stochastic casts use three draws per input.
void compare(Function f, const std::vector<double>& xs, const Cast& c, Tally& t) {
  for (int d = 0; d < (c.rounding == Rounding::stochastic ? 3 : 1); ++d) {
    const auto before = numeq::reference::function_path_counts();
    const std::vector<Result> fast = run(FunctionPath::fast, f, xs, c, d);
    const auto after = numeq::reference::function_path_counts();
    t.fast_mpfr += after.mpfr - before.mpfr;
    t.fallbacks += after.fallbacks - before.fallbacks;
    const std::vector<Result> slow = run(FunctionPath::mpfr, f, xs, c, d);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      if (fast[i].bits == slow[i].bits && fast[i].error == slow[i].error) continue;
      if (t.mismatches.fetch_add(1) < kMaxReports)
        ADD_FAILURE() << numeq::reference::function_name(f) << "(" << xs[i] << ") into " << c.format.name
                      << " mode " << static_cast<int>(c.rounding) << " random_bits " << c.random_bits
                      << " draw " << d << ": fast " << std::hex << fast[i].bits << " mpfr " << slow[i].bits
                      << std::dec << " " << fast[i].error << " / " << slow[i].error;
    }
    t.compared += xs.size();
  }
}

void print_counts(Function f, const char* what, const Tally& t, double secs) {
  const std::size_t compared = t.compared.load();
  const auto pct = [&](std::size_t k) { return compared ? 100.0 * static_cast<double>(k) / static_cast<double>(compared) : 0.0; };
  std::printf("[ %-10s ] %s: %zu comparisons, %zu mismatches; fast path handed to MPFR %zu (%.4f%%), of which "
              "rounding-test fallbacks %zu (%.4f%%); %.1f s\n",
              std::string(numeq::reference::function_name(f)).c_str(), what, compared, t.mismatches.load(),
              t.fast_mpfr, pct(t.fast_mpfr), t.fallbacks, pct(t.fallbacks), secs);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class FastFunctions : public ::testing::TestWithParam<Function> {};

TEST_P(FastFunctions, EverySmallFormatInput) {
  const Function f = GetParam();
  const std::size_t stride16 =
      long_tests() ? 1 : static_cast<std::size_t>(static_cast<double>(kDefaultStride) / sweep_scale() + 0.5);
  Tally t;
  const auto t0 = std::chrono::steady_clock::now();
  for (const Format* in : {&numeq::formats::bf16, &numeq::formats::fp16, &numeq::formats::e4m3fn,
                           &numeq::formats::e5m2}) {
    const std::vector<double> xs = all_values(*in, in->bits() == 16 ? stride16 : 1);
    std::vector<const Format*> outs{&numeq::formats::bf16, &numeq::formats::fp16, &numeq::formats::fp32};
    if (in->bits() == 8) outs.push_back(in);
    for (const Format* out : outs)
      for (const Cast& c : casts_into(*out)) compare(f, xs, c, t);
  }
  print_counts(f, long_tests() ? "every bf16/fp16/e4m3fn/e5m2 input" : "bf16/fp16 every 7th, every e4m3fn/e5m2",
               t, seconds_since(t0));
  EXPECT_EQ(t.mismatches.load(), 0u);
}

// Random fp32 inputs: half uniform in the bit patterns (mostly huge and tiny magnitudes), half
// with exponents in [-24, 8) where the functions vary most.
TEST_P(FastFunctions, RandomFp32Inputs) {
  const Function f = GetParam();
  const std::size_t n = long_tests() ? kLongRandomTotal / numeq::reference::function_names().size()
                                     : static_cast<std::size_t>(static_cast<double>(kDefaultRandom) * sweep_scale());
  std::vector<double> xs(n);
  const std::uint64_t key = numeq::random_stream_key(0xf32 + static_cast<std::uint64_t>(f));
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = numeq::random_bits_at(key, i);
    std::uint32_t bits = static_cast<std::uint32_t>(r);
    if (i % 2 == 1) bits = (bits & 0x807FFFFFu) | ((127u - 24u + static_cast<std::uint32_t>((r >> 32) % 32)) << 23);
    const float v = std::bit_cast<float>(bits);
    xs[i] = std::isnan(v) ? 1.5 : static_cast<double>(v);
  }
  Tally t;
  const auto t0 = std::chrono::steady_clock::now();
  Cast c;
  c.format = numeq::formats::fp32;
  compare(f, xs, c, t);
  print_counts(f, "random fp32 into fp32", t, seconds_since(t0));
  EXPECT_EQ(t.mismatches.load(), 0u);
}

std::string name_of(const ::testing::TestParamInfo<Function>& info) {
  return std::string(numeq::reference::function_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(All, FastFunctions,
                         ::testing::Values(Function::exp, Function::exp2, Function::log, Function::tanh,
                                           Function::sigmoid, Function::gelu, Function::gelu_tanh,
                                           Function::silu, Function::softplus, Function::sqrt,
                                           Function::rsqrt, Function::reciprocal),
                         name_of);

TEST(FunctionPathDefault, ReadsTheEnvironment) {
  // The test binary runs without NUMEQ_FUNCTIONS (ctest sets none): the default is fast.
  if (std::getenv("NUMEQ_FUNCTIONS") == nullptr) {
    EXPECT_EQ(numeq::reference::default_function_path(), FunctionPath::fast);
  }
}

}  // namespace
