// Certified elementwise functions: a fast double enclosure (fast_functions.hpp), then Ziv's loop
// over MPFR interval enclosures when its rounding test fails (see functions.hpp).

#include "numeq/references/functions.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include <xtensor/xbuilder.hpp>

#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/round_and_pack.hpp"
#include "numeq/references/mpfr_value.hpp"

#include "fast_functions.hpp"

namespace numeq::reference {

namespace {

constexpr std::array<std::string_view, 23> kNames = names_array(enum_names<Function>);

// Ziv's loop gives up here: 2^16 bits is far beyond the distance of any non-representable value
// of these functions at a double argument from a rounding boundary in practice; reaching it
// means an exact case the enclosure failed to collapse, which must be reported, not guessed.
constexpr mpfr_prec_t kMaxPrecision = mpfr_prec_t{1} << 16;

// The exact result for arguments where the function is defined by a special case or a limit
// (functions.hpp lists them); nullopt where Ziv's loop computes it.
std::optional<double> special_value(Function f, double x) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(x)) return x;
  const bool is_inf = std::isinf(x);
  const bool neg = std::signbit(x);
  switch (f) {
    case Function::exp:
    case Function::exp2:
      if (is_inf) return neg ? 0.0 : inf;
      break;
    case Function::log:
      if (neg && x != 0) return nan;  // x < 0, -Inf included
      if (x == 0) return -inf;        // log(+-0) = -Inf (IEEE 754-2019 s9.2)
      if (is_inf) return inf;
      break;
    case Function::tanh:
      if (is_inf) return neg ? -1.0 : 1.0;
      break;
    case Function::sigmoid:
      if (is_inf) return neg ? 0.0 : 1.0;
      break;
    case Function::gelu:
    case Function::gelu_tanh:
    case Function::silu:
      if (is_inf) return neg ? -0.0 : inf;  // x * (something -> 0+) approaches 0 from below
      break;
    case Function::softplus:
      if (is_inf) return neg ? 0.0 : inf;
      break;
    case Function::sqrt:
      if (neg && x != 0) return nan;
      if (is_inf || x == 0) return x;  // sqrt(+Inf) = +Inf, sqrt(+-0) = +-0 (IEEE 754 s5.4.1)
      break;
    case Function::rsqrt:
      if (neg && x != 0) return nan;
      if (x == 0) return neg ? -inf : inf;  // IEEE 754-2019 s9.2: rSqrt(+-0) = +-Inf
      if (is_inf) return 0.0;
      break;
    case Function::reciprocal:
      if (x == 0) return neg ? -inf : inf;
      if (is_inf) return neg ? -0.0 : 0.0;
      break;
    case Function::erf:
      if (is_inf) return neg ? -1.0 : 1.0;
      break;
    case Function::erf_dx:
      if (is_inf) return 0.0;
      break;
    case Function::sin:
    case Function::cos:
    case Function::tan:
      if (is_inf) return nan;
      break;
    case Function::atan: break;  // atan(+-Inf) = +-pi/2, rounded by the MPFR loop
    case Function::mish:
    case Function::gelu_sigmoid:
      if (is_inf) return neg ? -0.0 : inf;  // x * (something -> 0+) approaches 0 from below
      break;
    case Function::gelu_dx:
    case Function::silu_dx:
    case Function::gelu_sigmoid_dx:
      if (is_inf) return neg ? -0.0 : 1.0;  // negative for x << 0 (e.g. silu_dx ~ e^x (1 + x))
      break;
  }
  return std::nullopt;
}

// Per-thread MPFR storage, reused across elements and Ziv rounds.
struct Workspace {
  Interval x{64};  // the argument: exact (53 bits fit)
  std::array<Interval, 12> t;
  Interval r;

  void set_precision(mpfr_prec_t p) {
    for (Interval& i : t) i.set_precision(p);
    r.set_precision(p);
  }
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }  // this thread's constant caches
};

// out = sigmoid(z) = 1 / (1 + e^-z), using t[4..7] (out and z must be others).
void sigmoid_of(Interval& out, const Interval& z, Workspace& w) {
  ia::neg(w.t[4], z);
  ia::exp(w.t[5], w.t[4]);
  w.t[6].set_si(1);
  ia::add(w.t[7], w.t[5], w.t[6]);
  ia::recip(out, w.t[7]);
}

