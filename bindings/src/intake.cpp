// The array intake of numeq._core: numpy arrays of float32, float64, float16, the ml_dtypes
// formats and integers read as float64 values in one pass (numeq::widen); formats.cpp also checks
// them against a format in place (first_not_in_format) through element_type_of. The ml_dtypes types are recognised by their dtype's type
// number, which the Python package registers once at import (register_dtype): ml_dtypes assigns
// type numbers when it registers its types with numpy, so they are known only in the process.

#include "intake.hpp"

#include <pybind11/pybind11.h>

#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "conversions.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/widen.hpp"

namespace numeq_bindings {

namespace {

// Type number -> the format whose bit patterns arrays of that dtype hold.
std::mutex registry_mutex;
std::map<int, const numeq::Format*> registry;

const numeq::Format* registered(int type_number) {
  const std::lock_guard<std::mutex> lock(registry_mutex);
  const auto it = registry.find(type_number);
  return it == registry.end() ? nullptr : it->second;
}

}  // namespace

std::optional<numeq::ElementType> element_type_of(const py::array& a) {
  const int flags = a.flags();
  if ((flags & py::array::c_style) == 0 || (flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_) == 0)
    return std::nullopt;
  const py::dtype dt = a.dtype();
  if (dt.byteorder() != '=' && dt.byteorder() != '|') return std::nullopt;  // byte-swapped
  const int bytes = static_cast<int>(dt.itemsize());
  if (const numeq::Format* f = registered(dt.num())) return numeq::ElementType::patterns(*f);
  switch (dt.kind()) {
    case 'f':
      if (bytes == 4) return numeq::ElementType::patterns(numeq::formats::fp32);
      if (bytes == 8) return numeq::ElementType::patterns(numeq::formats::fp64);
      return std::nullopt;  // float16 is registered; long double is not read in place
    case 'i':
    case 'u':
      if (bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8) return numeq::ElementType::integers(bytes, dt.kind() == 'i');
      return std::nullopt;
    default: return std::nullopt;
  }
}

xt::xarray<double> to_xarray_widened(const py::array& a, const char* parameter) {
  const std::optional<numeq::ElementType> type = element_type_of(a);
  if (!type) return to_xarray(a.cast<Values>());
  std::vector<std::size_t> shape(a.shape(), a.shape() + a.ndim());
  xt::xarray<double> out = xt::xarray<double>::from_shape(shape);
  const std::size_t n = static_cast<std::size_t>(a.size());
  numeq::WidenReport report;
  {
    py::gil_scoped_release release;
    report = numeq::widen(a.data(), n, *type, out.data());
  }
  if (report.not_exact < n)  // the Python intake's words (numeq._arrays._as_source)
    throw numeq::error(std::string(parameter) + ": 64-bit integers beyond 2^53 are not exact as floats");
  if (report.not_pattern < n) {  // numeq::decode_into's words, naming the parameter
    std::ostringstream message;
    message << parameter << ": element " << report.not_pattern << " (C order) is not a bit pattern of "
            << type->format->name << " (only bits 0x" << std::hex << numeq::pattern_mask(*type->format)
            << " may be set)";
    throw numeq::error(message.str());
  }
  return out;
}

void register_dtype(const py::dtype& dtype, const std::string& fmt) {
  const numeq::Format& f = numeq::format_by_name(fmt, "fmt");
  if (f.is_integer() || f.storage_bits > 16)
    throw numeq::error("fmt: '" + fmt + "' is not a floating format of 8 or 16 bits; float32, float64 and integer "
                       "arrays need no registration");
  if (dtype.itemsize() * 8 != f.storage_bits)
    throw numeq::error("dtype: its elements have " + std::to_string(dtype.itemsize() * 8) + " bits, but format '" +
                       fmt + "' is stored in " + std::to_string(f.storage_bits));
  const std::lock_guard<std::mutex> lock(registry_mutex);
  registry[dtype.num()] = &f;
}

}  // namespace numeq_bindings
