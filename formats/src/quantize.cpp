#include "numeq/formats/quantize.hpp"

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "numeq/formats/error.hpp"
#include "numeq/formats/shape.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/exact.hpp"
#include "strided.hpp"

namespace numeq {
namespace {

// Rounding to an integer is rounding to a binary format whose subnormal spacing is 1: with 52
// fraction bits and bias -51 the smallest normal is 2^52, so every magnitude below 2^52 packs as
// a subnormal whose pattern is the integer itself. The one rounding kernel does the rest.
constexpr Format integer_grid{"integer-grid", FormatKind::floating, 64, 11, 52, -51,
                              true, true, Specials::ieee, 0};
constexpr std::uint64_t grid_limit = std::uint64_t{1} << 52;

Cast grid_cast(const Quantization& q) {
  return Cast{integer_grid, q.rounding, Overflow::saturate, Subnormals::keep, q.seed, q.random_bits};
}

// round(value) as an integer clamped to [lo, hi], from a rounded integer-grid pattern.
std::int64_t clamp_grid(std::uint64_t bits, std::int64_t add, std::int64_t lo, std::int64_t hi) {
  const bool negative = (bits >> 63) != 0;
  const std::uint64_t magnitude = bits & ~(std::uint64_t{1} << 63);
  if (magnitude >= grid_limit) return negative ? lo : hi;
  const std::int64_t value = (negative ? -static_cast<std::int64_t>(magnitude)
                                       : static_cast<std::int64_t>(magnitude)) + add;
  return value < lo ? lo : (value > hi ? hi : value);
}

Unpacked unpack_integer(std::int64_t k) {
  const Exact e = normalize(k < 0, static_cast<uint128>(k < 0 ? -static_cast<uint128>(k) : k), 0);
  Unpacked u;
  u.cls = ValueClass::finite;
  u.negative = e.negative;
  u.exponent = e.exponent;
  u.significand = e.significand;
  return u;
}

// (a + b) / divisor, formed exactly and handed over as 64 leading bits + sticky; a, b >= 0 finite,
// not both zero; divisor >= 1. (Used for scale = range / steps: rounding the range to a double
// first would round twice.)
Exact exact_sum_over(double a, double b, std::uint64_t divisor) {
  if (a < b) std::swap(a, b);
  const Unpacked large = unpack_double(a);
  // 128-bit fixed point with unit 2^(Ea - 126): a's significand sits at bits 126..63.
  uint128 sum = static_cast<uint128>(large.significand) << 63;
  bool sticky = false;
  if (b != 0) {
    const Unpacked small = unpack_double(b);
    const int shift = small.exponent - large.exponent + 63;  // <= 63: b <= a
    if (shift >= 0) {
      sum += static_cast<uint128>(small.significand) << shift;
    } else if (shift > -64) {
      sum += small.significand >> -shift;
      sticky = (small.significand << (64 + shift)) != 0;
    } else {
      sticky = true;
    }
  }
  // Bits lost from b are worth less than one unit, so they never change the integer quotient.
  const uint128 quotient = sum / divisor;
  sticky = sticky || sum % divisor != 0;
  Exact e = normalize(false, quotient, large.exponent - 126);
  e.sticky = e.sticky || sticky;
  return e;
}

// Index of the parameter that serves C-order element i of an array of shape x_shape.
std::size_t group_of(std::size_t i, const std::vector<std::size_t>& x_shape, const QuantGroups& g) {
  std::size_t group = 0;
  std::size_t stride = 1;
  for (std::size_t d = x_shape.size(); d-- > 0;) {
    const std::size_t index = i % x_shape[d];
    i /= x_shape[d];
    if (g.shape[d] != 1) {
      group += (static_cast<int>(d) == g.axis ? index / g.block_size : index) * stride;
    }
    stride *= g.shape[d];
  }
  return group;
}

std::size_t product(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t s : shape) n *= s;
  return n;
}

void check_format(const Format& f) {
  if (!f.is_integer())
    throw error("fmt: quantize needs an integer format (int8, uint8, int32), got '" +
                std::string(f.name) + "'; floating formats are reached with round/encode");
}

void check_parameters(const Quantization& q, const double* scale, const std::int64_t* zero_point,
                      std::size_t groups) {
  check_format(q.format);
  if (q.random_bits < 1 || q.random_bits > 64)
    throw error("random_bits: must be between 1 and 64, got " + std::to_string(q.random_bits));
  for (std::size_t k = 0; k < groups; ++k) {
    if (!(scale[k] > 0) || !std::isfinite(scale[k]))
      throw error("scale: every scale must be finite and > 0, got " + std::to_string(scale[k]) +
                  " at index " + std::to_string(k));
    if (zero_point[k] < q.format.int_min() || zero_point[k] > q.format.int_max())
      throw error("zero_point: " + std::to_string(zero_point[k]) + " at index " +
                  std::to_string(k) + " lies outside " + std::string(q.format.name) + "'s range [" +
                  std::to_string(q.format.int_min()) + ", " + std::to_string(q.format.int_max()) + "]");
  }
}

}  // namespace

