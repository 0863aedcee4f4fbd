#pragma once
// One fused tensor-core step, bit for bit: d = c + sum_{i<n} a_i * b_i as NVIDIA tensor cores
// compute it (FACTS.md s2), and the chains of such steps that one mma/wgmma instruction or a GEMM
// runs along K.
//
// The step (FACTS.md s2, steps 1-6):
//   1. NaN if any operand is NaN, an Inf meets a zero in a product, or +Inf and -Inf terms meet;
//      otherwise an Inf operand gives an Inf of its term's sign.
//   2. Every operand is decoded exactly, subnormals included; every product is exact.
//   3. E = the largest exponent among the terms (how each term's exponent is read, and whether
//      zeros take part, are the fields `max_exponent` and `zeros`).
//   4. Every term is aligned to E and cut to F fraction bits below 2^E (`fraction_bits`,
//      `alignment`).
//   5. The cut terms are added exactly (a wide integer: no intermediate normalisation).
//   6. The sum is normalised once and rounded into `output` by numeq's one rounding kernel
//      (numeq::round_and_pack); nothing else rounds.
//
// Sources, cited field by field below:
//   [MMA-Sim]  Xie, Wang, Yang, Yang, "MMA-Sim: Bit-Accurate Reference Model of Tensor Cores and
//              Matrix Cores", arXiv:2511.10909 (2025); repo microsoft/MMA-Sim,
//              mmasim/simulator/arithmetic.py (fused_dot_add, fused_sum, nv_fused_dot_add,
//              extract_significand_exponent) and mmasim/simulator/nv.py (per-architecture
//              accumulator bits, split-K, e8m13 output).
//   [MATLAB]   Khattak, Mikaitis, "Accurate Models of NVIDIA Tensor Cores", arXiv:2512.07004
//              (ACM TACO 2025); repo north-numerical-computing/MATLAB-tensor-core, files
//              models/tools/Generic_BFMA_TC.m, models/tools/GEMM.m, models/{V100,A100,Ada,H100,
//              B200}TC.m, model_validation/CUDA/*.cu (how the vectors were captured).
//   [Fasi]     Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores",
//              PeerJ CS 7:e330 (2021): the first measurements (V100, T4, A100); FACTS.md s2
//              sums up what the three works agree on.
//   [vectors]  tests/data/tensor-core-vectors: GPU-measured d for random a, b, c (5000 rows per
//              set; the [MATLAB] authors' captures). "settled" below means: the named choice
//              reproduces every row and each listed alternative fails on some rows
//              (tests/cpp/core/test_fused.cpp, FusedVectors.WhatTheDataSettle).
// Tags: [doc] vendor documentation, [paper], [code] read in a model above, [measured] settled by
// the vectors, [assumed] nobody has measured it: a parameter, never a hidden constant.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq::core {

// How a term loses the bits below 2^(E - F) when it is aligned to the largest exponent E.
enum class Alignment : std::uint8_t {
  // Sign-magnitude truncation toward zero. [measured] every NVIDIA set of the vectors; with
  // nearest-even alignment the fp32-output sets reproduce only 3614 (V100) to 4816 (H100 bf16)
  // rows of 5000. [code] MMA-Sim fused_sum (math.trunc); MATLAB Generic_BFMA_TC (bit strings cut).
  truncate,
  // Round to nearest, ties to even, at 2^(E - F): not NVIDIA; for other machines and for the
  // "enough fraction bits" checks.
  nearest_even,
};

