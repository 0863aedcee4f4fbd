#pragma once
// Integer quantisation (int8, uint8, int32) with a scale and a zero point per tensor, per channel
// along an axis, or per block of N elements along an axis, and the matching dequantisation.
//
//   q = clamp(round(x / scale) + zero_point, qmin, qmax)        x / scale exact, rounded once
//   x' = (q - zero_point) * scale                              exact, rounded once into `out`
//
// The quotient is formed exactly (128-bit division) and rounded by the one rounding kernel, so
// every Rounding mode, stochastic included, means what it says; no double rounding through a
// float quotient.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "numeq/formats/array.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/formats/names.hpp"

namespace numeq {

enum class QuantRange : std::uint8_t {
  full,       // every code: int8 [-128, 127], uint8 [0, 255]
  symmetric,  // the lowest code dropped: int8 [-127, 127], uint8 [1, 255] (TFLite narrow_range)
};

QuantRange quant_range_by_name(std::string_view name, std::string_view parameter = "range");

struct Quantization {
  Format format = formats::int8;  // int8, uint8 or int32
  Rounding rounding = Rounding::nearest_even;
  QuantRange range = QuantRange::full;
  std::uint64_t seed = 0;          // stochastic rounding key
  int random_bits = default_random_bits;

  std::int64_t qmin() const { return format.int_min() + (range == QuantRange::symmetric ? 1 : 0); }
  std::int64_t qmax() const { return format.int_max(); }
};

// Where each element finds its scale and zero point. The parameter arrays have x's rank; along
// `axis` they hold shape[axis] / block_size entries, along every other dimension either
// x.shape[d] entries or 1 (broadcast). Per tensor: all ones; per channel along axis a: block 1,
// shape[a] entries there; per block of N along a: block N.
struct QuantGroups {
  std::vector<std::size_t> shape;  // of the scale / zero-point arrays
  int axis = 0;
  std::size_t block_size = 1;
};

// Builds QuantGroups for x's shape and checks them: axis in range, block_size divides the axis,
// parameter shape compatible. Throws numeq::error naming the argument.
QuantGroups quant_groups(const std::vector<std::size_t>& x_shape, std::vector<std::size_t> param_shape,
                         int axis, std::size_t block_size);

// q[i] for every element of x (float values). scale[k] > 0 finite; zero_point[k] within the
// format's range. Output: int64 codes, contiguous in C order.
void quantize_into(const BitsView& x, const Quantization& q, const double* scale,
                   const std::int64_t* zero_point, const QuantGroups& groups, std::int64_t* out);

// x'[i] = (q[i] - zero_point) * scale rounded into `out` (nearest-even fp64 by default: exact for
// every 8-bit code times an fp32 scale).
void dequantize_into(const std::int64_t* codes, const std::vector<std::size_t>& shape,
                     const double* scale, const std::int64_t* zero_point, const QuantGroups& groups,
                     const Cast& out, double* values);

// Per-group parameters from data, over each group's range widened to include zero:
//   symmetric: scale = max(|min|, max) / ((qmax - qmin) / 2), zero point = the middle code
//              (0 for int8 [-127, 127], 128 for uint8 [1, 255]);
//   full:      scale = (max - min) / (qmax - qmin), zero point = qmin - round(min / scale).
// The range and the quotient are formed exactly and the scale is rounded once to fp32 (how scales
// are stored on every platform numeq models); an all-zero group gets scale 1. A scale beyond
// fp32's range is an error naming x.
void quant_params_into(const BitsView& x, const Quantization& q, const QuantGroups& groups,
                       double* scale, std::int64_t* zero_point);

}  // namespace numeq
