// The reduction Op factories (op.hpp): sum, mean and max along axes (numpy's layout-driven order
// or the platform's sum plan) and sum_of_squares, whose emulation is the sum of the squares as
// the kernel rounds them and whose exact value is the exact squares' sum.

#include "numeq/cases/op.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "numeq/core/evaluate.hpp"
#include "numeq/core/numpy_reduction.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/shape.hpp"
#include "op_common.hpp"

namespace numeq::cases {

using Array = xt::xarray<double>;
using namespace op_detail;

Reduction reduction_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<Reduction>, name, parameter, "reduction");
}

// The platform's sum plan for `compute` -> `compute`; a platform without one is an error naming
// `compute` (the reduction's own parameter), not the plan table's in_fmt.
core::Plan compute_sum_plan(const core::Platform& platform, const std::string& compute) {
  try {
    return core::plan_for(platform, core::Operation::sum, compute, compute);
  } catch (const numeq::error& e) {
    std::string what = e.what();
    if (what.rfind("in_fmt: ", 0) == 0) what = what.substr(8);
    throw numeq::error("compute: " + what);
  }
}

Op reduce(Reduction kind, const Array& x, std::ptrdiff_t axis, std::string_view in_fmt, const Cast& out,
          std::string_view compute) {
  if (x.dimension() == 0) throw numeq::error("x: a reduction needs at least one dimension, got a 0-d array");
  return reduce(kind, x, std::vector<std::ptrdiff_t>{static_cast<std::ptrdiff_t>(axis_index(axis, x.shape()))}, in_fmt, out, compute);
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
  op.signature = op.name + "(x" + signature_shape(x) + " " + std::string(in_fmt) + ", axis=" + axis_text + ") in " +
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
      // sx holds each element's terms along its last axis, in the result's C order.
      op.diagnose = [sx](const DiagnosisData& data) { return diagnose_reduction(*sx, data); };
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
      // The sum's models on the terms x / n (within the bound: each term's division by n rounds
      // at 2^-53, far below any bound): a tile of the row never added, or added twice.
      op.diagnose = [sx, n](const DiagnosisData& data) {
        const xt::xarray<double> terms = *sx / static_cast<double>(n);
        return diagnose_reduction(terms, data);
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
    core::Plan plan = compute_sum_plan(platform, compute_name);
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
        plan = compute_sum_plan(platform, compute_name);
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

Op sum_of_squares(const Array& x, std::string_view in_fmt, const Cast& out, std::string_view compute) {
  const Format& fin = floating_format(in_fmt, "in_fmt");
  const Format& fc = floating_format(compute, "compute");
  check_values(x, fin, "x");
  if (fin.precision() > 26)
    throw numeq::error("in_fmt: '" + std::string(in_fmt) +
                       "': squares of more than 26 bits are not exact in binary64; pass in_fmt, the format x's "
                       "values are of (float64 arrays are taken as fp64: bf16, fp16 and fp32 values need in_fmt)");
  if (x.dimension() == 0) throw numeq::error("x: a reduction needs at least one dimension, got a 0-d array");
  // x^2 in binary64 is exact (at most 52 bits; fp32's range squared stays inside binary64's). The
  // kernel rounds each square into compute, then sums them by the platform's sum plan: the plan's
  // op on the rounded squares is the emulation, and the exact result is the exact squares' sum.
  const Array squares = x * x;
  Array rounded = squares;
  for (double& v : rounded) v = round_to_format(v, Cast{fc});
  // The op is the exact squares' sum (its exact value and reference) emulated as the rounded
  // squares' sum (its model and emulation; the bound grown by the squaring errors below).
  const std::vector<std::ptrdiff_t> last{-1};
  Op op = reduce(Reduction::sum, squares, last, "fp64", out, "fp64");
  const Op rounded_sum = reduce(Reduction::sum, rounded, last, compute, out, compute);
  // Each row's squaring errors, sum_i |fl(x_i^2) - x_i^2|: each difference is exact (Sterbenz:
  // fl(q) is within a factor 2 of q, or q's underflow to 0 leaves q itself); their binary64 sum,
  // n positive terms, is within gamma_{n-1} of the true one, covered by 2 n 2^-53 and rounded up.
  const std::size_t k = x.shape().back(), rows = k == 0 ? 0 : x.size() / k;
  auto extra = std::make_shared<std::vector<double>>(rows, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    double e = 0;
    for (std::size_t i = r * k; i < (r + 1) * k; ++i) e += std::fabs(rounded.data()[i] - squares.data()[i]);
    (*extra)[r] = e == 0 ? 0 : std::nextafter(e * (1 + 2.0 * static_cast<double>(k) * 0x1p-53),
                                               std::numeric_limits<double>::infinity());
  }
  op.model_key = rounded_sum.model_key;
  op.emulate = [inner = rounded_sum.emulate, extra](const core::Platform& p, const core::BoundOptions& o) {
    Emulation e = inner(p, o);
    for (std::size_t r = 0; r < e.bound.size(); ++r) e.bound.data()[r] += (*extra)[r];
    return e;
  };
  // Neither sum's row restriction nor bound sources describe this op (one sum's exact value, the
  // other's emulation); its diagnoses read the exact squares.
  op.restrict_to = nullptr;
  op.bound_sources = nullptr;
  const auto exact_squares = std::make_shared<const Array>(squares);
  op.diagnose = [exact_squares](const DiagnosisData& data) { return diagnose_reduction(*exact_squares, data); };
  op.name = "sum_of_squares";
  op.signature = "sum_of_squares(x" + signature_shape(x) + " " + std::string(in_fmt) + ") in " +
                 std::string(compute) + " -> " + std::string(out.format.name);
  return op;
}

}  // namespace numeq::cases
