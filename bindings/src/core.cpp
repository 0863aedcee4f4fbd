// numeq._core machine models: platforms, plans (as JSON text) and the plan evaluator
// (core/plan.hpp, platform.hpp, evaluate.hpp). numeq/machines.py gives them their Python shape.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "bind.hpp"
#include "conversions.hpp"
#include "intake.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/core/numpy_reduction.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/core/tensor_core.hpp"
#include "numeq/formats/error.hpp"

namespace numeq_bindings {

namespace {

// a . b or a @ b (+ c) by `plan`, the inputs widened to float64 in the copy, the GIL released
// while the plan runs.
py::array dot_or_matmul(const py::array& a, const py::array& b, const std::optional<Values>& c,
                        bool matmul, const numeq::core::Plan& plan) {
  namespace core = numeq::core;
  const xt::xarray<double> as = to_xarray_widened(a, "a"),
                              bs = to_xarray_widened(b, "b");
  std::optional<xt::xarray<double>> cs;
  if (c) cs = to_xarray(*c);
  xt::xarray<double> r;
  {
    py::gil_scoped_release release;
    const xt::xarray<double>* cp = cs ? &*cs : nullptr;
    r = matmul ? core::matmul(as, bs, cp, plan) : core::dot(as, bs, cp, plan);
  }
  return to_numpy(std::move(r));
}

}  // namespace

void bind_core(py::module_& m) {
  namespace core = numeq::core;
  m.def("core_platforms", [] { return core::platform_names(); }, "names of the built-in and registered platforms");
  // A platform by name, or a platform or plan as JSON text, to text: one string argument each.
  struct TextFunction {
    const char* name;
    const char* parameter;
    std::string (*f)(const std::string&);
    const char* doc;
  };
  const TextFunction text_functions[] = {
      {"core_platform_json", "name",
       [](const std::string& name) { return core::to_json(core::platform_by_name(name)); },
       "a platform as JSON (the format register accepts)"},
      {"core_platform_evidence", "name",
       [](const std::string& name) { return core::evidence_report(core::platform_by_name(name)); },
       "a platform's evidence, one line per entry, function model and assumption"},
      {"core_register_platform", "text",
       [](const std::string& text) {
         const core::Platform p = core::platform_from_json(text);
         core::register_platform(p);
         return p.name;
       },
       "loads a platform from JSON and registers it; returns its name"},
      {"core_plan_check", "text", [](const std::string& text) { return core::to_json(core::plan_from_json(text)); },
       "validates a plan's JSON and returns it in canonical form"},
      {"core_plan_text", "text", [](const std::string& text) { return core::to_string(core::plan_from_json(text)); },
       "a plan's JSON as readable text (Plan's str)"},
  };
  for (const TextFunction& t : text_functions) m.def(t.name, t.f, py::arg(t.parameter), t.doc);
  m.def(
      "core_plan",
      [](const std::string& platform, const std::string& op, const std::string& in_fmt, const std::string& out,
         std::size_t split_k, const std::string& split_mode) {
        core::Plan plan = core::plan_for(*core::shared_platform(platform), core::operation_by_name(op), in_fmt, out);
        if (split_k > 1) plan = core::with_split_k(plan, split_k, core::split_mode_by_name(split_mode));
        return core::to_json(plan);
      },
      py::arg("platform"), py::arg("op"), py::arg("in_fmt"), py::arg("out"), py::arg("split_k"), py::arg("split_mode"));
  // numeq.assumption_candidates: core::assumption_candidates as (label, platform) pairs.
  m.def(
      "core_assumption_candidates",
      [](const std::string& platform, const std::string& op, const std::string& in_fmt, const std::string& out,
         const std::optional<std::vector<std::string>>& names) {
        std::vector<std::pair<std::string, std::string>> out_pairs;
        for (const core::AssumptionCandidate& c :
             core::assumption_candidates(platform, core::operation_by_name(op), in_fmt, out, names))
          out_pairs.emplace_back(c.label, c.platform);
        return out_pairs;
      },
      py::arg("platform"), py::arg("op"), py::arg("in_fmt"), py::arg("out"), py::arg("names"));
  m.def("core_tensor_core_structures", [] {
    std::vector<std::string> names;
    for (const auto& [value, name] : numeq::enum_names<core::TensorCoreStructure>) names.emplace_back(name);
    return names;
  });
  // numeq.tensor_core_candidates: core::tensor_core_candidates' labelled plans, as JSON.
  m.def(
      "core_tensor_core_candidates",
      [](const std::string& in_fmt, const std::string& out, const std::vector<int>& n,
         const std::vector<int>& fraction_bits, const std::vector<std::pair<std::string, std::string>>& step_outputs,
         const std::vector<std::string>& structures) {
        std::vector<numeq::Cast> casts;
        for (const auto& [fmt, rounding] : step_outputs)
          casts.push_back(numeq::Cast{numeq::plan_format_by_name(fmt, "step_output"),
                                      numeq::rounding_by_name(rounding, "step_output")});
        std::vector<core::TensorCoreStructure> st;
        for (const std::string& name : structures) st.push_back(core::tensor_core_structure_by_name(name));
        std::vector<std::pair<std::string, std::string>> out_plans;
        for (const core::TensorCoreCandidate& c :
             core::tensor_core_candidates(numeq::format_by_name(in_fmt, "in_fmt"), numeq::format_by_name(out, "out"), n,
                                          fraction_bits, casts, st))
          out_plans.emplace_back(c.label, core::to_json(c.plan));
        return out_plans;
      },
      py::arg("in_fmt"), py::arg("out"), py::arg("n"), py::arg("fraction_bits"), py::arg("step_outputs"),
      py::arg("structures"));
  m.def(
      "core_sum",
      [](const py::array& x, std::ptrdiff_t axis, const std::string& plan_text) {
        const core::Plan plan = core::plan_from_json(plan_text);
        const xt::xarray<double> xs = to_xarray_widened(x, "x");
        xt::xarray<double> r;
        {
          py::gil_scoped_release release;
          r = core::sum(xs, axis, plan);
        }
        return to_numpy(std::move(r));
      },
      py::arg("x"), py::arg("axis"), py::arg("plan"));
  m.def(
      "core_sum_axes",
      [](const py::array& x, const std::vector<std::ptrdiff_t>& axes, const std::string& plan_text) {
        const core::Plan plan = core::plan_from_json(plan_text);
        const xt::xarray<double> xs = to_xarray_widened(x, "x");
        const std::vector<std::size_t> reduced = core::normalise_axes(axes, xs.dimension(), "axis");
        xt::xarray<double> r;
        {
          py::gil_scoped_release release;
          r = core::sum(core::gather_reduced(xs, reduced), -1, plan);
        }
        return to_numpy(std::move(r));
      },
      py::arg("x"), py::arg("axes"), py::arg("plan"),
      "x summed over `axes` by the plan, each element's terms in the order of `axes` (the first outermost)");
  m.def(
      "core_numpy_reduction",
      [](const std::vector<std::size_t>& shape, const std::vector<std::ptrdiff_t>& strides,
         const std::vector<std::ptrdiff_t>& axes, const std::string& in_fmt, const std::string& compute, bool buffered,
         std::size_t bufsize) {
        const core::ReductionOrder r =
            core::numpy_reduction(shape, strides, axes, numeq::format_by_name(in_fmt, "in_fmt"),
                                  numeq::format_by_name(compute, "compute"), buffered, bufsize);
        return py::make_tuple(r.axes, core::to_json(r.plan));
      },
      py::arg("shape"), py::arg("strides"), py::arg("axes"), py::arg("in_fmt"), py::arg("compute"),
      py::arg("buffered"), py::arg("bufsize"),
      "numpy's add.reduce order for an array layout: (reduced axes outermost first, plan JSON)");
  m.def(
      "core_dot_or_matmul",
      [](const py::array& a, const py::array& b, const std::optional<Values>& c, bool matmul,
         const std::string& plan_text) {
        const core::Plan plan = core::plan_from_json(plan_text);
        return dot_or_matmul(a, b, c, matmul, plan);
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("matmul"), py::arg("plan"));
  m.def(
      "core_dot_or_matmul_on",
      [](const py::array& a, const py::array& b, const std::optional<Values>& c, bool matmul,
         const std::string& platform, const std::string& in_fmt, const std::string& out) {
        // A platform's own plan, looked up in the resolved platform (no JSON round trip).
        const core::Plan plan = core::plan_for(*core::shared_platform(platform),
                                               matmul ? core::Operation::matmul : core::Operation::dot, in_fmt, out);
        return dot_or_matmul(a, b, c, matmul, plan);
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("matmul"), py::arg("platform"), py::arg("in_fmt"),
      py::arg("out"));
  m.def(
      "core_matmul_row_blocks",
      [](const std::vector<py::array>& stationary, const std::vector<py::array>& moving, const std::string& platform,
         const std::string& in_fmt, const std::string& out) -> py::object {
        // core::matmul_row_blocks: None where it does not apply (the caller then concatenates
        // and widens). Each block: a 2-D C-ordered array; stationary's have M columns, moving's N.
        const auto blocks = [](const std::vector<py::array>& arrays, const char* name,
                               std::vector<core::RowBlock>& out) -> std::optional<std::size_t> {
          std::optional<std::size_t> columns;
          for (const py::array& a : arrays) {
            const std::optional<numeq::ElementType> type = element_type_of(a);
            if (!type || a.ndim() != 2) return std::nullopt;
            const auto cols = static_cast<std::size_t>(a.shape(1));
            if (columns && *columns != cols)
              throw numeq::error(std::string(name) + ": blocks of " + std::to_string(*columns) + " and " +
                                 std::to_string(cols) + " columns");
            columns = cols;
            out.push_back({a.data(), *type, static_cast<std::size_t>(a.shape(0))});
          }
          return columns;
        };
        std::vector<core::RowBlock> s, m;
        const std::optional<std::size_t> M = blocks(stationary, "stationary", s), N = blocks(moving, "moving", m);
        if (!M || !N) return py::none();
        const core::Plan plan = core::plan_for(*core::shared_platform(platform), core::Operation::matmul, in_fmt, out);
        std::optional<xt::xarray<double>> r;
        {
          py::gil_scoped_release release;
          r = core::matmul_row_blocks(s, m, *M, *N, plan);
        }
        if (!r) return py::none();
        return to_numpy(std::move(*r));
      },
      py::arg("stationary"), py::arg("moving"), py::arg("platform"), py::arg("in_fmt"), py::arg("out"),
      "stationary[K, M]^T @ moving[K, N], each a list of row blocks along K read in place, by the platform's plan "
      "(core::matmul_row_blocks), or None where that path does not apply");
}

}  // namespace numeq_bindings
