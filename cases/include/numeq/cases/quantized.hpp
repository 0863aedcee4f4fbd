#pragma once
// Quantised matmuls of the operation catalogue and the quantise / dequantise / cast entries. Each
// call returns the platform's emulated values AND, per element, a bound on |emulated - exact|
// (Emulation, emulation.hpp), both from the same pass over the same machine model: the block
// reductions are the platform's plans (core::plan_for) run by the one evaluator (core::matmul)
// and bounded by the one bound walker (core::matmul_bound); the scale multiplies and the fp32
// combines around them are modelled here, each rounding adding its own relative error.
//
// 1. Scaled fp8 matmul: D = A @ B with A [M, K] and B [K, N] fp8 values (e4m3fn / e5m2 on NVIDIA,
//    e4m3 / e5m2 on Trainium) and scales. The exact result is the matmul of the dequantised
//    operands, (a_ik * sa) (b_kj * sb) summed exactly; scales are applied where the platform
//    applies them:
//    per_tensor, per_channel (scale_a per row of A, scale_b per column of B): after the whole
//        accumulation, in the epilogue: t = fp32(sb * acc), v = fp32(sa * t), then the output
//        cast. The order sa * (sb * acc), each an fp32 multiply rounded to nearest, is vLLM's
//        CUTLASS 3.x ScaledEpilogue (csrc/quantization/cutlass_w8a8/c3x/scaled_mm_epilogues_c3x.hpp:
//        EVTCompute0 = multiplies(ScaleB, Accum), EVTCompute = multiplies(ScaleA, EVTCompute0),
//        round_to_nearest) [code]; cuBLASLt documents D = scale_D (alpha scale_A scale_B AB) but
//        not the order [doc], so this is a named assumption.
//    blockwise (DeepSeek-V3, arXiv:2412.19437 s3.3.2 "increasing accumulation precision" and
//        s3.3.1 "fine-grained quantization"): scale_a [M, K/128] (1x128 activation tiles along K),
//        scale_b [K/128, ceil(N/128)] (128x128 weight blocks). The platform's fp8 plan reduces
//        each 128-long K block from zero (the tensor-core chain, 4 WGMMAs of K = 32); the fp32
//        partial p is then scaled and added to an fp32 accumulator on CUDA cores:
//            s = fp32(sa[i,kb] * sb[kb,jb]);  acc = fp32(s * p + acc)   (one fma, `fma`)
//        or  acc = fp32(fp32(s * p) + acc)                              (`multiply_add`).
//        `fma` is DeepGEMM's `final_accum += scale * accum` compiled by nvcc with its default
//        --fmad=true (FACTS.md s2, CUDA cores) [code]; `multiply_add` is the default assumed for
//        Trainium (a Vector-engine multiply, then an add; the engines round each fp32 result,
//        FACTS.md s3) [assumed]. BlockCombine names the choice.
//    mx (OCP Microscaling v1.0): scale_a [M, K/32], scale_b [K/32, N], each a power of two (an
//        E8M0 value, 2^-127 .. 2^127). NAMED CHOICE `mx_block_partials`: each 32-long K block is
//        reduced from zero by the platform's fp8 plan into an fp32 partial p, which is scaled by
//        2^(ea + eb) exactly (a power of two: no rounding) and added to an fp32 accumulator with
//        one rounding (acc = fp32(acc + 2^(ea+eb) p)). The MX spec leaves the dot product's
//        internal precision and order implementation-defined (OCP MX v1.0 s6; FACTS.md s1), and
//        no measured model of a block-scaled tensor-core step is published; a hardware step that
//        scales products before its fused alignment would differ. Stated in every result's
//        evidence line (mx_assumption()).
//    Bound: per block, core::matmul_bound of the block plan against the emulated partial; then,
//    rigorously, each fp32 multiply and add adds u |its rounded result| + 2^-150 (round to
//    nearest: |fl(x) - x| <= u |fl(x)| in the normal range, half the smallest subnormal below;
//    Higham 2002, s2.2), the scale errors propagate as |s^ p^ - s P| <= |s^| e_p + u|s^| (|p^| +
//    e_p), and finally core::with_output_cast for the output format. Bounds are computed in
//    binary64 and widened by a relative 2^-30 so that their own roundings cannot undercut them.
//
// 2. int8 matmul with int32 accumulation: exact integer products and sums (integer addition is
//    associative, so the value does not depend on the order; only overflow does). A partial sum
//    (in K order, as a chain of IMMA steps feeds its accumulator) outside int32 is a numeq::error
//    naming the operands, the first output index (row-major) and the K at which it happened,
//    unless Int32Overflow::wrap asks for two's complement wraparound (the modular result; its
//    bound is then the exact distance |wrapped - exact|, a multiple of 2^32). Bound: 0.
//    Requantisation to int8/uint8 as cuBLASLt's IMMA epilogue with a float alpha (compute type
//    CUBLAS_COMPUTE_32I, scale type CUDA_R_32F, D type CUDA_R_8I) and TensorRT's int8 output:
//        q = clamp(round(fp32(fp32(acc) * fp32(multiplier))) + zero_point, qmin, qmax)
//    [doc: cuBLASLt cublasLtMatmul data-type table; TensorRT developer guide, "Explicit
//    quantization"]; the rounding of the final float-to-int conversion is the Quantization's
//    (nearest even by default, the cvt.rni of CUDA's __float2int_rn) [assumed: neither document
//    states it]. Exact reference: clamp(acc * multiplier + zero_point, qmin, qmax) with the
//    multiplier as given (a real number); clamping is 1-Lipschitz, so the bound on the unclamped
//    value holds.
//
// 3. cast / quantize / dequantize: formats' kernels (round, quantize_into, dequantize_into);
//    bound: the rounding's half spacing (nearest) or whole spacing (directed, odd, stochastic) at
//    the result, in the output's units, plus what saturation or flushing moves.
//
// Bad input throws numeq::error naming the argument: shapes, K not divisible by the block (128
// blockwise, 32 MX), scales zero/negative/NaN/Inf or not fp32 (E8M0 for MX) values, an operand
// format the platform has no plan for (the message lists the fp8 formats it has), int32 overflow.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <xtensor/xarray.hpp>

