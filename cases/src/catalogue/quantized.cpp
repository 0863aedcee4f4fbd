#include "numeq/cases/quantized.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "numeq/core/evaluate.hpp"
#include "numeq/formats/array.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::cases {

namespace {

constexpr double kU32 = 0x1p-24;    // unit roundoff of fp32 (FACTS.md s4)
constexpr double kEta32 = 0x1p-150;  // half the smallest fp32 subnormal: what a nearest rounding can
                                     // lose below the normal range, absolutely
// Bounds are sums of a few products of doubles per block; their own relative rounding stays far
// below 2^-40 for any K this library evaluates, so a relative 2^-30 keeps them upper bounds.
double widen(double b) { return b * (1.0 + 0x1p-30); }

std::string shape_string(const xt::xarray<double>& x) {
  std::string s = "(";
  for (std::size_t d = 0; d < x.dimension(); ++d) s += (d ? ", " : "") + std::to_string(x.shape()[d]);
  return s + (x.dimension() == 1 ? ",)" : ")");
}

void require_2d(const xt::xarray<double>& x, std::string_view name) {
  if (x.dimension() != 2)
    throw error(std::string(name) + ": expected a 2-D array, got shape " + shape_string(x));
}

// The sizes of a[M, K] @ b[K, N], both 2-D with matching K (else an error naming the operand).
struct MatmulSizes {
  std::size_t M, K, N;
};
MatmulSizes matmul_sizes(const xt::xarray<double>& a, const xt::xarray<double>& b) {
  require_2d(a, "a");
  require_2d(b, "b");
  const std::size_t K = a.shape()[1];
  if (b.shape()[0] != K)
    throw error("b: shape " + shape_string(b) + " does not match a " + shape_string(a) +
                " (a is [M, K], b is [K, N]: b needs " + std::to_string(K) + " rows)");
  return {a.shape()[0], K, b.shape()[1]};
}

// Every element is a value of fmt (or a NaN, whose outputs get a NaN bound).
void require_values_of(const xt::xarray<double>& x, const Format& fmt, std::string_view name) {
  const Cast exact{fmt};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x.data()[i];
    if (std::isnan(v)) continue;
    const double r = round_to_format(v, exact);
    if (!(r == v))
      throw error(std::string(name) + ": element " + std::to_string(i) + " = " + std::to_string(v) +
                  " is not a value of " + std::string(fmt.name));
  }
}

bool is_fp32_value(double v) { return static_cast<double>(static_cast<float>(v)) == v; }

// Float scales: positive, finite, and fp32 values (how every platform stores them).
void require_fp32_scales(const xt::xarray<double>& s, std::string_view name) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const double v = s.data()[i];
    if (!(v > 0) || !std::isfinite(v))
      throw error(std::string(name) + ": every scale must be finite and > 0, got " + std::to_string(v) +
                  " at index " + std::to_string(i));
    if (!is_fp32_value(v))
      throw error(std::string(name) + ": scale " + std::to_string(v) + " at index " + std::to_string(i) +
                  " is not an fp32 value (scales are stored as float32)");
  }
}

// MX scales: E8M0 values, i.e. powers of two 2^-127 .. 2^127 (OCP MX v1.0 s5.4; FACTS.md s1).
void require_e8m0_scales(const xt::xarray<double>& s, std::string_view name) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const double v = s.data()[i];
    int e = 0;
    const bool power_of_two = v > 0 && std::isfinite(v) && std::frexp(v, &e) == 0.5;
    if (!power_of_two || e - 1 < -127 || e - 1 > 127)
      throw error(std::string(name) + ": MX scales are E8M0 values (powers of two 2^-127 .. 2^127, finite, > 0); got " +
                  std::to_string(v) + " at index " + std::to_string(i));
  }
}

void require_shape(const xt::xarray<double>& s, std::string_view name, const std::vector<std::size_t>& want,
                   std::string_view why) {
  const std::vector<std::size_t> got(s.shape().begin(), s.shape().end());
  if (got == want) return;
  std::string w = "(";
  for (std::size_t d = 0; d < want.size(); ++d) w += (d ? ", " : "") + std::to_string(want[d]);
  w += want.size() == 1 ? ",)" : ")";
  throw error(std::string(name) + ": expected shape " + w + " (" + std::string(why) + "), got " + shape_string(s));
}

