#include "numeq/formats/block_scale.hpp"

#include <bit>
#include <algorithm>
#include <cmath>
#include <string>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/exact.hpp"
#include "strided.hpp"

namespace numeq {
namespace {

// C-order index of the block holding element i.
std::size_t block_of(std::size_t i, const std::vector<std::size_t>& shape,
                     const std::vector<std::size_t>& block_shape) {
  const std::size_t rank = shape.size();
  const std::size_t blocked_from = rank - block_shape.size();
  std::size_t block = 0;
  std::size_t stride = 1;
  for (std::size_t d = rank; d-- > 0;) {
    const std::size_t index = i % shape[d];
    i /= shape[d];
    const std::size_t b = d >= blocked_from ? block_shape[d - blocked_from] : 1;
    block += (index / b) * stride;
    stride *= shape[d] / b;
  }
  return block;
}

void check_scaling(const BlockScaling& s) {
  validate(s.element, "fmt");
  if (s.scale_format.is_integer() || !(s.scale_format == formats::e8m0fnu || s.scale_format == formats::fp32 ||
                                       s.scale_format == formats::bf16 || s.scale_format == formats::fp16 ||
                                       s.scale_format == formats::e4m3fn))
    throw error("scale_fmt: '" + std::string(s.scale_format.name) +
                "' is not a scale format; valid choices: e8m0fnu, fp32, bf16, fp16, e4m3fn");
  if (s.scale_rounding == Rounding::stochastic)
    throw error("scale_rounding: stochastic scales are not supported; valid choices: nearest_even, "
                "nearest_away, toward_zero, upward, downward, odd");
  if (s.block_shape.empty()) throw error("block: needs at least one block extent");
  for (std::size_t b : s.block_shape)
    if (b == 0) throw error("block: block extents must be >= 1");
}

// The block scale for amax > 0 under the scaling's rule.
double block_scale(double amax, const BlockScaling& scaling, const Cast& scale_cast, const Unpacked& max_element) {
  double s = 0;
  if (scaling.scale_rule == ScaleRule::ocp || scaling.scale_rule == ScaleRule::ocp_headroom) {
    // OCP MX v1.0 s6.3: X = 2^(floor(log2(amax)) - emax_elem); a power of two, so the scale
    // format holds it exactly unless it lies beyond its range, where it clamps. ocp_headroom
    // doubles it (nki.isa.quantize_mx: "a block scale that is two times larger").
    const int emax_elem = scaling.element.format.emax() - (scaling.scale_rule == ScaleRule::ocp_headroom ? 1 : 0);
    const double x = std::ldexp(1.0, std::ilogb(amax) - emax_elem);
    s = std::min(x, max_finite(scaling.scale_format));
    if (s < min_subnormal(scaling.scale_format)) s = min_subnormal(scaling.scale_format);
    s = round_to_format(s, Cast{scaling.scale_format, Rounding::downward, Overflow::saturate});
  } else {
    s = decode_bits(scale_cast.format, round_and_pack(scale_cast, exact_quotient(unpack_double(amax), max_element), 0));
  }
  if (s == 0) s = min_subnormal(scaling.scale_format);  // never divide by zero
  return s;
}

}  // namespace

ScaleRule scale_rule_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<ScaleRule>, name, parameter, "scale rule",
                 "(ocp: OCP MX v1.0 s6.3, 2^(floor(log2 amax) - emax_elem); quotient: amax / max_element rounded "
                 "by scale_rounding; ocp_headroom: twice the ocp scale, as AWS's quantize_mx)");
}

std::vector<std::size_t> block_scale_shape(const std::vector<std::size_t>& x_shape,
                                           const BlockScaling& scaling) {
  check_scaling(scaling);
  const auto& block = scaling.block_shape;
  if (block.size() > x_shape.size())
    throw error("block: has " + std::to_string(block.size()) + " extents but x has rank " +
                std::to_string(x_shape.size()));
  std::vector<std::size_t> shape = x_shape;
  const std::size_t first = x_shape.size() - block.size();
  for (std::size_t k = 0; k < block.size(); ++k) {
    const std::size_t along = x_shape[first + k];
    if (along % block[k] != 0)
      throw error("block: extent " + std::to_string(block[k]) + " does not divide axis " +
                  std::to_string(first + k) + " of length " + std::to_string(along));
    shape[first + k] = along / block[k];
  }
  return shape;
}

