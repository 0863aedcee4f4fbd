// Certified functions (references/functions.hpp) against an independent MPFR oracle.
//
// The oracle never calls the code under test (nor numeq's rounding kernel): for each input it
// evaluates the function with plain MPFR at kOraclePrecision = 2000 bits (gelu: 320, see below), as a composition of
// round-to-nearest steps at a few more bits, and makes only the final step round to odd (MPFR_RNDZ
// one bit short, then the last bit set when inexact; Boldo and Melquiond, "Emulation of FMA and
// correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 57(4), 2008). A value
// rounded to odd at p bits rounds to any precision q <= p - 2 exactly as the true value would, in
// every mode; stochastic rounding with R random bits only looks q + R <= 117 bits deep. The
// round-to-nearest error of the earlier steps (a few units in the 2060th bit) is far below the
// distance of these functions' values at 8/16/32/64-bit arguments from any rounding boundary,
// except where the value is exact (then every step is exact, as MPFR's ternary values show) or in
// a tail where it approaches a representable number (tanh x -> 1, gelu x -> x, ...): there the
// oracle writes the function as A - B with B > 0 computed to full relative precision (B is set to
// MPFR's smallest positive number when it underflows MPFR's exponent range, which only its sign
// matters for). numeq_oracle::RoundOracle::cast_value then rounds into the Cast under test.
//
// NUMEQ_SWEEP_SCALE (default 1) scales the sweeps (e.g. 0.05 under sanitizers): the "every bf16 /
// fp16 pattern" sweeps take every (1/scale)-th pattern then.

#include <gtest/gtest.h>
#include <mpfr.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/functions.hpp"
#include "numeq/references/mpfr_value.hpp"
#include "oracle/mpfr_oracle.hpp"
#include "oracle/mpfr_steps.hpp"
#include "oracle/test_support.hpp"

namespace {

using numeq::Cast;
using numeq::Format;
using numeq::Overflow;
using numeq::Rounding;
using numeq::Subnormals;
using numeq::reference::Function;
using numeq_oracle::same_value;

constexpr mpfr_prec_t kOraclePrecision = 2000;  // the round-to-odd result
// gelu needs erfc, which MPFR evaluates slowly for arguments 5..50 at high precision (milliseconds
// per call at 2000 bits, tens of them near 40): its oracle uses 320 bits, still 200 bits beyond
// the deepest bit any rounding here looks at (53 significand + 64 stochastic bits).
constexpr mpfr_prec_t kGeluOraclePrecision = 320;
mpfr_prec_t oracle_precision(Function f) {
  return f == Function::gelu ? kGeluOraclePrecision : kOraclePrecision;
}
// Precision of the round-to-nearest steps before the final one (set per oracle thread).
thread_local mpfr_prec_t t_work = kOraclePrecision + 64;
constexpr int kMaxReports = 8;

std::atomic<std::size_t> g_comparisons{0};

double sweep_scale() {
  const char* s = std::getenv("NUMEQ_SWEEP_SCALE");
  if (s == nullptr) return 1.0;
  const double v = std::atof(s);
  return v > 0 ? std::min(v, 1.0) : 1.0;
}
std::size_t stride() { return std::max<std::size_t>(1, static_cast<std::size_t>(1.0 / sweep_scale() + 0.5)); }

mpfr_prec_t work_precision() { return t_work; }
using Big = numeq_oracle::Big<work_precision>;  // the test's own owning mpfr_t (oracle/mpfr_steps.hpp)
using numeq_oracle::force_positive;
using numeq_oracle::to_odd;

// The specials of functions.hpp, restated from IEEE 754-2019 s9.2 and the limits.
bool special_value(Function f, double x, double& v) {
  const double inf = HUGE_VAL;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(x)) { v = nan; return true; }
  const bool neg = std::signbit(x);
  const bool is_inf = std::isinf(x);
  switch (f) {
    case Function::exp:
    case Function::exp2: if (is_inf) { v = neg ? 0.0 : inf; return true; } break;
    case Function::log:
      if (x < 0 || (is_inf && neg)) { v = nan; return true; }
      if (x == 0) { v = -inf; return true; }
      if (is_inf) { v = inf; return true; }
      break;
    case Function::tanh: if (is_inf) { v = neg ? -1.0 : 1.0; return true; } break;
    case Function::sigmoid: if (is_inf) { v = neg ? 0.0 : 1.0; return true; } break;
    case Function::gelu:
    case Function::gelu_tanh:
    case Function::silu:
      if (is_inf) { v = neg ? -0.0 : inf; return true; }
      if (x == 0) { v = x; return true; }
      break;
    case Function::softplus: if (is_inf) { v = neg ? 0.0 : inf; return true; } break;
    case Function::sqrt:
      if (x < 0 || (is_inf && neg)) { v = nan; return true; }
      if (x == 0 || is_inf) { v = x; return true; }
      break;
    case Function::rsqrt:
      if (x < 0 || (is_inf && neg)) { v = nan; return true; }
      if (x == 0) { v = neg ? -inf : inf; return true; }
      if (is_inf) { v = 0.0; return true; }
      break;
    case Function::reciprocal:
      if (x == 0) { v = neg ? -inf : inf; return true; }
      if (is_inf) { v = neg ? -0.0 : 0.0; return true; }
      break;
    default: break;  // the activation functions: test_activation_functions.cpp
  }
  return false;
}