std::size_t count_of(const xt::xarray<double>& s) { return s.size(); }

// Columns k0 .. k1-1 of a [M, K]; rows k0 .. k1-1 of b [K, N].
xt::xarray<double> columns(const xt::xarray<double>& a, std::size_t k0, std::size_t k1) {
  const std::size_t M = a.shape()[0], K = a.shape()[1], w = k1 - k0;
  xt::xarray<double> out = xt::xarray<double>::from_shape({M, w});
  for (std::size_t i = 0; i < M; ++i)
    std::copy_n(a.data() + i * K + k0, w, out.data() + i * w);
  return out;
}
xt::xarray<double> rows(const xt::xarray<double>& b, std::size_t k0, std::size_t k1) {
  const std::size_t N = b.shape()[1];
  xt::xarray<double> out = xt::xarray<double>::from_shape({k1 - k0, N});
  std::copy_n(b.data() + k0 * N, (k1 - k0) * N, out.data());
  return out;
}

// The fp8 formats with an fp32-output matmul plan on the platform, for error messages.
std::string fp8_formats_of(const core::Platform& p) {
  std::set<std::string> names;
  for (const core::PlanEntry& e : p.plans)
    if (e.op == core::Operation::matmul && e.out_fmt == "fp32") {
      const Format& f = format_by_name(e.in_fmt);
      if (f.bits() == 8 && !f.is_integer()) names.insert(e.in_fmt);
    }
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

core::Plan fp8_plan(const core::Platform& platform, std::string_view in_fmt, const xt::xarray<double>& a,
                    const xt::xarray<double>& b) {
  const Format& f = format_by_name(in_fmt, "in_fmt");
  if (f.is_integer() || f.bits() != 8)
    throw error("in_fmt: a scaled fp8 matmul takes an 8-bit float format, got '" + std::string(in_fmt) +
                "'; platform " + platform.name + " has fp8 matmul plans for: " + fp8_formats_of(platform));
  try {
    const std::array<const double*, 2> data{a.data(), b.data()};
    const std::array<std::size_t, 2> sizes{a.size(), b.size()};
    return core::plan_for_values(platform, core::Operation::matmul, in_fmt, "fp32", data, sizes);
  } catch (const error& e) {
    if (std::string(e.what()).find("up to 240") != std::string::npos) throw;
    throw error("in_fmt: platform " + platform.name + " has no fp8 matmul plan for '" + std::string(in_fmt) +
                "' (with fp32 accumulation); its fp8 formats: " + fp8_formats_of(platform));
  }
}

const Cast& output_cast(std::string_view out_fmt, Cast& storage) {
  const Format& f = format_by_name(out_fmt, "out_fmt");
  if (!(f == formats::fp32 || f == formats::bf16 || f == formats::fp16))
    throw error("out_fmt: a scaled fp8 matmul writes fp32, bf16 or fp16, got '" + std::string(out_fmt) + "'");
  storage = Cast{f};
  return storage;
}

// The output cast (round to nearest even, as CUTLASS's epilogue converters round [code]) of the
// fp32 epilogue value v, whose distance to the exact result is at most `pre`.
void finish(const Cast& out, double v, double pre, double& value, double& bound) {
  if (out.format == formats::fp32) {
    value = v;  // v is already an fp32 value and its rounding is counted in pre
    bound = widen(pre);
    return;
  }
  value = round_to_format(v, out);
  bound = core::with_output_cast(out, value, widen(pre));
}

double failure_per_element(const core::Plan& plan, std::size_t n, std::size_t reductions,
                           const core::BoundOptions& options) {
  if (options.kind != core::BoundKind::probabilistic) return 0.0;
  // Union bound over the independent block reductions that enter one output element.
  const double f = core::reduction_weights(plan, n, false, options).failure_probability;
  return std::min(1.0, f * static_cast<double>(reductions));
}

}  // namespace

Fp8Scaling fp8_scaling_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<Fp8Scaling>, name, parameter, "scaling");
}

