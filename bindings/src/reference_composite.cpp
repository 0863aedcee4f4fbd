// numeq.reference composite operations: softmax, log_softmax, layernorm, rmsnorm, attention
// (references/composite.hpp). The Python layer (numeq/reference.py) checks dtypes and in_fmt,
// broadcasts batch dimensions and masks, and hands over C-contiguous float64 values.

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
#include "numeq/references/composite.hpp"

namespace numeq_bindings {

void bind_reference_composite(py::module_& m) {
  namespace ref = numeq::reference;
  m.def(
      "reference_softmax",
      [](const Values& x, std::ptrdiff_t axis, bool log, const std::string& fmt, const std::string& rounding,
         const std::string& overflow, const std::string& subnormals, std::uint64_t seed, int random_bits) {
        const numeq::Cast cast = make_cast(fmt, rounding, overflow, subnormals, seed, random_bits);
        const xt::xarray<double> xs = to_xarray(x);
        xt::xarray<double> r;
        {
          py::gil_scoped_release release;
          r = log ? ref::log_softmax(xs, axis, cast) : ref::softmax(xs, axis, cast);
        }
        return to_numpy(std::move(r));
      },
      py::arg("x"), py::arg("axis"), py::arg("log"), py::arg("fmt"), py::arg("rounding"), py::arg("overflow"),
      py::arg("subnormals"), py::arg("seed"), py::arg("random_bits"),
      "softmax (log=False) or log_softmax (log=True) along axis, each element correctly rounded into fmt");
  m.def(
      "reference_norm",
      [](const Values& x, const std::optional<Values>& gamma, const std::optional<Values>& beta, double eps,
         bool centred, const std::string& fmt, const std::string& rounding, const std::string& overflow,
         const std::string& subnormals, std::uint64_t seed, int random_bits) {
        const numeq::Cast cast = make_cast(fmt, rounding, overflow, subnormals, seed, random_bits);
        const xt::xarray<double> xs = to_xarray(x);
        const std::optional<xt::xarray<double>> g = to_optional(gamma);
        const std::optional<xt::xarray<double>> b = to_optional(beta);
        ref::NormParameters parameters;
        parameters.gamma = g ? &*g : nullptr;
        parameters.beta = b ? &*b : nullptr;
        parameters.eps = eps;
        xt::xarray<double> r;
        {
          py::gil_scoped_release release;
          r = centred ? ref::layernorm(xs, parameters, cast) : ref::rmsnorm(xs, parameters, cast);
        }
        return to_numpy(std::move(r));
      },
      py::arg("x"), py::arg("gamma"), py::arg("beta"), py::arg("eps"), py::arg("centred"), py::arg("fmt"),
      py::arg("rounding"), py::arg("overflow"), py::arg("subnormals"), py::arg("seed"), py::arg("random_bits"),
      "layernorm (centred=True) or rmsnorm over the last axis, each element correctly rounded into fmt");
  m.def(
      "reference_attention",
      [](const Values& q, const Values& k, const Values& v, const std::optional<Values>& mask, bool causal,
         std::optional<double> scale, const std::string& fmt, const std::string& rounding,
         const std::string& overflow, const std::string& subnormals, std::uint64_t seed, int random_bits) {
        const numeq::Cast cast = make_cast(fmt, rounding, overflow, subnormals, seed, random_bits);
        const xt::xarray<double> qs = to_xarray(q);
        const xt::xarray<double> ks = to_xarray(k);
        const xt::xarray<double> vs = to_xarray(v);
        const std::optional<xt::xarray<double>> ms = to_optional(mask);
        ref::AttentionParameters parameters;
        parameters.scale = scale;
        parameters.causal = causal;
        parameters.mask = ms ? &*ms : nullptr;
        xt::xarray<double> r;
        {
          py::gil_scoped_release release;
          r = ref::attention(qs, ks, vs, parameters, cast);
        }
        return to_numpy(std::move(r));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask"), py::arg("causal"), py::arg("scale"),
      py::arg("fmt"), py::arg("rounding"), py::arg("overflow"), py::arg("subnormals"), py::arg("seed"),
      py::arg("random_bits"),
      "softmax(q k^T scale + mask) v, each element correctly rounded into fmt (mask additive, same batch shape)");
}

}  // namespace numeq_bindings