// How the exponent that enters the maximum (step 3) and fixes the alignment grid is read.
enum class MaxExponent : std::uint8_t {
  // Product: ea + eb, each the operand's exponent as encoded (a subnormal operand counts at its
  // format's emin), taken BEFORE the product significand (in [0, 4)) is renormalised; c: its own
  // encoded exponent in c_format. [code] MMA-Sim extract_significand_exponent + fused_dot_add;
  // MATLAB Generic_BFMA_TC (special_case: one more bit when that product's significand is >= 2,
  // the same grid for normal operands); FACTS.md s2 step 2. [measured] the vectors reject
  // `normalized` (4207..4854 of 5000 rows on the fp32-output sets, 4538 on H100 e4m3). Where a
  // subnormal operand's product sits (at emin here, MATLAB's `largest_term` below) the vectors do
  // not settle: no row puts such a product at the maximum, and largest_term reproduces them too.
  encoded,
  // The exponent of each exact, renormalised term. Rejected by the vectors; kept for other
  // machines and for experiments.
  normalized,
  // [code] MATLAB Generic_BFMA_TC: align to the exponent of the largest-magnitude term, with one
  // more bit kept when the product with the largest ea + eb (subnormal operands at emin) has a
  // significand >= 2 and c is not larger than every product (GEMM.m special_case). Identical to
  // `encoded` unless a product with a subnormal operand, or a subnormal c, is at the maximum.
  largest_term,
};

// Whether exact zeros (a zero product, c == 0) take part in the maximum of step 3.
enum class ZeroTerms : std::uint8_t {
  // [code] MMA-Sim extract_significand_exponent: a zero operand has exponent -126 whatever its
  // format, so a zero product's exponent is -126 + (the other operand's exponent) and a zero c's
  // is -126. They can only matter when every non-zero term lies below about 2^-126 (or, for
  // bf16/tf32, when the other operand is huge). [assumed] not in the vectors.
  fp32_emin,
  // [code] MATLAB GEMM.m: zeros are removed before the block FMA. [assumed] not in the vectors.
  excluded,
};

// ZeroTerms::fp32_emin: the exponent a zero operand (and a zero c) is read at, whatever its
// format (MMA-Sim extract_significand_exponent).
inline constexpr int zero_operand_exponent = -126;

// What a finite sum beyond the output's range gives.
enum class OverflowRule : std::uint8_t {
  // +-Inf, also under round-toward-zero. [code] MMA-Sim nv_fused_dot_add (the cut significand is
  // packed by a float32 conversion, which overflows to Inf); MATLAB Generic_BFMA_TC (dexp at the
  // all-ones field gives Inf). [assumed] not in the vectors.
  infinity,
  // As output.overflow says (numeq::Overflow::ieee under toward_zero gives the largest finite
  // value, as IEEE 754 s7.4 requires).
  cast,
};

// The sign of a zero result.
enum class ZeroSign : std::uint8_t {
  // +0 whatever the terms. [code] MMA-Sim (a Python float sum starting at 0.0), MATLAB (d = 0).
  // [assumed] not in the vectors.
  positive,
  // IEEE 754 s6.3: -0 when every term is a zero of negative sign (or, under downward rounding,
  // when non-zero terms cancel exactly); +0 otherwise.
  ieee,
};

// No floor on the alignment exponent (see FusedStep::exponent_floor).
inline constexpr int no_exponent_floor = std::numeric_limits<int>::min();

// One fused step. Plain data: an aggregate, comparable with ==, usable as a constexpr constant.
struct FusedStep {
  int n = 16;              // products per step (a step takes at most n; fewer are zero padding)
  int fraction_bits = 25;  // F: fraction bits kept below 2^E after alignment (0 .. max_fraction_bits)
  Alignment alignment = Alignment::truncate;
  MaxExponent max_exponent = MaxExponent::encoded;
  ZeroTerms zeros = ZeroTerms::fp32_emin;
  // Tiny terms: E = max(E, exponent_floor). MMA-Sim keeps every product exact at any exponent
  // (products are exact in binary64) and has no floor: no_exponent_floor. [code] MATLAB instead
  // converts every product to fp32 first (fpbits_IEEE, single(x)), which puts a floor of -126 on
  // the exponents and rounds products below 2^-126; -126 here models the floor only.
  // [assumed] not in the vectors (no row has all its terms below 2^-126).
  int exponent_floor = no_exponent_floor;
  Format a_format = formats::fp16;  // the formats a, b and c hold values of: they fix where a
  Format b_format = formats::fp16;  // subnormal operand's encoded exponent lies (and are checked)
  Format c_format = formats::fp32;
  // Final normalisation and rounding (step 6): fp32 toward_zero for fp32 accumulators, fp16
  // nearest_even for fp16 ones, nvidia::e8m13 toward_zero for Hopper/Ada fp8 with fp32 output.
  Cast output = {formats::fp32, Rounding::toward_zero};
  OverflowRule overflow = OverflowRule::infinity;
  ZeroSign zero_sign = ZeroSign::positive;