#include "numeq/cases/emulation.hpp"
#include "numeq/core/bound.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/quantize.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::cases {

// ---- 1. scaled fp8 matmul ----

enum class Fp8Scaling : std::uint8_t {
  per_tensor,   // scale_a, scale_b: one value each (shape {}, {1} or {1, 1})
  per_channel,  // scale_a: M values (shape {M} or {M, 1}); scale_b: N values ({N} or {1, N})
  blockwise,    // DeepSeek-V3: scale_a [M, K/128], scale_b [K/128, ceil(N/128)]
  mx,           // OCP MX: scale_a [M, K/32], scale_b [K/32, N], powers of two
};
using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)
// numeq::error naming `parameter` and listing the valid names otherwise.
Fp8Scaling fp8_scaling_by_name(std::string_view name, std::string_view parameter = "scaling");

// How a scaled blockwise partial joins the fp32 accumulator (see the header comment).
enum class BlockCombine : std::uint8_t {
  platform_default,  // fma on NVIDIA platforms, multiply_add elsewhere
  fma,               // acc = fp32(s * p + acc), one rounding
  multiply_add,      // acc = fp32(fp32(s * p) + acc), two roundings
};

inline constexpr std::size_t kDeepSeekBlock = 128;  // DeepSeek-V3 s3.3: 1x128 tiles, 128x128 blocks, N_C = 128
inline constexpr std::size_t kMxBlock = 32;         // OCP MX v1.0: 32 elements per shared scale

