#pragma once
// Array casts over xtensor expressions and containers (xt::adapt views of caller memory included,
// contiguous or strided). The work is done by one type-erased engine over strided bit patterns,
// multi-threaded; element i's stochastic draw is keyed by its C-order index i, so results do not
// depend on threads, chunking or memory layout.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xutils.hpp>

#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq {

// A read-only strided array of bit patterns of `format` (a float array is an array of fp32
// patterns, a double array one of fp64 patterns).
struct BitsView {
  const void* data = nullptr;
  int element_bytes = 8;       // 1, 2, 4 or 8: the width of one stored element
  const Format* format = &formats::fp64;
  std::vector<std::size_t> shape;
  std::vector<std::ptrdiff_t> strides;  // in elements; may be zero or negative

  std::size_t size() const;
};

// Encode every element of `in` into cast.format. Values go to values_out (doubles) and bit
// patterns (cast.format.storage_bits wide) to bits_out, both contiguous in C order; either may be
// null. `parameter` names the input in error messages.
void cast_into(const BitsView& in, const Cast& cast, double* values_out, void* bits_out,
               std::string_view parameter = "x");

// Decode every element of `in` (bit patterns of in.format) into doubles, contiguous in C order.
void decode_into(const BitsView& in, double* out, std::string_view parameter = "bits");

namespace detail {

template <class T>
inline constexpr bool is_float_or_double = std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class T>
constexpr const Format* format_of_value_type() {
  if constexpr (std::is_same_v<T, float>) return &formats::fp32;
  else if constexpr (std::is_same_v<T, double>) return &formats::fp64;
  else return nullptr;
}

template <class E>
BitsView view_of(const E& e, const Format* format) {
  using T = typename E::value_type;
  BitsView v;
  v.data = e.data() + e.data_offset();
  v.element_bytes = sizeof(T);
  v.format = format;
  v.shape.assign(e.shape().begin(), e.shape().end());
  v.strides.assign(e.strides().begin(), e.strides().end());
  return v;
}

// Runs f(view) on an expression, without a copy when it already lives in memory.
template <class E, class F>
auto with_view(const E& e, const Format* format, F&& f) {
  if constexpr (xt::has_data_interface<E>::value) {
    return f(view_of(e, format));
  } else {
    const xt::xarray<typename E::value_type> evaluated = e;
    return f(view_of(evaluated, format));
  }
}

template <class Shape>
std::vector<std::size_t> shape_vector(const Shape& s) {
  return std::vector<std::size_t>(s.begin(), s.end());
}

}  // namespace detail

// The general form behind round/encode/convert: elements of x are float or double values, or
// unsigned bit patterns of `source`; values (doubles) and/or bit patterns go to caller memory in
// C order (either pointer may be null). Memory-backed expressions (containers, xt::adapt views
// of caller buffers, strided or not) are read in place.
template <class E>
void cast_to(const xt::xexpression<E>& x, const Format& source, const Cast& cast, double* values_out,
             void* bits_out) {
  const auto& e = x.derived_cast();
  using T = typename E::value_type;
  static_assert(detail::is_float_or_double<T> || std::is_unsigned_v<T>,
                "numeq::cast_to takes float, double or unsigned bit-pattern elements");
  if (static_cast<int>(sizeof(T)) * 8 != source.storage_bits)
    throw error("x: elements of " + std::to_string(sizeof(T) * 8) + " bits cannot hold format " +
                std::string(source.name) + " (stored in " + std::to_string(source.storage_bits) + ")");
  detail::with_view(e, &source, [&](const BitsView& v) { cast_into(v, cast, values_out, bits_out); });
}

// x (float or double elements) rounded into cast.format, as doubles.
template <class E>
xt::xarray<double> round(const xt::xexpression<E>& x, const Cast& cast) {
  const auto& e = x.derived_cast();
  // (Tested on the type: GCC 12's -fsanitize=null rejects pointer comparisons in static_assert.)
  static_assert(detail::is_float_or_double<typename E::value_type>,
                "numeq::round takes float or double elements");
  const Format* source = detail::format_of_value_type<typename E::value_type>();
  xt::xarray<double> out(detail::shape_vector(e.shape()));
  detail::with_view(e, source, [&](const BitsView& v) { cast_into(v, cast, out.data(), nullptr); });
  return out;
}

// Bit patterns of x (float or double elements) in cast.format. Bits must be an unsigned type as
// wide as the format's storage.
template <class Bits, class E>
xt::xarray<Bits> encode(const xt::xexpression<E>& x, const Cast& cast) {
  static_assert(std::is_unsigned_v<Bits>, "numeq::encode returns unsigned bit patterns");
  if (static_cast<int>(sizeof(Bits)) * 8 != cast.format.storage_bits)
    throw error("encode: the bit-pattern type has " + std::to_string(sizeof(Bits) * 8) +
                " bits but format " + std::string(cast.format.name) + " is stored in " +
                std::to_string(cast.format.storage_bits));
  const auto& e = x.derived_cast();
  static_assert(detail::is_float_or_double<typename E::value_type>,
                "numeq::encode takes float or double elements");
  const Format* source = detail::format_of_value_type<typename E::value_type>();
  xt::xarray<Bits> out(detail::shape_vector(e.shape()));
  detail::with_view(e, source, [&](const BitsView& v) { cast_into(v, cast, nullptr, out.data()); });
  return out;
}

// Values of bit patterns of format f.
template <class E>
xt::xarray<double> decode(const xt::xexpression<E>& bits, const Format& f) {
  const auto& e = bits.derived_cast();
  using T = typename E::value_type;
  static_assert(std::is_integral_v<T>, "numeq::decode takes integer bit patterns");
  xt::xarray<double> out(detail::shape_vector(e.shape()));
  detail::with_view(e, &f, [&](const BitsView& v) { decode_into(v, out.data()); });
  return out;
}

// Bit patterns of `source` (an unsigned array) converted into cast.format, as doubles.
template <class E>
xt::xarray<double> convert(const xt::xexpression<E>& bits, const Format& source, const Cast& cast) {
  const auto& e = bits.derived_cast();
  static_assert(std::is_integral_v<typename E::value_type>, "numeq::convert takes bit patterns");
  xt::xarray<double> out(detail::shape_vector(e.shape()));
  detail::with_view(e, &source, [&](const BitsView& v) { cast_into(v, cast, out.data(), nullptr); });
  return out;
}

}  // namespace numeq