  friend constexpr bool operator==(const FusedStep& x, const FusedStep& y) {
    const auto same_cast = [](const Cast& p, const Cast& q) {
      return p.format == q.format && p.rounding == q.rounding && p.overflow == q.overflow &&
             p.subnormals == q.subnormals && p.seed == q.seed && p.random_bits == q.random_bits;
    };
    return x.n == y.n && x.fraction_bits == y.fraction_bits && x.alignment == y.alignment &&
           x.max_exponent == y.max_exponent && x.zeros == y.zeros &&
           x.exponent_floor == y.exponent_floor && x.a_format == y.a_format &&
           x.b_format == y.b_format && x.c_format == y.c_format && same_cast(x.output, y.output) &&
           x.overflow == y.overflow && x.zero_sign == y.zero_sign;
  }
};

// Largest F a step accepts (the wide accumulator holds 768 bits) and largest n.
inline constexpr int max_fraction_bits = 700;
inline constexpr int max_products = 1 << 20;
// The range of exponent_floor other than no_exponent_floor: binary64's exponents, from its
// smallest subnormal 2^-1074 to its largest binade 2^1023 (products and c are binary64 values).
inline constexpr int min_exponent_floor = -1074;
inline constexpr int max_exponent_floor = 1023;

// Checks a step's fields (n, fraction_bits, exponent_floor, operand formats, output cast): a
// numeq::error naming the field under `parameter` ("step.n: ..."). Every evaluation checks first.
void validate(const FusedStep& step, std::string_view parameter = "step");

// One fused step: a.size() == b.size() <= step.n products plus c, as doubles holding exact
// values of step.a_format, step.b_format (floats of at most 23 fraction bits) and step.c_format
// (numeq::error otherwise, naming the argument). Returns the value of step.output's format as a double (NaN, +-Inf included). The
// sum is exact in a wide integer; the only rounding is numeq::round_and_pack.
double fused_step(std::span<const double> a, std::span<const double> b, double c,
                  const FusedStep& step);

// Steps of step.n products along the first K elements of a and b ([0, n), [n, 2n), ...; the last
// step may be short): each step's output is the next step's c, the last one's is returned. An
// A100/Ada k=16 fp16 mma is fused_chain(a, b, c, 16, a100_fp16): two steps of 8, the first
// rounded toward zero to fp32 and fed as c (FACTS.md s2; MMA-Sim nv.py is_split_k). The output
// format must hold values of c_format (fp32 -> fp32, e8m13 -> fp32, fp16 -> fp16).
double fused_chain(std::span<const double> a, std::span<const double> b, double c, std::size_t K,
                   const FusedStep& step);
// The same along all of a and b (a.size() == b.size()).
double fused_chain(std::span<const double> a, std::span<const double> b, double c,
                   const FusedStep& step);

// How fused_step and fused_chain compute (fused.cpp): the general path adds every cut term into
// a 768-bit integer and serves every FusedStep. A fast path serves the common case (truncating
// alignment, MaxExponent::encoded, operand formats of at most 23 fraction bits and exponents
// within +-400, F <= 29, n <= 64): every product a_i * b_i is exact in binary64, every aligned
// term trunc(x * 2^(F - E)) is an exact integer below 2^31, their sum fits 64 bits, and the one
// rounding is the same normalize + round_and_pack as the general path's. A step with a NaN, an
// Inf or an operand that is not a value of its format, and a zero result under ZeroSign::ieee, is
// handed to the general path (which also throws the errors), so results and errors are the same
// bit for bit; tests/cpp/core/test_fused.cpp compares both paths on every named parameter set.
namespace detail {
// The general path alone: the reference the fast path is tested against.
double fused_step_reference(std::span<const double> a, std::span<const double> b, double c,
                            const FusedStep& step);
double fused_chain_reference(std::span<const double> a, std::span<const double> b, double c,
                             std::size_t K, const FusedStep& step);
// Which code the fast path runs (for tests and benchmarks; the default, automatic, takes
// current_isa(), cpu_dispatch.hpp). `none` sends every step to the general path. Returns
// false, changing nothing, when the CPU lacks the instructions. Process-wide; not for use while
// other threads compute fused steps.
bool set_fused_kernel(KernelChoice kernel);
// Whether the fast path serves this step's parameters at all.
bool fused_fast_path_applies(const FusedStep& step);
// Steps the fast path has handed to the general path on the calling thread (NaN, Inf, values
// not of their format, zero sums under ZeroSign::ieee), since the thread began.
std::uint64_t fused_general_steps();
}  // namespace detail

