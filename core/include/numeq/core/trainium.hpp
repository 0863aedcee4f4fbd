#pragma once
// Trainium (NeuronCore-v2 = trn1/inf2, NeuronCore-v3 = trn2) matmul profiles: what is documented
// of the Tensor Engine and PSUM (FACTS.md s3), and every unknown as a named assumption with its
// alternatives (numeq::core::Assumption), selectable by name:
//
//   numeq::core::platform_by_name("trainium.trn1[products=bf16,pe_order=pairwise]")
//
// Documented [doc: aws-neuron-sdk nki/guides/architecture/trainium_inferentia2_arch.rst,
// trainium2_arch.rst; nki.isa.nc_matmul docstring]: one nc_matmul contracts at most 128 rows of
// K (the SBUF partition axis; trn2 fp8 `double_row`: 256); "accumulations at FP32 precision", the
// result written to PSUM in fp32; a larger K runs several instructions accumulating into the same
// PSUM tile in program order (psum_fp32 += matmul_fp32). Inputs fp32, tf32, bf16, fp16, fp8 e4m3
// (IEEE-like, max 240) and e5m2. Down-casts round to nearest even and overflow to Inf; stochastic
// rounding is a runtime option (NEURON_RT_STOCHASTIC_ROUNDING_EN) whose generator is not published.
//
// Not documented [assumed], each an Assumption of the platform (trainium_assumption_names()):
//   pe_order        how the array adds the products of one instruction: sequential down the
//                   column from 0 (default), a pairwise tree, or fused (exact sum, one rounding)
//   products        exact products (default) or each rounded to bf16 first (a third-party claim
//                   for trn1: trnsci.dev, unverified)
//   pe_rounding     rounding of the additions inside the array: nearest_even (default), toward_zero
//   accumulator_bits  fraction bits of the in-array accumulator: 23 (fp32, default), 24, 25, 26,
//                   27 or 31 (extra bits, the tile rounded to fp32 when it enters PSUM)
//   fp8_double_row  (trn2) fp8 instructions contract 256 rows (on) or 128 (off, default)
//   mx_pe_add       (trn3) how each PE of an MX matmul adds its four products: fused (their exact
//                   sum rounded once, default) or sequential; read by the plans of the kernel
//                   option mx=on (trainium.trn3[mx=on]: nc_matmul_mx, 512 values of K per
//                   instruction, operands the dequantized values read as fp32)
//   output_rounding the PSUM -> output cast: nearest_even (default) or stochastic
//   fp32_matmul     how fp32 x fp32 is computed (4x the cost of bf16): native exact products
//                   (default), or bf16x4 / tf32x4: two pieces per operand, four passes per tile
//                   into PSUM (a plan `decompose` node)
//   vector_reduce_order, bn_aggr_merge, scalar_activation_ulps: Vector/Scalar engine unknowns,
//                   recorded with the platform for the operation catalogue and its bounds

#include "numeq/formats/format.hpp"

namespace numeq::core::trainium {

// Accumulators wider than fp32 for the accumulator_bits alternatives, registered among the
// accumulator formats (formats/format.hpp).
inline constexpr const Format& e8m24 = formats::e8m24;
inline constexpr const Format& e8m25 = formats::e8m25;
inline constexpr const Format& e8m26 = formats::e8m26;
inline constexpr const Format& e8m27 = formats::e8m27;
inline constexpr const Format& e8m31 = formats::e8m31;

}  // namespace numeq::core::trainium
