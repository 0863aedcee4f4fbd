// The certified functions added for NKI's activation table (references/functions.hpp: erf, erf_dx,
// sin, cos, tan, atan, mish, gelu_sigmoid, gelu_dx, silu_dx, gelu_sigmoid_dx) against an
// independent MPFR oracle, as tests/cpp/references/test_functions.cpp checks the others.
//
// The oracle never calls the code under test: each function is evaluated with plain MPFR at
// kPrecision + 64 bits (more for tiny arguments) rounded to nearest, the last step rounded to odd at kPrecision = 320 bits
// (200 bits beyond the deepest bit any rounding here looks at: 53 significand + 64 stochastic
// bits; a value rounded to odd at p bits rounds to any q <= p - 2 as the true value does). Tails
// that approach a representable number are written A + B with B to full relative precision (B
// set to MPFR's smallest positive number where it underflows MPFR's exponent range, only its sign
// mattering then): erf -> +-1, mish -> x, the derivatives -> 1 or 0.

#include <gtest/gtest.h>
#include <mpfr.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/functions.hpp"
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
using numeq_oracle::force_positive;
using numeq_oracle::same_value;
using numeq_oracle::to_odd;

constexpr mpfr_prec_t kPrecision = 320;
// The round-to-nearest steps' precision, per oracle thread: kPrecision + 64, plus the binary
// exponent of a tiny argument (the derivatives are 1/2 + c x near 0, summed from terms of size 1).
thread_local mpfr_prec_t t_work = kPrecision + 64;
mpfr_prec_t work_precision() { return t_work; }
using Big = numeq_oracle::Big<work_precision>;

const Function kNew[] = {Function::erf,  Function::erf_dx,       Function::sin,     Function::cos,
                         Function::tan,  Function::atan,         Function::mish,    Function::gelu_sigmoid,
                         Function::gelu_dx, Function::silu_dx,   Function::gelu_sigmoid_dx};

// functions.hpp's special values, restated.
bool special_value(Function f, double x, double& v) {
  const double inf = HUGE_VAL;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(x)) { v = nan; return true; }
  const bool neg = std::signbit(x);
  const bool is_inf = std::isinf(x);
  switch (f) {
    case Function::erf: if (is_inf) { v = neg ? -1.0 : 1.0; return true; } break;
    case Function::erf_dx: if (is_inf) { v = 0.0; return true; } break;
    case Function::sin:
    case Function::cos:
    case Function::tan: if (is_inf) { v = nan; return true; } break;
    case Function::mish:
    case Function::gelu_sigmoid:
      if (is_inf) { v = neg ? -0.0 : inf; return true; }
      if (x == 0) { v = x; return true; }
      break;
    case Function::gelu_dx:
    case Function::silu_dx:
    case Function::gelu_sigmoid_dx:
      if (is_inf) { v = neg ? -0.0 : 1.0; return true; }
      if (x == 0) { v = 0.5; return true; }
      break;
    default: break;
  }
  return false;
}

// silu_dx(y) = s + y s (1 - s), s = sigmoid(y), rounded to odd into out: y >= 0 as 1 + d,
// d = e (y - 1 - e) / (1 + e)^2 (> 0 for y >= 2), y < 0 as e (1 + e + y) / (1 + e)^2, e = e^-|y|.
void silu_dx(mpfr_ptr out, mpfr_srcptr y) {
  Big e, a, b, d;
  mpfr_abs(e.v, y, MPFR_RNDN);
  mpfr_neg(e.v, e.v, MPFR_RNDN);
  mpfr_exp(e.v, e.v, MPFR_RNDN);
  force_positive(e.v);
  mpfr_add_ui(b.v, e.v, 1, MPFR_RNDN);
  mpfr_sqr(b.v, b.v, MPFR_RNDN);
  if (mpfr_sgn(y) >= 0) {
    mpfr_sub_ui(a.v, y, 1, MPFR_RNDN);
    mpfr_sub(a.v, a.v, e.v, MPFR_RNDN);
    mpfr_mul(d.v, e.v, a.v, MPFR_RNDN);
    mpfr_div(d.v, d.v, b.v, MPFR_RNDN);
    if (mpfr_cmp_ui(y, 2) >= 0) force_positive(d.v);
    to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_add_ui(r, d.v, 1, rnd); });
  } else {
    mpfr_add_ui(a.v, e.v, 1, MPFR_RNDN);
    mpfr_add(a.v, a.v, y, MPFR_RNDN);
    mpfr_mul(d.v, e.v, a.v, MPFR_RNDN);
    to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_div(r, d.v, b.v, rnd); });
  }
}

