#pragma once
// The array intake of numeq._core (intake.cpp): numpy arrays read in place as float64 values.

#include <pybind11/numpy.h>

#include <xtensor/xarray.hpp>

#include <optional>
#include <string>

#include "numeq/formats/widen.hpp"

namespace numeq_bindings {

// The element type numeq::widen reads a numpy array's memory as: float32, float64, the dtypes
// registered with register_dtype (float16 and the ml_dtypes formats: bit patterns) and integers of
// 1 to 8 bytes, each C-contiguous, aligned and in native byte order; nullopt for anything else.
std::optional<numeq::ElementType> element_type_of(const pybind11::array& a);

// An xarray of the values of a numpy array: what element_type_of reads, widened to float64 in one
// multi-threaded pass (numeq::widen), anything else through Values (pybind11's conversion to
// C-ordered float64). Saves the float64 copy numpy would make first on the matmul, sum and compare
// paths. Errors (a 64-bit integer float64 does not hold, a byte with bits outside its 6- or 4-bit
// format's pattern) name `parameter`.
xt::xarray<double> to_xarray_widened(const pybind11::array& a, const char* parameter);

// Has element_type_of read arrays of `dtype` as bit patterns of format `fmt` (8 or 16 bits) from
// now on.
void register_dtype(const pybind11::dtype& dtype, const std::string& fmt);

}  // namespace numeq_bindings
