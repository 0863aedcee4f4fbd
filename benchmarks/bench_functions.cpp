// Certified elementwise functions: time per element of numeq::reference::evaluate with the fast
// path (a proven double enclosure, MPFR only when its rounding test fails) against the MPFR path
// alone (FunctionPath::mpfr, what NUMEQ_FUNCTIONS=mpfr selects), on the same fp32 inputs, in one
// process, on numeq::num_threads() threads (NUMEQ_NUM_THREADS). The fast path's time is the best of
// three runs; `fallbacks` counts its elements whose rounding test failed (first run).
//
//   numeq_bench_functions [--n 1000000] [--out fp32|bf16|fp16] [--functions exp,tanh,...]
//
// Inputs: random fp32 values with |x| in [2^-8, 2^4) and random signs (activations; the range
// where these functions vary), plus a fifth of them uniform in the fp32 bit patterns (huge and
// tiny magnitudes, NaN replaced by 1.5). Output: nearest_even into --out.
// Exit status: 0 when both paths give the same values for every element, 1 on a mismatch, 2 on
// bad arguments.

#include <xtensor/xarray.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/functions.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using numeq::reference::Function;
using numeq::reference::FunctionPath;

xt::xarray<double> inputs(std::size_t n) {
  xt::xarray<double> x = xt::xarray<double>::from_shape({n});
  const std::uint64_t key = numeq::random_stream_key(0xbe4c);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = numeq::random_bits_at(key, i);
    std::uint32_t bits = static_cast<std::uint32_t>(r);
    if (i % 5 != 0) bits = (bits & 0x807FFFFFu) | ((127u - 8u + static_cast<std::uint32_t>((r >> 32) % 12)) << 23);
    const float v = std::bit_cast<float>(bits);
    x(i) = std::isnan(v) ? 1.5 : static_cast<double>(v);
  }
  return x;
}

double seconds(const Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool same(const xt::xarray<double>& a, const xt::xarray<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a.data()[i]) && std::isnan(b.data()[i]);
    if (!both_nan && std::bit_cast<std::uint64_t>(a.data()[i]) != std::bit_cast<std::uint64_t>(b.data()[i]))
      return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 1000000;
  numeq::Cast out;
  std::vector<Function> functions;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + std::string(a));
      const std::string v = argv[++i];
      if (a == "--n") {
        n = static_cast<std::size_t>(std::stoull(v));
      } else if (a == "--out") {
        out.format = numeq::format_by_name(v);
      } else if (a == "--functions") {
        for (std::size_t s = 0; s <= v.size();) {
          const std::size_t e = std::min(v.find(',', s), v.size());
          functions.push_back(numeq::reference::function_by_name(v.substr(s, e - s), "--functions"));
          s = e + 1;
        }
      } else {
        throw std::runtime_error("unknown option " + std::string(a) + "; valid: --n, --out, --functions");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "numeq_bench_functions: %s\n", e.what());
    return 2;
  }
  if (functions.empty())
    for (std::string_view name : numeq::reference::function_names())
      functions.push_back(numeq::reference::function_by_name(name));

  const xt::xarray<double> x = inputs(n);
  std::printf("%zu fp32 inputs into %s nearest_even, %d threads\n", n, std::string(out.format.name).c_str(),
              numeq::num_threads());
  std::printf("%-11s %12s %12s %9s %12s\n", "function", "fast ns/el", "mpfr ns/el", "speedup", "fallbacks");
  bool ok = true;
  for (Function f : functions) {
    const auto c0 = numeq::reference::function_path_counts();
    auto t0 = Clock::now();
    const xt::xarray<double> fast = numeq::reference::evaluate_with(FunctionPath::fast, f, x, out);
    double t_fast = seconds(t0);
    const auto c1 = numeq::reference::function_path_counts();
    // The fast path's time is the best of three runs (it is short, and the machine may be shared).
    for (int r = 0; r < 2; ++r) {
      t0 = Clock::now();
      (void)numeq::reference::evaluate_with(FunctionPath::fast, f, x, out);
      t_fast = std::min(t_fast, seconds(t0));
    }
    t0 = Clock::now();
    const xt::xarray<double> slow = numeq::reference::evaluate_with(FunctionPath::mpfr, f, x, out);
    const double t_mpfr = seconds(t0);
    const bool equal = same(fast, slow);
    ok = ok && equal;
    const double per = 1e9 / static_cast<double>(n);
    std::printf("%-11s %12.1f %12.1f %8.1fx %12llu%s\n", std::string(numeq::reference::function_name(f)).c_str(),
                t_fast * per, t_mpfr * per, t_mpfr / t_fast,
                static_cast<unsigned long long>(c1.fallbacks - c0.fallbacks), equal ? "" : "  MISMATCH");
  }
  return ok ? 0 : 1;
}
