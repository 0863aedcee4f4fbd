#pragma once
// CPU dispatch, in one place: which instruction set a kernel runs in, and how a caller or the
// environment narrows it. Every kernel family (the memoised casts, the fused tensor-core steps,
// the matmul kernels, the bound's matmul) asks current_isa() or detected_isa() here; none reads
// the CPU or the environment itself. Only speed ever depends on the choice, never a result:
// every path is compared with the portable one by the tests.

#include <cstdint>
#include <string_view>

#include "numeq/formats/names.hpp"

// Functions compiled twice, for the baseline x86-64 and for x86-64-v3 (AVX2, FMA, BMI2), the
// loader picking one per CPU (GCC's target_clones: an ifunc resolved once, at load time). For
// loops that vectorise only with 64-bit lane compares (AVX2) or that call std::fma (a library call
// on the baseline, one instruction on v3). Results never depend on the clone: numeq builds with
// -ffp-contract=off, so the compiler fuses nothing the source does not; std::fma is exact either way.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define NUMEQ_X86_64_V3_CLONE [[gnu::target_clones("arch=x86-64-v3", "default")]]
#else
#define NUMEQ_X86_64_V3_CLONE
#endif

namespace numeq {

// The instruction sets numeq's vector kernels are written for, narrowest first: portable C++
// (SSE2 on x86-64, NEON elsewhere), AVX2 with FMA, and AVX-512 with the F, DQ, VL and BW subsets
// (those the kernels use).
enum class Isa : std::uint8_t { portable = 0, avx2 = 1, avx512 = 2 };

// The widest the CPU has, detected once (GCC/Clang __builtin_cpu_supports; portable elsewhere).
Isa detected_isa();

// detected_isa(), lowered by the environment variable NUMEQ_ISA (portable, avx2 or avx512) where
// it is set, never raised: the tests run every path on one machine. Read on every call. Throws
// numeq::error naming NUMEQ_ISA and the valid values for anything else.
Isa current_isa();

// How a kernel family is chosen (core's set_matmul_kernel, set_fused_kernel): automatic (the
// current_isa() path), none (every element on the general path), or one instruction set, refused
// where the CPU lacks it.
enum class KernelChoice : std::uint8_t { automatic, none, portable, avx2, avx512 };
// Whether the CPU has what `choice` names (automatic, none and portable: always).
bool available(KernelChoice choice);

}  // namespace numeq
