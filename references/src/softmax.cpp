// Certified softmax and log-softmax (composite.hpp): exact deltas, enclosures of e^delta, Ziv's
// loop per element after a fast path in double arithmetic.

#include "numeq/references/composite.hpp"
#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/direct_memo.hpp"
#include "numeq/formats/shape.hpp"

#include "composite_rows.hpp"
#include "fast_functions.hpp"

namespace numeq::reference {

namespace {

using namespace rows;

// The fast path of one softmax or log-softmax row, in double arithmetic with outward rounding
// (the CORE-MATH approach of the elementwise functions, fast_functions.hpp): every
// delta_j = x_j - x_ref must be exact in binary64 (TwoSum; else the row takes Ziv's loop whole);
// e^delta_j is enclosed by the fast exp (nullopt: the loop); the sums of the lower and of the
// upper ends are enclosed by Sum2 (double_interval.hpp), so that [S_lo, S_hi] holds
// S = sum_j e^delta_j. Softmax: [lo_i / S_hi, hi_i / S_lo]. Log-softmax: delta_i - ln S in
// [delta_i - ln(S_hi)^+, delta_i - ln(S_lo)^-] (ln is increasing; the fast log's enclosures at
// both ends). Quotients and differences are rounded outward (DoubleInterval). Every element goes
// through decide(): Ziv's test, or an enclosed result's width test; what it leaves stays in
// `pending` for the MPFR loop. NUMEQ_FUNCTIONS=mpfr turns it off.
// fast::enclose(exp, d) remembered per delta on each thread (formats/direct_memo.hpp): rows of
// narrow inputs repeat their differences x_j - x_ref many times, within and across rows (a
// 1024 x 4096 bf16 softmax evaluates a small fraction of its exps).
using ExpMemo = DirectMemo<std::uint64_t, std::optional<fast::Enclosure>>;

template <class At, class Index>
// (Cloned for x86-64-v3: the interval arithmetic's fma residuals become single instructions.)
NUMEQ_X86_64_V3_CLONE void softmax_fast(std::vector<std::size_t>& pending, const std::vector<std::size_t>& finite, std::size_t ref,
                  const At& at, const Index& index, const RowOutput& row, bool log) {
  if (pending.empty() || default_function_path() != FunctionPath::fast || !(row.within > 0 || fast::suits(row.out)))
    return;
  const std::size_t n_all = finite.back() + 1;
  thread_local std::vector<double> lo, hi, delta;
  thread_local ExpMemo memo;
  lo.assign(n_all, 0.0);
  hi.assign(n_all, 0.0);
  delta.assign(n_all, 0.0);
  const double xr = at(ref);
  for (const std::size_t j : finite) {
    const double x = at(j), d = x - xr;
    const double bv = d - x, av = d - bv;
    if (!std::isfinite(d) || (x - av) + (-xr - bv) != 0) return;  // delta not exact in binary64
    const auto bits = std::bit_cast<std::uint64_t>(d);
    const std::optional<fast::Enclosure>& e = memo.get(bits, bits, [d] { return fast::enclose(Function::exp, d); });
    if (!e || !std::isfinite(e->hi) || e->lo < 0) return;
    lo[j] = e->lo;
    hi[j] = e->hi;
    delta[j] = d;
  }
  Sum2 lower, upper;
  for (const std::size_t j : finite) {
    lower.add(lo[j]);
    upper.add(hi[j]);
  }
  const std::optional<DoubleInterval> lower_sum = lower.enclosure(), upper_sum = upper.enclosure();
  if (!lower_sum || !upper_sum) return;
  const DoubleInterval sum{lower_sum->lo, upper_sum->hi};
  if (!(sum.lo > 0) || !std::isfinite(sum.hi)) return;
  // ln S: the lower end's lower bound and the upper end's upper bound.
  DoubleInterval log_sum;
  if (log) {
    const std::optional<fast::Enclosure> a = fast::enclose(Function::log, sum.lo);
    const std::optional<fast::Enclosure> b = fast::enclose(Function::log, sum.hi);
    if (!a || !b) return;
    log_sum = {a->lo, b->hi};
  }
  std::size_t kept = 0;
  for (const std::size_t j : pending) {
    DoubleInterval y;
    if (log) y = DoubleInterval::point(delta[j]) - log_sum;
    else y = DoubleInterval{lo[j], hi[j]} / sum;
    if (!decide(row, index(j), {y.lo, y.hi, false, false})) pending[kept++] = j;
  }
  pending.resize(kept);
}

xt::xarray<double> softmax_like(const xt::xarray<double>& x, std::ptrdiff_t axis_in, const Cast& out, bool log,
                                double within = 0) {
  const char* what = log ? "log_softmax" : "softmax";
  const std::size_t axis = axis_index(axis_in, x.shape());
  const std::vector<std::size_t> shape(x.shape().begin(), x.shape().end());
  const std::size_t n = shape[axis];
  std::size_t inner = 1;
  for (std::size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::size_t rows = n == 0 ? 0 : x.size() / n;
  const double* data = x.data();
  return run_rows(shape, rows, out, what, within, [&](std::size_t row_index, const RowOutput& row) {
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
    // The fast path first: decides what it can, the rest go to Ziv's loop below.
    softmax_fast(pending, finite, ref, at, index, row, log);
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

}  // namespace

xt::xarray<double> softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast& out) {
  return softmax_like(x, axis, out, false);
}

xt::xarray<double> log_softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast& out) {
  return softmax_like(x, axis, out, true);
}

xt::xarray<double> softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, Within within) {
  return softmax_like(x, axis, kBinary64, false, checked(within));
}

xt::xarray<double> log_softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, Within within) {
  return softmax_like(x, axis, kBinary64, true, checked(within));
}

}  // namespace numeq::reference
