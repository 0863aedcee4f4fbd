#include "numeq/cases/op.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xbroadcast.hpp>

#include "numeq/cases/elementwise.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/core/numpy_reduction.hpp"
#include "numeq/references/composite.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/fast_round.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/cpu_dispatch.hpp"
#include "input_check.hpp"

namespace numeq::cases {

using Array = xt::xarray<double>;

std::string shape_text(const Array& x) {
  std::string s = "[";
  for (std::size_t d = 0; d < x.dimension(); ++d) {
    if (d) s += ',';
    s += std::to_string(x.shape()[d]);
  }
  s += ']';
  return s;
}

namespace {

using Shared = std::shared_ptr<const Array>;

// Every element of x must be a value of fmt (or NaN): the operation's inputs are values of its
// input format, and the emulations read them as such.
void check_values(const Array& x, const Format& fmt, const char* parameter) {
  const std::size_t i =
      detail::first_changed_by_rounding(x.data(), x.size(), fmt, [](double v) { return std::isnan(v); });
  if (i < x.size())
    throw numeq::error(std::string(parameter) + ": element " + std::to_string(i) + " (C order) = " +
                       std::to_string(x.data()[i]) + " is not a value of in_fmt '" + std::string(fmt.name) +
                       "'; round the inputs first");
}

const Format& floating_format(std::string_view name, const char* parameter) {
  const Format& f = format_by_name(name, parameter);
  if (f.is_integer())
    throw numeq::error(std::string(parameter) + ": '" + std::string(name) +
                       "' is an integer format; this operation takes floating formats (" +
                       format_names(FormatKind::floating) + ")");
  return f;
}

std::ptrdiff_t normalise_axis(std::ptrdiff_t axis, std::size_t rank, const Array& x) {
  const auto r = static_cast<std::ptrdiff_t>(rank);
  if (axis < -r || axis >= r)
    throw numeq::error("axis: " + std::to_string(axis) + " is out of range for x of shape " + shape_text(x) +
                       " (valid: " + std::to_string(-r) + " .. " + std::to_string(r - 1) + ")");
  return axis < 0 ? axis + r : axis;
}

// Round x to double by round-to-odd from its (hi + remainder sign) description, then once into
// the cast: correct for every deterministic rounding because binary64 carries at least two more
// bits than any format rounded into here (Boldo and Melquiond, IEEE TC 57(4), 2008).
double round_quotient(double q, double remainder, const Cast& cast) {
  if (remainder != 0 && std::isfinite(q)) {
    std::uint64_t bits;
    std::memcpy(&bits, &q, sizeof bits);
    if ((bits & 1u) == 0) q = std::nextafter(q, remainder > 0 ? std::numeric_limits<double>::infinity()
                                                              : -std::numeric_limits<double>::infinity());
  }
  return round_to_format(q, cast);
}

// (hi + lo) / n correctly rounded into cast, and the double nearest to it (for the exact value).
struct Quotient {
  double rounded;
  double nearest;
};
Quotient divide_exact(double hi, double lo, double n, const Cast& cast) {
  if (!std::isfinite(hi)) return {round_to_format(hi / n, cast), hi / n};
  const double q = (hi + lo) / n;  // hi + lo == hi when |lo| <= ulp(hi)/2 (a double-double)
  // remainder of the exact division: hi + lo - q n, its sign settles the odd rounding.
  const double r = std::fma(-q, n, hi) + lo;
  return {round_quotient(q, r, cast), q};
}

// numpy broadcasting of batch axes: the result shape of a[..., M, K] @ b[..., K, N].
std::vector<std::size_t> broadcast_shapes(std::vector<std::size_t> x, std::vector<std::size_t> y, const std::string& what) {
  if (x.size() < y.size()) std::swap(x, y);
  y.insert(y.begin(), x.size() - y.size(), 1);
  for (std::size_t d = 0; d < x.size(); ++d) {
    if (x[d] == y[d] || y[d] == 1) continue;
    if (x[d] == 1) x[d] = y[d];
    else throw numeq::error(what);
  }
  return x;
}

std::vector<std::size_t> matmul_shape(const Array& a, const Array& b) {
  std::vector<std::size_t> shape = broadcast_shapes(
      std::vector<std::size_t>(a.shape().begin(), a.shape().end() - 2),
      std::vector<std::size_t>(b.shape().begin(), b.shape().end() - 2),
      "b: batch dimensions of a " + shape_text(a) + " and b " + shape_text(b) + " do not broadcast");
  shape.push_back(a.shape()[a.dimension() - 2]);
  shape.push_back(b.shape().back());
  return shape;
}

void check_broadcast(const Array& c, const std::vector<std::size_t>& result, const char* parameter) {
  std::string text = "[";
  for (std::size_t d = 0; d < result.size(); ++d) {
    if (d) text += ',';
    text += std::to_string(result[d]);
  }
  text += ']';
  const std::string what = std::string(parameter) + ": shape " + shape_text(c) + " does not broadcast to the result " + text;
  if (c.dimension() > result.size()) throw numeq::error(what);
  if (broadcast_shapes(std::vector<std::size_t>(c.shape().begin(), c.shape().end()), result, what) != result)
    throw numeq::error(what);
}

}  // namespace

const reference::ExactValues& Op::exact_values() const {
  std::call_once(cache->exact_once, [this] { cache->exact = exact(); });
  return cache->exact;
}

const reference::ExactValues& Op::check_exact(double& relative_error) const {
  if (!exact_within) {
    relative_error = exact_relative_error;
    return exact_values();
  }
  std::call_once(cache->within_once, [this] { cache->within = exact_within(); });
  relative_error = exact_within_error;
  return cache->within;
}

const Array& Op::reference_values() const {
  std::call_once(cache->reference_once, [this] {
    if (reference_from_exact) {
      double relative_error = 0;  // reference_from_exact knows it (the op sets both)
      const reference::ExactValues& ex = check_exact(relative_error);
      Array r(ex.hi.shape());
      std::atomic<bool> settled{true};
      parallel_for(
          r.size(),
          [&](std::size_t begin, std::size_t end) {
            for (std::size_t i = begin; i < end && settled.load(std::memory_order_relaxed); ++i) {
              const std::optional<double> v = reference_from_exact(ex.hi.data()[i], ex.lo.data()[i]);
              if (!v) settled.store(false, std::memory_order_relaxed);
              else r.data()[i] = *v;
            }
          },
          1 << 14);
      cache->reference = settled.load() ? std::move(r) : reference();
    } else {
      cache->reference = reference();
    }
  });
  return cache->reference;
}

// ---- matmul ----

Op matmul(const Array& a, const Array& b, const Array* c, std::string_view in_fmt, const Cast& out) {
  const Format& fin = floating_format(in_fmt, "in_fmt");
  floating_format(out.format.name, "out");
  if (a.dimension() < 2 || b.dimension() < 2)
    throw numeq::error("a, b: matmul needs arrays of at least 2 dimensions ([..., M, K] and [..., K, N]), got " +
                       shape_text(a) + " and " + shape_text(b));
  if (a.shape().back() != b.shape()[b.dimension() - 2])
    throw numeq::error("b: inner dimensions differ: a " + shape_text(a) + " has K=" + std::to_string(a.shape().back()) +
                       ", b " + shape_text(b) + " has K=" + std::to_string(b.shape()[b.dimension() - 2]));
  check_values(a, fin, "a");
  check_values(b, fin, "b");
  const auto sa = std::make_shared<const Array>(a), sb = std::make_shared<const Array>(b);
  const Shared sc = c ? std::make_shared<const Array>(*c) : nullptr;
  if (sc) check_broadcast(*sc, matmul_shape(a, b), "c");
  Op op;
  op.name = "matmul";
  op.signature = "a" + shape_text(a) + " " + std::string(in_fmt) + " @ b" + shape_text(b) + " " + std::string(in_fmt) +
                 (sc ? " + c" + shape_text(*sc) : "") + " -> " + std::string(out.format.name);
  op.out = out;
  const std::string fmt(in_fmt);
  op.exact = [sa, sb, sc] { return reference::matmul_exact(*sa, *sb, sc.get()); };
  op.reference = [sa, sb, sc, out] { return reference::matmul(*sa, *sb, out, sc.get()); };
  // The reference from the double-double exact value, rounded to odd into binary64 by the sign of
  // lo, then into out (round_quotient): correct where lo is nonzero exactly when the exact value
  // differs from hi (products of fp32-range inputs have no bits below 2^-298, so lo never
  // underflows; no bias c of another format), where out is narrower than binary64 by 2 bits or
  // more, and for roundings whose exact-zero sign hi already carries (all but downward). Only the
  // 16- and 32-bit output formats (each has a NaN for a NaN result).
  const bool from_exact = !sc && fin != formats::fp64 && out.format.mantissa_bits >= 7 && out.format.mantissa_bits <= 50 &&
                          out.subnormals == Subnormals::keep &&
                          (out.rounding == Rounding::nearest_even || out.rounding == Rounding::nearest_away ||
                           out.rounding == Rounding::toward_zero || out.rounding == Rounding::upward);
  if (from_exact)
    op.reference_from_exact = [out](double hi, double lo) { return round_quotient(hi, lo, out); };
  op.emulate = [sa, sb, sc, fmt, out](const core::Platform& platform, const core::BoundOptions& options) {
    const core::Plan plan = core::plan_for(platform, core::Operation::matmul, fmt, out.format.name);
    Emulation e;
    e.values = core::matmul(*sa, *sb, sc.get(), plan);
    e.bound = core::matmul_bound(*sa, *sb, sc.get(), plan, e.values, options);
    if (options.kind == core::BoundKind::probabilistic)
      e.failure_probability =
          core::reduction_weights(plan, sa->shape().back(), sc != nullptr, options).failure_probability;
    return e;
  };
  op.model_key = [fmt, out](const core::Platform& platform) {
    core::Plan plan = core::plan_for(platform, core::Operation::matmul, fmt, out.format.name);
    plan.name.clear();  // it names the platform
    return core::to_json(plan, -1);
  };
  // Rows of a 2-D product: the rows of a (and of c, broadcast) that hold the elements.
  if (a.dimension() == 2 && b.dimension() == 2) {
    op.bound_sources = [sa, sb, sc, fmt, out](const core::Platform& platform, std::size_t flat, double emulated) {
      const core::Plan plan = core::plan_for(platform, core::Operation::matmul, fmt, out.format.name);
      const std::size_t M = sa->shape()[0], K = sa->shape()[1], N = sb->shape()[1], i = flat / N, j = flat % N;
      std::optional<double> cij;
      if (sc) cij = Array(xt::broadcast(*sc, std::vector<std::size_t>{M, N}))(i, j);
      return dot_bound_shares(sa->data() + i * K, 1, sb->data() + j, static_cast<std::ptrdiff_t>(N), K,
                              cij ? &*cij : nullptr, plan, emulated);
    };
    const std::string fmt_name(in_fmt);
    op.restrict_to = [sa, sb, sc, fmt_name, out](const std::vector<std::size_t>& elements) {
      const std::size_t M = sa->shape()[0], K = sa->shape()[1], N = sb->shape()[1];
      std::vector<std::size_t> rows;
      for (const std::size_t e : elements) rows.push_back(e / N);
      std::sort(rows.begin(), rows.end());
      rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
      Array ra(std::vector<std::size_t>{rows.size(), K});
      for (std::size_t r = 0; r < rows.size(); ++r)
        std::copy_n(sa->data() + rows[r] * K, K, ra.data() + r * K);
      std::optional<Array> rc;
      if (sc) {
        const Array full = xt::broadcast(*sc, std::vector<std::size_t>{M, N});
        rc.emplace(std::vector<std::size_t>{rows.size(), N});
        for (std::size_t r = 0; r < rows.size(); ++r)
          std::copy_n(full.data() + rows[r] * N, N, rc->data() + r * N);
      }
      std::vector<std::size_t> where;
      for (const std::size_t e : elements) {
        const std::size_t r = static_cast<std::size_t>(std::lower_bound(rows.begin(), rows.end(), e / N) - rows.begin());
        where.push_back(r * N + e % N);
      }
      return std::pair<Op, std::vector<std::size_t>>{matmul(ra, *sb, rc ? &*rc : nullptr, fmt_name, out), where};
    };
  }
  return op;
}

// ---- reductions ----

std::string_view to_string(Reduction r) {
  switch (r) {
    case Reduction::sum: return "sum";
    case Reduction::mean: return "mean";
    case Reduction::max: return "max";
  }
  return "?";
}

Reduction reduction_by_name(std::string_view name, std::string_view parameter) {
  for (Reduction r : {Reduction::sum, Reduction::mean, Reduction::max})
    if (to_string(r) == name) return r;
  throw numeq::error(std::string(parameter) + ": unknown reduction '" + std::string(name) + "'; valid: sum, mean, max");
}

Op reduce(Reduction kind, const Array& x, std::ptrdiff_t axis, std::string_view in_fmt, const Cast& out,
          std::string_view compute) {
  if (x.dimension() == 0) throw numeq::error("x: a reduction needs at least one dimension, got a 0-d array");
  return reduce(kind, x, std::vector<std::ptrdiff_t>{normalise_axis(axis, x.dimension(), x)}, in_fmt, out, compute);
}

Op reduce(Reduction kind, const Array& x, const std::vector<std::ptrdiff_t>& axes, std::string_view in_fmt,
          const Cast& out, std::string_view compute, const std::vector<std::ptrdiff_t>& strides, bool buffered) {
  const Format& fin = floating_format(in_fmt, "in_fmt");
  floating_format(out.format.name, "out");
  floating_format(compute, "compute");
  if (x.dimension() == 0) throw numeq::error("x: a reduction needs at least one dimension, got a 0-d array");
  std::vector<std::size_t> reduced = core::normalise_axes(axes, x.dimension(), "axis");
  std::sort(reduced.begin(), reduced.end());
  // The memory layout numpy's order follows (numpy_reduction.hpp); none given: C-contiguous.
  std::vector<std::ptrdiff_t> layout = strides;
  if (layout.empty()) {
    layout.assign(x.dimension(), 1);
    for (std::size_t d = x.dimension(); d-- > 1;)
      layout[d - 1] = layout[d] * static_cast<std::ptrdiff_t>(x.shape()[d]);
  }
  if (layout.size() != x.dimension())
    throw numeq::error("strides: " + std::to_string(layout.size()) + " strides for x of shape " + shape_text(x));
  check_values(x, fin, "x");
  // Every platform but numpy takes the reduced axes in C order: x's kept axes, then one last axis.
  const auto sx = std::make_shared<const Array>(core::gather_reduced(x, reduced));
  const auto original = std::make_shared<const Array>(x);
  const std::ptrdiff_t ax = static_cast<std::ptrdiff_t>(sx->dimension()) - 1;
  const double n = static_cast<double>(sx->shape().back());
  Op op;
  op.name = std::string(to_string(kind));
  std::string axis_text;
  for (const std::size_t d : reduced) axis_text += (axis_text.empty() ? "" : ", ") + std::to_string(d);
  if (reduced.size() != 1) axis_text = "(" + axis_text + ")";
  op.signature = op.name + "(x" + shape_text(x) + " " + std::string(in_fmt) + ", axis=" + axis_text + ") in " +
                 std::string(compute) + " -> " + std::string(out.format.name);
  op.out = out;
  const std::string compute_name(compute);

  // max along the axis, NaN propagating.
  const auto maximum = [sx, ax] {
    std::vector<std::size_t> shape;
    for (std::size_t d = 0; d < sx->dimension(); ++d)
      if (d != static_cast<std::size_t>(ax)) shape.push_back(sx->shape()[d]);
    Array total = Array::from_shape(shape);
    const std::size_t length = sx->shape()[static_cast<std::size_t>(ax)];
    std::size_t inner = 1;
    for (std::size_t d = static_cast<std::size_t>(ax) + 1; d < sx->dimension(); ++d) inner *= sx->shape()[d];
    const double* p = sx->data();
    for (std::size_t i = 0; i < total.size(); ++i) {
      const double* base = p + (i / inner) * length * inner + i % inner;
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t k = 0; k < length; ++k) {
        const double v = base[k * inner];
        if (std::isnan(v) || std::isnan(m)) m = std::numeric_limits<double>::quiet_NaN();
        else if (v > m || (v == m && !std::signbit(v))) m = v;  // max(-0, +0) = +0
      }
      total.data()[i] = m;
    }
    return total;
  };