// x * e / (1 + e) with e = exp(-z) (x > 0) as x - x e^-z/(1 + e^-z), or x * e^z/(1 + e^z)
// (x < 0): x * sigmoid(z) for z of x's sign.
void x_sigmoid(mpfr_ptr out, double x, mpfr_srcptr z) {
  Big e, d, s, xv;
  mpfr_set_d(xv.v, x, MPFR_RNDN);
  if (x > 0) {
    mpfr_neg(e.v, z, MPFR_RNDN);
    mpfr_exp(e.v, e.v, MPFR_RNDN);
    force_positive(e.v);
    mpfr_add_ui(d.v, e.v, 1, MPFR_RNDN);
    mpfr_div(s.v, e.v, d.v, MPFR_RNDN);
    mpfr_mul(s.v, s.v, xv.v, MPFR_RNDN);
    force_positive(s.v);
    to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_sub(r, xv.v, s.v, rnd); });
  } else {
    mpfr_exp(e.v, z, MPFR_RNDN);
    force_positive(e.v);
    mpfr_add_ui(d.v, e.v, 1, MPFR_RNDN);
    mpfr_div(s.v, e.v, d.v, MPFR_RNDN);
    to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_mul(r, xv.v, s.v, rnd); });
  }
}

// f(x) for a finite, non-special x, rounded to odd at kOraclePrecision bits.
void oracle_value(Function f, double x, mpfr_ptr out) {
  Big X, a, b, c;
  mpfr_set_d(X.v, x, MPFR_RNDN);  // exact
  const auto unary = [&](int (*g)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t)) {
    to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return g(r, X.v, rnd); });
  };
  switch (f) {
    case Function::exp: unary(mpfr_exp); return;
    case Function::exp2: unary(mpfr_exp2); return;
    case Function::log: unary(mpfr_log); return;
    case Function::sqrt: unary(mpfr_sqrt); return;
    case Function::rsqrt: unary(mpfr_rec_sqrt); return;
    case Function::reciprocal:
      to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_ui_div(r, 1, X.v, rnd); });
      return;
    case Function::tanh:
      if (std::fabs(x) < 1) {
        unary(mpfr_tanh);
        return;
      }
      // tanh|x| = 1 - u, u = 2 / (e^(2|x|) + 1)
      mpfr_abs(a.v, X.v, MPFR_RNDN);
      mpfr_mul_2ui(a.v, a.v, 1, MPFR_RNDN);
      mpfr_exp(a.v, a.v, MPFR_RNDN);
      mpfr_add_ui(a.v, a.v, 1, MPFR_RNDN);
      mpfr_ui_div(b.v, 2, a.v, MPFR_RNDN);
      force_positive(b.v);
      to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_ui_sub(r, 1, b.v, rnd); });
      if (x < 0) mpfr_neg(out, out, MPFR_RNDN);
      return;
    case Function::sigmoid:
      if (x >= 0) {  // 1 - e^-x / (1 + e^-x)
        mpfr_neg(a.v, X.v, MPFR_RNDN);
        mpfr_exp(a.v, a.v, MPFR_RNDN);
        force_positive(a.v);
        mpfr_add_ui(b.v, a.v, 1, MPFR_RNDN);
        mpfr_div(c.v, a.v, b.v, MPFR_RNDN);
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_ui_sub(r, 1, c.v, rnd); });
      } else {  // e^x / (1 + e^x)
        mpfr_exp(a.v, X.v, MPFR_RNDN);
        force_positive(a.v);
        mpfr_add_ui(b.v, a.v, 1, MPFR_RNDN);
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_div(r, a.v, b.v, rnd); });
      }
      return;
    case Function::silu: x_sigmoid(out, x, X.v); return;
    case Function::gelu_tanh: {
      // 1 + tanh y = 2 sigmoid(2y): gelu_tanh = x sigmoid(z), z = 2 sqrt(2/pi) (x + 44715/10^6 x^3)
      mpfr_pow_ui(a.v, X.v, 3, MPFR_RNDN);  // exact: 159 bits
      mpfr_mul_ui(a.v, a.v, 44715, MPFR_RNDN);
      mpfr_div_ui(a.v, a.v, 1000000, MPFR_RNDN);
      mpfr_add(a.v, a.v, X.v, MPFR_RNDN);
      mpfr_const_pi(b.v, MPFR_RNDN);
      mpfr_ui_div(b.v, 2, b.v, MPFR_RNDN);
      mpfr_sqrt(b.v, b.v, MPFR_RNDN);
      mpfr_mul(a.v, a.v, b.v, MPFR_RNDN);
      mpfr_mul_2ui(a.v, a.v, 1, MPFR_RNDN);
      x_sigmoid(out, x, a.v);
      return;
    }
    case Function::gelu: {
      // Phi(x) = erfc(-x / sqrt 2) / 2; for x > 0, gelu = x - x erfc(x / sqrt 2) / 2. Near 0,
      // gelu = x/2 + (x/2) erf(x / sqrt 2), the second term (> 0) to full relative precision.
      mpfr_sqrt_ui(b.v, 2, MPFR_RNDN);
      if (std::fabs(x) < 1) {
        mpfr_div(a.v, X.v, b.v, MPFR_RNDN);
        mpfr_erf(a.v, a.v, MPFR_RNDN);
        mpfr_mul_2si(c.v, X.v, -1, MPFR_RNDN);
        mpfr_mul(a.v, a.v, c.v, MPFR_RNDN);
        force_positive(a.v);
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_add(r, c.v, a.v, rnd); });
        return;
      }
      mpfr_abs(a.v, X.v, MPFR_RNDN);
      mpfr_div(a.v, a.v, b.v, MPFR_RNDN);
      mpfr_erfc(a.v, a.v, MPFR_RNDN);  // erfc(|x| / sqrt 2)
      force_positive(a.v);
      mpfr_mul_2si(c.v, X.v, -1, MPFR_RNDN);  // x / 2, exact
      if (x > 0) {
        mpfr_mul(a.v, a.v, c.v, MPFR_RNDN);
        force_positive(a.v);
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_sub(r, X.v, a.v, rnd); });
      } else {
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_mul(r, c.v, a.v, rnd); });
      }
      return;
    }
    case Function::softplus:
      if (x >= 0) {  // x + log1p(e^-x)
        mpfr_neg(a.v, X.v, MPFR_RNDN);
        mpfr_exp(a.v, a.v, MPFR_RNDN);
        force_positive(a.v);
        mpfr_log1p(a.v, a.v, MPFR_RNDN);
        force_positive(a.v);
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_add(r, X.v, a.v, rnd); });
      } else {  // log1p(e^x)
        mpfr_exp(a.v, X.v, MPFR_RNDN);
        force_positive(a.v);
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_log1p(r, a.v, rnd); });
      }
      return;
    default: ADD_FAILURE() << "test_activation_functions.cpp checks this function"; return;
  }
}

