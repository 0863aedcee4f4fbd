// Certified composite operations: exact row quantities, interval enclosures of the transcendental
// steps, Ziv's loop per output element (see composite.hpp for the definitions and the argument
// why the loop ends).

#include "numeq/references/composite.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>

#include "numeq/formats/error.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/round_and_pack.hpp"
#include "numeq/references/mpfr_value.hpp"

#include "fast_functions.hpp"

namespace numeq::reference {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// As for the elementwise functions: 2^16 bits is far beyond what any non-representable result
// needs; reaching it means an exact case the enclosure did not collapse, which is reported.
constexpr mpfr_prec_t kMaxPrecision = mpfr_prec_t{1} << 16;

// ---- exact dyadic arithmetic ----
//
// Every input is a double, i.e. a dyadic rational; sums, differences and products of dyadics are
// dyadic, and MPFR computes them exactly when the target precision spans the result's bits. The
// helpers below size the target so, and check MPFR's ternary value (zero iff exact, MPFR manual
// s4.5) so that a sizing mistake cannot pass silently.

// The span of the bits of finite doubles: every value lies below 2^top in magnitude and is a
// multiple of 2^low. Empty (no non-zero value) when top < low.
struct BitSpan {
  long top = LONG_MIN;
  long low = LONG_MAX;

