#pragma once
// Scaled dot-product attention of the operation catalogue as a platform computes it, with a
// per-element bound on the distance to the exact result (numeq::reference::attention, whose
// definitions of scale, causal mask and additive mask this follows), from one call.
//
// Inputs q[B..., Lq, d], k[B..., Lk, d], v[B..., Lk, dv] hold values of `in_fmt` (bf16, fp16,
// fp32, e4m3fn, ...: the format both GEMMs read, one the platform has a matmul plan
// in_fmt -> fp32 for). Everything between the GEMMs runs in fp32 (the compute format of every
// fused attention kernel: FlashAttention's ElementAccum, Trainium's PSUM and Vector engine).
//
// The model, stage by stage (both variants):
//   S = Q K^T         under the platform's matmul plan core::plan_for(platform, matmul, in_fmt,
//                     fp32); bounded by core::matmul_bound (the plan's own bound walker);
//   S <- scale * S    one fp32 multiplication by scale rounded to fp32 (scale: the given double,
//                     or 1/sqrt(d) computed in binary64 as a framework passes softmax_scale);
//                     FlashAttention (Dao et al., NeurIPS 2022, Algorithm 2: S = tau Q K^T)
//                     applies it to S as here;
//   S <- S + mask     one fp32 addition of the mask entry rounded to fp32; keys excluded by
//                     `causal` (key j > query i) or a -Inf mask entry take no part (P = 0 exactly);
//   softmax           max-subtracted, in fp32: exp under the platform's function model
//                     (core::function_model), sums under the platform's sum plan
//                     plan_for(platform, sum, fp32, fp32), IEEE fp32 subtraction and division;
//   P cast to in_fmt  before the second GEMM, nearest even, as FlashAttention-2 does
//                     (csrc/flash_attn/src/flash_fwd_kernel.h: rP = convert_type<Element>(acc_s)
//                     before gemm_rs(acc_o, rP, V)) and as any kernel must that feeds P to the
//                     same tensor-core instruction as V; AttentionOptions::cast_p = false
//                     models a kernel that keeps P in fp32 (then the second GEMM is the
//                     platform's fp32 plan: V's values are exact fp32 values). Such a kernel is
//                     another model, not a bug, and must be judged by its own bound: it stays
//                     within the cast model's bound for bf16 inputs, but not always for fp16 on
//                     NVIDIA, whose fp32 GEMM truncates P to tf32 (11 bits toward zero, a larger
//                     error than fp16's 11 bits to nearest; test_attention measures it);
//   O = P V           under the platform's matmul plan (in_fmt -> fp32, or fp32 -> fp32);
//   out               one cast of the fp32 result into `out`.
// Variants:
//   naive  S for the whole row, softmax e_j / sum_j e_j over all Lk keys, then P V: PyTorch's
//          math SDPA with the fp32 softmax and the P cast above;
//   flash  FlashAttention-2's forward pass (Dao, "FlashAttention-2: Faster Attention with
//          Better Parallelism and Work Partitioning", arXiv:2307.08691, Algorithm 1): per row
//          block of block_rows queries, key blocks j of block_cols keys in order, with the
//          running (m, l, O) per row:
//            S_j = scale Q K_j^T + mask (as above);  m' = max(m, rowmax(S_j));
//            P~ = exp(S_j - m')  (function model);   a = exp(m - m')  (function model);
//            l' = a l + rowsum(P~)  (fp32 multiply, the sum plan over the block, fp32 add);
//            O' = (a O) + cast_in(P~) V_j: the fp32 product a O is the accumulator c of the
//                 second GEMM's plan (on tensor cores the MMA chain starts from it, as
//                 FlashAttention-2 rescales acc_o and then runs gemm_rs into it; on Trainium c
//                 is one fp32 addition after the PSUM result: both as the plan says);
//          finally O / l (one fp32 division; with `reciprocal`, O * (1 / l) as the CUDA kernel
//          does) and the output cast. Causal: key blocks that lie
//          wholly above the diagonal of the row block are skipped (FlashAttention-2's
//          n_block_max); a processed block with no taking-part key for a row rescales by
//          exp(m - m) as the kernel does. Rows whose first blocks have no taking-part key keep
//          (m, l, O) = (-Inf, 0, 0) exactly (FlashAttention-2's Check_inf). block_rows has no
//          other effect: rows are independent.
//          (FlashAttention-2's CUDA kernel walks the key blocks from the last to the first; the
//          paper's Algorithm 1, modelled here, walks them in order.)
//
// Bounds are propagated through every stage in the same pass (cases/src/catalogue/tracked.hpp: every
// intermediate carries a bound on its distance to its exact counterpart): the S bound from the
// plan's bound walker, the scale and mask roundings, exp's budget plus its Lipschitz constant
// over the argument's interval, the sums' plan weights, the P cast's rounding, the second GEMM
// with inexact terms (sum_k w_k (|p^_k| + 2 e_k) |v_k| + sum_k e_k |v_k| + the plan's absolute
// and per-operand terms, w from core::reduction_weights), the division and the output cast
// (core::with_output_cast). The running maxima are constants shared by the emulation and its
// exact counterpart (softmax does not depend on the shift; the rescalings telescope to
// exp(S - m_final) exactly), as in normalization.hpp. Each rounding is stated at the largest
// magnitude its result may have, so the bound covers any device that follows these stages (the
// plans' structures, functions within their budgets), not just the emulation. The result is a
// convex combination of the taking-part v_j, so no element is farther from the exact value than
// from the ends of [min_j v_jc, max_j v_jc]: the bound is capped there.
//
// A row with no taking-part key (every key masked) is NaN under naive (the softmax of a row of
// -Inf, as PyTorch's math path gives) and 0 under flash (FlashAttention-2 divides an l = 0 row
// by 1); the reference's value is NaN.
// Bounds: NaN where the row holds a non-finite q, taking-part k, mask or v entry, or has no
// taking-part key (no claim); +Inf where a finite input's computation overflows or divides by
// a sum its bound does not keep away from zero. Rows run on numeq::parallel_for threads (and the
// GEMMs on core's); results do not depend on the thread count. Element i (C order) of a
// stochastic output uses draw i, as casts do.
// Errors (numeq::error naming the argument): q, k, v or mask of the wrong shape (as
// numeq::reference::attention checks them), an input that is not a value of in_fmt, a scale that
// is not finite, d = 0 without a scale, in_fmt without a matmul plan to fp32 on the platform (the
// message lists what it has), a platform without an fp32 sum plan, block_rows / block_cols zero
// or not dividing Lq / Lk (flash), a non-floating output.

#include <cstdint>
#include <cstddef>
#include <string_view>

#include <xtensor/xarray.hpp>

#include "numeq/cases/emulation.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/composite.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::cases {

enum class AttentionVariant : std::uint8_t { naive, flash };
using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)
AttentionVariant attention_variant_by_name(std::string_view name, std::string_view parameter = "variant");

struct AttentionOptions {
  AttentionVariant variant = AttentionVariant::naive;
  std::size_t block_rows = 64;  // flash: Br (> 0, dividing Lq)
  std::size_t block_cols = 64;  // flash: Bc (> 0, dividing Lk)
  bool cast_p = true;           // P cast to in_fmt before the second GEMM (false: kept in fp32)
  // flash: the final normalisation as O * (1 / l), two fp32 roundings, as FlashAttention-2's
  // kernel does it (normalize_softmax_lse: inv_sum = 1 / sum, acc_o *= inv_sum); false: O / l.
  bool reciprocal = false;
};

Emulation attention(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                    const reference::AttentionParameters& parameters, const core::Platform& platform,
                    std::string_view in_fmt, const Cast& out, const AttentionOptions& options = {});

}  // namespace numeq::cases