// The oracle's value of f at every input (specials included), on every core.
std::vector<Big> oracle_values(Function f, const std::vector<double>& xs) {
  std::vector<Big> out;
  out.reserve(xs.size());
  const mpfr_prec_t precision = oracle_precision(f);
  for (std::size_t i = 0; i < xs.size(); ++i) out.emplace_back(precision);
  // Strided over threads: the slow inputs (erfc's middle range) cluster in C order.
  const unsigned threads = std::max(2u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      t_work = precision + 64;
      for (std::size_t i = t; i < xs.size(); i += threads) {
        double v = 0;
        if (special_value(f, xs[i], v)) mpfr_set_d(out[i].v, v, MPFR_RNDN);
        else oracle_value(f, xs[i], out[i].v);
      }
      mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
    });
  for (std::thread& th : pool) th.join();
  return out;
}

Cast make(const Format& f, Rounding r = Rounding::nearest_even, Overflow o = Overflow::ieee,
          Subnormals s = Subnormals::keep, int random_bits = 32) {
  Cast c;
  c.format = f;
  c.rounding = r;
  c.overflow = o;
  c.subnormals = s;
  c.seed = 2024;
  c.random_bits = random_bits;
  return c;
}

// Every rounding mode under three policies: ieee/keep, saturate, flush_outputs (stochastic with
// several draw widths).
std::vector<Cast> mode_casts(const Format& f) {
  std::vector<Cast> out;
  for (Rounding r : numeq_test::kModes) {
    out.push_back(make(f, r));
    out.push_back(make(f, r, Overflow::saturate));
    out.push_back(make(f, r, Overflow::ieee, Subnormals::flush_outputs));
  }
  out.push_back(make(f, Rounding::stochastic, Overflow::ieee, Subnormals::keep, 1));
  out.push_back(make(f, Rounding::stochastic, Overflow::ieee, Subnormals::keep, 64));
  return out;
}

