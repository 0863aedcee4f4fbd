#include "numeq/references/exact.hpp"

#include <xtensor/xbroadcast.hpp>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "numeq/formats/error.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"

namespace numeq::reference {

namespace {

using Shape = std::vector<std::size_t>;

std::string shape_text(const auto& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// Runs term(i, acc) for every output element i in parallel, each with a cleared accumulator,
// and stores either the rounded value (cast != nullptr) or the double-double exact value.
template <class Term>
void reduce_each(std::size_t outputs, std::size_t terms_each, const Cast* cast, double* hi, double* lo,
                 Term&& term) {
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::atomic<std::size_t> first_invalid{none};
  const std::uint64_t key = cast ? random_stream_key(cast->seed) : 0;
  const bool stochastic = cast && cast->rounding == Rounding::stochastic;
  // Threads pay off from about 2^16 terms of work in all.
  const std::size_t serial_below = std::max<std::size_t>(1, (std::size_t{1} << 16) / std::max<std::size_t>(1, terms_each));
  parallel_for(outputs, [&](std::size_t begin, std::size_t end) {
    LongAccumulator acc;
    for (std::size_t i = begin; i < end; ++i) {
      acc.clear();
      term(i, acc);
      if (cast != nullptr) {
        const std::uint64_t bits = acc.round(*cast, stochastic ? random_bits_at(key, i) : 0);
        if (bits == invalid_encoding) {
          std::size_t current = first_invalid.load();
          while (i < current && !first_invalid.compare_exchange_weak(current, i)) {
          }
          hi[i] = 0;
          continue;
        }
        hi[i] = decode_bits(cast->format, bits);
      } else {
        const DoubleDouble d = acc.to_double_double();
        hi[i] = d.hi;
        lo[i] = d.lo;
      }
    }
  }, serial_below);
  if (first_invalid.load() != none)
    throw error("out: result element " + std::to_string(first_invalid.load()) + " (C order) is NaN, which format " +
                std::string(cast->format.name) + " cannot hold (it has no NaN encoding)");
}

void check_values(const Cast* cast) {
  if (cast != nullptr) validate(*cast, "out");
}

// ---- sum ----

void sum_impl(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast* cast, ExactValues& r) {
  check_values(cast);
  const auto dims = static_cast<std::ptrdiff_t>(x.dimension());
  if (dims == 0) throw error("x: a 0-d array has no axis to sum over; pass an array with at least one dimension");
  if (axis < -dims || axis >= dims)
    throw error("axis: " + std::to_string(axis) + " is out of range for x of shape " + shape_text(x.shape()) +
                " (valid: " + std::to_string(-dims) + " to " + std::to_string(dims - 1) + ")");
  const auto a = static_cast<std::size_t>(axis < 0 ? axis + dims : axis);
  std::size_t outer = 1, inner = 1;
  Shape out_shape;
  for (std::size_t d = 0; d < x.dimension(); ++d) {
    if (d < a) outer *= x.shape()[d];
    if (d > a) inner *= x.shape()[d];
    if (d != a) out_shape.push_back(x.shape()[d]);
  }
  const std::size_t length = x.shape()[a];
  r.hi = xt::xarray<double>::from_shape(out_shape);
  if (cast == nullptr) r.lo = xt::xarray<double>::from_shape(out_shape);
  const double* data = x.data();
  reduce_each(outer * inner, length, cast, r.hi.data(), cast ? nullptr : r.lo.data(),
              [&](std::size_t i, LongAccumulator& acc) {
                const double* base = data + (i / inner) * length * inner + i % inner;
                for (std::size_t k = 0; k < length; ++k) acc.add(base[k * inner]);
              });
}

// ---- dot ----

void dot_impl(const xt::xarray<double>& a, const xt::xarray<double>& b, const Cast* cast, ExactValues& r) {
  check_values(cast);
  if (a.dimension() != 1 || b.dimension() != 1 || a.size() != b.size())
    throw error("a, b: dot needs two 1-D arrays of equal length, got shapes " + shape_text(a.shape()) + " and " +
                shape_text(b.shape()) + " (use matmul for matrices)");
  r.hi = xt::xarray<double>::from_shape(Shape{});
  if (cast == nullptr) r.lo = xt::xarray<double>::from_shape(Shape{});
  reduce_each(1, a.size(), cast, r.hi.data(), cast ? nullptr : r.lo.data(), [&](std::size_t, LongAccumulator& acc) {
    for (std::size_t k = 0; k < a.size(); ++k) acc.add_product(a.data()[k], b.data()[k]);
  });
}

// ---- matmul ----

// Flat index into an operand's batch dimensions for a result batch index, numpy broadcasting.
struct BatchMap {
  Shape result;              // broadcast batch shape
  std::vector<std::size_t> a_strides, b_strides;  // per result batch dim, in matrices (0: broadcast)
};

BatchMap broadcast_batches(const Shape& a, const Shape& b) {
  BatchMap m;
  const std::size_t n = std::max(a.size(), b.size());
  m.result.assign(n, 1);
  m.a_strides.assign(n, 0);
  m.b_strides.assign(n, 0);
  std::size_t sa = 1, sb = 1;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t d = n - 1 - i;
    const std::size_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const std::size_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      throw error("a, b: batch dimensions " + shape_text(a) + " and " + shape_text(b) + " do not broadcast");
    m.result[d] = std::max(da, db);
    m.a_strides[d] = da == 1 ? 0 : sa;
    m.b_strides[d] = db == 1 ? 0 : sb;
    sa *= da;
    sb *= db;
  }
  return m;
}

void matmul_impl(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                 const Cast* cast, ExactValues& r) {
  check_values(cast);
  if (a.dimension() < 2 || b.dimension() < 2)
    throw error("a, b: matmul needs arrays of at least 2 dimensions ([..., M, K] and [..., K, N]), got shapes " +
                shape_text(a.shape()) + " and " + shape_text(b.shape()) + " (use dot for vectors)");
  const std::size_t M = a.shape()[a.dimension() - 2], K = a.shape()[a.dimension() - 1];
  const std::size_t Kb = b.shape()[b.dimension() - 2], N = b.shape()[b.dimension() - 1];
  if (K != Kb)
    throw error("a, b: inner dimensions differ: a has shape " + shape_text(a.shape()) + " (K=" + std::to_string(K) +
                "), b has shape " + shape_text(b.shape()) + " (K=" + std::to_string(Kb) + ")");
  const BatchMap batches = broadcast_batches(Shape(a.shape().begin(), a.shape().end() - 2),
                                             Shape(b.shape().begin(), b.shape().end() - 2));
  Shape out_shape = batches.result;
  out_shape.push_back(M);
  out_shape.push_back(N);
  xt::xarray<double> c_full;
  if (c != nullptr) {
    bool ok = c->dimension() <= out_shape.size();
    for (std::size_t i = 0; ok && i < c->dimension(); ++i) {
      const std::size_t dc = c->shape()[c->dimension() - 1 - i];
      ok = dc == 1 || dc == out_shape[out_shape.size() - 1 - i];
    }
    if (!ok)
      throw error("c: shape " + shape_text(c->shape()) + " does not broadcast to the result shape " +
                  shape_text(out_shape));
    c_full = xt::broadcast(*c, out_shape);
  }
  // b transposed per batch to [N, K], so that both operands of a dot product are contiguous.
  const std::size_t b_batches = b.size() / std::max<std::size_t>(1, K * N);
  std::vector<double> bt(b.size());
  for (std::size_t s = 0; s < b_batches; ++s)
    for (std::size_t k = 0; k < K; ++k)
      for (std::size_t n = 0; n < N; ++n) bt[s * N * K + n * K + k] = b.data()[s * K * N + k * N + n];
  r.hi = xt::xarray<double>::from_shape(out_shape);
  if (cast == nullptr) r.lo = xt::xarray<double>::from_shape(out_shape);
  const std::size_t matrices = r.hi.size() / std::max<std::size_t>(1, M * N);
  // Per result matrix, the matrix of a and of b it reads.
  std::vector<std::size_t> a_of(matrices), b_of(matrices);
  for (std::size_t t = 0; t < matrices; ++t) {
    std::size_t rest = t, ia = 0, ib = 0;
    for (std::size_t d = batches.result.size(); d-- > 0;) {
      const std::size_t idx = rest % batches.result[d];
      rest /= batches.result[d];
      ia += idx * batches.a_strides[d];
      ib += idx * batches.b_strides[d];
    }
    a_of[t] = ia;
    b_of[t] = ib;
  }
  const double* ad = a.data();
  const double* cd = c ? c_full.data() : nullptr;
  reduce_each(r.hi.size(), K + 1, cast, r.hi.data(), cast ? nullptr : r.lo.data(), [&](std::size_t i, LongAccumulator& acc) {
    const std::size_t t = M * N == 0 ? 0 : i / (M * N);
    const std::size_t m = (i / N) % M, n = i % N;
    const double* row = ad + a_of[t] * M * K + m * K;
    const double* col = bt.data() + b_of[t] * N * K + n * K;
    for (std::size_t k = 0; k < K; ++k) acc.add_product(row[k], col[k]);
    if (cd != nullptr) acc.add(cd[i]);
  });
}

}  // namespace

xt::xarray<double> sum(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast& out) {
  ExactValues r;
  sum_impl(x, axis, &out, r);
  return std::move(r.hi);
}
ExactValues sum_exact(const xt::xarray<double>& x, std::ptrdiff_t axis) {
  ExactValues r;
  sum_impl(x, axis, nullptr, r);
  return r;
}
xt::xarray<double> dot(const xt::xarray<double>& a, const xt::xarray<double>& b, const Cast& out) {
  ExactValues r;
  dot_impl(a, b, &out, r);
  return std::move(r.hi);
}
ExactValues dot_exact(const xt::xarray<double>& a, const xt::xarray<double>& b) {
  ExactValues r;
  dot_impl(a, b, nullptr, r);
  return r;
}
xt::xarray<double> matmul(const xt::xarray<double>& a, const xt::xarray<double>& b, const Cast& out,
                          const xt::xarray<double>* c) {
  ExactValues r;
  matmul_impl(a, b, c, &out, r);
  return std::move(r.hi);
}
ExactValues matmul_exact(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c) {
  ExactValues r;
  matmul_impl(a, b, c, nullptr, r);
  return r;
}

}  // namespace numeq::reference