  void add(double x) {
    if (x == 0 || !std::isfinite(x)) return;
    int e = 0;
    const double m = std::frexp(std::fabs(x), &e);  // x = m 2^e, m in [1/2, 1)
    // m 2^53 is an integer (subnormals included); its trailing zeros raise the lowest bit.
    const auto integer = static_cast<std::uint64_t>(std::ldexp(m, 53));
    top = std::max(top, static_cast<long>(e));
    low = std::min(low, static_cast<long>(e) - 53 + std::countr_zero(integer));
  }
  bool empty() const { return top < low; }
  // Bits enough for a sum of `terms` such values, exactly.
  mpfr_prec_t sum_precision(std::size_t terms) const {
    if (empty()) return MPFR_PREC_MIN;
    return static_cast<mpfr_prec_t>(top - low + std::bit_width(terms) + 1);
  }
};

BitSpan product_span(const BitSpan& a, const BitSpan& b) {
  if (a.empty() || b.empty()) return {};
  return {a.top + b.top, a.low + b.low};
}

void require_exact(int ternary) {
  if (ternary != 0) throw numeq::error("reference: internal error: an exact step was rounded");
}

// The exponent range an MPFR number's bits span: [lsb, top) with value < 2^top.
mpfr_prec_t exact_sum_precision(mpfr_srcptr a, mpfr_srcptr b) {
  if (mpfr_zero_p(a)) return mpfr_get_prec(b);
  if (mpfr_zero_p(b)) return mpfr_get_prec(a);
  const long top = std::max(mpfr_get_exp(a), mpfr_get_exp(b)) + 1;
  const long low = std::min(mpfr_get_exp(a) - mpfr_get_prec(a), mpfr_get_exp(b) - mpfr_get_prec(b));
  return static_cast<mpfr_prec_t>(top - low);
}

// r = a + b and r = a - b exactly (r must be neither operand).
void exact_add(Mpfr& r, mpfr_srcptr a, mpfr_srcptr b) {
  r.set_precision(std::max<mpfr_prec_t>(MPFR_PREC_MIN, exact_sum_precision(a, b)));
  require_exact(mpfr_add(r, a, b, MPFR_RNDN));
}
void exact_sub(Mpfr& r, mpfr_srcptr a, mpfr_srcptr b) {
  r.set_precision(std::max<mpfr_prec_t>(MPFR_PREC_MIN, exact_sum_precision(a, b)));
  require_exact(mpfr_sub(r, a, b, MPFR_RNDN));
}
void exact_mul(Mpfr& r, mpfr_srcptr a, mpfr_srcptr b) {
  r.set_precision(mpfr_get_prec(a) + mpfr_get_prec(b));
  require_exact(mpfr_mul(r, a, b, MPFR_RNDN));
}
void exact_set(Mpfr& r, double x) {
  r.set_precision(53);
  require_exact(mpfr_set_d(r, x, MPFR_RNDN));
}
void exact_mul_ui(Mpfr& r, mpfr_srcptr a, unsigned long k) {
  r.set_precision(mpfr_get_prec(a) + 64);
  require_exact(mpfr_mul_ui(r, a, k, MPFR_RNDN));
}

// sum_i x[i * stride] exactly, into r.
void exact_sum(Mpfr& r, const double* x, std::size_t n, std::size_t stride) {
  BitSpan span;
  for (std::size_t i = 0; i < n; ++i) span.add(x[i * stride]);
  r.set_precision(span.sum_precision(n));
  mpfr_set_zero(r, 1);
  for (std::size_t i = 0; i < n; ++i) require_exact(mpfr_add_d(r, r, x[i * stride], MPFR_RNDN));
}

// sum_i a[i] * b[i] exactly, into r (a, b contiguous).
void exact_dot(Mpfr& r, const double* a, const double* b, std::size_t n) {
  BitSpan sa;
  BitSpan sb;
  for (std::size_t i = 0; i < n; ++i) {
    sa.add(a[i]);
    sb.add(b[i]);
  }
  r.set_precision(product_span(sa, sb).sum_precision(n));
  mpfr_set_zero(r, 1);
  thread_local Mpfr product(106);  // a double times a double: 106 bits hold it exactly
  for (std::size_t i = 0; i < n; ++i) {
    require_exact(mpfr_set_d(product, a[i], MPFR_RNDN));
    require_exact(mpfr_mul_d(product, product, b[i], MPFR_RNDN));
    require_exact(mpfr_add(r, r, product, MPFR_RNDN));
  }
}

// The interval [x, x] for an exact MPFR value x at the interval's precision (outward rounded when
// the precision is smaller than x's).
void set_point(Interval& r, mpfr_srcptr x) {
  r.lo.open = mpfr_set(r.lo.value, x, MPFR_RNDD) != 0;
  r.hi.open = mpfr_set(r.hi.value, x, MPFR_RNDU) != 0;
}

// An exact zero result comes out of MPFR with the sign its rounding direction gives a zero sum
// (IEEE 754 s6.3: -0 when rounding downward), so the two ends of a point zero can differ in sign.
// The sign is the operation's to decide (composite.hpp); set it on both ends.
void settle_zero_sign(Interval& r, bool negative) {
  if (!r.is_point() || !mpfr_zero_p(r.lo.value)) return;
  mpfr_set_zero(r.lo.value, negative ? -1 : 1);
  mpfr_set_zero(r.hi.value, negative ? -1 : 1);
}

// ---- Ziv's loop over one row ----

mpfr_prec_t start_precision(const Cast& out) {
  const int extra = 32 + (out.rounding == Rounding::stochastic ? out.random_bits : 0);
  return std::max<mpfr_prec_t>(64, out.format.precision() + extra);
}

// The pattern of an exact double value (NaN, an infinity, a signed zero, or a representable
// value) in out, through the kernel as a cast would give it.
std::uint64_t exact_pattern(double v, const Cast& out, std::uint64_t random) {
  return encode_unpacked(unpack_double(v), out, random);
}

// One output row: where its elements go and their stochastic draws.
struct RowOutput {
  const Cast& out;
  std::uint64_t key;          // random_stream_key(out.seed)
  bool stochastic;
  std::uint64_t* bits;        // the result patterns, indexed by output element (C order)
  std::uint64_t random(std::size_t index) const { return stochastic ? random_bits_at(key, index) : 0; }
};

// Decides every element of `pending` (output indices): at precision p, prepare(p) computes the
// row's shared enclosures, then enclose(e, r, p) encloses element e in r. An element is decided
// when both ends round alike (Nudge for open ends, mpfr_value.hpp); the rest go round again at
// twice the precision. `what` names the operation for the error message.
template <class Prepare, class Enclose>
void certify_row(std::vector<std::size_t>& pending, const RowOutput& row, Prepare&& prepare,
                 Enclose&& enclose, const char* what) {
  thread_local Interval r;
  mpfr_prec_t p = start_precision(row.out);
  while (!pending.empty()) {
    prepare(p);
    r.set_precision(p);
    std::size_t kept = 0;
    for (const std::size_t e : pending) {
      enclose(e, r, p);
      const std::uint64_t random = row.random(e);
      const std::uint64_t lo = round_mpfr(r.lo.value, row.out, random, r.lo.open ? Nudge::above : Nudge::none);
      const std::uint64_t hi = round_mpfr(r.hi.value, row.out, random, r.hi.open ? Nudge::below : Nudge::none);
      if (lo == hi)
        row.bits[e] = lo;
      else
        pending[kept++] = e;
    }
    pending.resize(kept);
    if (pending.empty()) return;
    if (p >= kMaxPrecision)
      throw numeq::error(std::string("reference ") + what + ": could not certify the rounding of element " +
                         std::to_string(pending.front()) + " (C order) into " + std::string(row.out.format.name) +
                         " within " + std::to_string(kMaxPrecision) + " bits");
    p = std::min(2 * p, kMaxPrecision);
  }
}

// Per-thread interval storage, grown as rows need it.
struct Scratch {
  std::vector<Interval> a;
  std::vector<Interval> b;
  std::vector<Mpfr> exact;   // exact per-element values of the row
  std::vector<Mpfr> exact2;
  Interval t0, t1, t2, t3;