QuantRange quant_range_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<QuantRange>, name, parameter, "range");
}

QuantGroups quant_groups(const std::vector<std::size_t>& x_shape, std::vector<std::size_t> param_shape,
                         int axis, std::size_t block_size) {
  const int rank = static_cast<int>(x_shape.size());
  QuantGroups g;
  if (rank == 0) {
    g.shape = {};
    g.axis = 0;
    if (product(param_shape) != 1) throw error("scale: a 0-d x takes one scale");
    return g;
  }
  g.axis = static_cast<int>(axis_index(axis, x_shape));
  if (block_size == 0) throw error("block_size: must be >= 1");
  const std::size_t along = x_shape[static_cast<std::size_t>(g.axis)];
  if (along % block_size != 0)
    throw error("block_size: " + std::to_string(block_size) + " does not divide axis " +
                std::to_string(g.axis) + " of length " + std::to_string(along));
  g.block_size = block_size;
  if (param_shape.size() != x_shape.size())
    throw error("scale: has rank " + std::to_string(param_shape.size()) + ", x has rank " +
                std::to_string(rank));
  for (int d = 0; d < rank; ++d) {
    const std::size_t want = d == g.axis ? along / block_size : x_shape[static_cast<std::size_t>(d)];
    const std::size_t got = param_shape[static_cast<std::size_t>(d)];
    if (got != 1 && got != want)
      throw error("scale: dimension " + std::to_string(d) + " has " + std::to_string(got) +
                  " entries; expected " + std::to_string(want) + " or 1");
  }
  g.shape = std::move(param_shape);
  return g;
}

void quantize_into(const BitsView& x, const Quantization& q, const double* scale,
                   const std::int64_t* zero_point, const QuantGroups& groups, std::int64_t* out) {
  check_parameters(q, scale, zero_point, product(groups.shape));
  const Cast cast = grid_cast(q);
  const std::int64_t lo = q.qmin();
  const std::int64_t hi = q.qmax();
  const std::uint64_t key = random_stream_key(q.seed);
  const bool contiguous = detail::is_contiguous(x);
  std::atomic<bool> saw_nan{false};
  detail::with_width(x.element_bytes, [&]<class In>() {
    const Format source = *x.format;
    parallel_for(x.size(), [&](std::size_t begin, std::size_t end) {
      detail::for_each_offset(x, contiguous, begin, end, [&](std::size_t i, std::ptrdiff_t offset) {
        const Unpacked v = unpack(source, detail::load<In>(x.data, offset));
        const std::size_t k = group_of(i, x.shape, groups);
        const std::int64_t zp = zero_point[k];
        switch (v.cls) {
          case ValueClass::nan: saw_nan = true; out[i] = zp; return;
          case ValueClass::infinity: out[i] = v.negative ? lo : hi; return;  // saturation
          case ValueClass::zero: out[i] = zp < lo ? lo : (zp > hi ? hi : zp); return;
          case ValueClass::finite: break;
        }
        const std::uint64_t random =
            q.rounding == Rounding::stochastic ? random_bits_at(key, i) : 0;
        const std::uint64_t bits =
            round_and_pack(cast, exact_quotient(v, unpack_double(scale[k])), random);
        out[i] = clamp_grid(bits, zp, lo, hi);
      });
    });
  });
  if (saw_nan) throw error("x: contains NaN; integer formats have no NaN to quantise it to");
}