  switch (kind) {
    case Reduction::sum:
      op.exact = [sx, ax] { return reference::sum_exact(*sx, ax); };
      op.reference = [sx, ax, out] { return reference::sum(*sx, ax, out); };
      break;
    case Reduction::mean:
      op.exact_relative_error = 0x1p-53;  // the double nearest to (hi + lo) / n
      op.exact = [sx, ax, n] {
        reference::ExactValues s = reference::sum_exact(*sx, ax);
        for (std::size_t i = 0; i < s.hi.size(); ++i) {
          s.hi.data()[i] = divide_exact(s.hi.data()[i], s.lo.data()[i], n, Cast{formats::fp64}).nearest;
          s.lo.data()[i] = 0;
        }
        return s;
      };
      op.reference = [sx, ax, n, out] {
        const reference::ExactValues s = reference::sum_exact(*sx, ax);
        Array r = s.hi;
        for (std::size_t i = 0; i < r.size(); ++i)
          r.data()[i] = divide_exact(s.hi.data()[i], s.lo.data()[i], n, out).rounded;
        return r;
      };
      break;
    case Reduction::max:
      op.exact = [maximum] {
        reference::ExactValues r{maximum(), {}};
        r.lo = xt::zeros<double>(r.hi.shape());
        return r;
      };
      op.reference = [maximum, out] {
        Array r = maximum();
        for (double& v : r) v = round_to_format(v, out);
        return r;
      };
      break;
  }