  void reserve(std::size_t n) {
    while (a.size() < n) a.emplace_back(64);
    while (b.size() < n) b.emplace_back(64);
    while (exact.size() < n) exact.emplace_back(64);
    while (exact2.size() < n) exact2.emplace_back(64);
  }
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Sets every interval of v[0, n) to precision p.
void set_precision(std::vector<Interval>& v, std::size_t n, mpfr_prec_t p) {
  for (std::size_t i = 0; i < n; ++i) v[i].set_precision(p);
}

// r = sum of v[0, n) (n >= 1), using t as the running partial.
void interval_sum(Interval& r, std::vector<Interval>& v, const std::vector<std::size_t>& which, Interval& t) {
  // Alternate between r and t so that no operation writes one of its operands.
  Interval* acc = &r;
  Interval* other = &t;
  mpfr_set(acc->lo.value, v[which[0]].lo.value, MPFR_RNDD);
  mpfr_set(acc->hi.value, v[which[0]].hi.value, MPFR_RNDU);
  acc->lo.open = v[which[0]].lo.open;
  acc->hi.open = v[which[0]].hi.open;
  for (std::size_t i = 1; i < which.size(); ++i) {
    ia::add(*other, *acc, v[which[i]]);
    std::swap(acc, other);
  }
  if (acc != &r) {
    mpfr_set(r.lo.value, acc->lo.value, MPFR_RNDD);
    mpfr_set(r.hi.value, acc->hi.value, MPFR_RNDU);
    r.lo.open = acc->lo.open;
    r.hi.open = acc->hi.open;
  }
}

// Runs row_fn(row, begin) over every row on parallel_for threads, gathers patterns into values
// and reports the first NaN-into-no-NaN element.
xt::xarray<double> run_rows(const std::vector<std::size_t>& shape, std::size_t rows, const Cast& out,
                            const char* what,
                            const std::function<void(std::size_t, const RowOutput&)>& row_fn) {
  validate(out, "out");
  xt::xarray<double> result = xt::empty<double>(shape);
  const std::size_t n = result.size();
  std::vector<std::uint64_t> bits(n, 0);
  const RowOutput row{out, random_stream_key(out.seed), out.rounding == Rounding::stochastic, bits.data()};
  // Each row costs microseconds to milliseconds (MPFR), so even a few rows pay for threads.
  parallel_for(
      rows,
      [&](std::size_t begin, std::size_t end) {
        for (std::size_t r = begin; r < end; ++r) row_fn(r, row);
      },
      2);
  double* values = result.data();
  for (std::size_t i = 0; i < n; ++i) {
    if (bits[i] == invalid_encoding)
      throw numeq::error(std::string("out: element ") + std::to_string(i) + " (C order) of " + what +
                         " is NaN, which format " + std::string(out.format.name) +
                         " cannot hold: it has no NaN encoding");
    values[i] = decode_bits(out.format, bits[i]);
  }
  return result;
}

std::size_t normalise_axis(std::ptrdiff_t axis, std::size_t ndim, const char* parameter) {
  const auto d = static_cast<std::ptrdiff_t>(ndim);
  if (ndim == 0 || axis < -d || axis >= d)
    throw numeq::error(std::string(parameter) + ": axis " + std::to_string(axis) + " is out of range for an array of " +
                       std::to_string(ndim) + " dimension(s)" + (ndim == 0 ? " (a 0-d array has no axis)" : ""));
  return static_cast<std::size_t>(axis < 0 ? axis + d : axis);
}

// ---- softmax and log-softmax ----

// The fast path of one softmax row, in double arithmetic with outward rounding (the CORE-MATH
// approach of the elementwise functions, fast_functions.hpp): every delta_j = x_j - x_ref must be
// exact in binary64 (TwoSum; else the row takes Ziv's loop whole); e^delta_j is enclosed by the
// fast exp (nullopt: the loop); the sum of the lower ends is rounded down after every addition
// and that of the upper ends up (nextafter of a nearest-rounded sum bounds the exact one), and
// each quotient's ends likewise, so [lo_i / S_hi, hi_i / S_lo] holds e^delta_i / sum_j e^delta_j.
// An element whose two ends round to the same pattern (Ziv's test) is decided; the others stay in
// `pending` for the MPFR loop, which decides them as before. NUMEQ_FUNCTIONS=mpfr turns it off.
template <class At, class Index>
void softmax_fast(std::vector<std::size_t>& pending, const std::vector<std::size_t>& finite, std::size_t ref,
                  const At& at, const Index& index, const RowOutput& row) {
  if (pending.empty() || default_function_path() != FunctionPath::fast || !fast::suits(row.out)) return;
  const std::size_t n_all = finite.back() + 1;
  std::vector<double> lo(n_all, 0.0), hi(n_all, 0.0);
  const double xr = at(ref);
  double sum_lo = 0, sum_hi = 0;
  bool first = true;
  for (const std::size_t j : finite) {
    const double x = at(j), d = x - xr;
    const double bv = d - x, av = d - bv;
    if (!std::isfinite(d) || (x - av) + (-xr - bv) != 0) return;  // delta not exact in binary64
    const std::optional<fast::Enclosure> e = fast::enclose(Function::exp, d);
    if (!e || !std::isfinite(e->hi) || e->lo < 0) return;
    lo[j] = e->lo;
    hi[j] = e->hi;
    if (first) {
      sum_lo = e->lo;
      sum_hi = e->hi;
      first = false;
    } else {
      sum_lo = std::nextafter(sum_lo + e->lo, -kInf);
      sum_hi = std::nextafter(sum_hi + e->hi, kInf);
    }
  }
  if (!(sum_lo > 0) || !std::isfinite(sum_hi)) return;
  std::size_t kept = 0;
  for (const std::size_t j : pending) {
    // Quotients of a single exact term by itself are exact (1 / 1); otherwise widen outward.
    double q_lo = lo[j] / sum_hi, q_hi = hi[j] / sum_lo;
    if (!(lo[j] == sum_hi && hi[j] == sum_lo && lo[j] == hi[j])) {
      q_lo = std::max(0.0, std::nextafter(q_lo, -kInf));
      q_hi = std::nextafter(q_hi, kInf);
    }
    const std::size_t i = index(j);
    const std::optional<std::uint64_t> bits = fast::round_enclosure(fast::Enclosure{q_lo, q_hi, false, false}, row.out,
                                                                    row.random(i));
    if (bits) row.bits[i] = *bits;
    else pending[kept++] = j;
  }
  pending.resize(kept);
}

xt::xarray<double> softmax_like(const xt::xarray<double>& x, std::ptrdiff_t axis_in, const Cast& out, bool log) {
  const char* what = log ? "log_softmax" : "softmax";
  const std::size_t axis = normalise_axis(axis_in, x.dimension(), "axis");
  const std::vector<std::size_t> shape(x.shape().begin(), x.shape().end());
  const std::size_t n = shape[axis];
  std::size_t inner = 1;
  for (std::size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::size_t rows = n == 0 ? 0 : x.size() / n;
  const double* data = x.data();
  return run_rows(shape, rows, out, what, [&](std::size_t row_index, const RowOutput& row) {
    // Row r: elements base + j * inner, j < n (C order offsets: outer block, inner position).
    const std::size_t base = (row_index / inner) * n * inner + row_index % inner;
    auto at = [&](std::size_t j) { return data[base + j * inner]; };
    auto index = [&](std::size_t j) { return base + j * inner; };
    bool undefined = false;
    std::vector<std::size_t> finite;
    for (std::size_t j = 0; j < n; ++j) {
      const double v = at(j);
      if (std::isnan(v) || v == kInf) undefined = true;
      else if (v != -kInf) finite.push_back(j);
    }
    if (undefined || finite.empty()) {
      for (std::size_t j = 0; j < n; ++j) row.bits[index(j)] = exact_pattern(kNaN, out, row.random(index(j)));
      return;
    }
    std::vector<std::size_t> pending;
    for (std::size_t j = 0; j < n; ++j) {
      if (at(j) == -kInf)  // takes no part: e^-Inf = 0 exactly
        row.bits[index(j)] = exact_pattern(log ? -kInf : 0.0, out, row.random(index(j)));
      else
        pending.push_back(j);
    }
    // The shift: any entry works (softmax is shift-invariant); the largest keeps e^delta <= 1.
    std::size_t ref = finite[0];
    for (const std::size_t j : finite)
      if (at(j) > at(ref)) ref = j;
    Scratch& s = scratch();
    s.reserve(n);
    Interval& total = s.t0;
    Interval& log_total = s.t1;
    auto prepare = [&](mpfr_prec_t p) {
      set_precision(s.a, n, p);
      set_precision(s.b, n, p);
      total.set_precision(p);
      log_total.set_precision(p);
      s.t2.set_precision(p);
      s.t3.set_precision(p);
      s.t3.set(at(ref));
      for (const std::size_t j : finite) {
        s.t2.set(at(j));
        ia::sub(s.a[j], s.t2, s.t3);  // delta_j: exact once p spans both exponents
        ia::exp(s.b[j], s.a[j]);      // e^delta_j: a point 1 when delta_j is an exact 0
      }
      interval_sum(total, s.b, finite, s.t2);
      if (log) ia::log(log_total, total);
    };
    // The fast path first (softmax only): decides what it can, the rest go to Ziv's loop below.
    if (!log) softmax_fast(pending, finite, ref, at, index, row);
    // pending holds row positions; certify_row works on output indices, so map them.
    std::vector<std::size_t> out_pending;
    out_pending.reserve(pending.size());
    for (const std::size_t j : pending) out_pending.push_back(index(j));
    auto enclose = [&](std::size_t e, Interval& r, mpfr_prec_t) {
      const std::size_t j = (e - base) / inner;
      if (log) {
        ia::sub(r, s.a[j], log_total);
        settle_zero_sign(r, false);  // 0 - log 1: a single finite entry gives +0
      } else {
        ia::div(r, s.b[j], total);
      }
    };
    certify_row(out_pending, row, prepare, enclose, what);
  });
}

// ---- layernorm and rmsnorm ----

void check_affine(const xt::xarray<double>* v, std::size_t n, const char* parameter) {
  if (v == nullptr) return;
  if (v->dimension() != 1 || v->size() != n)
    throw numeq::error(std::string(parameter) + ": expected shape (" + std::to_string(n) +
                       ",) (the last axis of x), got " + std::to_string(v->dimension()) + "-d of " +
                       std::to_string(v->size()) + " element(s)");
}

xt::xarray<double> norm_like(const xt::xarray<double>& x, const NormParameters& parameters, const Cast& out,
                             bool centred) {
  const char* what = centred ? "layernorm" : "rmsnorm";
  if (x.dimension() == 0) throw numeq::error(std::string("x: ") + what + " needs at least one axis (it normalises the last)");
  if (!(parameters.eps >= 0) || !std::isfinite(parameters.eps))
    throw numeq::error("eps: must be finite and >= 0, got " + std::to_string(parameters.eps));
  const std::vector<std::size_t> shape(x.shape().begin(), x.shape().end());
  const std::size_t n = shape.back();
  check_affine(parameters.gamma, n, "gamma");
  check_affine(parameters.beta, n, "beta");
  const std::size_t rows = n == 0 ? 0 : x.size() / n;
  const double* data = x.data();
  const double* gamma = parameters.gamma ? parameters.gamma->data() : nullptr;
  const double* beta = parameters.beta ? parameters.beta->data() : nullptr;
  return run_rows(shape, rows, out, what, [&](std::size_t row_index, const RowOutput& row) {
    const std::size_t base = row_index * n;
    const double* xs = data + base;
    bool finite = true;
    for (std::size_t j = 0; j < n; ++j) finite = finite && std::isfinite(xs[j]);
    auto nan_row = [&] {
      for (std::size_t j = 0; j < n; ++j) row.bits[base + j] = exact_pattern(kNaN, out, row.random(base + j));
    };
    if (!finite) return nan_row();
    Scratch& s = scratch();
    s.reserve(n);
    // The scaled forms (composite.hpp): A_j = n x_j - S (or n x_j), D = n Q - S^2 + n^2 eps (or
    // n Q + n^2 eps), y_j = A_j / sqrt(D) * gamma_j + beta_j; A and D are exact dyadics.
    thread_local Mpfr sum(64), squares(64), t(64), u(64), radicand(64), eps(64);
    exact_sum(sum, xs, n, 1);
    exact_dot(squares, xs, xs, n);
    exact_mul_ui(t, squares, n);                    // n Q
    exact_set(eps, parameters.eps);
    exact_mul_ui(u, eps, n);
    exact_mul_ui(radicand, u, n);                   // n^2 eps
    exact_add(u, t, radicand);                      // n Q + n^2 eps
    if (centred) {
      exact_mul(t, sum, sum);
      exact_sub(radicand, u, t);                    // n Q - S^2 + n^2 eps >= 0 (Cauchy-Schwarz)
    } else {
      mpfr_swap(radicand, u);
    }
    if (mpfr_zero_p(radicand)) return nan_row();    // every A_j is 0 too: 0/0
    // Round-to-nearest signs of x_j - mean when it is zero: mean is -0 only for a row of -0
    // (a sum of zeros is -0 only when all are), and (-0) - (+0) = -0, every other zero
    // difference +0 (IEEE 754 s6.3).
    const bool mean_negative_zero = std::all_of(xs, xs + n, [](double v) { return v == 0 && std::signbit(v); });
    for (std::size_t j = 0; j < n; ++j) {
      exact_set(u, xs[j]);
      if (centred) {
        exact_mul_ui(t, u, n);
        exact_sub(s.exact[j], t, sum);
        if (mpfr_zero_p(s.exact[j]))
          mpfr_set_zero(s.exact[j], xs[j] == 0 && std::signbit(xs[j]) && mpfr_zero_p(sum) && !mean_negative_zero ? -1 : 1);
      } else {
        exact_mul_ui(s.exact[j], u, n);             // keeps x_j's zero sign
      }
    }
    std::vector<std::size_t> pending;
    for (std::size_t j = 0; j < n; ++j) {
      const double g = gamma ? gamma[j] : 1.0;
      const double b = beta ? beta[j] : 0.0;
      const bool zero = mpfr_zero_p(s.exact[j]) != 0;
      // Signs and special values of a_j * g + b with a_j = A_j / sqrt(D), finite.
      double special = 0;
      bool is_special = true;
      if (std::isnan(g) || std::isnan(b)) {
        special = kNaN;
      } else if (std::isinf(g)) {
        const double product = zero ? kNaN : ((mpfr_signbit(s.exact[j]) != 0) != (g < 0) ? -kInf : kInf);
        special = (std::isinf(b) && std::isinf(product) && (b < 0) != (product < 0)) ? kNaN : product + b;
      } else if (std::isinf(b)) {
        special = b;
      } else {
        is_special = false;
      }
      if (is_special)
        row.bits[base + j] = exact_pattern(special, out, row.random(base + j));
      else
        pending.push_back(base + j);
    }
    Interval& root = s.t0;
    auto prepare = [&](mpfr_prec_t p) {
      root.set_precision(p);
      s.t1.set_precision(p);
      s.t2.set_precision(p);
      s.t3.set_precision(p);
      set_point(s.t1, radicand);
      ia::sqrt(root, s.t1);
    };
    auto enclose = [&](std::size_t e, Interval& r, mpfr_prec_t) {
      const std::size_t j = e - base;
      set_point(s.t1, s.exact[j]);
      Interval* y = &s.t2;
      ia::div(*y, s.t1, root);
      bool zero_negative = mpfr_signbit(s.exact[j]) != 0;
      if (gamma) {
        s.t1.set(gamma[j]);
        ia::mul(s.t3, *y, s.t1);
        y = &s.t3;
        zero_negative = zero_negative != std::signbit(gamma[j]);
      }
      if (beta) {
        s.t1.set(beta[j]);
        ia::add(r, *y, s.t1);
        zero_negative = zero_negative && std::signbit(beta[j]);
      } else {
        mpfr_set(r.lo.value, y->lo.value, MPFR_RNDD);
        mpfr_set(r.hi.value, y->hi.value, MPFR_RNDU);
        r.lo.open = y->lo.open;
        r.hi.open = y->hi.open;
      }
      settle_zero_sign(r, zero_negative);
    };
    certify_row(pending, row, prepare, enclose, what);
  });
}

// ---- attention ----

void check_attention_shapes(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                            const xt::xarray<double>* mask) {
  auto dims = [](const xt::xarray<double>& a) {
    std::string s = "(";
    for (std::size_t d = 0; d < a.dimension(); ++d) s += (d ? ", " : "") + std::to_string(a.shape()[d]);
    return s + (a.dimension() == 1 ? ",)" : ")");
  };
  if (q.dimension() < 2) throw numeq::error("q: expected shape (..., Lq, d), got " + dims(q));
  if (k.dimension() != q.dimension())
    throw numeq::error("k: expected shape (..., Lk, d) with the batch dimensions of q " + dims(q) + ", got " + dims(k));
  if (v.dimension() != q.dimension())
    throw numeq::error("v: expected shape (..., Lk, dv) with the batch dimensions of q " + dims(q) + ", got " + dims(v));
  const std::size_t nd = q.dimension();
  for (std::size_t d = 0; d + 2 < nd; ++d) {
    if (k.shape()[d] != q.shape()[d]) throw numeq::error("k: batch dimensions " + dims(k) + " differ from q's " + dims(q));
    if (v.shape()[d] != q.shape()[d]) throw numeq::error("v: batch dimensions " + dims(v) + " differ from q's " + dims(q));
  }
  if (k.shape()[nd - 1] != q.shape()[nd - 1])
    throw numeq::error("k: the last dimension (d) must equal q's: q " + dims(q) + ", k " + dims(k));
  if (v.shape()[nd - 2] != k.shape()[nd - 2])
    throw numeq::error("v: the second-to-last dimension (Lk) must equal k's: k " + dims(k) + ", v " + dims(v));
  if (mask != nullptr) {
    bool ok = mask->dimension() == nd;
    for (std::size_t d = 0; ok && d + 2 < nd; ++d) ok = mask->shape()[d] == q.shape()[d];
    ok = ok && mask->shape()[nd - 2] == q.shape()[nd - 2] && mask->shape()[nd - 1] == k.shape()[nd - 2];
    if (!ok) throw numeq::error("mask: expected the score shape (..., Lq, Lk) of q " + dims(q) + " and k " + dims(k) +
                                ", got " + dims(*mask));
  }
}

// Whether sqrt(d) is an integer (then the default scale 1/sqrt(d) is the rational 1/root).
std::uint64_t integer_sqrt_or_zero(std::uint64_t d) {
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(d)));
  while (r * r > d) --r;
  while ((r + 1) * (r + 1) <= d) ++r;
  return r * r == d ? r : 0;
}

}  // namespace

