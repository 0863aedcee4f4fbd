// numeq._core operation catalogue: Op objects (cases/op.hpp), their emulations with bounds,
// tolerances and verdicts, the seeded input generators (cases/generators.hpp) and the Vector
// engine's statistics for numeq.nki (cases/bn_stats.hpp).
// numeq/ops.py and numeq/verdicts.py give them their Python shape.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bind.hpp"
#include "conversions.hpp"
#include "intake.hpp"
#include "numeq/cases/bn_stats.hpp"
#include "numeq/cases/generators.hpp"
#include "numeq/cases/op.hpp"
#include "numeq/cases/family_tolerance.hpp"
#include "numeq/cases/port.hpp"
#include "numeq/cases/variants.hpp"
#include "numeq/cases/verdict.hpp"
#include "numeq/references/functions.hpp"
#include "numeq/core/bound.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"

namespace numeq_bindings {

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
// The dicts numeq/verdicts.py, numeq/_op.py and numeq/tolerances.py read are one expression each,
// pybind11's keyword constructor: py::dict("key"_a = value, ...), each field named once.
using namespace py::literals;

// x as a float32 array: each element a value of a format of at most 24 significand bits (or
// NaN, Inf), exact in binary32.
py::array_t<float> as_float32(const xt::xarray<double>& x) {
  std::vector<py::ssize_t> shape(x.shape().begin(), x.shape().end());
  py::array_t<float> out(shape);
  float* to = out.mutable_data();
  for (std::size_t i = 0; i < x.size(); ++i) to[i] = static_cast<float>(x.data()[i]);
  return out;
}

core::BoundOptions bound_options(const std::string& kind, double lambda, double failure_probability = 0) {
  core::BoundOptions o;
  o.kind = core::bound_kind_by_name(kind, "kind");
  if (!(lambda > 0) || !std::isfinite(lambda))
    throw numeq::error("lam: expected a positive finite lambda, got " + std::to_string(lambda));
  o.lambda = lambda;
  if (!(failure_probability >= 0 && failure_probability < 1))
    throw numeq::error("failure_probability: expected a number in [0, 1) (0: lam decides), got " +
                       std::to_string(failure_probability));
  o.failure_probability = failure_probability;
  return o;
}

cases::Int32Overflow int32_overflow_by_name(const std::string& name) {
  return numeq::by_name(numeq::enum_names<cases::Int32Overflow>, name, "overflow", "int32 overflow mode");
}

py::dict tolerance_dict(const cases::Tolerance& t) {
  return py::dict("max_abs"_a = t.max_abs, "max_ulps"_a = t.max_ulps, "rtol"_a = t.rtol, "atol"_a = t.atol,
                  "rtol_only"_a = t.rtol_only, "atol_only"_a = t.atol_only, "max_reference"_a = t.max_reference,
                  "unbounded"_a = t.unbounded);
}

py::tuple emulation_tuple(cases::Emulation&& e) {
  return py::make_tuple(to_numpy(std::move(e.values)), to_numpy(std::move(e.bound)), e.failure_probability);
}

// The worst elements of a verdict as a list of dicts: each element's index as a tuple, then the
// dict fields(element) returns.
template <class Element, class Fields>
py::list worst_list(const std::vector<Element>& worst, Fields&& fields) {
  py::list w;
  for (const Element& e : worst) w.append(py::dict("index"_a = py::tuple(py::cast(e.index)), **fields(e)));
  return w;
}

// The diagnoses of a verdict as dicts (kind, explains, detail, evidence).
py::list diagnoses_list(const std::vector<cases::Diagnosis>& diagnoses) {
  py::list out;
  for (const cases::Diagnosis& d : diagnoses)
    out.append(py::dict("kind"_a = d.kind, "explains"_a = d.explains, "detail"_a = d.detail, "evidence"_a = d.evidence));
  return out;
}

// A verdict as the dict numeq/verdicts.py reads.
py::dict verdict_dict(const cases::Verdict& v, const std::string& message) {
  const auto worst = [](const cases::WorstElement& e) {
    return py::dict("got"_a = e.got, "emulated"_a = e.emulated, "reference"_a = e.reference, "exact"_a = e.exact,
                    "bound"_a = e.bound, "error"_a = e.error, "ulps"_a = e.ulps, "violation"_a = e.violation);
  };
  return py::dict(
      "passed"_a = v.passed, "tier"_a = std::string(cases::to_string(v.tier)),
      "accept"_a = std::string(cases::to_string(v.accept)), "explained_by"_a = v.explained_by,
      "also_explained_by"_a = py::cast(v.also_explained_by), "platform"_a = v.platform, "signature"_a = v.signature, "elements"_a = v.elements, "bit_exact"_a = v.bit_exact,
      "within_bound"_a = v.within_bound, "deterministic_only"_a = v.deterministic_only,
      "violations"_a = v.violations, "unwalked"_a = v.unwalked, "special_mismatches"_a = v.special_mismatches,
      "nan_mismatches"_a = v.nan_mismatches, "inf_mismatches"_a = v.inf_mismatches,
      "not_in_format"_a = v.not_in_format, "failures"_a = v.failures,
      "worst_error_over_bound"_a = v.worst_error_over_bound, "max_ulps"_a = v.max_ulps,
      "failure_probability"_a = v.failure_probability, "nearest_variant"_a = v.nearest_variant,
      "nearest_variant_matches"_a = v.nearest_variant_matches, "variants_searched"_a = v.variants_searched,
      "concentration"_a = v.concentration, "bound_source"_a = v.bound_source, "diagnosis"_a = v.diagnosis,
      "message"_a = message, "tolerance"_a = tolerance_dict(v.tolerance),
      "tolerance_bound"_a = std::string(cases::to_string(v.tolerance_bound)), "worst"_a = worst_list(v.worst, worst),
      "diagnoses"_a = diagnoses_list(v.diagnoses), "integer_output"_a = v.integer_output);
}

// A port verdict as the dict numeq/verdicts.py reads: the two platforms' verdicts (with their
// messages) and the elements where the two outputs differ beyond their cross-platform bound.
py::dict port_verdict_dict(const cases::PortVerdict& v, const std::string& message, const std::string& gpu_message,
                           const std::string& trainium_message) {
  const auto worst = [](const cases::PortElement& e) {
    return py::dict("gpu"_a = e.gpu, "trainium"_a = e.trainium, "difference"_a = e.difference, "bound"_a = e.bound);
  };
  return py::dict("passed"_a = v.passed, "gpu"_a = verdict_dict(v.gpu, gpu_message),
                  "trainium"_a = verdict_dict(v.trainium, trainium_message), "elements"_a = v.elements,
                  "equal"_a = v.equal, "beyond"_a = v.beyond,
                  "max_difference_over_bound"_a = v.max_difference_over_bound, "diagnosis"_a = v.diagnosis,
                  "message"_a = message, "worst"_a = worst_list(v.worst, worst));
}

cases::CompareOptions compare_options(const std::string& accept, double failure_probability, bool search_variants,
                                      std::size_t worst) {
  cases::CompareOptions o;
  o.accept = cases::tier_by_name(accept, "accept");
  o.failure_probability = failure_probability;
  o.search_variants = search_variants;
  o.worst = worst;
  return o;
}

}  // namespace