  const std::vector<std::ptrdiff_t> axes_given(reduced.begin(), reduced.end());
  // What a platform's emulation of the reduction reads: nothing for max (no rounding), numpy's
  // layout-driven order, or the platform's sum plan.
  op.model_key = [kind, compute_name](const core::Platform& platform) -> std::string {
    if (kind == Reduction::max) return "max";
    if (platform.name == "numpy") return "numpy";
    core::Plan plan = core::plan_for(platform, core::Operation::sum, compute_name, compute_name);
    plan.name.clear();
    return core::to_json(plan, -1);
  };
  op.emulate = [sx, ax, n, kind, compute_name, out, maximum, original, layout, axes_given, in_format = &fin, buffered](
                   const core::Platform& platform, const core::BoundOptions& options) {
    const Format& fc = format_by_name(compute_name, "compute");
    const Cast compute_cast{fc};
    Emulation e;
    if (kind == Reduction::max) {
      e.values = maximum();
      e.bound = xt::zeros<double>(e.values.shape());
      for (std::size_t i = 0; i < e.values.size(); ++i)
        if (!std::isfinite(e.values.data()[i])) e.bound.data()[i] = std::numeric_limits<double>::quiet_NaN();
    } else {
      // numpy's order follows x's memory layout (core/numpy_reduction.hpp); the others', C order.
      core::Plan plan;
      std::shared_ptr<const Array> terms = sx;
      if (platform.name == "numpy") {
        const std::vector<std::size_t> shape(original->shape().begin(), original->shape().end());
        core::ReductionOrder order = core::numpy_reduction(shape, layout, axes_given, *in_format, fc, buffered);
        terms = std::make_shared<const Array>(core::gather_reduced(*original, order.axes));
        plan = std::move(order.plan);
      } else {
        plan = core::plan_for(platform, core::Operation::sum, compute_name, compute_name);
      }
      e.values = core::sum(*terms, ax, plan);
      e.bound = core::sum_bound(*terms, ax, plan, e.values, options);
      if (options.kind == core::BoundKind::probabilistic)
        e.failure_probability =
            core::reduction_weights(plan, static_cast<std::size_t>(n), false, options).failure_probability;
      if (kind == Reduction::mean) {
        // The quotient as numpy forms it: true_divide of the compute-format sum by an intp count
        // runs in float64 and is cast back (numpy/_core/_methods.py, _mean): fl_c(fl_64(s / n)).
        const core::OutputCastBound compute_bound(compute_cast);
        for (std::size_t i = 0; i < e.values.size(); ++i) {
          const double s = e.values.data()[i];
          const double q = s / n;
          const double m = round_to_format(q, compute_cast);
          // |q - s/n| <= 2^-53 |q|; |s/n - exact/n| <= bound/n; then the compute cast.
          const double pre = e.bound.data()[i] / n * (1 + 0x1p-52) + std::abs(q) * 0x1p-53 * (1 + 0x1p-52);
          e.values.data()[i] = m;
          e.bound.data()[i] = std::isfinite(q) ? compute_bound(m, pre) : e.bound.data()[i];
        }
      }
    }
    if (out.format.name != fc.name || out.rounding != compute_cast.rounding) {
      const core::OutputCastBound out_bound(out);
      for (std::size_t i = 0; i < e.values.size(); ++i) {
        const double v = round_to_format(e.values.data()[i], out, i);
        e.bound.data()[i] = out_bound(v, e.bound.data()[i]);
        e.values.data()[i] = v;
      }
    }
    return e;
  };
  return op;
}

// ---- functions, softmax, normalisations ----

namespace {

// MPFR-certified operations: the exact value is known to binary64 (correctly rounded), so it
// travels as hi with lo = 0 and a relative error of at most 2^-53.
reference::ExactValues certified(Array hi) {
  reference::ExactValues r{std::move(hi), {}};
  r.lo = xt::zeros<double>(r.hi.shape());
  return r;
}

const Cast kBinary64{formats::fp64};
// How closely a check needs the exact value of a composite op (Op::exact_within): 2^-40 relative
// is far below any bound of an output of at most 24 significant bits (its own final rounding
// alone is 2^-25 relative), and wide enough for the fast enclosures (about 2^-42).
constexpr reference::Within kCheckWithin{0x1p-40};

// The reference from an exact value known to a relative error e (certified() above: the MPFR
// value rounded to nearest in binary64, e = 2^-53; an enclosure's midpoint, Op::exact_within):
// the exact value lies within e |exact| <= 2 e |hi| of hi, inside [hi - 2e|hi|, hi + 2e|hi|]
// widened by a neighbour on each side (the products and differences are rounded). Every
// deterministic rounding into out is monotone, so where both ends round to the same value the
// exact value rounds to it too; elsewhere (hi next to a rounding boundary of out, a zero whose
// sign the ends do not settle, a non-finite hi) nullopt, and the op's reference() rounds the
// exact value itself. Stochastic rounding and subnormal inputs read as zero (flush_inputs,
// flush_both) take reference() always.
std::function<std::optional<double>(double, double)> certified_reference(const Cast& out, double relative_error) {
  if (out.rounding == Rounding::stochastic || out.subnormals == Subnormals::flush_inputs ||
      out.subnormals == Subnormals::flush_both)
    return nullptr;
  // FastRound built once (it answers most ends), the kernel for the rest.
  return [out, relative_error, fast = FastRound(out)](double hi, double) -> std::optional<double> {
    if (!std::isfinite(hi)) return std::nullopt;
    const double reach = 2 * relative_error * std::abs(hi);
    const auto rounded = [&](double x) {
      double r = 0;
      return fast(x, r) ? r : round_to_format_by_kernel(x, out, 0);
    };
    const double below = rounded(next_down(hi - reach));
    const double above = rounded(next_up(hi + reach));
    if (!(below == above && std::signbit(below) == std::signbit(above))) return std::nullopt;
    return below;
  };
}

}  // namespace

Op function(reference::Function f, const Array& x, std::string_view in_fmt, const Cast& out) {
  check_values(x, floating_format(in_fmt, "in_fmt"), "x");
  floating_format(out.format.name, "out");
  const auto sx = std::make_shared<const Array>(x);
  Op op;
  op.name = std::string(reference::function_name(f));
  op.signature = op.name + "(x" + shape_text(x) + " " + std::string(in_fmt) + ") -> " + std::string(out.format.name);
  op.out = out;
  op.exact_relative_error = 0x1p-53;
  op.exact = [sx, f] { return certified(reference::evaluate(f, *sx, kBinary64)); };
  op.reference = [sx, f, out] { return reference::evaluate(f, *sx, out); };
  op.reference_from_exact = certified_reference(out, op.exact_relative_error);
  op.emulate = [sx, f, out](const core::Platform& platform, const core::BoundOptions&) {
    return cases::function(f, *sx, platform, out);
  };
  return op;
}