xt::xarray<double> softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast& out) {
  return softmax_like(x, axis, out, false);
}

xt::xarray<double> log_softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast& out) {
  return softmax_like(x, axis, out, true);
}

xt::xarray<double> layernorm(const xt::xarray<double>& x, const NormParameters& parameters, const Cast& out) {
  return norm_like(x, parameters, out, true);
}

xt::xarray<double> rmsnorm(const xt::xarray<double>& x, const NormParameters& parameters, const Cast& out) {
  return norm_like(x, parameters, out, false);
}

xt::xarray<double> attention(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                             const AttentionParameters& parameters, const Cast& out) {
  check_attention_shapes(q, k, v, parameters.mask);
  const std::size_t nd = q.dimension();
  const std::size_t lq = q.shape()[nd - 2];
  const std::size_t d = q.shape()[nd - 1];
  const std::size_t lk = k.shape()[nd - 2];
  const std::size_t dv = v.shape()[nd - 1];
  std::size_t batches = 1;
  for (std::size_t i = 0; i + 2 < nd; ++i) batches *= q.shape()[i];
  if (!parameters.scale && d == 0)
    throw numeq::error("q: the default scale 1/sqrt(d) needs d >= 1 (q has d = 0); pass a scale");
  if (parameters.scale && !std::isfinite(*parameters.scale))
    throw numeq::error("scale: must be finite, got " + std::to_string(*parameters.scale));
  std::vector<std::size_t> shape(q.shape().begin(), q.shape().end());
  shape.back() = dv;
  // The scale, exactly: a given double, or 1/sqrt(d): rational (1/root) when d is a square,
  // irrational otherwise. Equal scores are recognised exactly either way (below).
  const std::uint64_t root = parameters.scale ? 0 : integer_sqrt_or_zero(d);
  const bool rational_scale = parameters.scale.has_value() || root != 0;
  const double approx_scale = parameters.scale ? *parameters.scale : 1.0 / std::sqrt(static_cast<double>(d));
  const double* qs = q.data();
  const double* ks = k.data();
  const double* vs = v.data();
  const double* ms = parameters.mask ? parameters.mask->data() : nullptr;
  const std::size_t rows = dv == 0 ? 0 : batches * lq;
  return run_rows(shape, rows, out, "attention", [&](std::size_t row_index, const RowOutput& row) {
    const std::size_t b = row_index / lq;
    const std::size_t i = row_index % lq;
    const std::size_t base = row_index * dv;
    const double* qi = qs + row_index * d;
    const double* kb = ks + b * lk * d;
    const double* vb = vs + b * lk * dv;
    const double* mi = ms ? ms + row_index * lk : nullptr;
    auto fill = [&](std::size_t c, double value) { row.bits[base + c] = exact_pattern(value, out, row.random(base + c)); };
    auto nan_row = [&] {
      for (std::size_t c = 0; c < dv; ++c) fill(c, kNaN);
    };
    // The keys that take part, and whether the row's scores are defined.
    std::vector<std::size_t> keys;
    bool undefined = false;
    for (std::size_t j = 0; j < lk; ++j) {
      if (parameters.causal && j > i) continue;
      const double m = mi ? mi[j] : 0.0;
      if (m == -kInf) continue;
      if (std::isnan(m) || m == kInf) undefined = true;
      for (std::size_t c = 0; c < d; ++c) undefined = undefined || !std::isfinite(kb[j * d + c]);
      keys.push_back(j);
    }
    for (std::size_t c = 0; c < d; ++c) undefined = undefined || !std::isfinite(qi[c]);
    if (undefined || keys.empty()) return nan_row();
    Scratch& s = scratch();
    s.reserve(lk);
    // Exact scores' parts: D_j = q_i . k_j and the mask entry m_j.
    // The shift: a key of (about) the largest score, so that every e^delta is at most about 1.
    // Scores are compared at 64 bits in MPFR's exponent range: dot products of doubles can
    // exceed binary64's (1e200 * 1e200), where double approximations would all be Inf.
    std::size_t ref = keys[0];
    thread_local Mpfr approx(64), best(64);
    for (const std::size_t j : keys) {
      exact_dot(s.exact[j], qi, kb + j * d, d);
      mpfr_mul_d(approx, s.exact[j], approx_scale, MPFR_RNDN);
      mpfr_add_d(approx, approx, mi ? mi[j] : 0.0, MPFR_RNDN);
      if (j == keys[0] || mpfr_greater_p(approx, best)) {
        mpfr_set(best, approx, MPFR_RNDN);
        ref = j;
      }
    }
    // Columns with non-finite values among the taking-part keys are decided now.
    std::vector<std::size_t> pending;
    for (std::size_t c = 0; c < dv; ++c) {
      bool nan = false, pos = false, neg = false;
      for (const std::size_t j : keys) {
        const double value = vb[j * dv + c];
        nan = nan || std::isnan(value);
        pos = pos || value == kInf;
        neg = neg || value == -kInf;
      }
      if (nan || (pos && neg)) fill(c, kNaN);
      else if (pos) fill(c, kInf);
      else if (neg) fill(c, -kInf);
      else pending.push_back(base + c);
    }
    // Groups of keys with exactly equal scores. With a rational scale the score itself is exact
    // (scale D_j + m_j, or root * score = D_j + root m_j for scale 1/root); with an irrational
    // scale two scores are equal exactly when both D and m are (composite.hpp), so the pair
    // (D_j, m_j) is the key. Sorting by the key brings equal scores together.
    thread_local Mpfr scaled(64), scale_value(64), mask_value(64);
    std::vector<Mpfr> mask(keys.size());
    std::vector<Mpfr> key;
    key.reserve(keys.size());
    if (parameters.scale) exact_set(scale_value, *parameters.scale);
    for (std::size_t kk = 0; kk < keys.size(); ++kk) {
      const std::size_t j = keys[kk];
      exact_set(mask[kk], mi ? mi[j] : 0.0);
      Mpfr value(64);
      if (parameters.scale) {
        exact_mul(scaled, s.exact[j], scale_value);
        exact_add(value, scaled, mask[kk]);
      } else if (root != 0) {
        exact_mul_ui(scaled, mask[kk], static_cast<unsigned long>(root));
        exact_add(value, s.exact[j], scaled);
      }
      key.push_back(std::move(value));
    }
    auto compare = [&](std::size_t x, std::size_t y) {
      if (rational_scale) return mpfr_cmp(key[x], key[y]);
      const int by_dot = mpfr_cmp(s.exact[keys[x]], s.exact[keys[y]]);
      return by_dot != 0 ? by_dot : mpfr_cmp(mask[x], mask[y]);
    };
    std::vector<std::size_t> order(keys.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return compare(x, y) < 0; });
    std::vector<std::vector<std::size_t>> groups;  // positions in keys
    std::size_t top = 0;                            // the group of `ref`: its score is the shift
    for (std::size_t o = 0; o < order.size(); ++o) {
      if (o == 0 || compare(order[o - 1], order[o]) != 0) groups.emplace_back();
      groups.back().push_back(order[o]);
      if (keys[order[o]] == ref) top = groups.size() - 1;
    }
    // Per group g: delta_g = scale (D_g - D_ref) + (m_g - m_ref), both differences exact.
    const std::size_t ref_position = groups[top].front();
    std::vector<Mpfr> dot_delta(groups.size());
    std::vector<Mpfr> mask_delta(groups.size());
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const std::size_t first = groups[g].front();
      exact_sub(dot_delta[g], s.exact[keys[first]], s.exact[keys[ref_position]]);
      exact_sub(mask_delta[g], mask[first], mask[ref_position]);
    }
    // The result, written around the top group's mean mu = V_top / c_top (V: sum of v[:, c] over
    // a group, c: its size):
    //   out = mu + (sum_{g != top} e^{delta_g} T_g) / (c_top S),  T_g = c_top V_g - c_g V_top,
    //   S = c_top + sum_{g != top} c_g e^{delta_g}.
    // T_g is exact; a group whose mean equals mu has T_g = 0 and drops out exactly. So a column
    // of equal values, or any rational result (every group's mean equal, composite.hpp), comes
    // out as the exact mu, and a result a hair from mu (scores far apart: e^{delta} tiny) has a
    // correction of the right sign however small, where the plain quotient of two sums could not
    // be decided.
    Interval& total = s.t0;
    Interval& scale = s.t1;
    const auto c_top = static_cast<unsigned long>(groups[top].size());
    auto prepare = [&](mpfr_prec_t p) {
      set_precision(s.a, groups.size(), p);
      set_precision(s.b, groups.size(), p);
      total.set_precision(p);
      scale.set_precision(p);
      s.t2.set_precision(p);
      s.t3.set_precision(p);
      if (parameters.scale) {
        scale.set(*parameters.scale);
      } else {
        s.t2.set_si(static_cast<long>(d));
        ia::rec_sqrt(scale, s.t2);
      }
      total.set_si(static_cast<long>(c_top));
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (g == top) continue;
        set_point(s.t2, dot_delta[g]);
        ia::mul(s.t3, scale, s.t2);
        set_point(s.t2, mask_delta[g]);
        ia::add(s.a[g], s.t3, s.t2);   // delta_g
        ia::exp(s.b[g], s.a[g]);       // e^delta_g
        ia::scale(s.t3, s.b[g], static_cast<unsigned long>(groups[g].size()), 1);
        ia::add(s.t2, total, s.t3);
        std::swap(total, s.t2);
      }
    };
    auto enclose = [&](std::size_t e, Interval& r, mpfr_prec_t p) {
      const std::size_t c = e - base;
      // Every term zero: an exact zero, -0 only when every term is -0.
      bool all_zero = true, all_negative_zero = true;
      for (const std::size_t j : keys) {
        const double value = vb[j * dv + c];
        all_zero = all_zero && value == 0;
        all_negative_zero = all_negative_zero && value == 0 && std::signbit(value);
      }
      if (all_zero) {
        mpfr_set_zero(r.lo.value, all_negative_zero ? -1 : 1);
        mpfr_set_zero(r.hi.value, all_negative_zero ? -1 : 1);
        r.lo.open = r.hi.open = false;
        return;
      }
      thread_local Mpfr v_top(64), v_group(64), t(64), u(64), t_group(64);
      thread_local std::vector<double> column;
      auto group_sum = [&](Mpfr& out_sum, std::size_t g) {
        column.clear();
        for (const std::size_t position : groups[g]) column.push_back(vb[keys[position] * dv + c]);
        exact_sum(out_sum, column.data(), column.size(), 1);
      };
      group_sum(v_top, top);
      thread_local Interval numerator(64), other(64), term(64), point(64), denominator(64), correction(64), mu(64);
      for (Interval* each : {&numerator, &other, &term, &point, &denominator, &correction, &mu}) each->set_precision(p);
      numerator.set_si(0);
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (g == top) continue;
        group_sum(v_group, g);
        exact_mul_ui(t, v_group, c_top);
        exact_mul_ui(u, v_top, static_cast<unsigned long>(groups[g].size()));
        exact_sub(t_group, t, u);  // T_g
        if (mpfr_zero_p(t_group)) continue;
        set_point(point, t_group);
        ia::mul(term, s.b[g], point);
        ia::add(other, numerator, term);
        std::swap(numerator, other);
      }
      ia::scale(denominator, total, c_top, 1);
      ia::div(correction, numerator, denominator);
      mu.lo.open = mpfr_div_ui(mu.lo.value, v_top, c_top, MPFR_RNDD) != 0;
      mu.hi.open = mpfr_div_ui(mu.hi.value, v_top, c_top, MPFR_RNDU) != 0;
      ia::add(r, mu, correction);
      settle_zero_sign(r, false);
    };
    certify_row(pending, row, prepare, enclose, "attention");
  });
}

}  // namespace numeq::reference