struct ScaledMatmulOptions {
  Fp8Scaling scaling = Fp8Scaling::per_tensor;
  std::string out_fmt = "fp32";  // the output cast after the fp32 epilogue: fp32, bf16 or fp16
  BlockCombine combine = BlockCombine::platform_default;
  // per_tensor / per_channel only: the accumulation run as split-K (core::with_split_k): K cut
  // into split_k parts, serial (each part continues from the previous partial) or parallel (the
  // partials, each rounded to fp32, summed in order). 1: no split. Blockwise and MX already cut K
  // at every block; a split there is the caller's loop over their own results.
  std::size_t split_k = 1;
  core::SplitMode split_mode = core::SplitMode::serial;
  core::BoundOptions bound{};
};

// a [M, K] and b [K, N]: values of in_fmt (NaN allowed: its elements get a NaN bound). The
// accumulation plan is core::plan_for(platform, matmul, in_fmt, "fp32").
Emulation scaled_fp8_matmul(const xt::xarray<double>& a, const xt::xarray<double>& b,
                            const xt::xarray<double>& scale_a, const xt::xarray<double>& scale_b,
                            const core::Platform& platform, std::string_view in_fmt,
                            const ScaledMatmulOptions& options = {});

// The MX placement assumption in force, one line, for reports.
std::string_view mx_assumption();

// ---- 2. int8 matmul, int32 accumulation ----

enum class Int32Overflow : std::uint8_t {
  error,  // a partial sum outside int32 is a numeq::error (the default)
  wrap,   // two's complement wraparound, only when asked for
};

// a [M, K], b [K, N]: int8 values (integers in [-128, 127]). values: the int32 results.
Emulation int8_matmul(const xt::xarray<double>& a, const xt::xarray<double>& b,
                      Int32Overflow overflow = Int32Overflow::error);

struct Requantization {
  double multiplier = 1.0;   // scale_a * scale_b / scale_out: positive and finite; used as fp32
  std::int64_t zero_point = 0;
  Quantization quant{};      // output format (int8 / uint8), rounding, range
};

// acc: int32 values; values: the output codes (as doubles); bound in code units against
// clamp(acc * multiplier + zero_point, qmin, qmax).
Emulation requantize(const xt::xarray<double>& acc, const Requantization& r);

// int8_matmul then requantize, bounds composed (the first is exact).
Emulation int8_matmul_requantized(const xt::xarray<double>& a, const xt::xarray<double>& b,
                                  const Requantization& r, Int32Overflow overflow = Int32Overflow::error);

// ---- 3. quantize / dequantize / cast ----

// x rounded by `cast` (a floating format); bound against x itself.
Emulation cast(const xt::xarray<double>& x, const Cast& cast);

// Integer codes (as doubles) of x under q with per-group scale and zero point (quantize.hpp's
// QuantGroups: parameter arrays of x's rank, blocks of block_size along axis); bound in code
// units against the real-valued clamp(x / scale + zero_point, qmin, qmax). Inf elements get a
// NaN bound; NaN is refused (integer formats have none).
Emulation quantize(const xt::xarray<double>& x, const Quantization& q, const xt::xarray<double>& scale,
                   const xt::xarray<std::int64_t>& zero_point, int axis = 0, std::size_t block_size = 1);

// codes as integers: every element must be an integer (a double holding one exactly) within
// q's range [qmin, qmax] (int8 [-128, 127], ...); numeq::error naming `codes`, the format and the
// range otherwise (300, 0.5 or 2^64 for int8 are no codes of it).
std::vector<std::int64_t> integer_codes(const xt::xarray<double>& codes, const Quantization& q);

// (codes - zero_point) * scale rounded into `out`; bound against the exact product. codes as
// integer_codes reads them.
Emulation dequantize(const xt::xarray<double>& codes, const Quantization& q, const xt::xarray<double>& scale,
                     const xt::xarray<std::int64_t>& zero_point, int axis = 0, std::size_t block_size = 1,
                     const Cast& out = Cast{formats::fp64});

}  // namespace numeq::cases
