// The quantised Op factories (op.hpp): scaled fp8 and block-scaled matmuls, the requantised
// integer matmul, quantisation and dequantisation.

#include "numeq/cases/op.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "numeq/cases/quantized.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/shape.hpp"
#include "op_common.hpp"

namespace numeq::cases {

using namespace op_detail;

// ---- quantised matmuls ----

namespace {

// The scale that multiplies a[i, k] (is_a) or b[k, j] under the scaling layout (quantized.hpp).
double scale_at(const Array& s, Fp8Scaling scaling, bool is_a, std::size_t row, std::size_t col) {
  const double* p = s.data();
  switch (scaling) {
    case Fp8Scaling::per_tensor: return p[0];
    case Fp8Scaling::per_channel: return p[is_a ? row : col];  // a: one per row i; b: one per column j
    case Fp8Scaling::blockwise:
      // a [M, K/128]: (i, k / 128); b [K/128, ceil(N/128)]: (k / 128, j / 128).
      return is_a ? p[row * s.shape()[1] + col / kDeepSeekBlock]
                  : p[(row / kDeepSeekBlock) * s.shape()[1] + col / kDeepSeekBlock];
    case Fp8Scaling::mx:
      // a [M, K/32]: (i, k / 32); b [K/32, N]: (k / 32, j).
      return is_a ? p[row * s.shape()[1] + col / kMxBlock] : p[(row / kMxBlock) * s.shape()[1] + col];
  }
  return 0;
}

// The layout of quantized.hpp, checked before any index is read: per_tensor one value; per_channel
// one per row of a / column of b; blockwise a [M, K/128], b [K/128, ceil(N/128)]; mx a [M, K/32],
// b [K/32, N]. Every scale positive and finite.
void check_scales(const Array& s, Fp8Scaling scaling, bool is_a, std::size_t rows, std::size_t cols,
                  const char* parameter) {
  const auto up = [](std::size_t n, std::size_t d) { return (n + d - 1) / d; };
  std::size_t want_rows = 1, want_cols = 1, block = 0;
  switch (scaling) {
    case Fp8Scaling::per_tensor: break;
    case Fp8Scaling::per_channel: (is_a ? want_rows : want_cols) = is_a ? rows : cols; break;
    case Fp8Scaling::blockwise:
      block = kDeepSeekBlock;
      want_rows = is_a ? rows : rows / block;
      want_cols = is_a ? cols / block : up(cols, block);
      break;
    case Fp8Scaling::mx:
      block = kMxBlock;
      want_rows = is_a ? rows : rows / block;
      want_cols = is_a ? cols / block : cols;
      break;
  }
  const std::size_t k = is_a ? cols : rows;
  if (block && k % block != 0)
    throw numeq::error(std::string(parameter) + ": K = " + std::to_string(k) + " is not a multiple of the " +
                       std::to_string(block) + "-element block of " + std::string(to_string(scaling)) + " scaling");
  const bool per_tensor_ok = scaling == Fp8Scaling::per_tensor && s.size() == 1;
  const bool two_d_ok = s.dimension() == 2 && s.shape()[0] == want_rows && s.shape()[1] == want_cols;
  const bool one_d_ok = scaling == Fp8Scaling::per_channel && s.dimension() == 1 && s.size() == want_rows * want_cols;
  if (!per_tensor_ok && !two_d_ok && !one_d_ok)
    throw numeq::error(std::string(parameter) + ": shape " + shape_text(s) + " does not fit " +
                       std::string(to_string(scaling)) + " scaling (expected [" + std::to_string(want_rows) + "," +
                       std::to_string(want_cols) + "])");
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!(s.data()[i] > 0) || !std::isfinite(s.data()[i]))
      throw numeq::error(std::string(parameter) + ": element " + std::to_string(i) + " = " + std::to_string(s.data()[i]) +
                         "; scales must be positive and finite");
}

// x with every element multiplied by its scale: exact in binary64 (an 8-bit significand times a
// 24-bit one).
Array scaled(const Array& x, const Array& s, Fp8Scaling scaling, bool is_a) {
  Array r = x;
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) r(i, j) = x(i, j) * scale_at(s, scaling, is_a, i, j);
  return r;
}

}  // namespace

