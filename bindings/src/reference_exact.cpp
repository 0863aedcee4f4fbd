// numeq.reference exact reductions: sum, dot, matmul (rounded once, or exact as double-doubles).
// The Python layer hands over C-contiguous float64 values already checked against in_fmt.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bind.hpp"
#include "numeq/references/exact.hpp"

namespace py = pybind11;
using numeq_bindings::to_numpy;
using numeq_bindings::to_optional;
using numeq_bindings::to_xarray;
using numeq_bindings::Values;

namespace {


// The results move into the numpy arrays (no copy).
py::object finish(numeq::reference::ExactValues&& r, bool exact) {
  if (exact) return py::make_tuple(to_numpy(std::move(r.hi)), to_numpy(std::move(r.lo)));
  return to_numpy(std::move(r.hi));
}

}  // namespace

void numeq_bindings::bind_reference_exact(py::module_& m) {
  namespace ref = numeq::reference;
  m.def(
      "reference_sum",
      [](const Values& x, std::ptrdiff_t axis, const std::string& fmt, const std::string& rounding,
         const std::string& overflow, const std::string& subnormals, std::uint64_t seed, int random_bits,
         bool exact) -> py::object {
        const xt::xarray<double> xs = to_xarray(x);
        ref::ExactValues r;
        {
          py::gil_scoped_release release;
          if (exact) r = ref::sum_exact(xs, axis);
          else r.hi = ref::sum(xs, axis, make_cast(fmt, rounding, overflow, subnormals, seed, random_bits));
        }
        return finish(std::move(r), exact);
      },
      py::arg("x"), py::arg("axis"), py::arg("fmt"), py::arg("rounding"), py::arg("overflow"),
      py::arg("subnormals"), py::arg("seed"), py::arg("random_bits"), py::arg("exact"));
  m.def(
      "reference_dot",
      [](const Values& a, const Values& b, const std::string& fmt, const std::string& rounding,
         const std::string& overflow, const std::string& subnormals, std::uint64_t seed, int random_bits,
         bool exact) -> py::object {
        const xt::xarray<double> as = to_xarray(a), bs = to_xarray(b);
        ref::ExactValues r;
        {
          py::gil_scoped_release release;
          if (exact) r = ref::dot_exact(as, bs);
          else r.hi = ref::dot(as, bs, make_cast(fmt, rounding, overflow, subnormals, seed, random_bits));
        }
        return finish(std::move(r), exact);
      },
      py::arg("a"), py::arg("b"), py::arg("fmt"), py::arg("rounding"), py::arg("overflow"),
      py::arg("subnormals"), py::arg("seed"), py::arg("random_bits"), py::arg("exact"));
  m.def(
      "reference_matmul",
      [](const Values& a, const Values& b, const std::optional<Values>& c, const std::string& fmt,
         const std::string& rounding, const std::string& overflow, const std::string& subnormals,
         std::uint64_t seed, int random_bits, bool exact) -> py::object {
        // Read in place: the arrays stay alive (and the GIL-free computation only reads them).
        auto ref_of = [](const Values& v) {
          return ref::ArrayRef(v.data(), std::vector<std::size_t>(v.shape(), v.shape() + v.ndim()));
        };
        const ref::ArrayRef as = ref_of(a), bs = ref_of(b);
        std::optional<ref::ArrayRef> cs;
        if (c) cs = ref_of(*c);
        ref::ExactValues r;
        {
          py::gil_scoped_release release;
          const ref::ArrayRef* cp = cs ? &*cs : nullptr;
          if (exact) r = ref::matmul_exact(as, bs, cp);
          else r.hi = ref::matmul(as, bs, make_cast(fmt, rounding, overflow, subnormals, seed, random_bits), cp);
        }
        return finish(std::move(r), exact);
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("fmt"), py::arg("rounding"), py::arg("overflow"),
      py::arg("subnormals"), py::arg("seed"), py::arg("random_bits"), py::arg("exact"));
}