namespace nvidia {

// The fp32 accumulator cut to 13 fraction bits ("f32_e8m13"), registered with its sources among
// the accumulator formats (formats/format.hpp, formats::e8m13).
inline constexpr const Format& e8m13 = formats::e8m13;

// tf32 operands: the tensor core drops the 13 low bits of the fp32 pattern (truncation, not
// rounding). [doc] PTX ISA (wgmma .tf32: "the lower 13 bits of the fp32 value are ignored");
// [code] MMA-Sim arithmetic.py truncate_to_tf32 (x >> 13 << 13). A NaN whose payload sits only in
// the low 13 bits becomes Inf, as the bit operation does. The vectors hold tf32 values already.
constexpr std::uint32_t tf32_truncate_bits(std::uint32_t fp32_bits) { return fp32_bits & ~0x1FFFu; }
double tf32_truncate(float x);

namespace detail {
inline constexpr Cast rz32{formats::fp32, Rounding::toward_zero};
inline constexpr Cast rn16{formats::fp16, Rounding::nearest_even};
inline constexpr Cast rz_e8m13{e8m13, Rounding::toward_zero};
constexpr FusedStep make(int n, int F, const Format& in, const Format& c, const Cast& out) {
  FusedStep s;
  s.n = n;
  s.fraction_bits = F;
  s.a_format = in;
  s.b_format = in;
  s.c_format = c;
  s.output = out;
  return s;
}
}  // namespace detail

// Per generation and input type. Unless a line says otherwise, every set takes the defaults:
// truncating alignment, MaxExponent::encoded, ZeroTerms::fp32_emin (MMA-Sim), no exponent floor,
// OverflowRule::infinity, ZeroSign::positive, subnormal operands decoded exactly (no flush:
// [code] both models; MATLAB in_subnormals = 1) and subnormal results kept (out_subnormals = 1).
// Output variants: `_f16` = fp16 accumulator (c and d fp16, nearest-even: [code] MMA-Sim
// nv_fused_dot_add "f16" round(); MATLAB frmode 'rne'); otherwise fp32 (toward zero: [code]
// MMA-Sim math.trunc, MATLAB frmode 'rz'). [measured] = reproduces every row of the vectors.

// V100 (Volta, mma.m8n8k4 / wmma): n = 4, F = 23. [code] MMA-Sim arch_accum_fractional_bits
// "Volta": 23; MATLAB V100TC. [measured] fp32 and fp16 output: 5000/5000; F = 22 or 24 and n = 2
// fail on fp32 output (2765, 3800, 4172 rows).
inline constexpr FusedStep v100_fp16 = detail::make(4, 23, formats::fp16, formats::fp32, detail::rz32);
inline constexpr FusedStep v100_fp16_f16 = detail::make(4, 23, formats::fp16, formats::fp16, detail::rn16);

// T4 (Turing): n = 8, F = 24. [code] MMA-Sim "Turing": 24; FACTS.md s2. Not in the vectors.
inline constexpr FusedStep t4_fp16 = detail::make(8, 24, formats::fp16, formats::fp32, detail::rz32);
inline constexpr FusedStep t4_fp16_f16 = detail::make(8, 24, formats::fp16, formats::fp16, detail::rn16);

// A100 (Ampere): fp16/bf16 n = 8, tf32 n = 4, F = 24; an m16n8k16 (k8 for tf32) mma is two steps
// (fused_chain), the first rounded into the output format and fed as c. [code] MMA-Sim "Ampere":
// 24 and is_split_k; MATLAB A100TC (fma 8, neab 1; tf32 fma 4). [measured] fp16 (fp32 and fp16
// output), bf16, tf32: 5000/5000 each; F = 23 / 25 and n/2 fail on every fp32-output set.
inline constexpr FusedStep a100_fp16 = detail::make(8, 24, formats::fp16, formats::fp32, detail::rz32);
inline constexpr FusedStep a100_fp16_f16 = detail::make(8, 24, formats::fp16, formats::fp16, detail::rn16);
inline constexpr FusedStep a100_bf16 = detail::make(8, 24, formats::bf16, formats::fp32, detail::rz32);
inline constexpr FusedStep a100_tf32 = detail::make(4, 24, formats::tf32, formats::fp32, detail::rz32);

// Ada (L40S, RTX 40): as A100 for fp16/bf16/tf32; fp8 (mma.m16n8k32 .e4m3/.e5m2): two steps of
// 16 with F = 13, fp32 output cut to e8m13 (fp16 output: nearest-even). Published facts only:
// [code] MMA-Sim nv.py ("Ada Lovelace": 24; fp8: n_accum_fractional_bits 13, "f32_e8m13",
// split-K); MATLAB AdaTC (neab 1; fp8 fma 16, neab -10); FACTS.md s2. No Ada vectors here.
inline constexpr FusedStep ada_fp16 = detail::make(8, 24, formats::fp16, formats::fp32, detail::rz32);
inline constexpr FusedStep ada_fp16_f16 = detail::make(8, 24, formats::fp16, formats::fp16, detail::rn16);
inline constexpr FusedStep ada_bf16 = detail::make(8, 24, formats::bf16, formats::fp32, detail::rz32);
inline constexpr FusedStep ada_tf32 = detail::make(4, 24, formats::tf32, formats::fp32, detail::rz32);
inline constexpr FusedStep ada_e4m3 = detail::make(16, 13, formats::e4m3fn, formats::fp32, detail::rz_e8m13);
inline constexpr FusedStep ada_e5m2 = detail::make(16, 13, formats::e5m2, formats::fp32, detail::rz_e8m13);
inline constexpr FusedStep ada_e4m3_f16 = detail::make(16, 13, formats::e4m3fn, formats::fp16, detail::rn16);
inline constexpr FusedStep ada_e5m2_f16 = detail::make(16, 13, formats::e5m2, formats::fp16, detail::rn16);

// H100/H200 (Hopper, wgmma and mma): fp16/bf16 n = 16, tf32 n = 8, F = 25. [code] MMA-Sim
// "Hopper": 25 (WGMMASim); MATLAB H100TC (fma 16, neab 2; tf32 fma 8). [measured] fp16 (fp32 and
// fp16 output), bf16, tf32: 5000/5000 each; F = 24 / 26 and n/2 fail on every fp32-output set.
// The tf32 vectors hold 4 products per row, so they cannot tell n = 4 from n = 8 (FACTS.md: 8).
inline constexpr FusedStep h100_fp16 = detail::make(16, 25, formats::fp16, formats::fp32, detail::rz32);
inline constexpr FusedStep h100_fp16_f16 = detail::make(16, 25, formats::fp16, formats::fp16, detail::rn16);
inline constexpr FusedStep h100_bf16 = detail::make(16, 25, formats::bf16, formats::fp32, detail::rz32);
inline constexpr FusedStep h100_tf32 = detail::make(8, 25, formats::tf32, formats::fp32, detail::rz32);
// H100 fp8 (wgmma .e4m3/.e5m2, k = 32): one step of 32, F = 13, fp32 output cut to e8m13.
// [code] MMA-Sim WGMMASim (13, "f32_e8m13"); MATLAB H100TC (fma 32, neab -10; fp32 out keeps
// 23 - 10 = 13 bits). [measured] e4m3 and e5m2 with fp32 output: 5000/5000 with c = 0: those d
// were captured with a zeroed accumulator (with the file's c: 0 of 5000 rows), as the [MATLAB]
// validation script assumes. F = 12 / 14, n = 16 and a 23-bit output fail (3037..4622 rows).
inline constexpr FusedStep h100_e4m3 = detail::make(32, 13, formats::e4m3fn, formats::fp32, detail::rz_e8m13);
inline constexpr FusedStep h100_e5m2 = detail::make(32, 13, formats::e5m2, formats::fp32, detail::rz_e8m13);
// wgmma fp8 with an fp16 accumulator: [code] MMA-Sim WGMMASim (F = 13, one step of 32, fp16
// nearest-even); MATLAB H100TC agrees. NOT what the fp16-output vectors measured: those were
// captured with mma.sync.m16n8k32 (MATLAB model_validation/CUDA/mma_fp8_output_fp16.cu), which
// h100_mma_sync_fp8_f16 below reproduces; this single-step model gives 3113/5000 (e4m3) and
// 3340/5000 (e5m2) there, the correctly rounded a.b + c 3120 and 3356.
inline constexpr FusedStep h100_e4m3_f16 = detail::make(32, 13, formats::e4m3fn, formats::fp16, detail::rn16);
inline constexpr FusedStep h100_e5m2_f16 = detail::make(32, 13, formats::e5m2, formats::fp16, detail::rn16);

// Hopper mma.sync.m16n8k32 with fp8 operands and an fp16 accumulator. [measured] reproduces
// every row of both H100 fp8 -> fp16 sets (5000/5000 e4m3, 5000/5000 e5m2):
//   d1 = step(products k with k mod 4 in {0,1}, c = 0)      fp16 nearest-even
//   d2 = step(products k with k mod 4 in {2,3}, c = d1)     fp16 nearest-even
//   d  = d2 + c                                             one fp16 nearest-even addition
// each step n = 16, F = 25 (the F measured for Hopper's fp16 step, h100_fp16_f16; these rows
// alone only bound it, see below): Hopper's fp16 tensor-core step fed with the fp8 values (every e4m3/e5m2 value is an fp16 value), i.e. as if each 32-bit register of four
// fp8 values were widened to two fp16x2 registers and two k16 fp16 mma ran, c added after.
// This is the interleaved pattern of [code] MATLAB GEMM.m (inter_pattern: seq1 = k mod 4 < 2,
// seq2 = the rest, the first with c = 0, c added last by a round-to-nearest two-term add; used
// there by B200TC for fp8 at commit 109e412) with H100's F = 25 and the fp16 output format for
// the intermediate results. The vectors (e4m3/e5m2 rows of 5000) settle: 17 resp. 18 <= F
// (every F up to 40 reproduces all rows; F = 13: 4757/4904), the halves rounded to fp16
// nearest-even (toward zero: 2322/2911), c added last (fed to the first step: 3113/3153; with
// c = 0: 5/4), the k mod 4 split (halves swapped: 3476/3755; k < 16 first: 3477/3821).
inline constexpr FusedStep h100_mma_sync_e4m3_f16_half =
    detail::make(16, 25, formats::e4m3fn, formats::fp16, detail::rn16);
inline constexpr FusedStep h100_mma_sync_e5m2_f16_half =
    detail::make(16, 25, formats::e5m2, formats::fp16, detail::rn16);
// The closing fp16 addition d2 + c as a step: one product d2 * 1 plus c with F = 64 (more than
// the 40 binades of fp16, so the sum is exact) rounded once to nearest-even: IEEE fp16 addition.
inline constexpr FusedStep fp16_add = detail::make(1, 64, formats::fp16, formats::fp16, detail::rn16);
// a, b: K <= 32 products (K a multiple of 4; measured for K = 32); c: an fp16 value (the vectors'
// c went through __float2half, nearest-even). `half` gives the operand formats of the two steps.
double h100_mma_sync_fp8_f16(std::span<const double> a, std::span<const double> b, double c,
                             const FusedStep& half);

// B200 (Blackwell): fp16/bf16 n = 16, tf32 n = 8, F = 25, fp32 output toward zero. [code]
// MMA-Sim nv_ptx.py (mma and tcgen05mma: 25); MATLAB B200TC. [measured] fp16 (fp32 and fp16
// output), bf16, tf32: 5000/5000 each (B200 vectors, captured with wmma); F = 24 / 26 fail on
// every fp32-output set, n/2 on fp16 and bf16.
inline constexpr FusedStep b200_fp16 = detail::make(16, 25, formats::fp16, formats::fp32, detail::rz32);
inline constexpr FusedStep b200_fp16_f16 = detail::make(16, 25, formats::fp16, formats::fp16, detail::rn16);
inline constexpr FusedStep b200_bf16 = detail::make(16, 25, formats::bf16, formats::fp32, detail::rz32);
inline constexpr FusedStep b200_tf32 = detail::make(8, 25, formats::tf32, formats::fp32, detail::rz32);
// B200 fp8 as published for tcgen05.mma (and for mma.sync k32): one step of 32 with c inside,
// F = 25, no e8m13 cut. [code] MMA-Sim nv_ptx.py tcgen05mma / mma; MATLAB B200TC at b12b5a70
// (fma 32, neab 2). NOT what the B200 vectors measured (captured with mma.sync.m16n8k32, MATLAB
// model_validation/CUDA/mma_fp8_output_fp{32,16}.cu): fp32 output 3207/5000 (e4m3) and
// 3236/5000 (e5m2); fp16 output 3108 and 3403. tcgen05.mma itself is not in the vectors.
inline constexpr FusedStep b200_e4m3 = detail::make(32, 25, formats::e4m3fn, formats::fp32, detail::rz32);
inline constexpr FusedStep b200_e5m2 = detail::make(32, 25, formats::e5m2, formats::fp32, detail::rz32);
inline constexpr FusedStep b200_e4m3_f16 = detail::make(32, 25, formats::e4m3fn, formats::fp16, detail::rn16);
inline constexpr FusedStep b200_e5m2_f16 = detail::make(32, 25, formats::e5m2, formats::fp16, detail::rn16);
// B200 mma.sync.m16n8k32 with fp8 operands: the structure of h100_mma_sync_fp8_f16 with the
// accumulator's format: d1 = step(products k mod 4 in {0,1}, c = 0), d2 = step(products {2,3},
// c = d1), both n = 16, F = 25, rounded into the accumulator (fp32 toward zero, fp16 nearest
// even), then d = d2 + c, one nearest-even addition in the accumulator's format. [measured] all
// four B200 fp8 sets 5000/5000: fp32 output with the halves below, fp16 output with
// h100_mma_sync_e4m3_f16_half / _e5m2_f16_half (the H100 model unchanged). The structure is
// MATLAB GEMM.m's inter_pattern (B200TC fp8 at commit 109e412). What the rows settle, as
// e4m3 / e5m2 rows of 5000 (tests/cpp/core/test_fused.cpp, FusedVectors.B200Fp8WhatTheDataSettle):
//   - c is added after the products, to nearest: c fed to the first half 2761/2756 (fp16
//     output 3033/3154), c added toward zero 3151/3183;
//   - the products' sum is cut toward zero before c is added: one rounding of a.b + c to
//     nearest (c inside, F = 64) and halves rounded to nearest both give 5000/4999 (e5m2 row
//     3935, whose products' sum needs 25 bits, is 1 ulp off);
//   - F: every F from 20 / 23 (fp32 output; fp16: 17 / 18) up to 40 reproduces every row; 25 is
//     Blackwell's fp16 step;
//   - the grouping: the fp32 rows alone do not see it (the products' sum is an fp32 value in
//     9999 of the 10000 rows: one step of 32 with c added last, contiguous or swapped halves
//     also give 5000/5000), the fp16 rows do (one step of 32 with c last 3929/4241, contiguous
//     halves 3500/3850, halves swapped 3443/3771).
inline constexpr FusedStep b200_mma_sync_e4m3_half = detail::make(16, 25, formats::e4m3fn, formats::fp32, detail::rz32);
inline constexpr FusedStep b200_mma_sync_e5m2_half = detail::make(16, 25, formats::e5m2, formats::fp32, detail::rz32);

// The NaN a tensor core writes (the double results carry no payload): fp32 0x7FFFFFFF, fp16
// 0x7FFF. [code] MMA-Sim nv_fused_dot_add. [assumed] not in the vectors.
inline constexpr std::uint32_t nan_fp32_bits = 0x7FFFFFFFu;
inline constexpr std::uint16_t nan_fp16_bits = 0x7FFFu;

}  // namespace nvidia
}  // namespace numeq::core