void block_quantize_into(const BitsView& x, const BlockScaling& scaling, double* scales,
                         double* element_values, void* element_bits) {
  const std::vector<std::size_t> scale_shape = block_scale_shape(x.shape, scaling);
  std::size_t blocks = 1;
  for (std::size_t s : scale_shape) blocks *= s;
  const std::size_t n = x.size();
  // Pass 1: amax per block.
  std::vector<double> values(n);
  std::vector<double> amax(blocks, 0.0);
  detail::with_width(x.element_bytes, [&]<class In>() {
    detail::for_each_offset(x, detail::is_contiguous(x), 0, n, [&](std::size_t i, std::ptrdiff_t offset) {
      const double v = decode_bits(*x.format, detail::load<In>(x.data, offset));
      if (!std::isfinite(v))
        throw error("x: element " + std::to_string(i) + " is " + std::to_string(v) +
                    "; block scaling needs finite values");
      values[i] = v;
      const std::size_t b = block_of(i, x.shape, scaling.block_shape);
      amax[b] = std::max(amax[b], std::fabs(v));
    });
  });
  // Scales: amax / max_element rounded once into the scale format.
  const Cast scale_cast{scaling.scale_format, scaling.scale_rounding, Overflow::saturate};
  const Unpacked max_element = unpack_double(max_finite(scaling.element.format));
  std::vector<double> scale(blocks, 1.0);
  for (std::size_t b = 0; b < blocks; ++b) {
    if (amax[b] == 0) continue;  // an all-zero block: any scale serves; 1 keeps it readable
    scale[b] = block_scale(amax[b], scaling, scale_cast, max_element);
  }
  // Elements: x / scale exactly, rounded once through the element cast.
  const Cast& element = scaling.element;
  const std::uint64_t key = random_stream_key(element.seed);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t b = block_of(i, x.shape, scaling.block_shape);
    const std::uint64_t random = element.rounding == Rounding::stochastic ? random_bits_at(key, i) : 0;
    std::uint64_t bits = 0;
    if (values[i] == 0) {
      bits = encode_unpacked(unpack_double(values[i]), element, random);
    } else {
      bits = round_and_pack(element, exact_quotient(unpack_double(values[i]), unpack_double(scale[b])), random);
    }
    if (element_values != nullptr) element_values[i] = decode_bits(element.format, bits);
    if (element_bits != nullptr) {
      switch (element.format.storage_bits) {
        case 8: static_cast<std::uint8_t*>(element_bits)[i] = static_cast<std::uint8_t>(bits); break;
        case 16: static_cast<std::uint16_t*>(element_bits)[i] = static_cast<std::uint16_t>(bits); break;
        case 32: static_cast<std::uint32_t*>(element_bits)[i] = static_cast<std::uint32_t>(bits); break;
        default: static_cast<std::uint64_t*>(element_bits)[i] = bits; break;
      }
    }
  }
  if (scales != nullptr)
    for (std::size_t b = 0; b < blocks; ++b) scales[b] = scale[b];
}

void block_dequantize_into(const double* element_values, const std::vector<std::size_t>& shape,
                           const double* scales, const BlockScaling& scaling, const Cast& out,
                           double* values) {
  validate(out, "out");
  block_scale_shape(shape, scaling);
  std::size_t n = 1;
  for (std::size_t s : shape) n *= s;
  for (std::size_t i = 0; i < n; ++i) {
    const double e = element_values[i];
    const double s = scales[block_of(i, shape, scaling.block_shape)];
    if (e == 0 || !std::isfinite(e) || !std::isfinite(s) || s == 0) {
      values[i] = e * s;  // zeros, NaN and Inf follow IEEE multiplication
      continue;
    }
    values[i] = decode_bits(out.format,
                            round_and_pack(out, exact_product(unpack_double(e), unpack_double(s)), 0));
  }
}

}  // namespace numeq