std::string cast_name(const Cast& c) {
  return std::string(c.format.name) + "/" + std::string(numeq::to_string(c.rounding)) + "/" +
         std::string(numeq::to_string(c.overflow)) + "/" + std::string(numeq::to_string(c.subnormals)) +
         "/R" + std::to_string(c.random_bits);
}

// evaluate(f, xs[picks], cast) against the oracle, element by element; returns comparisons made.
std::size_t check(Function f, const std::vector<double>& xs, const std::vector<Big>& oracle,
                  const std::vector<std::size_t>& picks, const Cast& cast, const std::string& what) {
  std::vector<double> in(picks.size());
  for (std::size_t k = 0; k < picks.size(); ++k) in[k] = xs[picks[k]];
  const std::vector<std::size_t> shape{in.size()};
  xt::xarray<double> got;
  try {
    got = numeq::reference::evaluate(f, xt::adapt(in, shape), cast);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " " << cast_name(cast) << ": threw " << e.what();
    return 0;
  }
  std::vector<double> want(in.size());
  std::atomic<int> bad_expectation{0};
  numeq::parallel_for(
      in.size(),
      [&](std::size_t begin, std::size_t end) {
        numeq_oracle::RoundOracle o(cast.format);
        for (std::size_t k = begin; k < end; ++k) {
          const numeq_oracle::Expected e = o.cast_value(oracle[picks[k]].v, cast, k);
          if (e.throws) bad_expectation.fetch_add(1);
          want[k] = e.value;
        }
      },
      256);
  EXPECT_EQ(bad_expectation.load(), 0) << what << ": the sweep formats all hold NaN";
  int reports = 0;
  for (std::size_t k = 0; k < in.size(); ++k) {
    if (!same_value(got[k], want[k])) {
      if (++reports <= kMaxReports)
        ADD_FAILURE() << numeq::reference::function_name(f) << " " << what << " " << cast_name(cast)
                      << " x=" << numeq_oracle::describe(in[k]) << " got " << numeq_oracle::describe(got[k])
                      << " want " << numeq_oracle::describe(want[k]);
    }
  }
  EXPECT_EQ(reports, 0) << numeq::reference::function_name(f) << " " << what << " " << cast_name(cast)
                        << ": " << reports << " mismatches";
  g_comparisons.fetch_add(in.size());
  return in.size();
}

// Every pattern of an 8- or 16-bit format, decoded by the oracle.
std::vector<double> all_values(const Format& f) {
  const numeq_oracle::Spec spec(f);
  std::vector<double> out;
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << f.storage_bits); ++b)
    out.push_back(numeq_oracle::decode_oracle(spec, b));
  return out;
}

std::vector<std::size_t> every(std::size_t n, std::size_t step, std::size_t offset = 0) {
  std::vector<std::size_t> out;
  for (std::size_t i = offset % step; i < n; i += step) out.push_back(i);
  return out;
}