// out = softplus(x) = max(x, 0) + log1p(e^-|x|) (no overflow of e^x, no cancellation), using
// t[8..9] (out must be another).
void softplus_of(Interval& out, const Interval& X, double x, Workspace& w) {
  auto& t = w.t;
  if (x >= 0) {
    ia::neg(t[8], X);
    ia::exp(t[9], t[8]);
    ia::log1p(t[8], t[9]);
    ia::add(out, X, t[8]);
  } else {
    ia::exp(t[9], X);
    ia::log1p(out, t[9]);
  }
}

// out = silu_dx(y) = s + y s (1 - s), s = sigmoid(y), for an interval y of one sign (nonneg: y >= 0),
// using t[8..11]. With e = e^-|y|: y >= 0 gives 1 + e (y - 1 - e) / (1 + e)^2, y < 0 gives
// e (1 + e + y) / (1 + e)^2 (s = 1/(1 + e) or e/(1 + e)). Each is 1 + d or d with d's sign known
// from its factors even where e underflows MPFR's exponent range (its ends then 0 open and the
// smallest positive number), so tails round on the right side of 1 and of 0.
void silu_dx_of(Interval& out, const Interval& Y, bool nonneg, Workspace& w) {
  auto& t = w.t;
  if (nonneg) {
    ia::neg(t[8], Y);
    ia::exp(t[9], t[8]);          // e
    t[10].set_si(1);
    ia::add(t[11], t[9], t[10]);  // 1 + e
    ia::mul(t[8], t[11], t[11]);  // (1 + e)^2
    ia::sub(t[11], Y, t[10]);     // y - 1
    ia::sub(t[10], t[11], t[9]);  // y - 1 - e
    ia::mul(t[11], t[9], t[10]);
    ia::div(t[9], t[11], t[8]);   // d
    t[10].set_si(1);
    ia::add(out, t[10], t[9]);
  } else {
    ia::exp(t[9], Y);             // e
    t[10].set_si(1);
    ia::add(t[11], t[9], t[10]);  // 1 + e
    ia::mul(t[8], t[11], t[11]);  // (1 + e)^2
    ia::add(t[10], t[11], Y);     // 1 + e + y
    ia::mul(t[11], t[9], t[10]);
    ia::div(out, t[11], t[8]);
  }
}