void dequantize_into(const std::int64_t* codes, const std::vector<std::size_t>& shape,
                     const double* scale, const std::int64_t* zero_point, const QuantGroups& groups,
                     const Cast& out, double* values) {
  validate(out, "out");
  const std::size_t n = product(shape);
  for (std::size_t k = 0, count = product(groups.shape); k < count; ++k)
    if (!(scale[k] > 0) || !std::isfinite(scale[k]))
      throw error("scale: every scale must be finite and > 0, got " + std::to_string(scale[k]) +
                  " at index " + std::to_string(k));
  parallel_for(n, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const std::size_t k = group_of(i, shape, groups);
      std::int64_t steps = 0;
      // codes far outside every integer format (an unsigned 2^64 - 1 read as int64) would wrap here.
      if (__builtin_sub_overflow(codes[i], zero_point[k], &steps))
        throw error("codes: element " + std::to_string(i) + " = " + std::to_string(codes[i]) + " minus zero point " +
                    std::to_string(zero_point[k]) + " overflows int64; codes are integers of an integer format");
      if (steps == 0) {
        values[i] = 0.0;
        continue;
      }
      const Exact product = exact_product(unpack_integer(steps), unpack_double(scale[k]));
      values[i] = decode_bits(out.format, round_and_pack(out, product, 0));
    }
  });
}

void quant_params_into(const BitsView& x, const Quantization& q, const QuantGroups& groups,
                       double* scale, std::int64_t* zero_point) {
  check_format(q.format);
  const std::size_t count = product(groups.shape);
  std::vector<double> low(count, 0.0);
  std::vector<double> high(count, 0.0);  // groups always include zero: min <= 0 <= max
  detail::with_width(x.element_bytes, [&]<class In>() {
    detail::for_each_offset(x, detail::is_contiguous(x), 0, x.size(), [&](std::size_t i, std::ptrdiff_t offset) {
      const double v = decode_bits(*x.format, detail::load<In>(x.data, offset));
      if (!std::isfinite(v)) throw error("x: quant_params needs finite values; element " + std::to_string(i) + " is " + std::to_string(v));
      const std::size_t k = group_of(i, x.shape, groups);
      low[k] = std::min(low[k], v);
      high[k] = std::max(high[k], v);
    });
  });
  const Cast to_fp32{formats::fp32};
  const Cast nearest{integer_grid};
  const std::int64_t qmin = q.qmin();
  const std::int64_t qmax = q.qmax();
  const bool symmetric = q.range == QuantRange::symmetric;
  // qmax - qmin is even in symmetric ranges (int8 254, uint8 254, int32 2^32 - 2).
  const auto steps = static_cast<std::uint64_t>(symmetric ? (qmax - qmin) / 2 : qmax - qmin);
  for (std::size_t k = 0; k < count; ++k) {
    const double a = symmetric ? std::max(-low[k], high[k]) : high[k];
    const double b = symmetric ? 0.0 : -low[k];
    if (a == 0 && b == 0) {
      scale[k] = 1.0;
    } else {
      scale[k] = decode_bits(formats::fp32, round_and_pack(to_fp32, exact_sum_over(a, b, steps), 0));
      if (std::isinf(scale[k]))
        throw error("x: the range of group " + std::to_string(k) +
                    " needs a scale beyond fp32's largest value");
      if (scale[k] == 0) scale[k] = min_subnormal(formats::fp32);
    }
    if (symmetric) {
      zero_point[k] = (qmin + qmax) / 2;  // the middle code: 0 for int8, 128 for uint8
    } else {
      // zero_point = qmin - round(min / scale): the code that represents 0 exactly.
      std::int64_t offset = 0;
      if (low[k] != 0)
        offset = clamp_grid(round_and_pack(nearest, exact_quotient(unpack_double(low[k]), unpack_double(scale[k])), 0),
                            0, -(std::int64_t{1} << 62), std::int64_t{1} << 62);
      const std::int64_t zp = qmin - offset;
      zero_point[k] = zp < qmin ? qmin : (zp > qmax ? qmax : zp);
    }
  }
}

}  // namespace numeq
