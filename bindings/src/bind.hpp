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
#include <utility>
#include <vector>

#include "numeq/formats/rounding.hpp"
#include "numeq/formats/widen.hpp"

namespace numeq_bindings {

// float64 arrays as the C++ layers take them: C order, converted by pybind11 when needed.
using Values = pybind11::array_t<double, pybind11::array::c_style | pybind11::array::forcecast>;

// A copy of a C-ordered float64 array as an xarray.
inline xt::xarray<double> to_xarray(const Values& a) {
  std::vector<std::size_t> shape(a.shape(), a.shape() + a.ndim());
  return xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape);
}

// The element type numeq::widen reads a numpy array's memory as: float32, float64, the dtypes
// registered with register_dtype (float16 and the ml_dtypes formats: bit patterns) and integers of
// 1 to 8 bytes, each C-contiguous, aligned and in native byte order; nullopt for anything else
// (intake.cpp).
std::optional<numeq::ElementType> element_type_of(const pybind11::array& a);

// An xarray of the values of a numpy array: what element_type_of reads, widened to float64 in one
// multi-threaded pass (numeq::widen), anything else through Values (pybind11's conversion to
// C-ordered float64). Saves the float64 copy numpy would make first on the matmul, sum and compare
// paths. Errors (a 64-bit integer float64 does not hold, a byte with bits outside its 6- or 4-bit
// format's pattern) name `parameter` (intake.cpp).
xt::xarray<double> to_xarray_widened(const pybind11::array& a, const char* parameter);

inline std::optional<xt::xarray<double>> to_optional(const std::optional<Values>& a) {
  if (!a) return std::nullopt;
  return to_xarray(*a);
}

// A numpy float64 array holding x: a copy of an lvalue; an rvalue is moved into a capsule that
// the array owns, so a result travels to Python without a copy.
inline pybind11::array to_numpy(const xt::xarray<double>& x) {
  std::vector<pybind11::ssize_t> shape(x.shape().begin(), x.shape().end());
  pybind11::array_t<double> out(shape);
  std::copy(x.begin(), x.end(), out.mutable_data());
  return out;
}
inline pybind11::array to_numpy(xt::xarray<double>&& x) {
  auto* owner = new xt::xarray<double>(std::move(x));
  pybind11::capsule release(owner, [](void* p) { delete static_cast<xt::xarray<double>*>(p); });
  std::vector<pybind11::ssize_t> shape(owner->shape().begin(), owner->shape().end());
  return pybind11::array_t<double>(shape, owner->data(), release);
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
// numeq._core.register_dtype and first_not_in_format: the array intake (intake.cpp).
void bind_intake(pybind11::module_& m);
// numeq.ops and numeq.compare: the operation catalogue, bounds and verdicts (cases.cpp).
void bind_cases(pybind11::module_& m);

}  // namespace numeq_bindings