Op softmax(const Array& x, std::ptrdiff_t axis, std::string_view in_fmt, const Cast& out, const SoftmaxOptions& options,
           bool log) {
  check_values(x, floating_format(in_fmt, "in_fmt"), "x");
  floating_format(out.format.name, "out");
  if (x.dimension() == 0) throw numeq::error("x: softmax needs at least one dimension, got a 0-d array");
  const std::ptrdiff_t ax = normalise_axis(axis, x.dimension(), x);
  const auto sx = std::make_shared<const Array>(x);
  Op op;
  op.name = log ? "log_softmax" : "softmax";
  op.signature = op.name + "[" + std::string(to_string(options.variant)) +
                 (options.variant == SoftmaxVariant::online ? ", block " + std::to_string(options.block) : "") +
                 "](x" + shape_text(x) + " " + std::string(in_fmt) + ", axis=" + std::to_string(ax) + ") in " +
                 std::string(options.compute.name) + " -> " + std::string(out.format.name);
  op.out = out;
  op.exact_relative_error = 0x1p-53;
  op.exact = [sx, ax, log] {
    return certified(log ? reference::log_softmax(*sx, ax, kBinary64) : reference::softmax(*sx, ax, kBinary64));
  };
  op.exact_within_error = kCheckWithin.relative_error;
  op.exact_within = [sx, ax, log] {
    return certified(log ? reference::log_softmax(*sx, ax, kCheckWithin) : reference::softmax(*sx, ax, kCheckWithin));
  };
  op.reference = [sx, ax, log, out] {
    return log ? reference::log_softmax(*sx, ax, out) : reference::softmax(*sx, ax, out);
  };
  op.reference_from_exact = certified_reference(out, op.exact_within_error);
  op.emulate = [sx, ax, log, out, options](const core::Platform& platform, const core::BoundOptions&) {
    return log ? cases::log_softmax(*sx, ax, platform, out, options) : cases::softmax(*sx, ax, platform, out, options);
  };
  return op;
}

namespace {

Op norm(bool centred, const Array& x, const Array* gamma, const Array* beta, double eps, std::string_view in_fmt,
        const Cast& out, const NormOptions& options) {
  check_values(x, floating_format(in_fmt, "in_fmt"), "x");
  floating_format(out.format.name, "out");
  if (x.dimension() == 0) throw numeq::error("x: a normalisation needs at least one dimension, got a 0-d array");
  const auto sx = std::make_shared<const Array>(x);
  const Shared sg = gamma ? std::make_shared<const Array>(*gamma) : nullptr;
  const Shared sb = beta ? std::make_shared<const Array>(*beta) : nullptr;
  // Checked when the op is built, so that a bad argument is reported where it was given.
  if (!(eps >= 0) || !std::isfinite(eps))
    throw numeq::error("eps: expected a finite value >= 0, got " + std::to_string(eps));
  for (const auto& [p, name] : {std::pair{sg.get(), "gamma"}, std::pair{sb.get(), "beta"}})
    if (p && (p->dimension() != 1 || p->shape()[0] != x.shape().back()))
      throw numeq::error(std::string(name) + ": expected shape [" + std::to_string(x.shape().back()) + "] (x's last axis), got " +
                         shape_text(*p));
  Op op;
  op.name = centred ? "layernorm" : "rmsnorm";
  op.signature = op.name + (centred ? "[" + std::string(to_string(options.variant)) + "]" : std::string()) + "(x" +
                 shape_text(x) + " " + std::string(in_fmt) + (sg ? ", gamma" : "") + (sb ? ", beta" : "") +
                 ", eps=" + std::to_string(eps) + ") in " + std::string(options.compute.name) + " -> " +
                 std::string(out.format.name);
  op.out = out;
  op.exact_relative_error = 0x1p-53;
  const auto parameters = [sg, sb, eps] { return reference::NormParameters{sg.get(), sb.get(), eps}; };
  op.exact = [sx, centred, parameters] {
    return certified(centred ? reference::layernorm(*sx, parameters(), kBinary64) : reference::rmsnorm(*sx, parameters(), kBinary64));
  };
  op.exact_within_error = kCheckWithin.relative_error;
  op.exact_within = [sx, centred, parameters] {
    return certified(centred ? reference::layernorm(*sx, parameters(), kCheckWithin)
                             : reference::rmsnorm(*sx, parameters(), kCheckWithin));
  };
  op.reference = [sx, centred, parameters, out] {
    return centred ? reference::layernorm(*sx, parameters(), out) : reference::rmsnorm(*sx, parameters(), out);
  };
  op.reference_from_exact = certified_reference(out, op.exact_within_error);
  op.emulate = [sx, centred, parameters, out, options](const core::Platform& platform, const core::BoundOptions&) {
    return centred ? cases::layernorm(*sx, parameters(), platform, out, options)
                   : cases::rmsnorm(*sx, parameters(), platform, out, options);
  };
  return op;
}

}  // namespace

Op layernorm(const Array& x, const Array* gamma, const Array* beta, double eps, std::string_view in_fmt, const Cast& out,
             const NormOptions& options) {
  return norm(true, x, gamma, beta, eps, in_fmt, out, options);
}

Op rmsnorm(const Array& x, const Array* gamma, const Array* beta, double eps, std::string_view in_fmt, const Cast& out,
           const NormOptions& options) {
  return norm(false, x, gamma, beta, eps, in_fmt, out, options);
}

// ---- attention ----

Op attention(const Array& q, const Array& k, const Array& v, const Array* mask, bool causal, std::optional<double> scale,
             std::string_view in_fmt, const Cast& out, const AttentionOptions& options) {
  const Format& fin = floating_format(in_fmt, "in_fmt");
  floating_format(out.format.name, "out");
  check_values(q, fin, "q");
  check_values(k, fin, "k");
  check_values(v, fin, "v");
  const auto sq = std::make_shared<const Array>(q), sk = std::make_shared<const Array>(k),
             sv = std::make_shared<const Array>(v);
  const Shared sm = mask ? std::make_shared<const Array>(*mask) : nullptr;
  const auto parameters = [sm, causal, scale] {
    reference::AttentionParameters p;
    p.scale = scale;
    p.causal = causal;
    p.mask = sm.get();
    return p;
  };
  Op op;
  op.name = "attention";
  op.signature = "attention[" + std::string(to_string(options.variant)) +
                 (options.variant == AttentionVariant::flash
                      ? " " + std::to_string(options.block_rows) + "x" + std::to_string(options.block_cols)
                      : std::string()) +
                 "](q" + shape_text(q) + ", k" + shape_text(k) + ", v" + shape_text(v) + " " + std::string(in_fmt) +
                 (causal ? ", causal" : "") + (sm ? ", mask" : "") + ") -> " + std::string(out.format.name);
  op.out = out;
  op.exact_relative_error = 0x1p-53;
  op.exact = [sq, sk, sv, parameters] { return certified(reference::attention(*sq, *sk, *sv, parameters(), kBinary64)); };
  op.reference = [sq, sk, sv, parameters, out] { return reference::attention(*sq, *sk, *sv, parameters(), out); };
  op.reference_from_exact = certified_reference(out, op.exact_relative_error);
  const std::string fmt(in_fmt);
  op.emulate = [sq, sk, sv, parameters, fmt, out, options](const core::Platform& platform, const core::BoundOptions&) {
    return cases::attention(*sq, *sk, *sv, parameters(), platform, fmt, out, options);
  };
  return op;
}

// ---- quantised matmuls ----