// An enclosure of f(x) at the workspace's precision, into w.r.
void enclose(Function f, double x, Workspace& w) {
  const Interval& X = w.x;
  auto& t = w.t;
  Interval& r = w.r;
  switch (f) {
    case Function::exp: ia::exp(r, X); return;
    case Function::exp2: ia::exp2(r, X); return;
    case Function::log: ia::log(r, X); return;
    case Function::tanh: ia::tanh(r, X); return;
    case Function::sqrt: ia::sqrt(r, X); return;
    case Function::rsqrt: ia::rec_sqrt(r, X); return;
    case Function::reciprocal: ia::recip(r, X); return;
    case Function::sigmoid: sigmoid_of(r, X, w); return;
    case Function::silu:
      sigmoid_of(t[0], X, w);
      ia::mul(r, X, t[0]);
      return;
    case Function::gelu:
      // x/2 * (1 + erf(x/sqrt 2)) = x/2 * erfc(-x/sqrt 2): erfc keeps full relative accuracy
      // where 1 + erf would cancel (x << 0).
      t[0].set_si(2);
      ia::sqrt(t[1], t[0]);
      ia::div(t[2], X, t[1]);
      ia::neg(t[3], t[2]);
      ia::erfc(t[4], t[3]);
      ia::mul_2si(t[5], X, -1);
      ia::mul(r, t[5], t[4]);
      return;
    case Function::gelu_tanh:
      // y = sqrt(2/pi) (x + 44715/10^6 x^3); x/2 (1 + tanh y) = x * sigmoid(2y) (1 + tanh y =
      // 2 / (1 + e^-2y)), which does not cancel for y << 0.
      ia::mul(t[0], X, X);
      ia::mul(t[1], t[0], X);
      ia::scale(t[2], t[1], 44715, 1000000);
      ia::add(t[3], X, t[2]);
      ia::pi(t[0]);
      ia::recip(t[1], t[0]);
      ia::mul_2si(t[0], t[1], 1);
      ia::sqrt(t[1], t[0]);          // sqrt(2/pi)
      ia::mul(t[2], t[1], t[3]);     // y
      ia::mul_2si(t[0], t[2], 1);    // 2y
      sigmoid_of(t[1], t[0], w);
      ia::mul(r, X, t[1]);
      return;
    case Function::softplus: softplus_of(r, X, x, w); return;
    case Function::erf: ia::erf(r, X); return;
    case Function::erf_dx:
      // 2/sqrt(pi) e^-x^2
      ia::mul(t[0], X, X);
      ia::neg(t[1], t[0]);
      ia::exp(t[2], t[1]);
      ia::pi(t[0]);
      ia::sqrt(t[1], t[0]);
      ia::recip(t[0], t[1]);
      ia::mul_2si(t[1], t[0], 1);
      ia::mul(r, t[1], t[2]);
      return;
    case Function::sin: ia::sin(r, X); return;
    case Function::cos: ia::cos(r, X); return;
    case Function::tan: ia::tan(r, X); return;
    case Function::atan: ia::atan(r, X); return;
    case Function::mish:
      softplus_of(t[0], X, x, w);
      ia::tanh(t[1], t[0]);
      ia::mul(r, X, t[1]);
      return;
    case Function::gelu_sigmoid:
      ia::scale(t[0], X, 1702, 1000);
      sigmoid_of(t[1], t[0], w);
      ia::mul(r, X, t[1]);
      return;
    case Function::silu_dx: silu_dx_of(r, X, x >= 0, w); return;
    case Function::gelu_sigmoid_dx:
      // d/dx x sigmoid(k x) = sigmoid(k x) + k x sigmoid'(k x) = silu_dx(k x), k = 1702/1000
      ia::scale(t[0], X, 1702, 1000);
      silu_dx_of(r, t[0], x >= 0, w);
      return;
    case Function::gelu_dx: {
      // Phi(x) + x phi(x) = 1 + d(x) (x >= 0) or -d(-x) (x < 0), d(u) = u phi(u) - Q(u) for
      // u = |x|, Q(u) = erfc(u / sqrt 2) / 2 the upper tail. For u >= 1, d(u) > 0: Q(u) < phi(u)/u
      // (Mills' ratio bound; Gordon, Ann. Math. Stat. 12, 1941) <= u phi(u). Where phi and Q
      // underflow MPFR's range that sign is imposed on the lower end of d (0, open).
      const Interval* U = &X;
      if (x < 0) {
        ia::neg(t[0], X);
        U = &t[0];
      }
      ia::mul(t[1], *U, *U);
      ia::mul_2si(t[2], t[1], -1);
      ia::neg(t[3], t[2]);
      ia::exp(t[1], t[3]);           // e^-u^2/2
      ia::pi(t[2]);
      ia::mul_2si(t[3], t[2], 1);
      ia::sqrt(t[2], t[3]);          // sqrt(2 pi)
      ia::div(t[3], t[1], t[2]);     // phi(u)
      ia::mul(t[1], *U, t[3]);       // u phi(u)
      t[2].set_si(2);
      ia::sqrt(t[3], t[2]);
      ia::div(t[2], *U, t[3]);
      ia::erfc(t[3], t[2]);
      ia::mul_2si(t[2], t[3], -1);   // Q(u)
      ia::sub(t[3], t[1], t[2]);     // d(u)
      if (std::fabs(x) >= 1 && mpfr_sgn(t[3].lo.value.get()) <= 0) {
        mpfr_set_zero(t[3].lo.value.get(), 1);
        t[3].lo.open = true;
      }
      if (x >= 0) {
        t[1].set_si(1);
        ia::add(r, t[1], t[3]);
      } else {
        ia::neg(r, t[3]);
      }
      return;
    }
  }
}

