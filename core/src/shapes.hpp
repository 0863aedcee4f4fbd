#pragma once
// Shapes for error messages and numpy broadcasting, shared by the evaluator and the bound walker
// (private to core/): both must accept and reject exactly the same arguments.

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbroadcast.hpp>

#include "numeq/formats/error.hpp"
#include "numeq/formats/shape.hpp"

namespace numeq::core::detail {

// For each matrix t of a batched matmul's result (batch axes `batch`, C order), the matrix of a
// (batch axes batch_a) and of b (batch_b) it reads, as numpy broadcasts batch axes.
struct BatchOperands {
  std::vector<std::size_t> a_of, b_of;
};
inline BatchOperands batch_operands(const std::vector<std::size_t>& batch, const std::vector<std::size_t>& batch_a,
                                    const std::vector<std::size_t>& batch_b) {
  std::size_t matrices = 1;
  for (std::size_t d : batch) matrices *= d;
  BatchOperands r{std::vector<std::size_t>(matrices, 0), std::vector<std::size_t>(matrices, 0)};
  for (std::size_t t = 0; t < matrices; ++t) {
    std::size_t rest = t, ia = 0, ib = 0, stride_a = 1, stride_b = 1;
    for (std::size_t d = batch.size(); d-- > 0;) {
      const std::size_t idx = rest % batch[d];
      rest /= batch[d];
      const std::ptrdiff_t da = static_cast<std::ptrdiff_t>(d) - static_cast<std::ptrdiff_t>(batch.size() - batch_a.size());
      const std::ptrdiff_t db = static_cast<std::ptrdiff_t>(d) - static_cast<std::ptrdiff_t>(batch.size() - batch_b.size());
      if (da >= 0) {
        const std::size_t len = batch_a[static_cast<std::size_t>(da)];
        ia += (len == 1 ? 0 : idx) * stride_a;
        stride_a *= len;
      }
      if (db >= 0) {
        const std::size_t len = batch_b[static_cast<std::size_t>(db)];
        ib += (len == 1 ? 0 : idx) * stride_b;
        stride_b *= len;
      }
    }
    r.a_of[t] = ia;
    r.b_of[t] = ib;
  }
  return r;
}

// Where a reduction along `axis` of x finds its terms: element i of the result (C order, shape
// out_shape) reduces x[(i / inner) * length * inner + i % inner + k * inner], k < length.
struct AxisLayout {
  std::size_t axis = 0, outer = 1, inner = 1, length = 0;
  std::vector<std::size_t> out_shape;
};
inline AxisLayout axis_layout(const xt::xarray<double>& x, std::ptrdiff_t axis) {
  AxisLayout l;
  l.axis = axis_index(axis, x.shape());
  for (std::size_t d = 0; d < x.dimension(); ++d) {
    if (d < l.axis) l.outer *= x.shape()[d];
    if (d > l.axis) l.inner *= x.shape()[d];
    if (d != l.axis) l.out_shape.push_back(x.shape()[d]);
  }
  l.length = x.shape()[l.axis];
  return l;
}

// a[..., K] . b[..., K] (+ c): the result's shape and the operands broadcast to it (fa, fb:
// shape + [K]; fc: shape, empty without c).
struct DotLayout {
  std::size_t K = 0;
  std::vector<std::size_t> shape;
  xt::xarray<double> fa, fb, fc;
};
inline DotLayout dot_layout(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c) {
  if (a.dimension() == 0 || b.dimension() == 0)
    throw numeq::error("a, b: dot needs arrays with at least one axis (the reduced last axis)");
  DotLayout l;
  l.K = a.shape().back();
  if (b.shape().back() != l.K)
    throw numeq::error("b: last dimension " + std::to_string(b.shape().back()) + " differs from a's " +
                       std::to_string(l.K) + " (a " + shape_text(a.shape()) + ", b " + shape_text(b.shape()) + ")");
  const std::vector<std::size_t> sa(a.shape().begin(), a.shape().end() - 1), sb(b.shape().begin(), b.shape().end() - 1);
  const auto leading = broadcast_shape(sa, sb);
  if (!leading)
    throw numeq::error("b: leading dimensions of a " + shape_text(a) + " and b " + shape_text(b) + " do not broadcast");
  l.shape = *leading;
  std::vector<std::size_t> full_a = l.shape, full_b = l.shape;
  full_a.push_back(l.K);
  full_b.push_back(l.K);
  l.fa = xt::broadcast(a, full_a);
  l.fb = xt::broadcast(b, full_b);
  if (c) {
    if (!broadcasts_to(c->shape(), l.shape))
      throw numeq::error("c: shape " + shape_text(*c) + " does not broadcast to the result " + shape_text(l.shape));
    l.fc = xt::broadcast(*c, l.shape);
  }
  return l;
}

// a[..., M, K] @ b[..., K, N] (+ c): sizes, batch axes, the result's shape, c broadcast to it
// (empty without c) and the operand matrices of each result matrix.
struct MatmulLayout {
  std::size_t M = 0, K = 0, N = 0;
  std::vector<std::size_t> batch_a, batch_b, batch, shape;
  xt::xarray<double> fc;
  BatchOperands operands;
};
inline MatmulLayout matmul_layout(const xt::xarray<double>& a, const xt::xarray<double>& b,
                                  const xt::xarray<double>* c) {
  if (a.dimension() < 2 || b.dimension() < 2)
    throw numeq::error("a, b: matmul needs arrays of at least 2 dimensions ([..., M, K] and [..., K, N]), got " +
                       shape_text(a.shape()) + " and " + shape_text(b.shape()) + " (use dot for vectors)");
  MatmulLayout l;
  l.M = a.shape()[a.dimension() - 2];
  l.K = a.shape().back();
  l.N = b.shape().back();
  const std::size_t Kb = b.shape()[b.dimension() - 2];
  if (l.K != Kb)
    throw numeq::error("b: inner dimensions differ: a " + shape_text(a.shape()) + " has K=" + std::to_string(l.K) +
                       ", b " + shape_text(b.shape()) + " has K=" + std::to_string(Kb));
  l.batch_a.assign(a.shape().begin(), a.shape().end() - 2);
  l.batch_b.assign(b.shape().begin(), b.shape().end() - 2);
  const auto batch = broadcast_shape(l.batch_a, l.batch_b);
  if (!batch)
    throw numeq::error("b: batch dimensions of a " + shape_text(a) + " and b " + shape_text(b) + " do not broadcast");
  l.batch = *batch;
  l.shape = l.batch;
  l.shape.push_back(l.M);
  l.shape.push_back(l.N);
  if (c) {
    if (!broadcasts_to(c->shape(), l.shape))
      throw numeq::error("c: shape " + shape_text(*c) + " does not broadcast to the result " + shape_text(l.shape));
    l.fc = xt::broadcast(*c, l.shape);
  }
  l.operands = batch_operands(l.batch, l.batch_a, l.batch_b);
  return l;
}

}  // namespace numeq::core::detail
