// numeq._core's op registry (cases/registry.hpp): its rows as Python dicts, and the one binding
// that builds any registered op from its arguments by name (numeq/ops.py's every op comes here).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bind.hpp"
#include "conversions.hpp"
#include "numeq/cases/family_tolerance.hpp"
#include "numeq/cases/registry.hpp"
#include "numeq/core/bound.hpp"
#include "numeq/core/platform.hpp"
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
  py::list generators;
  for (cases::Distribution d : s.catalogue.generators.empty() ? cases::all_distributions() : s.catalogue.generators)
    generators.append(std::string(to_string(d)));
  if (!s.catalogue.formats.empty())
    catalogue = py::dict("formats"_a = s.catalogue.formats, "out"_a = s.catalogue.out, "shape"_a = s.catalogue.shape,
                         "table_shape"_a = s.catalogue.table_shape, "k_meaning"_a = s.catalogue.k_meaning,
                         "reduces"_a = s.catalogue.reduces, "generators"_a = generators);
  return py::dict("name"_a = s.name, "doc"_a = s.doc, "family"_a = s.family, "inputs"_a = inputs, "params"_a = params,
                  "format_keywords"_a = s.format_keywords, "default_out"_a = s.default_out, "catalogue"_a = catalogue,
                  "bugs"_a = s.bugs);
}

// A family tolerance as the dict numeq/tolerances.py reads (its forms, tier, draws).
py::dict family_dict(const cases::FamilyTolerance& f) {
  return py::dict("ulps"_a = f.forms.ulps, "rtol"_a = f.forms.rtol, "atol"_a = f.forms.atol,
                  "max_rtol"_a = f.forms.max_rtol, "atol_rel"_a = f.forms.atol_rel, "max_abs"_a = f.forms.max_abs,
                  "rtol_only"_a = f.forms.rtol_only, "atol_only"_a = f.forms.atol_only,
                  "tier"_a = std::string(to_string(f.tier)), "failure_probability"_a = f.failure_probability,
                  "draws"_a = f.draws, "unbounded"_a = f.unbounded);
}

// cases::family_tolerance over `draws` ops, one call: platform (and against, unless "exact").
py::dict family(const std::function<cases::Op(std::uint64_t)>& draw, std::size_t draws, const std::string& platform,
                const std::string& against, const std::string& kind, double failure_probability,
                std::optional<double> lam, double margin) {
  const auto p = numeq::core::shared_platform(platform, "platform");
  std::shared_ptr<const numeq::core::Platform> a;
  if (against != "exact") a = numeq::core::shared_platform(against, "against");
  std::vector<std::uint64_t> seeds(draws);
  for (std::size_t i = 0; i < draws; ++i) seeds[i] = i;
  cases::FamilyTolerance f;
  {
    py::gil_scoped_release release;
    f = cases::family_tolerance(draw, seeds, *p, a.get(), numeq::core::bound_kind_by_name(kind, "kind"),
                                failure_probability, margin, lam);
  }
  return family_dict(f);
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
  // The catalogue's draw of an op: its inputs by name (numeq.catalogue.build).
  m.def(
      "op_catalogue_inputs",
      [](const std::string& name, const std::string& in_fmt, const std::vector<std::size_t>& dims, std::size_t k,
         const std::string& generator, std::uint64_t seed) {
        py::dict out;
        for (auto& [key, values] : cases::catalogue_inputs(name, in_fmt, dims, k,
                                                           cases::distribution_by_name(generator, "generator"), seed))
          out[py::str(key)] = to_numpy(std::move(values));
        return out;
      },
      py::arg("name"), py::arg("in_fmt"), py::arg("dims"), py::arg("k"), py::arg("generator"), py::arg("seed"));
  // numeq.tolerance: a catalogue problem's tolerance over every (generator, seed) draw, in one call.
  m.def(
      "cases_family_tolerance",
      [](const std::string& name, const std::string& in_fmt, const std::string& out,
         const std::vector<std::size_t>& dims, std::size_t k, const std::vector<std::string>& generators,
         const std::vector<std::uint64_t>& seeds, const std::string& platform, const std::string& against,
         const std::string& kind, double failure_probability, std::optional<double> lam, double margin) {
        std::vector<std::pair<cases::Distribution, std::uint64_t>> draws;
        for (const std::string& g : generators)
          for (std::uint64_t s : seeds) draws.emplace_back(cases::distribution_by_name(g, "inputs"), s);
        const auto draw = [&](std::uint64_t i) {
          return cases::catalogue_op(name, in_fmt, out, dims, k, draws[i].first, draws[i].second);
        };
        return family(draw, draws.size(), platform, against, kind, failure_probability, lam, margin);
      },
      py::arg("name"), py::arg("in_fmt"), py::arg("out"), py::arg("dims"), py::arg("k"), py::arg("generators"),
      py::arg("seeds"), py::arg("platform"), py::arg("against"), py::arg("kind"), py::arg("failure_probability"),
      py::arg("lam"), py::arg("margin"));
  // The same over one op on the caller's inputs (numeq.tolerance(data=op)).
  m.def(
      "cases_family_tolerance_of",
      [](const cases::Op& op, const std::string& platform, const std::string& against, const std::string& kind,
         double failure_probability, std::optional<double> lam, double margin) {
        return family([&](std::uint64_t) { return op; }, 1, platform, against, kind, failure_probability, lam,
                      margin);
      },
      py::arg("op"), py::arg("platform"), py::arg("against"), py::arg("kind"), py::arg("failure_probability"),
      py::arg("lam"), py::arg("margin"));
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