// f(x) for a finite (atan: any) non-special x, rounded to odd at kPrecision bits.
void oracle_value(Function f, double x, mpfr_ptr out) {
  Big X, a, b, c;
  mpfr_set_d(X.v, x, MPFR_RNDN);  // exact
  const auto unary = [&](int (*g)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t)) {
    to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return g(r, X.v, rnd); });
  };
  switch (f) {
    case Function::sin: unary(mpfr_sin); return;
    case Function::cos: unary(mpfr_cos); return;
    case Function::tan: unary(mpfr_tan); return;
    case Function::atan: unary(mpfr_atan); return;
    case Function::erf:
      if (std::fabs(x) < 1) {
        unary(mpfr_erf);
        return;
      }
      mpfr_abs(a.v, X.v, MPFR_RNDN);
      mpfr_erfc(a.v, a.v, MPFR_RNDN);  // erf|x| = 1 - erfc|x|
      force_positive(a.v);
      to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_ui_sub(r, 1, a.v, rnd); });
      if (x < 0) mpfr_neg(out, out, MPFR_RNDN);
      return;
    case Function::erf_dx:
      mpfr_sqr(a.v, X.v, MPFR_RNDN);  // exact
      mpfr_neg(a.v, a.v, MPFR_RNDN);
      mpfr_exp(a.v, a.v, MPFR_RNDN);
      force_positive(a.v);
      mpfr_const_pi(b.v, MPFR_RNDN);
      mpfr_sqrt(b.v, b.v, MPFR_RNDN);
      mpfr_ui_div(b.v, 2, b.v, MPFR_RNDN);
      to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_mul(r, a.v, b.v, rnd); });
      return;
    case Function::mish:
      if (x > 0) {  // x - x (1 - tanh sp), 1 - tanh sp = 2 / (e^(2 sp) + 1), sp = x + log1p(e^-x)
        mpfr_neg(a.v, X.v, MPFR_RNDN);
        mpfr_exp(a.v, a.v, MPFR_RNDN);
        mpfr_log1p(a.v, a.v, MPFR_RNDN);
        mpfr_add(a.v, a.v, X.v, MPFR_RNDN);
        mpfr_mul_2ui(a.v, a.v, 1, MPFR_RNDN);
        mpfr_exp(a.v, a.v, MPFR_RNDN);
        mpfr_add_ui(a.v, a.v, 1, MPFR_RNDN);
        mpfr_ui_div(a.v, 2, a.v, MPFR_RNDN);
        mpfr_mul(a.v, a.v, X.v, MPFR_RNDN);
        force_positive(a.v);
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_sub(r, X.v, a.v, rnd); });
      } else {  // x tanh(log1p(e^x))
        mpfr_exp(a.v, X.v, MPFR_RNDN);
        force_positive(a.v);
        mpfr_log1p(a.v, a.v, MPFR_RNDN);
        force_positive(a.v);
        mpfr_tanh(a.v, a.v, MPFR_RNDN);
        force_positive(a.v);
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_mul(r, X.v, a.v, rnd); });
      }
      return;
    case Function::gelu_sigmoid:
      // x sigmoid(z), z = 1.702 x: x - x e^-z / (1 + e^-z) (x > 0), x e^z / (1 + e^z) (x < 0)
      mpfr_mul_ui(a.v, X.v, 1702, MPFR_RNDN);
      mpfr_div_ui(a.v, a.v, 1000, MPFR_RNDN);
      if (x > 0) {
        mpfr_neg(b.v, a.v, MPFR_RNDN);
        mpfr_exp(b.v, b.v, MPFR_RNDN);
        force_positive(b.v);
        mpfr_add_ui(c.v, b.v, 1, MPFR_RNDN);
        mpfr_div(b.v, b.v, c.v, MPFR_RNDN);
        mpfr_mul(b.v, b.v, X.v, MPFR_RNDN);
        force_positive(b.v);
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_sub(r, X.v, b.v, rnd); });
      } else {
        mpfr_exp(b.v, a.v, MPFR_RNDN);
        force_positive(b.v);
        mpfr_add_ui(c.v, b.v, 1, MPFR_RNDN);
        mpfr_div(b.v, b.v, c.v, MPFR_RNDN);
        to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_mul(r, X.v, b.v, rnd); });
      }
      return;
    case Function::silu_dx: silu_dx(out, X.v); return;
    case Function::gelu_sigmoid_dx:
      mpfr_mul_ui(a.v, X.v, 1702, MPFR_RNDN);
      mpfr_div_ui(a.v, a.v, 1000, MPFR_RNDN);
      silu_dx(out, a.v);
      return;
    case Function::gelu_dx: {
      // d(u) = u phi(u) - erfc(u / sqrt 2) / 2, u = |x| (> 0 for u >= 1); 1 + d(x) or -d(-x)
      mpfr_abs(a.v, X.v, MPFR_RNDN);
      mpfr_sqr(b.v, a.v, MPFR_RNDN);
      mpfr_div_2ui(b.v, b.v, 1, MPFR_RNDN);
      mpfr_neg(b.v, b.v, MPFR_RNDN);
      mpfr_exp(b.v, b.v, MPFR_RNDN);
      mpfr_const_pi(c.v, MPFR_RNDN);
      mpfr_mul_2ui(c.v, c.v, 1, MPFR_RNDN);
      mpfr_sqrt(c.v, c.v, MPFR_RNDN);
      mpfr_div(b.v, b.v, c.v, MPFR_RNDN);
      mpfr_mul(b.v, b.v, a.v, MPFR_RNDN);  // u phi(u)
      mpfr_sqrt_ui(c.v, 2, MPFR_RNDN);
      mpfr_div(c.v, a.v, c.v, MPFR_RNDN);
      mpfr_erfc(c.v, c.v, MPFR_RNDN);
      mpfr_div_2ui(c.v, c.v, 1, MPFR_RNDN);  // Q(u)
      mpfr_sub(b.v, b.v, c.v, MPFR_RNDN);
      if (mpfr_cmp_ui(a.v, 1) >= 0) force_positive(b.v);
      if (x >= 0) to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_add_ui(r, b.v, 1, rnd); });
      else to_odd(out, [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_neg(r, b.v, rnd); });
      return;
    }
    default: ADD_FAILURE() << "no oracle for " << numeq::reference::function_name(f); return;
  }
}

