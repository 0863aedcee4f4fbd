#pragma once
// The parts of numeq._core, one registration function per layer (module.cpp calls them all).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "numeq/formats/rounding.hpp"

namespace numeq_bindings {

// float64 arrays as the C++ layers take them: C order, converted by pybind11 when needed.
using Values = pybind11::array_t<double, pybind11::array::c_style | pybind11::array::forcecast>;

// A copy of a C-ordered float64 array as an xarray.
inline xt::xarray<double> to_xarray(const Values& a) {
  std::vector<std::size_t> shape(a.shape(), a.shape() + a.ndim());
  return xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape);
}

inline std::optional<xt::xarray<double>> to_optional(const std::optional<Values>& a) {
  if (!a) return std::nullopt;
  return to_xarray(*a);
}

// A new numpy float64 array holding x.
inline pybind11::array to_numpy(const xt::xarray<double>& x) {
  std::vector<pybind11::ssize_t> shape(x.shape().begin(), x.shape().end());
  pybind11::array_t<double> out(shape);
  std::copy(x.begin(), x.end(), out.mutable_data());
  return out;
}

// A Cast from the Python keywords (names checked, numeq::error listing the valid ones).
numeq::Cast make_cast(const std::string& fmt, const std::string& rounding, const std::string& overflow,
                      const std::string& subnormals, std::uint64_t seed, int random_bits);

// numeq.reference: exact sums, dot products and matmuls (reference_exact.cpp).
void bind_reference_exact(pybind11::module_& m);
// numeq.reference: certified functions (reference_functions.cpp).
void bind_reference_functions(pybind11::module_& m);
// numeq.reference: softmax, log_softmax, layernorm, rmsnorm, attention (reference_composite.cpp).
void bind_reference_composite(pybind11::module_& m);
// numeq platforms, plans and the plan evaluator (core.cpp).
void bind_core(pybind11::module_& m);
// numeq.reveal_order: order discovery of a Python callable (reveal.cpp).
void bind_reveal(pybind11::module_& m);

}  // namespace numeq_bindings