namespace {

// The scale that multiplies a[i, k] (is_a) or b[k, j] under the scaling layout (quantized.hpp).
double scale_at(const Array& s, Fp8Scaling scaling, bool is_a, std::size_t row, std::size_t col) {
  const double* p = s.data();
  switch (scaling) {
    case Fp8Scaling::per_tensor: return p[0];
    case Fp8Scaling::per_channel: return p[is_a ? row : col];  // a: one per row i; b: one per column j
    case Fp8Scaling::blockwise:
      // a [M, K/128]: (i, k / 128); b [K/128, ceil(N/128)]: (k / 128, j / 128).
      return is_a ? p[row * s.shape()[1] + col / kDeepSeekBlock]
                  : p[(row / kDeepSeekBlock) * s.shape()[1] + col / kDeepSeekBlock];
    case Fp8Scaling::mx:
      // a [M, K/32]: (i, k / 32); b [K/32, N]: (k / 32, j).
      return is_a ? p[row * s.shape()[1] + col / kMxBlock] : p[(row / kMxBlock) * s.shape()[1] + col];
  }
  return 0;
}

// The layout of quantized.hpp, checked before any index is read: per_tensor one value; per_channel
// one per row of a / column of b; blockwise a [M, K/128], b [K/128, ceil(N/128)]; mx a [M, K/32],
// b [K/32, N]. Every scale positive and finite.
void check_scales(const Array& s, Fp8Scaling scaling, bool is_a, std::size_t rows, std::size_t cols,
                  const char* parameter) {
  const auto up = [](std::size_t n, std::size_t d) { return (n + d - 1) / d; };
  std::size_t want_rows = 1, want_cols = 1, block = 0;
  switch (scaling) {
    case Fp8Scaling::per_tensor: break;
    case Fp8Scaling::per_channel: (is_a ? want_rows : want_cols) = is_a ? rows : cols; break;
    case Fp8Scaling::blockwise:
      block = kDeepSeekBlock;
      want_rows = is_a ? rows : rows / block;
      want_cols = is_a ? cols / block : up(cols, block);
      break;
    case Fp8Scaling::mx:
      block = kMxBlock;
      want_rows = is_a ? rows : rows / block;
      want_cols = is_a ? cols / block : cols;
      break;
  }
  const std::size_t k = is_a ? cols : rows;
  if (block && k % block != 0)
    throw numeq::error(std::string(parameter) + ": K = " + std::to_string(k) + " is not a multiple of the " +
                       std::to_string(block) + "-element block of " + std::string(to_string(scaling)) + " scaling");
  const bool per_tensor_ok = scaling == Fp8Scaling::per_tensor && s.size() == 1;
  const bool two_d_ok = s.dimension() == 2 && s.shape()[0] == want_rows && s.shape()[1] == want_cols;
  const bool one_d_ok = scaling == Fp8Scaling::per_channel && s.dimension() == 1 && s.size() == want_rows * want_cols;
  if (!per_tensor_ok && !two_d_ok && !one_d_ok)
    throw numeq::error(std::string(parameter) + ": shape " + shape_text(s) + " does not fit " +
                       std::string(to_string(scaling)) + " scaling (expected [" + std::to_string(want_rows) + "," +
                       std::to_string(want_cols) + "])");
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!(s.data()[i] > 0) || !std::isfinite(s.data()[i]))
      throw numeq::error(std::string(parameter) + ": element " + std::to_string(i) + " = " + std::to_string(s.data()[i]) +
                         "; scales must be positive and finite");
}

// x with every element multiplied by its scale: exact in binary64 (an 8-bit significand times a
// 24-bit one).
Array scaled(const Array& x, const Array& s, Fp8Scaling scaling, bool is_a) {
  Array r = x;
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) r(i, j) = x(i, j) * scale_at(s, scaling, is_a, i, j);
  return r;
}

}  // namespace

Op scaled_fp8_matmul(const Array& a, const Array& b, const Array& scale_a, const Array& scale_b, std::string_view in_fmt,
                     const ScaledMatmulOptions& options) {
  const Format& fin = floating_format(in_fmt, "in_fmt");
  const Format& fout = floating_format(options.out_fmt, "out");
  if (a.dimension() != 2 || b.dimension() != 2)
    throw numeq::error("a, b: a scaled fp8 matmul takes 2-D operands a[M, K] and b[K, N], got " + shape_text(a) +
                       " and " + shape_text(b));
  check_values(a, fin, "a");
  check_values(b, fin, "b");
  if (a.shape()[1] != b.shape()[0])
    throw numeq::error("b: inner dimensions differ: a " + shape_text(a) + " has K=" + std::to_string(a.shape()[1]) +
                       ", b " + shape_text(b) + " has K=" + std::to_string(b.shape()[0]));
  check_scales(scale_a, options.scaling, true, a.shape()[0], a.shape()[1], "scale_a");
  check_scales(scale_b, options.scaling, false, b.shape()[0], b.shape()[1], "scale_b");
  const auto sa = std::make_shared<const Array>(a), sb = std::make_shared<const Array>(b);
  const auto ssa = std::make_shared<const Array>(scale_a), ssb = std::make_shared<const Array>(scale_b);
  Op op;
  op.name = "scaled_fp8_matmul";
  op.signature = "scaled_fp8_matmul[" + std::string(to_string(options.scaling)) + "](a" + shape_text(a) + " @ b" +
                 shape_text(b) + " " + std::string(in_fmt) + ") -> " + options.out_fmt;
  op.out = Cast{fout};
  const Fp8Scaling scaling = options.scaling;
  const auto operands = [sa, sb, ssa, ssb, scaling] {
    return std::pair{scaled(*sa, *ssa, scaling, true), scaled(*sb, *ssb, scaling, false)};
  };
  op.exact = [operands] {
    const auto [x, y] = operands();
    return reference::matmul_exact(x, y);
  };
  const Cast out{fout};
  op.reference = [operands, out] {
    const auto [x, y] = operands();
    return reference::matmul(x, y, out);
  };
  const std::string fmt(in_fmt);
  op.emulate = [sa, sb, ssa, ssb, fmt, options](const core::Platform& platform, const core::BoundOptions& bound) {
    ScaledMatmulOptions o = options;
    o.bound = bound;
    return cases::scaled_fp8_matmul(*sa, *sb, *ssa, *ssb, platform, fmt, o);
  };
  return op;
}

Op integer_matmul(const Array& a, const Array& b, Int32Overflow overflow) {
  if (a.dimension() != 2 || b.dimension() != 2 || a.shape()[1] != b.shape()[0])
    throw numeq::error("a, b: int8_matmul takes a[M, K] and b[K, N], got " + shape_text(a) + " and " + shape_text(b));
  const auto sa = std::make_shared<const Array>(a), sb = std::make_shared<const Array>(b);
  Op op;
  op.name = "int8_matmul";
  op.signature = "int8_matmul(a" + shape_text(a) + " @ b" + shape_text(b) + ") -> int32";
  op.out = Cast{formats::int32};
  op.exact = [sa, sb] { return reference::matmul_exact(*sa, *sb); };
  // Integer products and sums are exact in the long accumulator; within int32 they are the result.
  op.reference = [sa, sb] { return reference::matmul(*sa, *sb, Cast{formats::fp64}); };
  op.emulate = [sa, sb, overflow](const core::Platform&, const core::BoundOptions&) {
    return cases::int8_matmul(*sa, *sb, overflow);
  };
  return op;
}

Op conversion(const Array& x, std::string_view in_fmt, const Cast& out) {
  check_values(x, floating_format(in_fmt, "in_fmt"), "x");
  floating_format(out.format.name, "out");
  const auto sx = std::make_shared<const Array>(x);
  Op op;
  op.name = "cast";
  op.signature = "cast(x" + shape_text(x) + " " + std::string(in_fmt) + ") -> " + std::string(out.format.name) + " " +
                 std::string(to_string(out.rounding));
  op.out = out;
  op.exact = [sx] { return certified(*sx); };
  op.reference = [sx, out] {
    Array r = *sx;
    for (std::size_t i = 0; i < r.size(); ++i) r.data()[i] = round_to_format(r.data()[i], out, i);
    return r;
  };
  op.emulate = [sx, out](const core::Platform&, const core::BoundOptions&) { return cases::cast(*sx, out); };
  return op;
}

// ---- requantised integer matmul ----

namespace {

// hi + lo (|lo| well below one) rounded to an integer exactly, for the deterministic roundings.
double round_to_integer(double hi, double lo, Rounding rounding) {
  double n = std::floor(hi);
  double f = (hi - n) + lo;  // hi - n is exact (|hi| < 2^53 here)
  if (f < 0) n -= 1, f += 1;
  if (f >= 1) n += 1, f -= 1;
  if (f == 0) return n;
  const bool positive = n >= 0;  // the value n + f lies in (n, n + 1)
  switch (rounding) {
    case Rounding::nearest_even: return f > 0.5 ? n + 1 : f < 0.5 ? n : (std::fmod(n, 2.0) == 0 ? n : n + 1);
    case Rounding::nearest_away: return f > 0.5 ? n + 1 : f < 0.5 ? n : (positive ? n + 1 : n);
    case Rounding::toward_zero: return positive ? n : n + 1;
    case Rounding::upward: return n + 1;
    case Rounding::downward: return n;
    default: break;
  }
  throw numeq::error("rounding: the requantisation reference takes nearest_even, nearest_away, toward_zero, upward or "
                     "downward");
}

}  // namespace