std::vector<numeq_oracle::MpfrVar> oracle_values(Function f, const std::vector<double>& xs) {
  std::vector<numeq_oracle::MpfrVar> out;
  out.reserve(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) out.emplace_back(kPrecision);
  const unsigned threads = std::max(2u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t i = t; i < xs.size(); i += threads) {
        double v = 0;
        int e = 0;
        std::frexp(xs[i], &e);
        t_work = kPrecision + 64 + (std::isfinite(xs[i]) && e < 0 ? -e : 0);
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

std::vector<Cast> mode_casts(const Format& f) {
  std::vector<Cast> out;
  for (Rounding r : numeq_test::kModes) {
    out.push_back(make(f, r));
    out.push_back(make(f, r, Overflow::saturate));
    out.push_back(make(f, r, Overflow::ieee, Subnormals::flush_outputs));
  }
  out.push_back(make(f, Rounding::stochastic, Overflow::ieee, Subnormals::keep, 64));
  return out;
}

// evaluate(f, xs[picks], cast) against the oracle, element by element.
void check(Function f, const std::vector<double>& xs, const std::vector<numeq_oracle::MpfrVar>& oracle,
           const std::vector<std::size_t>& picks, const Cast& cast, const std::string& what) {
  std::vector<double> in(picks.size());
  for (std::size_t k = 0; k < picks.size(); ++k) in[k] = xs[picks[k]];
  xt::xarray<double> got;
  try {
    got = numeq::reference::evaluate(f, xt::adapt(in, std::vector<std::size_t>{in.size()}), cast);
  } catch (const std::exception& e) {
    ADD_FAILURE() << numeq::reference::function_name(f) << " " << what << ": threw " << e.what();
    return;
  }
  std::vector<double> want(in.size());
  numeq::parallel_for(
      in.size(),
      [&](std::size_t begin, std::size_t end) {
        numeq_oracle::RoundOracle o(cast.format);
        for (std::size_t k = begin; k < end; ++k) want[k] = o.cast_value(oracle[picks[k]].v, cast, k).value;
      },
      256);
  int reports = 0;
  for (std::size_t k = 0; k < in.size(); ++k)
    if (!same_value(got[k], want[k]) && ++reports <= 8)
      ADD_FAILURE() << numeq::reference::function_name(f) << " " << what << " " << cast.format.name << "/"
                    << numeq::to_string(cast.rounding) << " x=" << numeq_oracle::describe(in[k]) << " got "
                    << numeq_oracle::describe(got[k]) << " want " << numeq_oracle::describe(want[k]);
}

std::vector<std::size_t> every(std::size_t n, std::size_t step, std::size_t offset = 0) {
  std::vector<std::size_t> out;
  for (std::size_t i = offset % step; i < n; i += step) out.push_back(i);
  return out;
}

std::vector<double> all_values(const Format& f) {
  const numeq_oracle::Spec spec(f);
  std::vector<double> out;
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << f.storage_bits); ++b)
    out.push_back(numeq_oracle::decode_oracle(spec, b));
  return out;
}

