// numeq._core order discovery (core/reveal.hpp): the black box is a Python callable, called with
// float64 numpy arrays (numeq/reveal.py converts them to the caller's dtype and the result to a
// float). Plans travel as JSON text, as in core.cpp.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <span>
#include <string>

#include "bind.hpp"
#include "numeq/core/reveal.hpp"
#include "numeq/formats/error.hpp"

namespace numeq_bindings {

namespace {

py::array_t<double> copy_of(std::span<const double> x) {
  py::array_t<double> out(static_cast<py::ssize_t>(x.size()));
  std::copy(x.begin(), x.end(), out.mutable_data());
  return out;
}

// The dict numeq/reveal.py reads, one expression (pybind11's keyword constructor).
py::dict result_dict(const numeq::core::RevealResult& r) {
  using namespace py::literals;
  const py::object compact = r.compact ? py::object(py::str(numeq::core::to_json(*r.compact))) : py::object(py::none());
  return py::dict("plan"_a = numeq::core::to_json(r.plan), "calls"_a = r.calls, "tree"_a = r.tree,
                  "shape"_a = r.shape, "compact"_a = compact, "big"_a = r.big, "unit"_a = r.unit,
                  "multi_term_nodes"_a = r.multi_term_nodes, "absorbing_nodes"_a = r.absorbing_nodes,
                  "reproduces"_a = r.reproduces, "notes"_a = r.notes);
}

}  // namespace

void bind_reveal(py::module_& m) {
  namespace core = numeq::core;
  m.def(
      "core_reveal",
      [](const py::function& call, std::size_t n, bool dot, const std::string& fmt, const std::string& in_fmt,
         const std::string& out_fmt, const std::string& product) {
        core::RevealOptions options;
        options.fmt = fmt;
        options.in_fmt = in_fmt;
        options.out_fmt = out_fmt;
        options.product = numeq::core::product_mode_by_name(product);
        // The callable returns a Python float (reveal.py's wrapper sees to it).
        if (dot) {
          const core::DotFunction f = [&call](std::span<const double> a, std::span<const double> b) {
            return call(copy_of(a), copy_of(b)).cast<double>();
          };
          return result_dict(core::reveal_dot_order(f, n, options));
        }
        const core::SumFunction f = [&call](std::span<const double> x) { return call(copy_of(x)).cast<double>(); };
        return result_dict(core::reveal_order(f, n, options));
      },
      py::arg("call"), py::arg("n"), py::arg("dot"), py::arg("fmt"), py::arg("in_fmt"), py::arg("out_fmt"), py::arg("product"),
      "FPRev order discovery; returns a dict (numeq.reveal_order gives it its Python shape)");
}

}  // namespace numeq_bindings
