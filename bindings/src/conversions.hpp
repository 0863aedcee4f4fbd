#pragma once
// Conversions between numeq._core's Python arguments and the C++ library's types, shared by the
// registration files (conversions.cpp): numpy arrays to and from xtensor arrays, and the cast
// keywords to a numeq::Cast. The array intake's in-place widening is intake.hpp.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "numeq/formats/rounding.hpp"

namespace numeq_bindings {

namespace py = pybind11;

// float64 arrays as the C++ layers take them: C order, converted by pybind11 when needed.
using Values = py::array_t<double, py::array::c_style | py::array::forcecast>;

// A copy of a C-ordered float64 array as an xarray.
inline xt::xarray<double> to_xarray(const Values& a) {
  std::vector<std::size_t> shape(a.shape(), a.shape() + a.ndim());
  return xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape);
}

inline std::optional<xt::xarray<double>> to_optional(const std::optional<Values>& a) {
  if (!a) return std::nullopt;
  return to_xarray(*a);
}

// A numpy float64 array holding x: a copy of an lvalue; an rvalue is moved into a capsule that
// the array owns, so a result travels to Python without a copy.
inline py::array to_numpy(const xt::xarray<double>& x) {
  std::vector<py::ssize_t> shape(x.shape().begin(), x.shape().end());
  py::array_t<double> out(shape);
  std::copy(x.begin(), x.end(), out.mutable_data());
  return out;
}
inline py::array to_numpy(xt::xarray<double>&& x) {
  auto* owner = new xt::xarray<double>(std::move(x));
  py::capsule release(owner, [](void* p) { delete static_cast<xt::xarray<double>*>(p); });
  std::vector<py::ssize_t> shape(owner->shape().begin(), owner->shape().end());
  return py::array_t<double>(shape, owner->data(), release);
}

// A Cast from the Python keywords (names checked, numeq::error listing the valid ones).
numeq::Cast make_cast(const std::string& fmt, const std::string& rounding, const std::string& overflow,
                      const std::string& subnormals, std::uint64_t seed, int random_bits);

}  // namespace numeq_bindings