// fp32 patterns (random, uniform in the bits), random doubles, and the tails and exact points.
std::vector<double> fp32_and_double_inputs(std::size_t n) {
  std::vector<double> out;
  std::uint64_t s = 0x5eed;
  for (std::size_t i = 0; i < n; ++i) {
    s = numeq::splitmix64_mix(s + numeq::splitmix64_gamma);
    out.push_back(static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(s))));
    if (i % 4 == 0) out.push_back(std::bit_cast<double>(s));
    if (i % 4 == 1) out.push_back(std::ldexp(static_cast<double>(s >> 11), -53) * 40 - 20);
  }
  for (double x : {0.0, -0.0, 1.0, -1.0, 2.0, 4.0, 0.25, 0.5, -0.5, 3.0, 9.0, 1024.0, 0x1p-126,
                   0x1p-149, -0x1p-149, 1e-300, 5e-324, -5e-324, 88.72283935546875, 88.7228470, -103.9720840,
                   -87.33654785, 127.0, 128.0, -149.0, -150.0, 16.0, 20.0, 100.0, 700.0, 1e4, 1e30,
                   3e38, 1e300, -16.0, -20.0, -100.0, -700.0, -1e4, -1e30, -3e38, -1e300, 1.7976931348623157e308,
                   -1.7976931348623157e308, HUGE_VAL, -HUGE_VAL, std::numeric_limits<double>::quiet_NaN()})
    out.push_back(x);
  return out;
}

class Functions : public ::testing::TestWithParam<Function> {};

// Every bf16 and every fp16 pattern into its own format (nearest_even), and a subsample under
// every mode and policy.
TEST_P(Functions, Every16BitInput) {
  const Function f = GetParam();
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t n = 0;
  for (const Format* fmt : {&numeq::formats::bf16, &numeq::formats::fp16}) {
    const std::vector<double> xs = all_values(*fmt);
    const std::vector<std::size_t> all = every(xs.size(), stride());
    std::vector<double> used(all.size());
    // Only the swept inputs need oracle values (compute them for the subset used).
    std::vector<std::size_t> sub = every(all.size(), 97, 13);  // positions within `all`
    for (std::size_t k = 0; k < all.size(); ++k) used[k] = xs[all[k]];
    const std::vector<Big> oracle = oracle_values(f, used);
    std::vector<std::size_t> identity(used.size());
    for (std::size_t k = 0; k < identity.size(); ++k) identity[k] = k;
    n += check(f, used, oracle, identity, make(*fmt), "all " + std::string(fmt->name));
    for (const Cast& c : mode_casts(*fmt)) n += check(f, used, oracle, sub, c, "sub " + std::string(fmt->name));
    // Into fp32 and e4m3fn as well (other precisions and a format without Inf).
    n += check(f, used, oracle, sub, make(numeq::formats::fp32), std::string(fmt->name) + " sub");
    n += check(f, used, oracle, sub, make(numeq::formats::e4m3fn, Rounding::upward),
               std::string(fmt->name) + " sub");
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ %-10s ] 16-bit inputs: %zu comparisons in %.1f s\n",
              std::string(numeq::reference::function_name(f)).c_str(), n, secs);
}

// Every value of every 8-bit floating format, into the same format and into bf16, every mode.
TEST_P(Functions, Every8BitInput) {
  const Function f = GetParam();
  std::size_t n = 0;
  for (const Format* fmt : {&numeq::formats::e4m3fn, &numeq::formats::e4m3, &numeq::formats::e4m3fnuz,
                            &numeq::formats::e5m2, &numeq::formats::e5m2fnuz}) {
    const std::vector<double> xs = all_values(*fmt);
    const std::vector<Big> oracle = oracle_values(f, xs);
    std::vector<std::size_t> all = every(xs.size(), 1);
    for (const Format* out : {fmt, &numeq::formats::bf16})
      for (const Cast& c : mode_casts(*out)) n += check(f, xs, oracle, all, c, std::string(fmt->name) + " in");
  }
  std::printf("[ %-10s ] 8-bit inputs: %zu comparisons\n",
              std::string(numeq::reference::function_name(f)).c_str(), n);
}