Op integer_matmul_requantized(const Array& a, const Array& b, const Requantization& r, Int32Overflow overflow) {
  if (a.dimension() != 2 || b.dimension() != 2 || a.shape()[1] != b.shape()[0])
    throw numeq::error("a, b: int8_matmul takes a[M, K] and b[K, N], got " + shape_text(a) + " and " + shape_text(b));
  if (r.quant.rounding == Rounding::odd || r.quant.rounding == Rounding::stochastic)
    throw numeq::error("rounding: the requantisation reference takes nearest_even, nearest_away, toward_zero, upward "
                       "or downward, got " + std::string(to_string(r.quant.rounding)));
  const auto sa = std::make_shared<const Array>(a), sb = std::make_shared<const Array>(b);
  Op op;
  op.name = "int8_matmul_requantized";
  op.signature = "int8_matmul_requantized(a" + shape_text(a) + " @ b" + shape_text(b) + ") -> " +
                 std::string(r.quant.format.name);
  op.out = Cast{r.quant.format, r.quant.rounding};
  const double qmin = static_cast<double>(r.quant.qmin()), qmax = static_cast<double>(r.quant.qmax());
  const double zp = static_cast<double>(r.zero_point), m = r.multiplier;
  // acc * m as a double-double (an error-free product by fma), then zp, then the clamp.
  op.exact = [sa, sb, m, zp, qmin, qmax] {
    reference::ExactValues acc = reference::matmul_exact(*sa, *sb);
    for (std::size_t i = 0; i < acc.hi.size(); ++i) {
      const double x = acc.hi.data()[i] + acc.lo.data()[i];  // an integer below 2^53: exact
      const double p = x * m, e = std::fma(x, m, -p);
      const double s = p + zp, t = (p - (s - (s - p))) + (zp - (s - p));
      double h = s, l = t + e;
      if (h + l <= qmin) h = qmin, l = 0;
      if (h + l >= qmax) h = qmax, l = 0;
      acc.hi.data()[i] = h;
      acc.lo.data()[i] = l;
    }
    return acc;
  };
  const Rounding rounding = r.quant.rounding;
  op.reference = [sa, sb, m, zp, qmin, qmax, rounding] {
    Array out = reference::matmul(*sa, *sb, Cast{formats::fp64});
    for (double& v : out) {
      const double p = v * m, e = std::fma(v, m, -p);
      v = std::clamp(round_to_integer(p, e, rounding) + zp, qmin, qmax);
    }
    return out;
  };
  op.emulate = [sa, sb, r, overflow](const core::Platform&, const core::BoundOptions&) {
    return cases::int8_matmul_requantized(*sa, *sb, r, overflow);
  };
  return op;
}

// ---- quantisation ----

namespace {

// The index of element i's scale / zero point (C order) under quantize.hpp's groups.
std::size_t group_index(std::size_t i, const std::vector<std::size_t>& x_shape, const QuantGroups& g) {
  std::size_t flat = 0, stride = 1;
  for (std::size_t d = x_shape.size(); d-- > 0;) {
    std::size_t idx = i % x_shape[d];
    i /= x_shape[d];
    if (static_cast<int>(d) == g.axis) idx /= g.block_size;
    if (g.shape[d] == 1) idx = 0;
    flat += idx * stride;
    stride *= g.shape[d];
  }
  return flat;
}

struct QuantSetup {
  std::vector<std::size_t> shape;
  QuantGroups groups;
};

QuantSetup quant_setup(const Array& x, const Array& scale, const xt::xarray<std::int64_t>& zero_point, int axis,
                       std::size_t block_size) {
  QuantSetup s;
  s.shape.assign(x.shape().begin(), x.shape().end());
  s.groups = quant_groups(s.shape, std::vector<std::size_t>(scale.shape().begin(), scale.shape().end()), axis, block_size);
  if (!std::equal(zero_point.shape().begin(), zero_point.shape().end(), scale.shape().begin(), scale.shape().end()))
    throw numeq::error("zero_point: shape differs from scale's " + shape_text(scale));
  for (std::size_t i = 0; i < scale.size(); ++i)
    if (!(scale.data()[i] > 0) || !std::isfinite(scale.data()[i]))
      throw numeq::error("scale: element " + std::to_string(i) + " = " + std::to_string(scale.data()[i]) +
                         "; scales must be positive and finite");
  return s;
}

}  // namespace

Op quantization(const Array& x, std::string_view in_fmt, const Quantization& q, const Array& scale,
                const xt::xarray<std::int64_t>& zero_point, int axis, std::size_t block_size) {
  check_values(x, floating_format(in_fmt, "in_fmt"), "x");
  const QuantSetup setup = quant_setup(x, scale, zero_point, axis, block_size);
  const auto sx = std::make_shared<const Array>(x), ss = std::make_shared<const Array>(scale);
  const auto sz = std::make_shared<const xt::xarray<std::int64_t>>(zero_point);
  Op op;
  op.name = "quantize";
  op.signature = "quantize(x" + shape_text(x) + " " + std::string(in_fmt) + ") -> " + std::string(q.format.name);
  op.out = Cast{q.format, q.rounding};
  // clamp(x / s + z): the quotient as a double-double (q + r / s, r = x - q s exact by fma) and
  // z added by an error-free sum, so that hi + lo carries the exact value to about 2^-106.
  op.exact = [sx, ss, sz, setup, q] {
    reference::ExactValues r{*sx, xt::zeros<double>(sx->shape())};
    for (std::size_t i = 0; i < sx->size(); ++i) {
      const std::size_t g = group_index(i, setup.shape, setup.groups);
      const double s = ss->data()[g], z = static_cast<double>(sz->data()[g]), value = sx->data()[i];
      const double quotient = value / s;
      const double rest = std::fma(-quotient, s, value) / s;
      const double hi = quotient + z;
      const double err = (quotient - (hi - (hi - quotient))) + (z - (hi - quotient));
      double h = hi, l = err + rest;
      const double lo_q = static_cast<double>(q.qmin()), hi_q = static_cast<double>(q.qmax());
      if (h + l <= lo_q) h = lo_q, l = 0;
      if (h + l >= hi_q) h = hi_q, l = 0;
      r.hi.data()[i] = h;
      r.lo.data()[i] = l;
    }
    return r;
  };
  op.reference = [sx, ss, sz, q, axis, block_size] { return cases::quantize(*sx, q, *ss, *sz, axis, block_size).values; };
  op.emulate = [sx, ss, sz, q, axis, block_size](const core::Platform&, const core::BoundOptions&) {
    return cases::quantize(*sx, q, *ss, *sz, axis, block_size);
  };
  return op;
}

Op dequantization(const Array& codes, const Quantization& q, const Array& scale,
                  const xt::xarray<std::int64_t>& zero_point, int axis, std::size_t block_size, const Cast& out) {
  floating_format(out.format.name, "out");
  integer_codes(codes, q);  // checked where the op is built: the exact value reads them too
  const QuantSetup setup = quant_setup(codes, scale, zero_point, axis, block_size);
  const auto sc = std::make_shared<const Array>(codes), ss = std::make_shared<const Array>(scale);
  const auto sz = std::make_shared<const xt::xarray<std::int64_t>>(zero_point);
  Op op;
  op.name = "dequantize";
  op.signature = "dequantize(codes" + shape_text(codes) + " " + std::string(q.format.name) + ") -> " +
                 std::string(out.format.name);
  op.out = out;
  // (c - z) s: c - z is exact in binary64 (|c - z| < 2^33 for int32 codes); the product as a
  // double-double by fma (error-free), exact for every code width and binary64 scale.
  op.exact = [sc, ss, sz, setup] {
    reference::ExactValues r{*sc, xt::zeros<double>(sc->shape())};
    for (std::size_t i = 0; i < sc->size(); ++i) {
      const std::size_t g = group_index(i, setup.shape, setup.groups);
      const double steps = sc->data()[i] - static_cast<double>(sz->data()[g]), s = ss->data()[g];
      const double p = steps * s;
      r.hi.data()[i] = p;
      r.lo.data()[i] = std::isfinite(p) ? std::fma(steps, s, -p) : 0.0;
    }
    return r;
  };
  op.reference = [op_exact = op.exact, out] {
    reference::ExactValues e = op_exact();
    Array v = std::move(e.hi);
    // hi is the product rounded to nearest binary64: already the answer for fp64 nearest-even
    // output; otherwise round-to-odd from (hi, sign of lo), then into out (round_quotient).
    const bool hi_is_it = out.format == formats::fp64 && out.rounding == Rounding::nearest_even;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double lo = e.lo.data()[i];
      v.data()[i] = lo == 0 || hi_is_it ? round_to_format(v.data()[i], out, i) : round_quotient(v.data()[i], lo, out);
    }
    return v;
  };
  op.emulate = [sc, ss, sz, q, axis, block_size, out](const core::Platform&, const core::BoundOptions&) {
    return cases::dequantize(*sc, q, *ss, *sz, axis, block_size, out);
  };
  return op;
}