std::string_view mx_assumption() {
  return "mx_block_partials [assumed]: each 32-long K block is reduced from zero by the platform's fp8 plan into "
         "an fp32 partial, scaled exactly by 2^(ea+eb), and added to an fp32 accumulator (one rounding to nearest "
         "even); OCP MX v1.0 leaves the dot product's internal precision and order implementation-defined";
}

Emulation scaled_fp8_matmul(const xt::xarray<double>& a, const xt::xarray<double>& b,
                            const xt::xarray<double>& scale_a, const xt::xarray<double>& scale_b,
                            const core::Platform& platform, std::string_view in_fmt,
                            const ScaledMatmulOptions& options) {
  const auto [M, K, N] = matmul_sizes(a, b);
  if (K == 0) throw error("a: K must be positive, got shape " + shape_string(a));
  if (options.split_k == 0) throw error("split_k: must be >= 1 (1: no split)");
  if (options.split_k > 1 && options.scaling != Fp8Scaling::per_tensor && options.scaling != Fp8Scaling::per_channel)
    throw error("split_k: applies to per_tensor and per_channel scaling only (blockwise and MX cut K at every block)");
  if (options.split_k > K)
    throw error("split_k: " + std::to_string(options.split_k) + " parts exceed K = " + std::to_string(K));
  const core::Plan plan = options.split_k > 1
                              ? core::with_split_k(fp8_plan(platform, in_fmt, a, b), options.split_k,
                                                   options.split_mode, Cast{formats::fp32})
                              : fp8_plan(platform, in_fmt, a, b);
  const Format& fmt = format_by_name(in_fmt, "in_fmt");
  Cast out_storage;
  const Cast& out = output_cast(options.out_fmt, out_storage);

  // Scale shapes and values.
  switch (options.scaling) {
    case Fp8Scaling::per_tensor:
      if (count_of(scale_a) != 1) throw error("scale_a: per-tensor scaling takes one scale, got shape " + shape_string(scale_a));
      if (count_of(scale_b) != 1) throw error("scale_b: per-tensor scaling takes one scale, got shape " + shape_string(scale_b));
      break;
    case Fp8Scaling::per_channel:
      if (count_of(scale_a) != M || scale_a.dimension() > 2 || (scale_a.dimension() == 2 && scale_a.shape()[1] != 1))
        throw error("scale_a: per-channel scaling takes one scale per row of a: shape (" + std::to_string(M) + ",) or (" +
                    std::to_string(M) + ", 1), got " + shape_string(scale_a));
      if (count_of(scale_b) != N || scale_b.dimension() > 2 || (scale_b.dimension() == 2 && scale_b.shape()[0] != 1))
        throw error("scale_b: per-channel scaling takes one scale per column of b: shape (" + std::to_string(N) + ",) or (1, " +
                    std::to_string(N) + "), got " + shape_string(scale_b));
      break;
    case Fp8Scaling::blockwise:
      if (K % kDeepSeekBlock != 0)
        throw error("a: blockwise scaling needs K divisible by 128 (DeepSeek-V3 1x128 tiles), got K = " + std::to_string(K));
      require_shape(scale_a, "scale_a", {M, K / kDeepSeekBlock}, "one scale per row and 128-long K block");
      require_shape(scale_b, "scale_b", {K / kDeepSeekBlock, (N + kDeepSeekBlock - 1) / kDeepSeekBlock},
                    "one scale per 128x128 block of b");
      break;
    case Fp8Scaling::mx:
      if (K % kMxBlock != 0)
        throw error("a: MX scaling needs K divisible by 32 (OCP MX blocks), got K = " + std::to_string(K));
      require_shape(scale_a, "scale_a", {M, K / kMxBlock}, "one E8M0 scale per row and 32-long K block");
      require_shape(scale_b, "scale_b", {K / kMxBlock, N}, "one E8M0 scale per 32-long K block and column");
      break;
  }
  if (options.scaling == Fp8Scaling::mx) {
    require_e8m0_scales(scale_a, "scale_a");
    require_e8m0_scales(scale_b, "scale_b");
  } else {
    require_fp32_scales(scale_a, "scale_a");
    require_fp32_scales(scale_b, "scale_b");
  }
  require_values_of(a, fmt, "a");
  require_values_of(b, fmt, "b");

  Emulation r;
  r.values = xt::xarray<double>::from_shape({M, N});
  r.bound = xt::xarray<double>::from_shape({M, N});
  const double* sa = scale_a.data();
  const double* sb = scale_b.data();

  if (options.scaling == Fp8Scaling::per_tensor || options.scaling == Fp8Scaling::per_channel) {
    // The whole K by the platform's plan, then the epilogue: t = fp32(sb * acc), v = fp32(sa * t)
    // (vLLM ScaledEpilogue order [code]).
    const xt::xarray<double> acc = core::matmul(a, b, nullptr, plan);
    const xt::xarray<double> e = core::matmul_bound(a, b, nullptr, plan, acc, options.bound);
    const bool per_channel = options.scaling == Fp8Scaling::per_channel;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        const std::size_t ij = i * N + j;
        const float fa = static_cast<float>(sa[per_channel ? i : 0]);
        const float fb = static_cast<float>(sb[per_channel ? j : 0]);
        const float t = fb * static_cast<float>(acc.data()[ij]);
        const float v = fa * t;
        // |v - sa sb P| <= |v - sa t| + sa |t - sb acc| + sa sb |acc - P|
        const double pre = (kU32 * std::fabs(double{v}) + kEta32) + double{fa} * (kU32 * std::fabs(double{t}) + kEta32) +
                           double{fa} * double{fb} * e.data()[ij];
        finish(out, double{v}, pre, r.values.data()[ij], r.bound.data()[ij]);
      }
    r.failure_probability = failure_per_element(plan, K, 1, options.bound);
    return r;
  }

  const bool blockwise = options.scaling == Fp8Scaling::blockwise;
  const std::size_t block = blockwise ? kDeepSeekBlock : kMxBlock;
  const std::size_t nb = K / block;
  const std::size_t nbn = (N + kDeepSeekBlock - 1) / kDeepSeekBlock;
  BlockCombine combine = options.combine;
  if (combine == BlockCombine::platform_default)
    combine = platform.name.rfind("nvidia.", 0) == 0 ? BlockCombine::fma : BlockCombine::multiply_add;
  const Cast fp32_add{formats::fp32};

  std::vector<float> acc(M * N, 0.0f);   // blockwise: the CUDA-core fp32 accumulator
  std::vector<double> acc_mx(M * N, 0.0);  // mx: the fp32 accumulator (values held as doubles)
  std::vector<double> err(M * N, 0.0);   // running bound on |acc - exact partial sum|
  for (std::size_t kb = 0; kb < nb; ++kb) {
    const xt::xarray<double> ab = columns(a, kb * block, (kb + 1) * block);
    const xt::xarray<double> bb = rows(b, kb * block, (kb + 1) * block);
    const xt::xarray<double> p = core::matmul(ab, bb, nullptr, plan);
    const xt::xarray<double> ep = core::matmul_bound(ab, bb, nullptr, plan, p, options.bound);
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        const std::size_t ij = i * N + j;
        const double pij = p.data()[ij], eij = ep.data()[ij];
        if (blockwise) {
          const float s = static_cast<float>(sa[i * nb + kb]) * static_cast<float>(sb[kb * nbn + j / kDeepSeekBlock]);
          const double exact_s = sa[i * nb + kb] * sb[kb * nbn + j / kDeepSeekBlock];  // exact: 24 + 24 bits
          const float pf = static_cast<float>(pij);
          double e_combine = 0;
          if (combine == BlockCombine::fma) {
            acc[ij] = std::fmaf(s, pf, acc[ij]);
            e_combine = kU32 * std::fabs(double{acc[ij]}) + kEta32;
          } else {
            const float m = s * pf;
            acc[ij] = m + acc[ij];
            e_combine = kU32 * std::fabs(double{m}) + kEta32 + kU32 * std::fabs(double{acc[ij]}) + kEta32;
          }
          // |s p - S P| <= |s| e_p + |s - S| (|p| + e_p), |s - S| computed exactly from doubles.
          const double s_err = std::fabs(double{s} - exact_s);
          err[ij] += std::fabs(double{s}) * eij + s_err * (std::fabs(pij) + eij) + e_combine;
        } else {
          const double s = sa[i * nb + kb] * sb[kb * N + j];  // 2^(ea+eb): exact
          acc_mx[ij] = core::add_rounded(acc_mx[ij], s * pij, fp32_add);
          err[ij] += s * eij + kU32 * std::fabs(acc_mx[ij]) + kEta32;
        }
      }
  }
  for (std::size_t ij = 0; ij < M * N; ++ij) {
    const double v = blockwise ? double{acc[ij]} : acc_mx[ij];
    finish(out, v, err[ij], r.values.data()[ij], r.bound.data()[ij]);
  }
  r.failure_probability = failure_per_element(plan, block, nb, options.bound);
  return r;
}