std::string describe(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// Process-wide counters (function_path_counts). Relaxed: they are statistics, and they are only
// touched on the MPFR path, which costs microseconds anyway.
std::atomic<std::uint64_t> g_fallbacks{0};
std::atomic<std::uint64_t> g_mpfr{0};

// The certified pattern, or numeq::invalid_encoding for NaN into a format without NaN.
std::uint64_t certified(FunctionPath path, Function f, double x, const Cast& out, std::uint64_t random) {
  if (const std::optional<double> s = special_value(f, x))
    return encode_unpacked(unpack_double(*s), out, random);
  if (path == FunctionPath::fast && fast::suits(out)) {
    if (const std::optional<fast::Enclosure> e = fast::enclose(f, x)) {
      if (const std::optional<std::uint64_t> bits = fast::round_enclosure(*e, out, random)) return *bits;
      g_fallbacks.fetch_add(1, std::memory_order_relaxed);
    }
  }
  g_mpfr.fetch_add(1, std::memory_order_relaxed);
  thread_local Workspace w;
  w.x.set(x);
  const int extra = 32 + (out.rounding == Rounding::stochastic ? out.random_bits : 0);
  mpfr_prec_t p = std::max<mpfr_prec_t>(64, out.format.precision() + extra);
  while (true) {
    w.set_precision(p);
    enclose(f, x, w);
    const Interval& r = w.r;
    const std::uint64_t lo = round_mpfr(r.lo.value, out, random, r.lo.open ? Nudge::above : Nudge::none);
    const std::uint64_t hi = round_mpfr(r.hi.value, out, random, r.hi.open ? Nudge::below : Nudge::none);
    if (lo == hi) return lo;
    if (p >= kMaxPrecision) break;
    p = std::min(2 * p, kMaxPrecision);
  }
  throw numeq::error("reference " + std::string(function_name(f)) + ": could not certify the rounding of " +
                     std::string(function_name(f)) + "(" + describe(x) + ") into " +
                     std::string(out.format.name) + " within " + std::to_string(kMaxPrecision) + " bits");
}

std::string nan_message(Function f, const Cast& out) {
  return std::string(function_name(f)) + " gives NaN, which format " + std::string(out.format.name) +
         " cannot hold: it has no NaN encoding (OCP MX FP6/FP4 hold finite values only)";
}

}  // namespace

std::string_view function_name(Function f) { return name_of(enum_names<Function>, f); }

std::span<const std::string_view> function_names() { return kNames; }

Function function_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<Function>, name, parameter, "function");
}

FunctionPath default_function_path() {
  static const FunctionPath path = [] {
    const char* v = std::getenv("NUMEQ_FUNCTIONS");
    if (v == nullptr || std::string_view(v).empty()) return FunctionPath::fast;
    return by_name(enum_names<FunctionPath>, v, "environment variable NUMEQ_FUNCTIONS", "function path");
  }();
  return path;
}

FunctionPathCounts function_path_counts() {
  return {g_fallbacks.load(std::memory_order_relaxed), g_mpfr.load(std::memory_order_relaxed)};
}

std::uint64_t evaluate_bits(Function f, double x, const Cast& out, std::uint64_t random) {
  return evaluate_bits_with(default_function_path(), f, x, out, random);
}

std::uint64_t evaluate_bits_with(FunctionPath path, Function f, double x, const Cast& out, std::uint64_t random) {
  validate(out, "out");
  const std::uint64_t bits = certified(path, f, x, out, random);
  if (bits == invalid_encoding)
    throw numeq::error("x: " + nan_message(f, out) + " (x = " + describe(x) + ")");
  return bits;
}

xt::xarray<double> evaluate(Function f, const xt::xarray<double>& x, const Cast& out) {
  return evaluate_with(default_function_path(), f, x, out);
}

xt::xarray<double> evaluate_with(FunctionPath path, Function f, const xt::xarray<double>& x, const Cast& out) {
  validate(out, "out");
  xt::xarray<double> result = xt::empty<double>(x.shape());
  const std::size_t n = x.size();
  const double* in = x.data();
  double* values = result.data();
  const std::uint64_t key = random_stream_key(out.seed);
  const bool stochastic = out.rounding == Rounding::stochastic;
  constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  std::atomic<std::size_t> first_invalid{none};
  parallel_for(
      n,
      [&](std::size_t begin, std::size_t end) {
        std::size_t invalid = none;
        for (std::size_t i = begin; i < end; ++i) {
          const std::uint64_t random = stochastic ? random_bits_at(key, i) : 0;
          const std::uint64_t bits = certified(path, f, in[i], out, random);
          if (bits == invalid_encoding) [[unlikely]] {
            invalid = std::min(invalid, i);
            values[i] = std::numeric_limits<double>::quiet_NaN();
            continue;
          }
          values[i] = decode_bits(out.format, bits);
        }
        std::size_t current = first_invalid.load();
        while (invalid < current && !first_invalid.compare_exchange_weak(current, invalid)) {
        }
      },
      // Each element costs microseconds (MPFR), so small arrays already pay for threads.
      64);
  if (first_invalid.load() != none)
    throw numeq::error("x: element " + std::to_string(first_invalid.load()) + " (C order): " +
                       nan_message(f, out));
  return result;
}

}  // namespace numeq::reference
