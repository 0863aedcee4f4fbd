#pragma once
// Block-scaled floats: one scale per block of elements, elements cast into a narrow format.
//   OCP Microscaling (MX) v1.0: blocks of 32 along the last axis, one E8M0 scale (a power of two),
//     elements E4M3/E5M2/E3M2/E2M3/E2M1. The spec leaves the scale's rounding open: CUDA/CUTLASS
//     round up, ml_dtypes to nearest even (numeq FACTS s1), so it is a parameter here.
//   DeepSeek-V3 (arXiv:2412.19437 s3.3): one fp32 scale per 1x128 activation tile or per 128x128
//     weight block, elements E4M3.
// One rule serves both: scale = round(amax / max_element, scale_format, scale_rounding), computed
// from the exact quotient; element = round(x / scale) exactly, through the element Cast.

#include <cstddef>
#include <vector>

#include "numeq/formats/array.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq {

struct BlockScaling {
  Cast element{formats::e4m3fn, Rounding::nearest_even, Overflow::saturate};
  Format scale_format = formats::e8m0fnu;
  Rounding scale_rounding = Rounding::nearest_even;
  // Block extent over the last block_shape.size() axes: {32} for MX, {128} for 1x128 tiles,
  // {128, 128} for weight blocks.
  std::vector<std::size_t> block_shape{32};
};

inline BlockScaling mx_scaling(const Format& element, Rounding scale_rounding = Rounding::nearest_even) {
  return BlockScaling{Cast{element, Rounding::nearest_even, Overflow::saturate}, formats::e8m0fnu,
                      scale_rounding, {32}};
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