class NewFunctions : public ::testing::TestWithParam<Function> {};

// Every bf16 and fp16 pattern into its own format and fp32 (nearest_even), a subsample under
// every mode and policy; every e4m3fn and e5m2 pattern into bf16 under every mode.
TEST_P(NewFunctions, EverySmallFormatInput) {
  const Function f = GetParam();
  for (const Format* fmt : {&numeq::formats::bf16, &numeq::formats::fp16}) {
    const std::vector<double> xs = all_values(*fmt);
    const auto oracle = oracle_values(f, xs);
    const std::vector<std::size_t> all = every(xs.size(), 1), sub = every(xs.size(), 89, 7);
    check(f, xs, oracle, all, make(*fmt), "all");
    check(f, xs, oracle, all, make(numeq::formats::fp32), "all");
    for (const Cast& c : mode_casts(*fmt)) check(f, xs, oracle, sub, c, "sub");
  }
  for (const Format* fmt : {&numeq::formats::e4m3fn, &numeq::formats::e5m2}) {
    const std::vector<double> xs = all_values(*fmt);
    const auto oracle = oracle_values(f, xs);
    for (const Cast& c : mode_casts(numeq::formats::bf16)) check(f, xs, oracle, every(xs.size(), 1), c, "8-bit");
  }
}

