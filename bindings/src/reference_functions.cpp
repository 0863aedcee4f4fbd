// numeq._core.reference_function: certified elementwise functions (references/functions.hpp).
// Dtype handling (ml_dtypes inputs, in_fmt checks) lives in numeq/_reference_functions.py; this
// layer takes float64 values, C order.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bind.hpp"
#include "conversions.hpp"
#include "numeq/references/functions.hpp"

namespace numeq_bindings {

void bind_reference_functions(py::module_& m) {
  m.def(
      "reference_function",
      [](const std::string& name, const py::array_t<double, py::array::c_style | py::array::forcecast>& x,
         const std::string& fmt, const std::string& rounding, const std::string& overflow,
         const std::string& subnormals, std::uint64_t seed, int random_bits) {
        const numeq::reference::Function f = numeq::reference::function_by_name(name, "function");
        const numeq::Cast cast = make_cast(fmt, rounding, overflow, subnormals, seed, random_bits);
        std::vector<std::size_t> shape;
        for (py::ssize_t d = 0; d < x.ndim(); ++d) shape.push_back(static_cast<std::size_t>(x.shape(d)));
        py::array_t<double> out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
        {
          py::gil_scoped_release release;
          const xt::xarray<double> in = xt::adapt(x.data(), static_cast<std::size_t>(x.size()),
                                                  xt::no_ownership(), shape);
          const xt::xarray<double> values = numeq::reference::evaluate(f, in, cast);
          std::copy(values.data(), values.data() + values.size(), out.mutable_data());
        }
        return out;
      },
      py::arg("name"), py::arg("x"), py::arg("fmt"), py::arg("rounding"), py::arg("overflow"),
      py::arg("subnormals"), py::arg("seed"), py::arg("random_bits"),
      "f(x) correctly rounded into fmt (float64 values, NaN where the format gives NaN)");
}

}  // namespace numeq_bindings
