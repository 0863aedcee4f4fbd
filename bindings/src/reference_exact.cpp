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
#include "conversions.hpp"
#include "numeq/references/exact.hpp"

namespace numeq_bindings {

namespace {

namespace ref = numeq::reference;

// The exact values (hi, lo) or the rounded ones, computed with the GIL released; the results move
// into the numpy arrays (no copy).
template <class Exact, class Rounded>
py::object exact_or_rounded(bool exact, Exact&& exact_values, Rounded&& rounded) {
  ref::ExactValues r;
  {
    py::gil_scoped_release release;
    if (exact) r = exact_values();
    else r.hi = rounded();
  }
  if (exact) return py::make_tuple(to_numpy(std::move(r.hi)), to_numpy(std::move(r.lo)));
  return to_numpy(std::move(r.hi));
}

// The cast keywords of a rounded result. cast() checks them (make_cast) and is called only for a
// rounded result, so an exact call does not check them.
struct CastKeywords {
  const std::string &fmt, &rounding, &overflow, &subnormals;
  std::uint64_t seed;
  int random_bits;
  numeq::Cast cast() const { return make_cast(fmt, rounding, overflow, subnormals, seed, random_bits); }
};

// Registers `name`(operands..., fmt, rounding, overflow, subnormals, seed, random_bits, exact), the
// arguments of every exact reduction: reduce(operands..., exact, keywords) computes it.
template <class... Operands, class Reduce, class... OperandArgs>
void def_reduction(py::module_& m, const char* name, Reduce reduce, OperandArgs... operand_args) {
  m.def(
      name,
      [reduce](Operands... operands, const std::string& fmt, const std::string& rounding, const std::string& overflow,
               const std::string& subnormals, std::uint64_t seed, int random_bits, bool exact) -> py::object {
        return reduce(operands..., exact, CastKeywords{fmt, rounding, overflow, subnormals, seed, random_bits});
      },
      operand_args..., py::arg("fmt"), py::arg("rounding"), py::arg("overflow"), py::arg("subnormals"),
      py::arg("seed"), py::arg("random_bits"), py::arg("exact"));
}

}  // namespace

void bind_reference_exact(py::module_& m) {
  def_reduction<const Values&, std::ptrdiff_t>(
      m, "reference_sum",
      [](const Values& x, std::ptrdiff_t axis, bool exact, const CastKeywords& keywords) {
        const xt::xarray<double> xs = to_xarray(x);
        return exact_or_rounded(
            exact, [&] { return ref::sum_exact(xs, axis); }, [&] { return ref::sum(xs, axis, keywords.cast()); });
      },
      py::arg("x"), py::arg("axis"));
  def_reduction<const Values&, const Values&>(
      m, "reference_dot",
      [](const Values& a, const Values& b, bool exact, const CastKeywords& keywords) {
        const xt::xarray<double> as = to_xarray(a), bs = to_xarray(b);
        return exact_or_rounded(
            exact, [&] { return ref::dot_exact(as, bs); }, [&] { return ref::dot(as, bs, keywords.cast()); });
      },
      py::arg("a"), py::arg("b"));
  def_reduction<const Values&, const Values&, const std::optional<Values>&>(
      m, "reference_matmul",
      [](const Values& a, const Values& b, const std::optional<Values>& c, bool exact, const CastKeywords& keywords) {
        // Read in place: the arrays stay alive (and the GIL-free computation only reads them).
        auto ref_of = [](const Values& v) {
          return ref::ArrayRef(v.data(), std::vector<std::size_t>(v.shape(), v.shape() + v.ndim()));
        };
        const ref::ArrayRef as = ref_of(a), bs = ref_of(b);
        std::optional<ref::ArrayRef> cs;
        if (c) cs = ref_of(*c);
        const ref::ArrayRef* cp = cs ? &*cs : nullptr;
        return exact_or_rounded(
            exact, [&] { return ref::matmul_exact(as, bs, cp); },
            [&] { return ref::matmul(as, bs, keywords.cast(), cp); });
      },
      py::arg("a"), py::arg("b"), py::arg("c"));
}

}  // namespace numeq_bindings