// ---- int8 ----

namespace {

std::vector<std::int32_t> int8_codes(const xt::xarray<double>& x, std::string_view name) {
  std::vector<std::int32_t> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x.data()[i];
    if (!(v >= -128 && v <= 127) || v != std::floor(v))
      throw error(std::string(name) + ": element " + std::to_string(i) + " = " + std::to_string(v) +
                  " is not an int8 value (an integer in [-128, 127])");
    out[i] = static_cast<std::int32_t>(v);
  }
  return out;
}

bool nearest(Rounding r) { return r == Rounding::nearest_even || r == Rounding::nearest_away; }

BitsView doubles_view(const xt::xarray<double>& x) {
  BitsView v;
  v.data = x.data();
  v.element_bytes = 8;
  v.format = &formats::fp64;
  v.shape.assign(x.shape().begin(), x.shape().end());
  v.strides.assign(v.shape.size(), 1);
  for (std::size_t d = v.shape.size(); d-- > 1;)
    v.strides[d - 1] = v.strides[d] * static_cast<std::ptrdiff_t>(v.shape[d]);
  return v;
}

// The spacing of format f's grid at the value y (the binade of |y|, never below emin); at y = 0
// the smallest subnormal spacing.
double spacing_at(const Format& f, double y) {
  const int emin = f.emin();
  if (y == 0) return std::ldexp(1.0, emin - f.mantissa_bits);
  const int e = std::max(std::ilogb(y), emin);
  return std::ldexp(1.0, e - f.mantissa_bits);
}