Op scaled_fp8_matmul(const Array& a, const Array& b, const Array& scale_a, const Array& scale_b, std::string_view in_fmt,
                     const ScaledMatmulOptions& options) {
  const Format& fin = floating_format(in_fmt, "in_fmt");
  const Format& fout = floating_format(options.out_fmt, "out");
  if (a.dimension() != 2 || b.dimension() != 2)
    throw numeq::error("a, b: a scaled fp8 matmul takes 2-D operands a[M, K] and b[K, N], got " + shape_text(a) +
                       " and " + shape_text(b));
  check_values(a, fin, "a");
  check_values(b, fin, "b");
  if (a.shape()[1] != b.shape()[0])
    throw numeq::error("b: inner dimensions differ: a " + shape_text(a) + " has K=" + std::to_string(a.shape()[1]) +
                       ", b " + shape_text(b) + " has K=" + std::to_string(b.shape()[0]));
  check_scales(scale_a, options.scaling, true, a.shape()[0], a.shape()[1], "scale_a");
  check_scales(scale_b, options.scaling, false, b.shape()[0], b.shape()[1], "scale_b");
  const auto sa = std::make_shared<const Array>(a), sb = std::make_shared<const Array>(b);
  const auto ssa = std::make_shared<const Array>(scale_a), ssb = std::make_shared<const Array>(scale_b);
  Op op;
  op.name = "scaled_fp8_matmul";
  op.signature = "scaled_fp8_matmul[" + std::string(to_string(options.scaling)) + "](a" + signature_shape(a) + " @ b" +
                 signature_shape(b) + " " + std::string(in_fmt) + ") -> " + options.out_fmt;
  op.out = Cast{fout};
  const Fp8Scaling scaling = options.scaling;
  const auto operands = [sa, sb, ssa, ssb, scaling] {
    return std::pair{scaled(*sa, *ssa, scaling, true), scaled(*sb, *ssb, scaling, false)};
  };
  op.exact = [operands] {
    const auto [x, y] = operands();
    return reference::matmul_exact(x, y);
  };
  const Cast out{fout};
  op.reference = [operands, out] {
    const auto [x, y] = operands();
    return reference::matmul(x, y, out);
  };
  const std::string fmt(in_fmt);
  op.emulate = [sa, sb, ssa, ssb, fmt, options](const core::Platform& platform, const core::BoundOptions& bound) {
    ScaledMatmulOptions o = options;
    o.bound = bound;
    return cases::scaled_fp8_matmul(*sa, *sb, *ssa, *ssb, platform, fmt, o);
  };
  return op;
}

Op integer_matmul(const Array& a, const Array& b, Int32Overflow overflow) {
  if (a.dimension() != 2 || b.dimension() != 2 || a.shape()[1] != b.shape()[0])
    throw numeq::error("a, b: int8_matmul takes a[M, K] and b[K, N], got " + shape_text(a) + " and " + shape_text(b));
  const auto sa = std::make_shared<const Array>(a), sb = std::make_shared<const Array>(b);
  Op op;
  op.name = "int8_matmul";
  op.signature = "int8_matmul(a" + signature_shape(a) + " @ b" + signature_shape(b) + ") -> int32";
  op.out = Cast{formats::int32};
  op.exact = [sa, sb] { return reference::matmul_exact(*sa, *sb); };
  // Integer products and sums are exact in the long accumulator; within int32 they are the result.
  op.reference = [sa, sb] { return reference::matmul(*sa, *sb, Cast{formats::fp64}); };
  op.emulate = [sa, sb, overflow](const core::Platform&, const core::BoundOptions&) {
    return cases::int8_matmul(*sa, *sb, overflow);
  };
  return op;
}

Op conversion(const Array& x, std::string_view in_fmt, const Cast& out) {
  check_values(x, floating_format(in_fmt, "in_fmt"), "x");
  floating_format(out.format.name, "out");
  const auto sx = std::make_shared<const Array>(x);
  Op op;
  op.name = "cast";
  op.signature = "cast(x" + signature_shape(x) + " " + std::string(in_fmt) + ") -> " + std::string(out.format.name) + " " +
                 std::string(to_string(out.rounding));
  op.out = out;
  op.exact = [sx] { return certified(*sx); };
  op.reference = [sx, out] {
    Array r = *sx;
    for (std::size_t i = 0; i < r.size(); ++i) r.data()[i] = round_to_format(r.data()[i], out, i);
    return r;
  };
  op.emulate = [sx, out](const core::Platform&, const core::BoundOptions&) { return cases::cast(*sx, out); };
  return op;
}

// ---- requantised integer matmul ----

namespace {

// hi + lo (|lo| well below one) rounded to an integer exactly, for the deterministic roundings.
double round_to_integer(double hi, double lo, Rounding rounding) {
  double n = std::floor(hi);
  double f = (hi - n) + lo;  // hi - n is exact (|hi| < 2^53 here)
  if (f < 0) n -= 1, f += 1;
  if (f >= 1) n += 1, f -= 1;
  if (f == 0) return n;
  const bool positive = n >= 0;  // the value n + f lies in (n, n + 1)
  switch (rounding) {
    case Rounding::nearest_even: return f > 0.5 ? n + 1 : f < 0.5 ? n : (std::fmod(n, 2.0) == 0 ? n : n + 1);
    case Rounding::nearest_away: return f > 0.5 ? n + 1 : f < 0.5 ? n : (positive ? n + 1 : n);
    case Rounding::toward_zero: return positive ? n : n + 1;
    case Rounding::upward: return n + 1;
    case Rounding::downward: return n;
    default: break;
  }
  throw numeq::error("rounding: the requantisation reference takes nearest_even, nearest_away, toward_zero, upward or "
                     "downward");
}

}  // namespace

