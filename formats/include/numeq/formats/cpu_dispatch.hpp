#pragma once
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