// What one rounding by cast can move a value that lands on y: half a spacing for nearest, a
// whole one for the directed, odd and stochastic modes.
double rounding_bound(const Cast& cast, double y) {
  const double s = spacing_at(cast.format, y);
  return nearest(cast.rounding) ? 0.5 * s : s;
}

QuantGroups groups_for(const std::vector<std::size_t>& shape, const xt::xarray<double>& scale,
                       const xt::xarray<std::int64_t>& zero_point, int axis, std::size_t block_size) {
  if (scale.size() != zero_point.size() ||
      !std::equal(scale.shape().begin(), scale.shape().end(), zero_point.shape().begin(), zero_point.shape().end()))
    throw error("zero_point: must have the shape of scale");
  return quant_groups(shape, std::vector<std::size_t>(scale.shape().begin(), scale.shape().end()), axis, block_size);
}

}  // namespace

Emulation int8_matmul(const xt::xarray<double>& a, const xt::xarray<double>& b, Int32Overflow overflow) {
  const auto [M, K, N] = matmul_sizes(a, b);
  const std::vector<std::int32_t> qa = int8_codes(a, "a");
  const std::vector<std::int32_t> qb = int8_codes(b, "b");
  std::vector<std::int32_t> bt(K * N);  // b transposed: each column contiguous
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t j = 0; j < N; ++j) bt[j * K + k] = qb[k * N + j];
  constexpr std::int64_t lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
  Emulation r;
  r.values = xt::xarray<double>::from_shape({M, N});
  r.bound = xt::xarray<double>::from_shape({M, N});
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      const std::int32_t* x = qa.data() + i * K;
      const std::int32_t* y = bt.data() + j * K;
      // Exact in int64: |partial| <= 2^14 K. The partial sums in K order stand for the int32
      // accumulator of a chain of IMMA steps; the first to leave int32 is reported.
      std::int64_t s = 0;
      std::int64_t smin = 0, smax = 0;
      for (std::size_t k = 0; k < K; ++k) {
        s += static_cast<std::int64_t>(x[k]) * y[k];
        smin = std::min(smin, s);
        smax = std::max(smax, s);
      }
      if ((smin < lo || smax > hi) && overflow == Int32Overflow::error) {
        std::int64_t t = 0;
        std::size_t k = 0;
        for (; k < K; ++k) {
          t += static_cast<std::int64_t>(x[k]) * y[k];
          if (t < lo || t > hi) break;
        }
        throw error("a, b: int32 accumulator overflow in int8 matmul at output [" + std::to_string(i) + ", " +
                    std::to_string(j) + "] (row-major index " + std::to_string(i * N + j) + "): the partial sum over k = 0.." +
                    std::to_string(k) + " is " + std::to_string(t) + ", outside [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "] (K = " + std::to_string(K) +
                    "); split K, or pass Int32Overflow::wrap to emulate two's complement wraparound");
      }
      // Two's complement wraparound of the exact sum (addition modulo 2^32 is associative, so
      // every order gives this value).
      const auto wrapped = static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(s)));
      r.values.data()[i * N + j] = static_cast<double>(wrapped);
      r.bound.data()[i * N + j] = std::fabs(static_cast<double>(s - wrapped));  // 0 unless it wrapped
    }
  return r;
}