// ---- tolerances ----

UlpOf::UlpOf(const Format& f)
    : integer_(f.is_integer()), max_(integer_ ? 0 : max_finite(f)), min_normal_(integer_ ? 0 : min_normal(f)),
      emin_(integer_ ? 0 : f.emin()), mantissa_bits_(f.mantissa_bits) {}

double ulp_of(double x, const Format& f) { return UlpOf(f)(x); }

namespace {

// A bound and its reference's magnitude: in the (r, b) plane each element is the point (r_i, b_i),
// and its allowance line atol(rtol) = b_i - rtol r_i.
struct BoundPoint {
  double r, b;
};

// How far b - K r, computed in binary64 with a rounded slope K, may lie from its exact value:
// three roundings of at most 2^-53 (|b| + |K r|) each, doubled.
double off_line(const BoundPoint& x, double K) { return 0x1p-50 * (std::abs(x.b) + std::abs(K * x.r)); }

// The slope of the upper convex hull's edge that crosses the vertical line r = m (left end at
// r <= m, right end at r > m), for points on both sides of m: Kirkpatrick and Seidel's bridge
// ("The ultimate planar convex hull algorithm?", SIAM J. Comput. 15(1), 1986, s3), by prune and
// search. Pair the points, take the median K of the pairs' slopes, find the points on the hull's
// supporting line of slope K; either they straddle m (the bridge, slope K), or the bridge lies to
// one side and one point of every pair whose slope is on the wrong side of K is no end of it.
// Each round drops a quarter of the points or more: linear time, no sort.
// The first element (lowest index) that maximises b_i - K |r_i| among those with b_i and r_i
// finite, as a serial scan with a strict comparison finds it ({-Inf, n} when none is, or when every
// such value is -Inf). A slice keeps four lanes' first maxima and their indices in one pass; the
// lanes' and then the slices' winners merge by (value, then lower index), which no slice or lane
// order changes.
struct Farthest {
  double value;
  std::size_t at;
};
NUMEQ_X86_64_V3_CLONE Farthest farthest_in(const double* bp, const double* rp, std::size_t begin, std::size_t end,
                                           double K) {
  constexpr double none = -std::numeric_limits<double>::infinity();
  // Finiteness from the exponent field; four lanes, each keeping its first maximum and where it
  // lies (one pass over the data; a lane's new maximum is rare after its first elements).
  const auto finite = [](double x) {
    return (std::bit_cast<std::uint64_t>(x) & 0x7ff0000000000000u) != 0x7ff0000000000000u;
  };
  double tops[4] = {none, none, none, none};
  std::size_t at[4] = {end, end, end, end};
  std::size_t i = begin;
  for (; i + 4 <= end; i += 4)
    for (std::size_t l = 0; l < 4; ++l) {
      const double b = bp[i + l], r = rp[i + l];
      const double v = finite(b) & finite(r) ? b - K * std::abs(r) : none;
      if (v > tops[l]) tops[l] = v, at[l] = i + l;
    }
  for (; i < end; ++i) {
    const double v = finite(bp[i]) & finite(rp[i]) ? bp[i] - K * std::abs(rp[i]) : none;
    if (v > tops[0]) tops[0] = v, at[0] = i;
  }
  // The lanes' winners: the largest value, the lowest index among equals (a serial scan's first).
  Farthest best{none, end};
  for (std::size_t l = 0; l < 4; ++l)
    if (at[l] < end && (tops[l] > best.value || (tops[l] == best.value && at[l] < best.at))) best = {tops[l], at[l]};
  if (best.at < end) best.value = bp[best.at] - K * std::abs(rp[best.at]);  // the element's own value (sign of zero)
  return best;
}

// The least atol >= 0 with atol + rt |r_i| >= b_i for every i with b_i and r_i finite, as binary64
// evaluates it, from the slice [begin, end): a_i = b_i - rt |r_i| (rounded) covers element i, or
// else its successor does (the exact b_i - rt |r_i| lies within half a spacing of a_i, below the
// successor, and rounding is monotone); coverage is monotone in atol, so the answer is the largest
// of those. Returns the largest a_i that covers its element and the largest that does not (whose
// successor the caller takes), -Inf where none; branch-free, so that the x86-64-v3 clone
// vectorises it.
struct Covering {
  double covered, short_of;
};
NUMEQ_X86_64_V3_CLONE Covering covering_atol(const double* bp, const double* rp, std::size_t begin, std::size_t end,
                                             double rt) {
  constexpr double none = -std::numeric_limits<double>::infinity();
  const auto finite = [](double x) {
    return (std::bit_cast<std::uint64_t>(x) & 0x7ff0000000000000u) != 0x7ff0000000000000u;
  };
  double covered = none, short_of = none;
  for (std::size_t i = begin; i < end; ++i) {
    const double b = bp[i], p = rt * std::abs(rp[i]);
    const double a = b - p;
    const bool used = finite(b) & finite(rp[i]);
    const bool enough = a + p >= b;
    covered = std::max(covered, used & enough ? a : none);
    short_of = std::max(short_of, used & !enough ? a : none);
  }
  return {covered, short_of};
}

std::pair<double, std::size_t> first_maximum(std::size_t n, const double* bp, const double* rp, double K) {
  std::pair<double, std::size_t> best{-std::numeric_limits<double>::infinity(), n};
  std::mutex merge;
  parallel_for(
      n,
      [&](std::size_t begin, std::size_t end) {
        const Farthest here = farthest_in(bp, rp, begin, end, K);
        if (here.at == end) return;
        const std::lock_guard<std::mutex> lock(merge);
        if (here.value > best.first || (here.value == best.first && here.at < best.second)) best = {here.value, here.at};
      },
      1 << 16);
  return best;
}

double bridge_slope(std::vector<BoundPoint> s, double m) {
  std::vector<BoundPoint> next;
  std::vector<double> slopes, median;
  while (s.size() >= 2) {
    next.clear();
    slopes.clear();
    // Pairs (s[2j], s[2j+1]) ordered by r; equal r: only the higher point can be a hull vertex.
    std::size_t pairs = 0;
    for (std::size_t j = 0; j + 1 < s.size(); j += 2) {
      BoundPoint& p = s[j];
      BoundPoint& q = s[j + 1];
      if (p.r > q.r) std::swap(p, q);
      if (p.r == q.r) {
        next.push_back(p.b >= q.b ? p : q);
        p.r = q.r = std::numeric_limits<double>::quiet_NaN();  // consumed
        continue;
      }
      slopes.push_back((q.b - p.b) / (q.r - p.r));
      s[pairs * 2] = p;  // compact the pairs with a slope to the front, in slope order
      s[pairs * 2 + 1] = q;
      ++pairs;
    }
    if (s.size() % 2) next.push_back(s.back());
    if (pairs == 0) {
      s.swap(next);
      continue;
    }
    median = slopes;
    const auto mid = median.begin() + static_cast<std::ptrdiff_t>(median.size() / 2);
    std::nth_element(median.begin(), mid, median.end());
    const double K = *mid;
    // The points on the supporting line of slope K: the largest b - K r (pairs and kept points).
    // K is a rounded slope and b - K r is rounded twice: a point within off_line (a few ulps of
    // its b and K r, and the largest's) of the largest counts as on the line. The exact largest
    // is always among them, so a side chosen below is the exact one; a point counted in by
    // rounding only lies on the line to within that rounding.
    double top = -std::numeric_limits<double>::infinity(), top_slack = 0;
    const auto climb = [&](const BoundPoint& x) {
      const double v = x.b - K * x.r;
      if (v > top) top = v, top_slack = off_line(x, K);
    };
    for (std::size_t j = 0; j < 2 * pairs; ++j) climb(s[j]);
    for (const BoundPoint& x : next) climb(x);
    double r_min = std::numeric_limits<double>::infinity(), r_max = -r_min;
    const auto visit = [&](const BoundPoint& x) {
      if (x.b - K * x.r >= top - top_slack - off_line(x, K)) r_min = std::min(r_min, x.r), r_max = std::max(r_max, x.r);
    };
    for (std::size_t j = 0; j < 2 * pairs; ++j) visit(s[j]);
    for (const BoundPoint& x : next) visit(x);
    if (r_min <= m && m < r_max) return K;
    // The bridge lies to the right (its slope is below K) or to the left (above K).
    const bool right = r_max <= m;
    for (std::size_t j = 0; j < pairs; ++j) {
      const BoundPoint &p = s[2 * j], &q = s[2 * j + 1];
      const double k = slopes[j];
      if (right ? k >= K : k <= K) next.push_back(right ? q : p);
      else next.push_back(p), next.push_back(q);
    }
    s.swap(next);
  }
  // Unreachable for points on both sides of m; no bridge found: rtol 0 (the caller compares).
  return 0;
}

}  // namespace