Op integer_matmul_requantized(const Array& a, const Array& b, const Requantization& r, Int32Overflow overflow) {
  if (a.dimension() != 2 || b.dimension() != 2 || a.shape()[1] != b.shape()[0])
    throw numeq::error("a, b: int8_matmul takes a[M, K] and b[K, N], got " + shape_text(a) + " and " + shape_text(b));
  if (r.quant.rounding == Rounding::odd || r.quant.rounding == Rounding::stochastic)
    throw numeq::error("rounding: the requantisation reference takes nearest_even, nearest_away, toward_zero, upward "
                       "or downward, got " + std::string(to_string(r.quant.rounding)));
  const auto sa = std::make_shared<const Array>(a), sb = std::make_shared<const Array>(b);
  Op op;
  op.name = "int8_matmul_requantized";
  op.signature = "int8_matmul_requantized(a" + signature_shape(a) + " @ b" + signature_shape(b) + ") -> " +
                 std::string(r.quant.format.name);
  op.out = Cast{r.quant.format, r.quant.rounding};
  const double qmin = static_cast<double>(r.quant.qmin()), qmax = static_cast<double>(r.quant.qmax());
  const double zp = static_cast<double>(r.zero_point), m = r.multiplier;
  // acc * m as a double-double (an error-free product by fma), then zp, then the clamp.
  op.exact = [sa, sb, m, zp, qmin, qmax] {
    reference::ExactValues acc = reference::matmul_exact(*sa, *sb);
    for (std::size_t i = 0; i < acc.hi.size(); ++i) {
      const double x = acc.hi.data()[i] + acc.lo.data()[i];  // an integer below 2^53: exact
      const double p = x * m, e = std::fma(x, m, -p);
      const double s = p + zp, t = (p - (s - (s - p))) + (zp - (s - p));
      double h = s, l = t + e;
      if (h + l <= qmin) h = qmin, l = 0;
      if (h + l >= qmax) h = qmax, l = 0;
      acc.hi.data()[i] = h;
      acc.lo.data()[i] = l;
    }
    return acc;
  };
  const Rounding rounding = r.quant.rounding;
  op.reference = [sa, sb, m, zp, qmin, qmax, rounding] {
    Array out = reference::matmul(*sa, *sb, Cast{formats::fp64});
    for (double& v : out) {
      const double p = v * m, e = std::fma(v, m, -p);
      v = std::clamp(round_to_integer(p, e, rounding) + zp, qmin, qmax);
    }
    return out;
  };
  op.emulate = [sa, sb, r, overflow](const core::Platform&, const core::BoundOptions&) {
    return cases::int8_matmul_requantized(*sa, *sb, r, overflow);
  };
  return op;
}

// ---- quantisation ----

namespace {

// The index of element i's scale / zero point (C order) under quantize.hpp's groups.
std::size_t group_index(std::size_t i, const std::vector<std::size_t>& x_shape, const QuantGroups& g) {
  std::size_t flat = 0, stride = 1;
  for (std::size_t d = x_shape.size(); d-- > 0;) {
    std::size_t idx = i % x_shape[d];
    i /= x_shape[d];
    if (static_cast<int>(d) == g.axis) idx /= g.block_size;
    if (g.shape[d] == 1) idx = 0;
    flat += idx * stride;
    stride *= g.shape[d];
  }
  return flat;
}

struct QuantSetup {
  std::vector<std::size_t> shape;
  QuantGroups groups;
};

QuantSetup quant_setup(const Array& x, const Array& scale, const xt::xarray<std::int64_t>& zero_point, int axis,
                       std::size_t block_size) {
  QuantSetup s;
  s.shape.assign(x.shape().begin(), x.shape().end());
  s.groups = quant_groups(s.shape, std::vector<std::size_t>(scale.shape().begin(), scale.shape().end()), axis, block_size);
  if (!std::equal(zero_point.shape().begin(), zero_point.shape().end(), scale.shape().begin(), scale.shape().end()))
    throw numeq::error("zero_point: shape differs from scale's " + shape_text(scale));
  for (std::size_t i = 0; i < scale.size(); ++i)
    if (!(scale.data()[i] > 0) || !std::isfinite(scale.data()[i]))
      throw numeq::error("scale: element " + std::to_string(i) + " = " + std::to_string(scale.data()[i]) +
                         "; scales must be positive and finite");
  return s;
}

}  // namespace