Emulation requantize(const xt::xarray<double>& acc, const Requantization& rq) {
  const Format& qf = rq.quant.format;
  if (!(qf == formats::int8 || qf == formats::uint8))
    throw error("quant.format: requantisation writes int8 or uint8, got '" + std::string(qf.name) + "'");
  if (!(rq.multiplier > 0) || !std::isfinite(rq.multiplier))
    throw error("multiplier: must be finite and > 0, got " + std::to_string(rq.multiplier));
  const float m32 = static_cast<float>(rq.multiplier);
  if (!(m32 > 0) || !std::isfinite(m32))
    throw error("multiplier: " + std::to_string(rq.multiplier) + " is outside fp32's range (the epilogue holds it as float)");
  if (rq.zero_point < qf.int_min() || rq.zero_point > qf.int_max())
    throw error("zero_point: " + std::to_string(rq.zero_point) + " lies outside " + std::string(qf.name) + "'s range");
  for (std::size_t i = 0; i < acc.size(); ++i) {
    const double v = acc.data()[i];
    if (!(v >= -0x1p31 && v <= 0x1p31 - 1) || v != std::floor(v))
      throw error("acc: element " + std::to_string(i) + " = " + std::to_string(v) + " is not an int32 value");
  }
  // t = fp32(fp32(acc) * fp32(multiplier)): the epilogue's float arithmetic.
  xt::xarray<double> t = xt::xarray<double>::from_shape(std::vector<std::size_t>(acc.shape().begin(), acc.shape().end()));
  for (std::size_t i = 0; i < acc.size(); ++i)
    t.data()[i] = static_cast<double>(static_cast<float>(acc.data()[i]) * m32);
  // The float-to-integer rounding, clamp and zero point: formats' quantiser with scale 1.
  const std::vector<std::size_t> shape(acc.shape().begin(), acc.shape().end());
  const QuantGroups g = quant_groups(shape, std::vector<std::size_t>(shape.size(), 1), 0, 1);
  std::vector<std::int64_t> codes(acc.size());
  const double one = 1.0;
  quantize_into(doubles_view(t), rq.quant, &one, &rq.zero_point, g, codes.data());
  Emulation r;
  r.values = xt::xarray<double>::from_shape(shape);
  r.bound = xt::xarray<double>::from_shape(shape);
  const double dm = std::fabs(double{m32} - rq.multiplier);  // exact: both are doubles near each other
  const double round_err = nearest(rq.quant.rounding) ? 0.5 : 1.0;
  for (std::size_t i = 0; i < acc.size(); ++i) {
    const double x = acc.data()[i];
    r.values.data()[i] = static_cast<double>(codes[i]);
    // |t - x M| <= |t - fl(x) M32| + M32 |fl(x) - x| + |x| |M32 - M|; fl(x) exact below 2^24.
    const double conv = std::fabs(x) > 0x1p24 ? kU32 * std::fabs(x) : 0.0;
    const double pre = kU32 * std::fabs(t.data()[i]) + kEta32 + double{m32} * conv + std::fabs(x) * dm;
    r.bound.data()[i] = widen(pre) + round_err;
  }
  return r;
}