// fp32 and fp64 arguments (random patterns, tails, exact points) into fp32 and fp64.
TEST_P(Functions, Fp32AndDoubleInputs) {
  const Function f = GetParam();
  const std::vector<double> xs =
      fp32_and_double_inputs(std::max<std::size_t>(64, static_cast<std::size_t>(1500 * sweep_scale())));
  const std::vector<Big> oracle = oracle_values(f, xs);
  const std::vector<std::size_t> all = every(xs.size(), 1);
  std::size_t n = 0;
  for (const Cast& c : mode_casts(numeq::formats::fp32)) n += check(f, xs, oracle, all, c, "fp32/fp64 in");
  n += check(f, xs, oracle, all, make(numeq::formats::fp64), "fp32/fp64 in");
  n += check(f, xs, oracle, all, make(numeq::formats::fp64, Rounding::toward_zero), "fp32/fp64 in");
  n += check(f, xs, oracle, all, make(numeq::formats::tf32, Rounding::odd), "fp32/fp64 in");
  n += check(f, xs, oracle, all, make(numeq::formats::e8m0fnu, Rounding::upward), "fp32/fp64 in");
  std::printf("[ %-10s ] fp32/fp64 inputs: %zu comparisons\n",
              std::string(numeq::reference::function_name(f)).c_str(), n);
}

INSTANTIATE_TEST_SUITE_P(All, Functions,
                         ::testing::Values(Function::exp, Function::exp2, Function::log, Function::tanh,
                                           Function::sigmoid, Function::gelu, Function::gelu_tanh,
                                           Function::silu, Function::softplus, Function::sqrt,
                                           Function::rsqrt, Function::reciprocal),
                         [](const ::testing::TestParamInfo<Function>& param_info) {
                           return std::string(numeq::reference::function_name(param_info.param));
                         });

TEST(FunctionNames, RoundTripAndErrors) {
  for (std::string_view name : numeq::reference::function_names())
    EXPECT_EQ(numeq::reference::function_name(numeq::reference::function_by_name(name)), name);
  EXPECT_EQ(numeq::reference::function_names().size(), 23u);
  numeq_test::expect_error_mentioning([] { numeq::reference::function_by_name("expo"); }, "function");
  numeq_test::expect_error_mentioning([] { numeq::reference::function_by_name("expo"); }, "gelu_tanh");
  numeq_test::expect_error_mentioning([] { numeq::reference::function_by_name("", "name"); }, "name");
}

TEST(FunctionErrors, NanIntoFormatWithoutNan) {
  const Cast c = make(numeq::formats::e2m1fn);
  const std::vector<double> in{1.0, 4.0, -1.0, 2.0};
  const std::vector<std::size_t> shape{2, 2};
  numeq_test::expect_error_mentioning(
      [&] { numeq::reference::evaluate(Function::log, xt::adapt(in, shape), c); }, "element 2");
  numeq_test::expect_error_mentioning(
      [&] { numeq::reference::evaluate_bits(Function::exp, std::nan(""), c); }, "e2m1fn");
  numeq_test::expect_error_mentioning(
      [&] { numeq::reference::evaluate_bits(Function::sqrt, -1.0, c); }, "NaN");
  // An integer target is not a floating format.
  numeq_test::expect_error_mentioning(
      [&] { numeq::reference::evaluate_bits(Function::exp, 1.0, make(numeq::formats::int8)); }, "out");
  // Finite results into e2m1fn are fine (and saturate: no Inf there).
  EXPECT_EQ(numeq::reference::evaluate(Function::exp, xt::adapt(std::vector<double>{100.0},
                                                                std::vector<std::size_t>{1}), c)(0),
            6.0);
}

TEST(FunctionExact, ExactValuesInEveryMode) {
  // Exact results must terminate (point enclosures) and be returned unrounded in every mode.
  struct Case { Function f; double x; double want; };
  const Case cases[] = {{Function::exp, 0.0, 1.0},         {Function::exp2, 10.0, 1024.0},
                        {Function::exp2, -3.0, 0.125},      {Function::log, 1.0, 0.0},
                        {Function::sqrt, 2.25, 1.5},        {Function::rsqrt, 0.25, 2.0},
                        {Function::reciprocal, -8.0, -0.125}, {Function::sigmoid, 0.0, 0.5},
                        {Function::tanh, -0.0, -0.0},       {Function::gelu, -0.0, -0.0},
                        {Function::gelu_tanh, 0.0, 0.0},    {Function::silu, 0.0, 0.0}};
  for (const Case& k : cases)
    for (Rounding r : numeq_test::kModes)
      for (const Format* fmt : {&numeq::formats::bf16, &numeq::formats::fp32, &numeq::formats::fp64}) {
        const Cast c = make(*fmt, r, Overflow::ieee, Subnormals::keep, 64);
        const std::uint64_t bits = numeq::reference::evaluate_bits(k.f, k.x, c, 0x8000000000000001ull);
        EXPECT_TRUE(same_value(numeq::decode_pattern(*fmt, bits), k.want))
            << numeq::reference::function_name(k.f) << "(" << k.x << ") " << cast_name(c);
      }
}