void bind_cases(py::module_& m) {
  py::class_<cases::Op>(m, "CasesOp", "an operation of the catalogue on given inputs (numeq.ops builds them)")
      .def_readonly("name", &cases::Op::name)
      .def_readonly("signature", &cases::Op::signature)
      .def_property_readonly("out_format", [](const cases::Op& op) { return std::string(op.out.format.name); })
      .def("exact",
           [](const cases::Op& op) {
             numeq::reference::ExactValues r;
             {
               py::gil_scoped_release release;
               r = op.exact_values();
             }
             return py::make_tuple(to_numpy(std::move(r.hi)), to_numpy(std::move(r.lo)), op.exact_relative_error);
           })
      .def("result_shape",
           [](const cases::Op& op) {
             double relative_error = 0;
             const numeq::reference::ExactValues* r = nullptr;
             {
               py::gil_scoped_release release;
               r = &op.check_exact(relative_error);  // kept: the check that follows reads it again
             }
             return py::tuple(py::cast(std::vector<std::size_t>(r->hi.shape().begin(), r->hi.shape().end())));
           },
           "the shape of the op's result (its exact values', computed once and kept)")
      .def("check_exact",
           [](const cases::Op& op) {
             numeq::reference::ExactValues r;
             double relative_error = 0;
             {
               py::gil_scoped_release release;
               r = op.check_exact(relative_error);
             }
             py::object radius = py::none();
             if (!r.radius.empty()) {
               xt::xarray<double> radii = xt::zeros<double>(r.hi.shape());
               std::copy(r.radius.begin(), r.radius.end(), radii.begin());
               radius = to_numpy(std::move(radii));
             }
             return py::make_tuple(to_numpy(std::move(r.hi)), to_numpy(std::move(r.lo)), relative_error, radius);
           },
           "the exact values a check measures against (Op::check_exact): (hi, lo, relative error, radius or None: "
           "|exact - (hi + lo)| <= relative error |hi| + radius)")
      .def("reference",
           [](const cases::Op& op) {
             xt::xarray<double> r;
             {
               py::gil_scoped_release release;
               r = op.reference_values();
             }
             return to_numpy(std::move(r));
           })
      .def(
          "emulate",
          [](const cases::Op& op, const std::string& platform, const std::string& kind, double lambda,
             double failure_probability) {
            const auto p = core::shared_platform(platform, "platform");
            const core::BoundOptions o = bound_options(kind, lambda, failure_probability);
            cases::Emulation e;
            {
              py::gil_scoped_release release;
              e = *op.emulation(*p, o);
            }
            return emulation_tuple(std::move(e));
          },
          py::arg("platform"), py::arg("kind"), py::arg("lam"), py::arg("failure_probability") = 0.0);

  m.def(
      "cases_int8_matmul_requantized",
      [](const Values& a, const Values& b, const std::string& overflow, double multiplier, std::int64_t zero_point,
         const std::string& fmt, const std::string& rounding, const std::string& range) {
        const cases::Int32Overflow o = int32_overflow_by_name(overflow);
        cases::Requantization r;
        r.multiplier = multiplier;
        r.zero_point = zero_point;
        r.quant.format = numeq::format_by_name(fmt, "out");
        r.quant.rounding = numeq::rounding_by_name(rounding);
        r.quant.range = numeq::quant_range_by_name(range);
        return cases::integer_matmul_requantized(to_xarray(a), to_xarray(b), r, o);
      },
      py::arg("a"), py::arg("b"), py::arg("overflow"), py::arg("multiplier"), py::arg("zero_point"), py::arg("fmt"),
      py::arg("rounding"), py::arg("range"));
  m.def(
      "cases_cast",
      [](const Values& x, const std::string& in_fmt, const std::string& out, const std::string& rounding,
         const std::string& overflow, const std::string& subnormals, std::uint64_t seed) {
        const numeq::Cast cast = make_cast(out, rounding, overflow, subnormals, seed, numeq::default_random_bits);
        return cases::conversion(to_xarray(x), in_fmt, cast);
      },
      py::arg("x"), py::arg("in_fmt"), py::arg("out"), py::arg("rounding"), py::arg("overflow"), py::arg("subnormals"),
      py::arg("seed"));
  m.def(
      "cases_quantize",
      [](bool quantize, const Values& x, const std::string& in_fmt, const std::string& fmt, const Values& scale,
         const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& zero_point, int axis,
         std::size_t block, const std::string& rounding, const std::string& range, std::uint64_t seed,
         const std::string& out) {
        numeq::Quantization q;
        q.format = numeq::format_by_name(fmt, "fmt");
        q.rounding = numeq::rounding_by_name(rounding);
        q.range = numeq::quant_range_by_name(range);
        q.seed = seed;
        std::vector<std::size_t> zshape(zero_point.shape(), zero_point.shape() + zero_point.ndim());
        xt::xarray<std::int64_t> z = xt::adapt(zero_point.data(), static_cast<std::size_t>(zero_point.size()),
                                               xt::no_ownership(), zshape);
        if (quantize) return cases::quantization(to_xarray(x), in_fmt, q, to_xarray(scale), z, axis, block);
        const numeq::Cast cast = make_cast(out, "nearest_even", "ieee", "keep", 0, numeq::default_random_bits);
        return cases::dequantization(to_xarray(x), q, to_xarray(scale), z, axis, block, cast);
      },
      py::arg("quantize"), py::arg("x"), py::arg("in_fmt"), py::arg("fmt"), py::arg("scale"), py::arg("zero_point"),
      py::arg("axis"), py::arg("block"), py::arg("rounding"), py::arg("range"), py::arg("seed"), py::arg("out"));
  // numeq.tolerances: one draw's requirement from the platform's emulation (and the other
  // platform's, for the cross form), and the forms over several draws (family_tolerance.hpp).
  m.def(
      "cases_requirement",
      [](const cases::Op& op, const Values& values, const Values& bound, double failure_probability,
         std::optional<Values> other_values, std::optional<Values> other_bound, double other_failure_probability) {
        const cases::Emulation platform{to_xarray(values), to_xarray(bound), failure_probability};
        std::optional<cases::Emulation> other;
        if (other_values && other_bound)
          other = cases::Emulation{to_xarray(*other_values), to_xarray(*other_bound), other_failure_probability};
        const cases::Requirement r = cases::requirement(op, platform, other ? &*other : nullptr);
        const auto arr = [](const std::vector<double>& v) { return py::array_t<double>(v.size(), v.data()); };
        return py::make_tuple(arr(r.need), arr(r.expected), arr(r.judged), r.unbounded, r.failure_probability,
                              arr(r.computed));
      },
      py::arg("op"), py::arg("values"), py::arg("bound"), py::arg("failure_probability"), py::arg("other_values"),
      py::arg("other_bound"), py::arg("other_failure_probability"));
  m.def(
      "cases_ulp_of",
      [](const Values& x, const std::string& fmt) {
        const numeq::Format& f = numeq::format_by_name(fmt, "fmt");
        py::array_t<double> out(x.size());
        double* o = out.mutable_data();
        const cases::UlpOf ulp(f);
        for (py::ssize_t i = 0; i < x.size(); ++i) o[i] = ulp(x.data()[i]);
        return out;
      },
      py::arg("x"), py::arg("fmt"));
  m.def(
      "cases_fit_tolerance",
      [](const std::vector<std::tuple<Values, Values, std::optional<Values>>>& draws, const std::string& out,
         double margin) {
        std::vector<cases::Requirement> rs;
        for (const auto& [need, expected, computed] : draws) {
          cases::Requirement r;
          r.need.assign(need.data(), need.data() + need.size());
          r.expected.assign(expected.data(), expected.data() + expected.size());
          if (computed) r.computed.assign(computed->data(), computed->data() + computed->size());
          if (r.need.size() != r.expected.size()) throw numeq::error("draws: need and expected differ in length");
          rs.push_back(std::move(r));
        }
        const cases::ToleranceForms f = cases::fit_tolerance(rs, numeq::format_by_name(out, "out"), margin);
        return py::dict("ulps"_a = f.ulps, "rtol"_a = f.rtol, "atol"_a = f.atol, "max_rtol"_a = f.max_rtol,
                        "atol_rel"_a = f.atol_rel, "max_abs"_a = f.max_abs, "rtol_only"_a = f.rtol_only,
                        "atol_only"_a = f.atol_only);
      },
      py::arg("draws"), py::arg("out"), py::arg("margin"));
  m.def(
      "cases_tolerance",
      [](const Values& bound, const Values& reference, const std::string& out) {
        return tolerance_dict(cases::tolerance(to_xarray(bound), to_xarray(reference), numeq::format_by_name(out, "out")));
      },
      py::arg("bound"), py::arg("reference"), py::arg("out"));
  // Op.variants: the named variants the verdict's search tries (cases::platform_variants).
  m.def(
      "cases_platform_variants",
      [](const cases::Op& op, const std::string& platform) {
        return cases::platform_variants(*core::shared_platform(platform, "platform"), op);
      },
      py::arg("op"), py::arg("platform"));
  m.def(
      "cases_cross_bound",
      [](const cases::Op& op, const std::string& platform_a, const std::string& platform_b, const std::string& kind,
         double lambda, double failure_probability) {
        const auto pa = core::shared_platform(platform_a, "platform_a");
        const auto pb = core::shared_platform(platform_b, "platform_b");
        const core::BoundOptions o = bound_options(kind, lambda, failure_probability);
        xt::xarray<double> r;
        {
          py::gil_scoped_release release;
          r = cases::cross_platform_bound(*op.emulation(*pa, o), *op.emulation(*pb, o));
        }
        return to_numpy(std::move(r));
      },
      py::arg("op"), py::arg("platform_a"), py::arg("platform_b"), py::arg("kind"), py::arg("lam"),
      py::arg("failure_probability") = 0.0);
  m.def(
      "cases_compare",
      [](const py::array& actual, const cases::Op& op, const std::string& platform, const std::string& accept,
         double failure_probability, bool search_variants, std::size_t worst, bool hardware_variants) {
        const auto p = core::shared_platform(platform, "platform");
        cases::CompareOptions o = compare_options(accept, failure_probability, search_variants, worst);
        if (hardware_variants) o.variant_scope = cases::VariantScope::hardware;
        // Device outputs (float32, float16, ml_dtypes, integers) widen here in one pass (no float64
        // copy in Python first).
        const xt::xarray<double> xs = to_xarray_widened(actual, "actual");
        cases::Verdict v;
        std::string message;
        {
          py::gil_scoped_release release;
          v = cases::compare(xs, op, *p, o);
          message = cases::describe(v);
        }
        return verdict_dict(v, message);
      },
      py::arg("actual"), py::arg("op"), py::arg("platform"), py::arg("accept"), py::arg("failure_probability"),
      py::arg("search_variants"), py::arg("worst"), py::arg("hardware_variants") = false);
  m.def(
      "cases_compare_port",
      [](const py::array& gpu, const py::array& trainium, const cases::Op& op, const std::string& gpu_platform,
         const std::string& trainium_platform, const std::string& accept, double failure_probability,
         bool search_variants, std::size_t worst) {
        const auto pg = core::shared_platform(gpu_platform, "gpu_platform");
        const auto pt = core::shared_platform(trainium_platform, "trainium_platform");
        const cases::CompareOptions o = compare_options(accept, failure_probability, search_variants, worst);
        const xt::xarray<double> xg = to_xarray_widened(gpu, "gpu_output");
        const xt::xarray<double> xtr = to_xarray_widened(trainium, "trainium_output");
        cases::PortVerdict v;
        std::string message, mg, mt;
        {
          py::gil_scoped_release release;
          v = cases::compare_port(xg, xtr, op, *pg, *pt, o);
          message = cases::describe(v);
          mg = cases::describe(v.gpu);
          mt = cases::describe(v.trainium);
        }
        return port_verdict_dict(v, message, mg, mt);
      },
      py::arg("gpu"), py::arg("trainium"), py::arg("op"), py::arg("gpu_platform"), py::arg("trainium_platform"),
      py::arg("accept"), py::arg("failure_probability"), py::arg("search_variants"), py::arg("worst"));
  m.def(
      "cases_generate",
      [](const std::string& distribution, std::uint64_t seed, double scale, const std::string& fmt,
         const std::vector<std::size_t>& shape) {
        cases::Generator g{cases::distribution_by_name(distribution, "generator"), seed, scale};
        return to_numpy(cases::generate(g, numeq::format_by_name(fmt, "fmt"), shape));
      },
      py::arg("distribution"), py::arg("seed"), py::arg("scale"), py::arg("fmt"), py::arg("shape"));
  m.def("cases_generators", [] {
    std::vector<std::string> names;
    for (cases::Distribution d : cases::all_distributions()) names.emplace_back(cases::to_string(d));
    return names;
  });
  // The Vector engine's statistics as values (cases/bn_stats.hpp), for numeq.nki's bn_stats and
  // bn_aggr: float32 arrays, as the instructions write fp32 (every result is a value of `compute`,
  // at most 24 significand bits: exact in binary32).
  m.def(
      "cases_bn_stats",
      [](const Values& x, const std::string& compute) {
        const xt::xarray<double> rows = to_xarray(x);
        const numeq::Format& format = numeq::format_by_name(compute, "compute");
        xt::xarray<double> out;
        {
          py::gil_scoped_release release;
          out = cases::bn_stats(rows, format);
        }
        return as_float32(out);
      },
      py::arg("x"), py::arg("compute") = "fp32");
  m.def(
      "cases_bn_aggr",
      [](const Values& stats, const std::string& merge, const std::string& compute) {
        const xt::xarray<double> triples = to_xarray(stats);
        const cases::BnAggrMerge how = cases::bn_aggr_merge_by_name(merge, "merge");
        const numeq::Format& format = numeq::format_by_name(compute, "compute");
        xt::xarray<double> out;
        {
          py::gil_scoped_release release;
          out = cases::bn_aggr(triples, how, format);
        }
        return as_float32(out);
      },
      py::arg("stats"), py::arg("merge") = "chan", py::arg("compute") = "fp32");
}

}  // namespace numeq_bindings
