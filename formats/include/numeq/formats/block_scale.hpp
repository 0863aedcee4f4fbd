#pragma once
// Block-scaled floats: one scale per block of elements, elements cast into a narrow format.
//   OCP Microscaling (MX) v1.0: blocks of 32 along the last axis, one E8M0 scale (a power of two),
//     elements E4M3/E5M2/E3M2/E2M3/E2M1. The spec (s6.3, "Conversion from vector of scalar
//     elements to MX format") sets shared_exp = floor(log2(amax)) - emax_elem, with emax_elem the
//     exponent of the element format's largest normal: ScaleRule::ocp, the default of
//     mx_scaling(). Elements whose quotient exceeds the element format's max_finite then saturate
//     (the spec's clamp). AWS's NeuronCore-v4 quantize_mx takes a scale "two times larger,
//     reserving additional range for rounding the largest values in each group without
//     saturation": 2^(floor(log2 amax) - (emax_elem - 1)) (nki.isa.quantize_mx docstring, SDK 2.27+):
//     ScaleRule::ocp_headroom, whose quotients stay below 2^(emax_elem + 1) and never clip in
//     e4m3fn or e5m2. Other implementations round amax / max_element instead (CUDA/CUTLASS up,
//     ml_dtypes to nearest even: numeq FACTS s1): ScaleRule::quotient, with scale_rounding.
//   DeepSeek-V3 (arXiv:2412.19437 s3.3): one fp32 scale per 1x128 activation tile or per 128x128
//     weight block, elements E4M3: ScaleRule::quotient (amax / 448 rounded into fp32).
// Element = round(x / scale) exactly, through the element Cast.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "numeq/formats/array.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/formats/names.hpp"

namespace numeq {

// How a block's scale follows from its amax (the largest |x| of the block):
//   ocp       2^(floor(log2 amax) - emax_elem) (OCP MX v1.0 s6.3), then into scale_format
//             (clamped to its range); scale_rounding is not used;
//   ocp_headroom  twice the ocp scale, 2^(floor(log2 amax) - emax_elem + 1), clamped the same way
//             (AWS NKI quantize_mx, "a block scale that is two times larger");
//   quotient  amax / max_finite(element) rounded into scale_format by scale_rounding.
enum class ScaleRule : std::uint8_t { ocp, quotient, ocp_headroom };
ScaleRule scale_rule_by_name(std::string_view name, std::string_view parameter = "scale_rule");

struct BlockScaling {
  Cast element{formats::e4m3fn, Rounding::nearest_even, Overflow::saturate};
  Format scale_format = formats::e8m0fnu;
  Rounding scale_rounding = Rounding::nearest_even;
  // Block extent over the last block_shape.size() axes: {32} for MX, {128} for 1x128 tiles,
  // {128, 128} for weight blocks.
  std::vector<std::size_t> block_shape{32};
  ScaleRule scale_rule = ScaleRule::quotient;  // the general rule; mx_scaling() takes the spec's
};

// OCP MX: the spec's scale rule by default; ScaleRule::quotient with a scale_rounding models the
// implementations that round amax / max_element.
inline BlockScaling mx_scaling(const Format& element, ScaleRule rule = ScaleRule::ocp,
                               Rounding scale_rounding = Rounding::nearest_even) {
  return BlockScaling{Cast{element, Rounding::nearest_even, Overflow::saturate}, formats::e8m0fnu,
                      scale_rounding, {32}, rule};
}

// Shape of the scale array for x's shape: x's shape with each blocked axis divided by its block.
// Throws numeq::error when a block does not divide its axis.
std::vector<std::size_t> block_scale_shape(const std::vector<std::size_t>& x_shape,
                                           const BlockScaling& scaling);

// Quantise x (float values): scales (C order, block_scale_shape) and elements (values and/or bit
// patterns of scaling.element.format, C order, x's shape). Any output pointer may be null.
// x must be finite.
void block_quantize_into(const BitsView& x, const BlockScaling& scaling, double* scales,
                         double* element_values, void* element_bits);

// element * scale for every element, rounded once into `out`.
void block_dequantize_into(const double* element_values, const std::vector<std::size_t>& shape,
                           const double* scales, const BlockScaling& scaling, const Cast& out,
                           double* values);

}  // namespace numeq
