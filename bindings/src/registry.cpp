// numeq._core's op registry (cases/registry.hpp): its rows as Python dicts, and the one binding
// that builds any registered op from its arguments by name (numeq/ops.py's every op comes here).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bind.hpp"
#include "conversions.hpp"
#include "numeq/cases/registry.hpp"
#include "numeq/formats/error.hpp"

namespace numeq_bindings {

namespace {

namespace cases = numeq::cases;
using namespace py::literals;

py::object param_object(const cases::ParamValue& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) return py::none();
        else return py::cast(x);
      },
      v);
}

// A Python argument as a ParamValue: None, bool, int, float, str, or a list / tuple of ints; the
// registry's build_op then checks it against the parameter's type.
cases::ParamValue param_value(const std::string& name, const py::handle& v) {
  if (v.is_none()) return std::monostate{};
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) {
    try {
      return v.cast<std::int64_t>();
    } catch (const py::cast_error&) {
      throw numeq::error(name + ": " + py::str(v).cast<std::string>() + " does not fit a 64-bit integer");
    }
  }
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::vector<std::int64_t> out;
    for (const py::handle& e : v) {
      if (!py::isinstance<py::int_>(e) || py::isinstance<py::bool_>(e))
        throw numeq::error(name + ": expected a list of integers, got an element " + py::repr(e).cast<std::string>());
      out.push_back(e.cast<std::int64_t>());
    }
    return out;
  }
  throw numeq::error(name + ": expected None, a bool, an integer, a real, a name or a list of integers, got " +
                     std::string(py::str(v.get_type().attr("__name__"))));
}

py::dict spec_dict(const cases::OpSpec& s) {
  py::list inputs, params;
  for (const cases::InputSpec& i : s.inputs)
    inputs.append(py::dict("name"_a = i.name, "shape"_a = i.shape, "required"_a = i.required,
                           "role"_a = std::string(to_string(i.role)), "catalogue_shape"_a = i.catalogue_shape,
                           "layout"_a = i.layout, "doc"_a = i.doc));
  for (const cases::ParamSpec& p : s.params)
    params.append(py::dict("name"_a = p.name, "type"_a = std::string(to_string(p.type)),
                           "default"_a = param_object(p.default_value), "choices"_a = p.choices, "doc"_a = p.doc));
  py::object catalogue = py::none();
  if (!s.catalogue.formats.empty())
    catalogue = py::dict("formats"_a = s.catalogue.formats, "out"_a = s.catalogue.out, "shape"_a = s.catalogue.shape,
                         "table_shape"_a = s.catalogue.table_shape, "k_meaning"_a = s.catalogue.k_meaning,
                         "reduces"_a = s.catalogue.reduces);
  return py::dict("name"_a = s.name, "doc"_a = s.doc, "family"_a = s.family, "inputs"_a = inputs, "params"_a = params,
                  "format_keywords"_a = s.format_keywords, "default_out"_a = s.default_out, "catalogue"_a = catalogue,
                  "bugs"_a = s.bugs);
}

}  // namespace

void bind_registry(py::module_& m) {
  m.def("op_registry", [] {
    py::list out;
    for (const cases::OpSpec& s : cases::op_registry()) out.append(spec_dict(s));
    return out;
  });
  // The parameters the catalogue builds `name` with at these dimensions and K.
  m.def(
      "op_catalogue_params",
      [](const std::string& name, const std::vector<std::size_t>& dims, std::size_t k) {
        const cases::OpSpec& s = cases::op_spec(name);
        py::dict out;
        if (s.catalogue.params)
          for (const auto& [key, value] : s.catalogue.params(dims, k)) out[py::str(key)] = param_object(value);
        return out;
      },
      py::arg("name"), py::arg("dims"), py::arg("k"));
  m.def(
      "op_build",
      [](const std::string& name, const py::dict& inputs, const py::dict& layouts, const py::dict& params,
         const std::string& in_fmt, const std::optional<std::string>& out, const std::string& rounding) {
        cases::OpArguments a;
        for (const auto& [key, value] : inputs) {
          const std::string n = key.cast<std::string>();
          if (value.is_none()) continue;
          a.inputs.emplace(n, to_xarray(value.cast<Values>()));
        }
        for (const auto& [key, value] : layouts) {
          const auto [strides, buffered] = value.cast<std::pair<std::vector<std::ptrdiff_t>, bool>>();
          a.layouts.emplace(key.cast<std::string>(), cases::Layout{strides, buffered});
        }
        for (const auto& [key, value] : params) {
          const std::string n = key.cast<std::string>();
          a.params.emplace(n, param_value(n, value));
        }
        a.in_fmt = in_fmt;
        // An op without format keywords (int8_matmul) has no output cast: out is None.
        if (out) a.out = make_cast(*out, rounding, "ieee", "keep", 0, numeq::default_random_bits);
        return cases::build_op(name, std::move(a));
      },
      py::arg("name"), py::arg("inputs"), py::arg("layouts"), py::arg("params"), py::arg("in_fmt"), py::arg("out"),
      py::arg("rounding"));
}

}  // namespace numeq_bindings