// fp32 patterns (uniform in the bits), doubles in [-20, 20], tails and exact points, into fp32
// under every mode and into fp64.
TEST_P(NewFunctions, Fp32AndDoubleInputs) {
  const Function f = GetParam();
  std::vector<double> xs;
  std::uint64_t s = 0xfeed;
  for (int i = 0; i < 3000; ++i) {
    s = numeq::splitmix64_mix(s + numeq::splitmix64_gamma);
    xs.push_back(static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(s))));
    if (i % 3 == 0) xs.push_back(std::ldexp(static_cast<double>(s >> 11), -53) * 40 - 20);
  }
  for (double x : {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, 9.0, -9.0, 3.1415927410125732,
                   -3.1415927410125732, 1.5707963705062866, -1.5707963705062866, 0x1p-126, 0x1p-149, -0x1p-149,
                   1e-300, -0.7517916, -1.2784645, -0.7511638, 5.0, 27.0, 40.0, 1e4, 4e4, 1e9, 1e30, 3e38,
                   -1e4, -4e4, -1e9, -1e30, -3e38, 1e300, -1e300, 1.7976931348623157e308, HUGE_VAL, -HUGE_VAL,
                   std::numeric_limits<double>::quiet_NaN()})
    xs.push_back(x);
  const auto oracle = oracle_values(f, xs);
  const std::vector<std::size_t> all = every(xs.size(), 1);
  for (const Cast& c : mode_casts(numeq::formats::fp32)) check(f, xs, oracle, all, c, "fp32/fp64 in");
  check(f, xs, oracle, all, make(numeq::formats::fp64), "fp32/fp64 in");
  check(f, xs, oracle, all, make(numeq::formats::fp64, Rounding::toward_zero), "fp32/fp64 in");
}

INSTANTIATE_TEST_SUITE_P(Activations, NewFunctions, ::testing::ValuesIn(kNew),
                         [](const ::testing::TestParamInfo<Function>& p) {
                           return std::string(numeq::reference::function_name(p.param));
                         });

TEST(NewFunctionsExact, ExactValuesInEveryMode) {
  struct Case { Function f; double x; double want; };
  const Case cases[] = {{Function::erf, -0.0, -0.0},         {Function::sin, -0.0, -0.0},
                        {Function::cos, 0.0, 1.0},           {Function::tan, 0.0, 0.0},
                        {Function::atan, -0.0, -0.0},        {Function::mish, -0.0, -0.0},
                        {Function::gelu_sigmoid, 0.0, 0.0},  {Function::gelu_dx, 0.0, 0.5},
                        {Function::silu_dx, -0.0, 0.5},      {Function::gelu_sigmoid_dx, 0.0, 0.5},
                        {Function::erf, HUGE_VAL, 1.0},      {Function::gelu_dx, -HUGE_VAL, -0.0},
                        {Function::silu_dx, HUGE_VAL, 1.0},  {Function::erf_dx, -HUGE_VAL, 0.0}};
  for (const Case& k : cases)
    for (Rounding r : numeq_test::kModes)
      for (const Format* fmt : {&numeq::formats::bf16, &numeq::formats::fp32, &numeq::formats::fp64}) {
        const Cast c = make(*fmt, r, Overflow::ieee, Subnormals::keep, 64);
        const std::uint64_t bits = numeq::reference::evaluate_bits(k.f, k.x, c, 0x8000000000000001ull);
        EXPECT_TRUE(same_value(numeq::decode_pattern(*fmt, bits), k.want))
            << numeq::reference::function_name(k.f) << "(" << k.x << ") " << numeq::to_string(r);
      }
  // sin, cos, tan of an infinity are NaN; atan(+-Inf) = +-pi/2 correctly rounded.
  EXPECT_TRUE(std::isnan(numeq::decode_pattern(numeq::formats::fp32, numeq::reference::evaluate_bits(
                                                   Function::sin, HUGE_VAL, make(numeq::formats::fp32)))));
  EXPECT_EQ(numeq::decode_pattern(numeq::formats::fp32,
                                  numeq::reference::evaluate_bits(Function::atan, -HUGE_VAL, make(numeq::formats::fp32))),
            -1.5707963705062866);
  EXPECT_EQ(numeq::decode_pattern(numeq::formats::fp64, numeq::reference::evaluate_bits(
                                                            Function::atan, HUGE_VAL, make(numeq::formats::fp64))),
            1.5707963267948966);
}

}  // namespace