Op quantization(const Array& x, std::string_view in_fmt, const Quantization& q, const Array& scale,
                const xt::xarray<std::int64_t>& zero_point, int axis, std::size_t block_size) {
  check_values(x, floating_format(in_fmt, "in_fmt"), "x");
  const QuantSetup setup = quant_setup(x, scale, zero_point, axis, block_size);
  const auto sx = std::make_shared<const Array>(x), ss = std::make_shared<const Array>(scale);
  const auto sz = std::make_shared<const xt::xarray<std::int64_t>>(zero_point);
  Op op;
  op.name = "quantize";
  op.signature = "quantize(x" + signature_shape(x) + " " + std::string(in_fmt) + ") -> " + std::string(q.format.name);
  op.out = Cast{q.format, q.rounding};
  // clamp(x / s + z): the quotient as a double-double (q + r / s, r = x - q s exact by fma) and
  // z added by an error-free sum, so that hi + lo carries the exact value to about 2^-106.
  op.exact = [sx, ss, sz, setup, q] {
    reference::ExactValues r{*sx, xt::zeros<double>(sx->shape())};
    for (std::size_t i = 0; i < sx->size(); ++i) {
      const std::size_t g = group_index(i, setup.shape, setup.groups);
      const double s = ss->data()[g], z = static_cast<double>(sz->data()[g]), value = sx->data()[i];
      const double quotient = value / s;
      const double rest = std::fma(-quotient, s, value) / s;
      const double hi = quotient + z;
      const double err = (quotient - (hi - (hi - quotient))) + (z - (hi - quotient));
      double h = hi, l = err + rest;
      const double lo_q = static_cast<double>(q.qmin()), hi_q = static_cast<double>(q.qmax());
      if (h + l <= lo_q) h = lo_q, l = 0;
      if (h + l >= hi_q) h = hi_q, l = 0;
      r.hi.data()[i] = h;
      r.lo.data()[i] = l;
    }
    return r;
  };
  op.reference = [sx, ss, sz, q, axis, block_size] { return cases::quantize(*sx, q, *ss, *sz, axis, block_size).values; };
  op.emulate = [sx, ss, sz, q, axis, block_size](const core::Platform&, const core::BoundOptions&) {
    return cases::quantize(*sx, q, *ss, *sz, axis, block_size);
  };
  return op;
}

Op dequantization(const Array& codes, const Quantization& q, const Array& scale,
                  const xt::xarray<std::int64_t>& zero_point, int axis, std::size_t block_size, const Cast& out) {
  floating_format(out.format.name, "out");
  integer_codes(codes, q);  // checked where the op is built: the exact value reads them too
  const QuantSetup setup = quant_setup(codes, scale, zero_point, axis, block_size);
  const auto sc = std::make_shared<const Array>(codes), ss = std::make_shared<const Array>(scale);
  const auto sz = std::make_shared<const xt::xarray<std::int64_t>>(zero_point);
  Op op;
  op.name = "dequantize";
  op.signature = "dequantize(codes" + signature_shape(codes) + " " + std::string(q.format.name) + ") -> " +
                 std::string(out.format.name);
  op.out = out;
  // (c - z) s: c - z is exact in binary64 (|c - z| < 2^33 for int32 codes); the product as a
  // double-double by fma (error-free), exact for every code width and binary64 scale.
  op.exact = [sc, ss, sz, setup] {
    reference::ExactValues r{*sc, xt::zeros<double>(sc->shape())};
    for (std::size_t i = 0; i < sc->size(); ++i) {
      const std::size_t g = group_index(i, setup.shape, setup.groups);
      const double steps = sc->data()[i] - static_cast<double>(sz->data()[g]), s = ss->data()[g];
      const double p = steps * s;
      r.hi.data()[i] = p;
      r.lo.data()[i] = std::isfinite(p) ? std::fma(steps, s, -p) : 0.0;
    }
    return r;
  };
  op.reference = [op_exact = op.exact, out] {
    reference::ExactValues e = op_exact();
    Array v = std::move(e.hi);
    // hi is the product rounded to nearest binary64: already the answer for fp64 nearest-even
    // output; otherwise round-to-odd from (hi, sign of lo), then into out (round_quotient).
    const bool hi_is_it = out.format == formats::fp64 && out.rounding == Rounding::nearest_even;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double lo = e.lo.data()[i];
      v.data()[i] = lo == 0 || hi_is_it ? round_to_format(v.data()[i], out, i) : round_quotient(v.data()[i], lo, out);
    }
    return v;
  };
  op.emulate = [sc, ss, sz, q, axis, block_size, out](const core::Platform&, const core::BoundOptions&) {
    return cases::dequantize(*sc, q, *ss, *sz, axis, block_size, out);
  };
  return op;
}

}  // namespace numeq::cases