TEST(FunctionThreads, IndependentOfThreadCount) {
  std::vector<double> in;
  for (int i = 0; i < 3000; ++i) in.push_back(std::ldexp(static_cast<double>(i) - 1500.0, -7));
  const std::vector<std::size_t> shape{30, 100};
  const Cast c = make(numeq::formats::bf16, Rounding::stochastic, Overflow::ieee, Subnormals::keep, 64);
  numeq::set_num_threads(1);
  const xt::xarray<double> one = numeq::reference::evaluate(Function::gelu_tanh, xt::adapt(in, shape), c);
  numeq::set_num_threads(3);
  const xt::xarray<double> three = numeq::reference::evaluate(Function::gelu_tanh, xt::adapt(in, shape), c);
  numeq::set_num_threads(0);
  ASSERT_EQ(one.shape(), three.shape());
  for (std::size_t i = 0; i < in.size(); ++i) EXPECT_TRUE(same_value(one.data()[i], three.data()[i])) << i;
  // Element i uses draw i of the seed's stream: matches evaluate_bits with that draw.
  const std::uint64_t key = numeq::random_stream_key(c.seed);
  for (std::size_t i = 0; i < in.size(); i += 7)
    EXPECT_TRUE(same_value(one.data()[i],
                           numeq::decode_pattern(c.format, numeq::reference::evaluate_bits(
                                                               Function::gelu_tanh, in[i], c,
                                                               numeq::random_bits_at(key, i)))));
}

// round_mpfr (the kernel path for MPFR values) against the oracle on random MPFR values of many
// precisions, every format and mode.
TEST(RoundMpfr, MatchesOracle) {
  std::uint64_t s = 77;
  std::size_t n = 0;
  Big v(300);
  for (const Format* fmt : numeq::all_formats()) {
    if (fmt->is_integer()) continue;
    numeq_oracle::RoundOracle o(*fmt);
    for (const Cast& c : mode_casts(*fmt)) {
      for (int i = 0; i < 400; ++i) {
        s = numeq::splitmix64_mix(s + numeq::splitmix64_gamma);
        const mpfr_prec_t p = 2 + static_cast<mpfr_prec_t>(s % 250);
        mpfr_set_prec(v.v, p);
        // Random bits: two 64-bit words times a power of two around the format's range.
        const std::uint64_t w = numeq::splitmix64_mix(s);
        mpfr_set_ui_2exp(v.v, w | 1, 0, MPFR_RNDZ);
        mpfr_mul_2si(v.v, v.v, static_cast<long>(s >> 40 & 0x3FF) - 600, MPFR_RNDN);
        if (i % 5 == 0) mpfr_set_ui_2exp(v.v, 1, static_cast<long>(s >> 50 & 0x1FF) - 256, MPFR_RNDN);
        if ((s & 2) != 0) mpfr_neg(v.v, v.v, MPFR_RNDN);
        const std::uint64_t random = numeq::random_bits_at(numeq::random_stream_key(c.seed), static_cast<std::uint64_t>(i));
        const numeq_oracle::Expected e = o.cast_value(v.v, c, static_cast<std::uint64_t>(i));
        const std::uint64_t bits = numeq::reference::round_mpfr(v.v, c, c.rounding == Rounding::stochastic ? random : 0);
        ASSERT_FALSE(e.throws);
        ASSERT_TRUE(same_value(numeq::decode_pattern(*fmt, bits), e.value))
            << cast_name(c) << " p=" << p << " got " << numeq_oracle::describe(numeq::decode_pattern(*fmt, bits))
            << " want " << numeq_oracle::describe(e.value);
        ++n;
      }
    }
  }
  g_comparisons.fetch_add(n);
  std::printf("round_mpfr: %zu comparisons\n", n);
}

class CountReport : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("test_functions: %zu comparisons with the MPFR oracle\n", g_comparisons.load());
  }
};
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new CountReport);

}  // namespace