Emulation int8_matmul_requantized(const xt::xarray<double>& a, const xt::xarray<double>& b, const Requantization& r,
                                  Int32Overflow overflow) {
  const Emulation acc = int8_matmul(a, b, overflow);
  Emulation q = requantize(acc.values, r);
  // A wrapped accumulator is off by acc.bound; the multiplier scales that distance.
  for (std::size_t i = 0; i < q.bound.size(); ++i)
    if (acc.bound.data()[i] != 0) q.bound.data()[i] += widen(acc.bound.data()[i] * r.multiplier);
  return q;
}

// ---- cast / quantize / dequantize ----

Emulation cast(const xt::xarray<double>& x, const Cast& c) {
  validate(c, "cast");
  Emulation r;
  r.values = numeq::round(x, c);
  r.bound = xt::xarray<double>::from_shape(std::vector<std::size_t>(x.shape().begin(), x.shape().end()));
  const double max = max_finite(c.format);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x.data()[i], y = r.values.data()[i];
    double& b = r.bound.data()[i];
    if (!std::isfinite(v)) { b = std::numeric_limits<double>::quiet_NaN(); continue; }
    if (!std::isfinite(y)) { b = std::numeric_limits<double>::infinity(); continue; }  // overflowed
    b = rounding_bound(c, y);
    if (std::fabs(v) > max) b = std::max(b, widen(std::fabs(v) - max));  // saturated
    if (y == 0 && v != 0) b = std::max(b, std::fabs(v));                   // flushed to zero
  }
  return r;
}

Emulation quantize(const xt::xarray<double>& x, const Quantization& q, const xt::xarray<double>& scale,
                   const xt::xarray<std::int64_t>& zero_point, int axis, std::size_t block_size) {
  const std::vector<std::size_t> shape(x.shape().begin(), x.shape().end());
  const QuantGroups g = groups_for(shape, scale, zero_point, axis, block_size);
  std::vector<std::int64_t> codes(x.size());
  quantize_into(doubles_view(x), q, scale.data(), zero_point.data(), g, codes.data());
  Emulation r;
  r.values = xt::xarray<double>::from_shape(shape);
  r.bound = xt::xarray<double>::from_shape(shape);
  const double round_err = nearest(q.rounding) ? 0.5 : 1.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    r.values.data()[i] = static_cast<double>(codes[i]);
    r.bound.data()[i] = std::isfinite(x.data()[i]) ? round_err : std::numeric_limits<double>::quiet_NaN();
  }
  return r;
}

std::vector<std::int64_t> integer_codes(const xt::xarray<double>& codes, const Quantization& q) {
  std::vector<std::int64_t> c(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const double v = codes.data()[i];
    if (!(v >= static_cast<double>(q.qmin()) && v <= static_cast<double>(q.qmax())) || v != std::floor(v)) {
      std::ostringstream text;
      text << std::setprecision(17) << v;
      throw error("codes: element " + std::to_string(i) + " (C order) = " + text.str() + " is not a code of " +
                  std::string(q.format.name) + ": codes are integers in [" + std::to_string(q.qmin()) + ", " +
                  std::to_string(q.qmax()) + "]");
    }
    c[i] = static_cast<std::int64_t>(v);
  }
  return c;
}

Emulation dequantize(const xt::xarray<double>& codes, const Quantization& q, const xt::xarray<double>& scale,
                     const xt::xarray<std::int64_t>& zero_point, int axis, std::size_t block_size, const Cast& out) {
  const std::vector<std::size_t> shape(codes.shape().begin(), codes.shape().end());
  const QuantGroups g = groups_for(shape, scale, zero_point, axis, block_size);
  const std::vector<std::int64_t> c = integer_codes(codes, q);
  Emulation r;
  r.values = xt::xarray<double>::from_shape(shape);
  dequantize_into(c.data(), shape, scale.data(), zero_point.data(), g, out, r.values.data());
  r.bound = xt::xarray<double>::from_shape(shape);
  // The one rounding into `out` (exact for 8-bit codes times fp32 scales into fp64, where this is
  // half an fp64 ulp: harmless).
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const double y = r.values.data()[i];
    r.bound.data()[i] = rounding_bound(out, y);
  }
  return r;
}

}  // namespace numeq::cases