Tolerance tolerance(const Array& bound, const Array& reference, const Format& out) {
  if (bound.shape() != reference.shape())
    throw numeq::error("reference: shape " + shape_text(reference) + " differs from the bound's " + shape_text(bound));
  Tolerance t;
  // Elements with a finite bound and reference take part, read in place (compare calls this on
  // full results).
  const double* bp = bound.data();
  const double* rp = reference.data();
  const std::size_t n = bound.size();
  const auto used = [&](std::size_t i) { return std::isfinite(bp[i]) && std::isfinite(rp[i]); };
  const UlpOf ulp(out);
  // The first pass over blocks of a fixed size, on parallel_for's threads, merged in block order:
  // the sum of |reference| (the only order-dependent figure) is the same on any thread count.
  struct Block {
    std::size_t count = 0;
    double sum_r = 0, max_abs = 0, r_top = 0, b_zero = 0, max_ulps = 0, rtol_only = 0;
  };
  constexpr std::size_t kBlock = 8192;
  std::vector<Block> blocks((n + kBlock - 1) / kBlock);
  parallel_for(blocks.size(), [&](std::size_t first, std::size_t last) {
    for (std::size_t k = first; k < last; ++k) {
      Block& s = blocks[k];
      for (std::size_t i = k * kBlock; i < std::min(n, (k + 1) * kBlock); ++i) {
        if (!used(i)) continue;
        const double bi = bp[i], ri = std::abs(rp[i]);
        ++s.count;
        s.sum_r += ri;
        if (s.count == 1 || bi > s.max_abs) s.max_abs = bi, s.r_top = ri;
        else if (bi == s.max_abs) s.r_top = std::min(s.r_top, ri);
        if (ri == 0) s.b_zero = std::max(s.b_zero, bi);
        s.max_ulps = std::max(s.max_ulps, bi / ulp(rp[i]));
        s.rtol_only = std::max(s.rtol_only, bi == 0 ? 0.0 : (ri == 0 ? std::numeric_limits<double>::infinity() : bi / ri));
      }
    }
  }, 8);
  std::size_t count = 0;
  double sum_r = 0;
  double r_top = 0;   // the smallest |reference| among the largest bounds
  double b_zero = 0;  // the largest bound of a zero reference (and 0)
  for (const Block& s : blocks) {
    if (s.count == 0) continue;
    if (count == 0 || s.max_abs > t.max_abs) t.max_abs = s.max_abs, r_top = s.r_top;
    else if (s.max_abs == t.max_abs) r_top = std::min(r_top, s.r_top);
    count += s.count;
    sum_r += s.sum_r;
    b_zero = std::max(b_zero, s.b_zero);
    t.max_ulps = std::max(t.max_ulps, s.max_ulps);
    t.rtol_only = std::max(t.rtol_only, s.rtol_only);
  }
  if (t.max_abs <= 0) t.max_abs = 0, r_top = 0;  // the line a = 0 is the highest
  t.atol_only = t.max_abs;
  t.atol = t.max_abs;
  if (count == 0) return t;
  // The total allowance f(rtol) = N a(rtol) + rtol sum_i r_i, a(rtol) = max(0, max_i b_i - rtol r_i),
  // is convex and piecewise linear: a is the upper envelope of the lines, whose slope -r_active
  // steepens toward rtol = 0. f falls while r_active exceeds the mean m = sum r / N and rises
  // after: the least f lies where the envelope passes from a line of r > m to one of r <= m. In
  // the (r, b) plane the envelope's lines are the upper convex hull's vertices (a line maximal at
  // rtol is a point on the hull's supporting line of slope rtol), so that rtol is the slope of
  // the hull's edge over r = m. The line a = 0 is the point (0, 0).
  const double N = static_cast<double>(count);
  const double m = sum_r / N;
  if (r_top <= m) return t;  // f rises from rtol = 0 on: atol alone
  // Hull vertices on either side of m: the largest bound (right of m) and the highest point at
  // r = 0 (left). Quickhull steps narrow them down (Barber, Dobkin and Huhdanpaa, ACM TOMS 22(4),
  // 1996): the point farthest above their chord is a hull vertex and takes the place of the one
  // on its side of m; with none above it, the chord is the edge over m. Each step is one pass.
  BoundPoint left{0, b_zero}, right{r_top, t.max_abs};
  double rt = -1;
  for (int step = 0; step < 6 && rt < 0; ++step) {
    const double K = (right.b - left.b) / (right.r - left.r);
    const double chord = std::max(left.b - K * left.r, right.b - K * right.r);
    // The farthest point above the chord (the first of equals), on parallel_for's threads.
    const auto [top, at] = first_maximum(n, bp, rp, K);
    const BoundPoint far = at < n ? BoundPoint{std::abs(rp[at]), bp[at]} : BoundPoint{};
    if (top <= chord + off_line(far, K) + off_line(right, K) + off_line(left, K)) rt = K;
    else (far.r > m ? right : left) = far;
  }
  if (rt < 0) {
    // The edge over m lies between left and right: only points above their chord (to within
    // rounding) can be its ends. The bridge among them.
    const double K = (right.b - left.b) / (right.r - left.r);
    const double chord = std::min(left.b - K * left.r, right.b - K * right.r);
    std::vector<BoundPoint> points{left, right};
    // On parallel_for's slices, concatenated in slice order (the point list of a serial scan).
    for (const std::vector<BoundPoint>& some : parallel_states<std::vector<BoundPoint>>(
             n, [&](std::size_t begin, std::size_t end, std::vector<BoundPoint>& found) {
               for (std::size_t i = begin; i < end; ++i) {
                 if (!used(i)) continue;
                 const BoundPoint x{std::abs(rp[i]), bp[i]};
                 if (x.r > left.r && x.r < right.r &&
                     x.b - K * x.r >= chord - off_line(x, K) - off_line(left, K) - off_line(right, K))
                   found.push_back(x);
               }
             }))
      points.insert(points.end(), some.begin(), some.end());
    rt = bridge_slope(std::move(points), m);
  }
  // The atol that makes rt cover every bound (computed, not estimated), as atol + rtol |ref| is
  // evaluated in binary64 (covering_atol), in one pass.
  double at = 0;
  {
    std::mutex merge;
    parallel_for(n, [&](std::size_t begin, std::size_t end) {
      const Covering c = covering_atol(bp, rp, begin, end, rt);
      const double least = std::max(c.covered, c.short_of == -std::numeric_limits<double>::infinity()
                                                   ? c.short_of : next_up(c.short_of));
      const std::lock_guard<std::mutex> lock(merge);
      at = std::max(at, least);
    }, 1 << 16);
  }
  // Rounding may leave the fit a hair above atol alone: keep the simpler form then.
  if (!(rt > 0) || N * t.max_abs <= N * at + rt * sum_r) return t;
  t.rtol = rt;
  t.atol = at;
  return t;
}

Array cross_platform_bound(const Emulation& a, const Emulation& b) {
  if (a.bound.shape() != b.bound.shape())
    throw numeq::error("b: bound shape " + shape_text(b.bound) + " differs from a's " + shape_text(a.bound));
  Array r = a.bound + b.bound;
  // the sum in double rounds: one ulp of binary64 upward keeps it a bound.
  for (double& v : r) v = std::nextafter(v, std::numeric_limits<double>::infinity());
  return r;
}

}  // namespace numeq::cases
