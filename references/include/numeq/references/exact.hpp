#pragma once
// Exact reductions: sum along an axis, dot product, matmul and batched matmul, each computed in
// the long accumulator (no rounding at all) and rounded once into an output Cast. Inputs are
// doubles holding values of any supported format (every such value is a double exactly); the
// Python layer checks that they belong to the declared input format.
//
// Element i (C order) of a result rounded stochastically uses the draw
// random_bits_at(random_stream_key(out.seed), i), as casts do. Work is spread over
// numeq::num_threads() threads; every result is exact before its single rounding, so it does not
// depend on the thread count.

#include <xtensor/xarray.hpp>

#include <cstddef>
#include <utility>
#include <vector>

#include "numeq/formats/rounding.hpp"
#include "numeq/references/accumulator.hpp"

namespace numeq::reference {

// What a reduction hands back: the rounded values (NaN where the format gives NaN) or the exact
// values as double-doubles (hi, lo). radius: empty, or (an enclosed result, composite.hpp's
// attention_enclosed) one per element of hi (C order) with |exact - (hi + lo)| <= radius[i].
struct ExactValues {
  xt::xarray<double> hi;
  xt::xarray<double> lo;
  std::vector<double> radius = {};
};

// Sum of x along `axis` (negative counts from the end), rounded once into `out`.
xt::xarray<double> sum(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast& out);
ExactValues sum_exact(const xt::xarray<double>& x, std::ptrdiff_t axis);

// a . b for 1-D a and b of equal length: a 0-d result.
xt::xarray<double> dot(const xt::xarray<double>& a, const xt::xarray<double>& b, const Cast& out);
ExactValues dot_exact(const xt::xarray<double>& a, const xt::xarray<double>& b);

// A C-ordered float64 array in the caller's memory, read in place (the bindings pass numpy
// arrays this way, without a copy). The data must outlive the call.
struct ArrayRef {
  const double* values = nullptr;
  std::vector<std::size_t> extents;

  ArrayRef(const double* v, std::vector<std::size_t> e) : values(v), extents(std::move(e)) {}
  explicit ArrayRef(const xt::xarray<double>& x) : values(x.data()), extents(x.shape().begin(), x.shape().end()) {}
  const double* data() const { return values; }
  const std::vector<std::size_t>& shape() const { return extents; }
  std::size_t dimension() const { return extents.size(); }
  std::size_t size() const;
};

// a[..., M, K] @ b[..., K, N] (+ c, broadcast to the result, added exactly), batch dimensions
// broadcast as numpy does; 1-D operands are not accepted (use dot). c may be null.
xt::xarray<double> matmul(const xt::xarray<double>& a, const xt::xarray<double>& b, const Cast& out,
                          const xt::xarray<double>* c = nullptr);
ExactValues matmul_exact(const xt::xarray<double>& a, const xt::xarray<double>& b,
                         const xt::xarray<double>* c = nullptr);
xt::xarray<double> matmul(const ArrayRef& a, const ArrayRef& b, const Cast& out, const ArrayRef* c = nullptr);
ExactValues matmul_exact(const ArrayRef& a, const ArrayRef& b, const ArrayRef* c = nullptr);

}  // namespace numeq::reference
