// numeq._core formats layer (formats/): the formats and their properties, casts, decoding,
// integer and block quantisation, and the array intake's Python face (register_dtype, as_float64,
// first_not_in_format; intake.hpp). numpy buffers are handed to the engines as strided views of
// caller memory (no copies).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <xtensor/xadapt.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bind.hpp"
#include "conversions.hpp"
#include "intake.hpp"
#include "numeq/numeq.hpp"

namespace numeq_bindings {

namespace {

// A numpy array's strides in elements (may be negative).
std::vector<std::ptrdiff_t> element_strides(const py::array& a, const char* parameter) {
  std::vector<std::ptrdiff_t> strides;
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    if (a.strides(d) % a.itemsize() != 0)
      throw numeq::error(std::string(parameter) + ": strides that are not a multiple of the element size are not supported");
    strides.push_back(a.strides(d) / a.itemsize());
  }
  return strides;
}

// A strided view of a numpy array whose elements are bit patterns of `format` (float32 arrays
// are fp32 patterns, float64 arrays fp64 patterns).
numeq::BitsView view_of(const py::array& a, const numeq::Format& format, const char* parameter) {
  numeq::BitsView v;
  v.data = a.data();
  v.element_bytes = static_cast<int>(a.itemsize());
  v.format = &format;
  v.shape = std::vector<std::size_t>(a.shape(), a.shape() + a.ndim());
  v.strides = element_strides(a, parameter);
  return v;
}

// Runs f(view) with an xt::adapt view of the numpy buffer (no copy; strides in elements, may be
// negative), its element type chosen by dtype kind and width.
template <class F>
void with_adapted(const py::array& a, const char* parameter, F&& f) {
  const std::vector<std::size_t> shape(a.shape(), a.shape() + a.ndim());
  const std::vector<std::ptrdiff_t> strides = element_strides(a, parameter);
  auto run = [&](auto* typed) {
    f(xt::adapt(typed, static_cast<std::size_t>(a.size()), xt::no_ownership(), shape, strides));
  };
  const char kind = a.dtype().kind();
  const void* data = a.data();
  if (kind == 'f' && a.itemsize() == 4) return run(static_cast<const float*>(data));
  if (kind == 'f' && a.itemsize() == 8) return run(static_cast<const double*>(data));
  switch (a.itemsize()) {
    case 1: return run(static_cast<const std::uint8_t*>(data));
    case 2: return run(static_cast<const std::uint16_t*>(data));
    case 4: return run(static_cast<const std::uint32_t*>(data));
    case 8: return run(static_cast<const std::uint64_t*>(data));
    default: throw numeq::type_error(std::string(parameter) + ": unsupported element size");
  }
}

std::vector<py::ssize_t> shape_of(const py::array& a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

py::array bits_array(const numeq::Format& f, const std::vector<py::ssize_t>& shape) {
  switch (f.storage_bits) {
    case 8: return py::array_t<std::uint8_t>(shape);
    case 16: return py::array_t<std::uint16_t>(shape);
    case 32: return py::array_t<std::uint32_t>(shape);
    default: return py::array_t<std::uint64_t>(shape);
  }
}

py::dict format_info(const std::string& name) {
  const numeq::Format& f = numeq::format_by_name(name, "name");
  py::dict d;
  d["name"] = std::string(f.name);
  d["kind"] = f.is_integer() ? "integer" : "floating";
  d["bits"] = f.bits();
  d["storage_bits"] = f.storage_bits;
  d["signed"] = f.is_signed;
  if (f.is_integer()) {
    d["min"] = f.int_min();
    d["max"] = f.int_max();
    return d;
  }
  static const char* specials[] = {"ieee", "fn", "fnuz", "finite"};
  d["exponent_bits"] = f.exponent_bits;
  d["mantissa_bits"] = f.mantissa_bits;
  d["precision"] = f.precision();
  d["bias"] = f.bias;
  d["specials"] = specials[static_cast<int>(f.specials)];
  d["has_inf"] = f.has_inf();
  d["has_nan"] = f.has_nan();
  d["has_negative_zero"] = f.has_negative_zero();
  d["has_zero"] = f.has_zero;
  d["has_subnormals"] = f.has_zero && f.mantissa_bits > 0;
  d["max"] = numeq::max_finite(f);
  d["min_normal"] = numeq::min_normal(f);
  d["min_subnormal"] = numeq::min_subnormal(f);
  d["emin"] = f.emin();
  d["emax"] = static_cast<int>(f.max_finite_magnitude() >> f.mantissa_bits) - f.bias;
  d["epsilon"] = std::ldexp(1.0, -f.mantissa_bits);          // spacing just above 1
  d["unit_roundoff"] = std::ldexp(1.0, -f.precision());      // u = 2^-p
  d["max_bits"] = (f.max_finite_magnitude()) << f.storage_shift;
  d["inf_bits"] = f.has_inf() ? py::object(py::int_(f.inf_bits(false) << f.storage_shift)) : py::object(py::none());
  d["nan_bits"] = f.has_nan() ? py::object(py::int_(f.nan_bits(false) << f.storage_shift)) : py::object(py::none());
  d["storage_shift"] = f.storage_shift;
  return d;
}

// The output cast of a dequantisation: `out_fmt` with a deterministic rounding mode (`function`
// names the caller in the error).
numeq::Cast deterministic_cast(const std::string& out_fmt, const std::string& rounding, const char* function) {
  numeq::Cast out;
  out.format = numeq::format_by_name(out_fmt, "out");
  out.rounding = numeq::rounding_by_name(rounding);
  if (out.rounding == numeq::Rounding::stochastic)
    throw numeq::error(std::string("rounding: ") + function + " takes a deterministic rounding mode");
  return out;
}

}  // namespace

void bind_formats(py::module_& m) {
  m.def("formats", [] {
    std::vector<std::string> names;
    for (const numeq::Format* f : numeq::all_formats()) names.emplace_back(f->name);
    return names;
  });
  m.def("format_info", &format_info, py::arg("name"));
  m.def("roundings", [] { return numeq::rounding_names(); });
  m.def("overflows", [] { return numeq::overflow_names(); });
  m.def("subnormal_modes", [] { return numeq::subnormals_names(); });
  m.def("num_threads", &numeq::num_threads);
  m.def("set_num_threads", &numeq::set_num_threads, py::arg("n"));

  // x: float32/float64 array, or unsigned bit patterns of `source`.
  m.def(
      "cast",
      [](const py::array& x, const std::string& source, const std::string& fmt, const std::string& rounding,
         const std::string& overflow, const std::string& subnormals, std::uint64_t seed, int random_bits,
         bool want_values, bool want_bits) {
        const numeq::Cast cast = make_cast(fmt, rounding, overflow, subnormals, seed, random_bits);
        const numeq::Format& source_format = numeq::format_by_name(source, "source");
        const auto shape = shape_of(x);
        py::array_t<double> values = want_values ? py::array_t<double>(shape) : py::array_t<double>();
        py::array bits = want_bits ? bits_array(cast.format, shape) : py::array();
        double* values_out = want_values ? values.mutable_data() : nullptr;
        void* bits_out = want_bits ? bits.mutable_data() : nullptr;
        with_adapted(x, "x", [&](const auto& adapted) {
          py::gil_scoped_release release;
          numeq::cast_to(adapted, source_format, cast, values_out, bits_out);
        });
        return py::make_tuple(want_values ? py::object(values) : py::object(py::none()),
                              want_bits ? py::object(bits) : py::object(py::none()));
      },
      py::arg("x"), py::arg("source"), py::arg("fmt"), py::arg("rounding"), py::arg("overflow"),
      py::arg("subnormals"), py::arg("seed"), py::arg("random_bits"), py::arg("want_values"),
      py::arg("want_bits"));

  m.def(
      "decode",
      [](const py::array& bits, const std::string& fmt) {
        const numeq::BitsView view = view_of(bits, numeq::format_by_name(fmt, "fmt"), "bits");
        py::array_t<double> out(shape_of(bits));
        double* out_data = out.mutable_data();
        {
          py::gil_scoped_release release;
          numeq::decode_into(view, out_data, "bits");
        }
        return out;
      },
      py::arg("bits"), py::arg("fmt"));

  // Integer quantisation. scale/zero_point arrive broadcast to x's rank (QuantGroups layout).
  m.def(
      "quantize",
      [](const py::array& x, const std::string& source, const std::string& fmt,
         const py::array_t<double, py::array::c_style | py::array::forcecast>& scale,
         const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& zero_point, int axis,
         std::size_t block_size, const std::string& range, const std::string& rounding, std::uint64_t seed,
         int random_bits) {
        numeq::Quantization q;
        q.format = numeq::format_by_name(fmt, "fmt");
        q.rounding = numeq::rounding_by_name(rounding);
        q.range = numeq::quant_range_by_name(range);
        q.seed = seed;
        q.random_bits = random_bits;
        const numeq::BitsView view = view_of(x, numeq::format_by_name(source, "source"), "x");
        std::vector<std::size_t> pshape(scale.shape(), scale.shape() + scale.ndim());
        const numeq::QuantGroups groups = numeq::quant_groups(view.shape, pshape, axis, block_size);
        if (zero_point.size() != scale.size()) throw numeq::error("zero_point: must have one entry per scale");
        py::array_t<std::int64_t> out(shape_of(x));
        std::int64_t* out_data = out.mutable_data();
        {
          py::gil_scoped_release release;
          numeq::quantize_into(view, q, scale.data(), zero_point.data(), groups, out_data);
        }
        return out;
      },
      py::arg("x"), py::arg("source"), py::arg("fmt"), py::arg("scale"), py::arg("zero_point"),
      py::arg("axis"), py::arg("block_size"), py::arg("range"), py::arg("rounding"), py::arg("seed"),
      py::arg("random_bits"));

  m.def(
      "dequantize",
      [](const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& codes,
         const py::array_t<double, py::array::c_style | py::array::forcecast>& scale,
         const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& zero_point, int axis,
         std::size_t block_size, const std::string& out_fmt, const std::string& rounding) {
        std::vector<std::size_t> shape(codes.shape(), codes.shape() + codes.ndim());
        std::vector<std::size_t> pshape(scale.shape(), scale.shape() + scale.ndim());
        const numeq::QuantGroups groups = numeq::quant_groups(shape, pshape, axis, block_size);
        if (zero_point.size() != scale.size()) throw numeq::error("zero_point: must have one entry per scale");
        const numeq::Cast out = deterministic_cast(out_fmt, rounding, "dequantize");
        py::array_t<double> values(shape_of(codes));
        double* values_data = values.mutable_data();
        {
          py::gil_scoped_release release;
          numeq::dequantize_into(codes.data(), shape, scale.data(), zero_point.data(), groups, out, values_data);
        }
        return values;
      },
      py::arg("codes"), py::arg("scale"), py::arg("zero_point"), py::arg("axis"), py::arg("block_size"),
      py::arg("out"), py::arg("rounding"));

  m.def(
      "quant_params",
      [](const py::array& x, const std::string& source, const std::string& fmt, std::vector<std::size_t> pshape,
         int axis, std::size_t block_size, const std::string& range) {
        numeq::Quantization q;
        q.format = numeq::format_by_name(fmt, "fmt");
        q.range = numeq::quant_range_by_name(range);
        const numeq::BitsView view = view_of(x, numeq::format_by_name(source, "source"), "x");
        const numeq::QuantGroups groups = numeq::quant_groups(view.shape, pshape, axis, block_size);
        std::vector<py::ssize_t> ps(pshape.begin(), pshape.end());
        py::array_t<double> scale(ps);
        py::array_t<std::int64_t> zp(ps);
        numeq::quant_params_into(view, q, groups, scale.mutable_data(), zp.mutable_data());
        return py::make_tuple(scale, zp);
      },
      py::arg("x"), py::arg("source"), py::arg("fmt"), py::arg("param_shape"), py::arg("axis"),
      py::arg("block_size"), py::arg("range"));

  m.def(
      "block_quantize",
      [](const py::array& x, const std::string& source, const std::string& fmt, std::vector<std::size_t> block,
         const std::string& scale_fmt, const std::string& scale_rounding, const std::string& rounding,
         const std::string& overflow, const std::string& subnormals, std::uint64_t seed, int random_bits,
         const std::string& scale_rule) {
        numeq::BlockScaling s;
        s.scale_rule = numeq::scale_rule_by_name(scale_rule, "scale_rule");
        s.element = make_cast(fmt, rounding, overflow, subnormals, seed, random_bits);
        s.scale_format = numeq::format_by_name(scale_fmt, "scale_fmt");
        s.scale_rounding = numeq::rounding_by_name(scale_rounding, "scale_rounding");
        s.block_shape = std::move(block);
        const numeq::BitsView view = view_of(x, numeq::format_by_name(source, "source"), "x");
        const auto scale_shape = numeq::block_scale_shape(view.shape, s);
        py::array_t<double> scales(std::vector<py::ssize_t>(scale_shape.begin(), scale_shape.end()));
        py::array_t<double> values(shape_of(x));
        py::array bits = bits_array(s.element.format, shape_of(x));
        double* scales_data = scales.mutable_data();
        double* values_data = values.mutable_data();
        void* bits_data = bits.mutable_data();
        {
          py::gil_scoped_release release;
          numeq::block_quantize_into(view, s, scales_data, values_data, bits_data);
        }
        return py::make_tuple(values, bits, scales);
      },
      py::arg("x"), py::arg("source"), py::arg("fmt"), py::arg("block"), py::arg("scale_fmt"),
      py::arg("scale_rounding"), py::arg("rounding"), py::arg("overflow"), py::arg("subnormals"),
      py::arg("seed"), py::arg("random_bits"), py::arg("scale_rule") = "quotient");

  m.def(
      "block_dequantize",
      [](const py::array_t<double, py::array::c_style | py::array::forcecast>& values,
         const py::array_t<double, py::array::c_style | py::array::forcecast>& scales, std::vector<std::size_t> block,
         const std::string& out_fmt, const std::string& rounding) {
        numeq::BlockScaling s;
        s.block_shape = std::move(block);
        std::vector<std::size_t> shape(values.shape(), values.shape() + values.ndim());
        const auto scale_shape = numeq::block_scale_shape(shape, s);
        std::vector<std::size_t> got(scales.shape(), scales.shape() + scales.ndim());
        if (got != scale_shape) throw numeq::error("scales: shape does not match the blocks of values");
        const numeq::Cast out = deterministic_cast(out_fmt, rounding, "block_dequantize");
        py::array_t<double> result(shape_of(values));
        numeq::block_dequantize_into(values.data(), shape, scales.data(), s, out, result.mutable_data());
        return result;
      },
      py::arg("values"), py::arg("scales"), py::arg("block"), py::arg("out"), py::arg("rounding"));
  m.def("register_dtype", &register_dtype, py::arg("dtype"), py::arg("fmt"),
        "reads arrays of `dtype` as bit patterns of format `fmt` (8 or 16 bits) from now on");
  m.def(
      "as_float64",
      [](const py::array& x, const std::string& parameter) {
        return to_numpy(to_xarray_widened(x, parameter.c_str()));
      },
      py::arg("x"), py::arg("parameter"),
      "x's values as a C-ordered float64 array, widened in one pass (errors name `parameter`)");
  // The first element (C order) that is not a value of fmt (numeq::is_value), or -1: one pass
  // over the array in place, multi-threaded, for every dtype the intake reads (an element that is
  // no pattern of its format, or a 64-bit integer float64 does not hold, is not a value either);
  // any other array through its float64 copy.
  m.def(
      "first_not_in_format",
      [](const py::array& x, const std::string& fmt) -> std::int64_t {
        const numeq::Format& f = numeq::format_by_name(fmt, "fmt");
        const std::size_t n = static_cast<std::size_t>(x.size());
        std::size_t first = n;
        if (const std::optional<numeq::ElementType> type = element_type_of(x)) {
          py::gil_scoped_release release;
          first = numeq::widen(x.data(), n, *type, nullptr, &f).first();
        } else {
          const Values values = x.cast<Values>();
          py::gil_scoped_release release;
          first = numeq::widen(values.data(), n, numeq::ElementType::patterns(numeq::formats::fp64), nullptr, &f).first();
        }
        return first == n ? -1 : static_cast<std::int64_t>(first);
      },
      py::arg("x"), py::arg("fmt"));
}

}  // namespace numeq_bindings
