#pragma once
// How a tensor-core instruction's fused steps and its accumulator c meet along K: the one builder
// of tensor-core reductions, shared by the built-in NVIDIA platforms (nvidia_platforms.cpp) and the
// generic candidates a fit tries against measured outputs (numeq.tensor_core_candidates).
//
// A step (fused.hpp, FACTS.md s2): exact products aligned to the largest exponent, truncated to F
// fraction bits, summed exactly, normalised and rounded once. Structures:
//   chain   steps of n products chained along K from c, each step's result the next one's c
//           [measured] every fp16 / bf16 / tf32 set of the tensor-core vectors, H100 fp8 -> fp32;
//   c_last  an instruction of n products is one step from zero, c added after it by one
//           nearest-even addition in the accumulator's format, instructions chained through it;
//   halves  an instruction of 2n products: k mod 4 in {0, 1} in one step from zero, {2, 3} in a
//           second fed with the first's result, c added last as in c_last [measured]
//           mma.sync.m16n8k32 with fp8 operands: H100 fp8 -> fp16, B200 fp8 -> fp32 and -> fp16
//           (the bytes 0-1 and 2-3 of each 32-bit register of four fp8 values).

#include <cstdint>
#include <string>
#include <vector>

#include "numeq/core/fused.hpp"
#include "numeq/core/plan.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::core {

enum class TensorCoreStructure : std::uint8_t { chain, c_last, halves };
using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)
TensorCoreStructure tensor_core_structure_by_name(std::string_view name, std::string_view parameter = "structure");

// The accumulator format a step's result is a value of: its output format, fp32 for Hopper's
// e8m13 (fused.hpp: an fp32 value with 13 fraction bits).
Format accumulator_format(const FusedStep& step);

// One instruction's reduction under `structure`, chained along K.
PlanNode tensor_core_reduction(const FusedStep& step, TensorCoreStructure structure);

// A generic tensor core for in_fmt -> out (fp32 or fp16 accumulators): every combination of
// products per step (`n`), alignment fraction bits (`fraction_bits`), step output (`step_outputs`:
// format and rounding; e8m13 allowed) and `structures`, as a labelled plan: "n=16,F=25,step=fp32
// toward_zero,structure=halves". Steps truncate, take the encoded maximum exponent, zeros at fp32's
// emin, overflow to infinity, positive zero sums (the measured NVIDIA behaviour, FACTS.md s2);
// c and the output are the accumulator format (fp16 for out = fp16, else fp32). numeq::error
// naming `n` or `fraction_bits` for a value outside what a step takes (fused.hpp's limits).
struct TensorCoreCandidate {
  std::string label;
  Plan plan;
};
std::vector<TensorCoreCandidate> tensor_core_candidates(const Format& in, const Format& out,
                                                        const std::vector<int>& n,
                                                        const std::vector<int>& fraction_bits,
                                                        const std::vector<Cast>& step_outputs,
                                                        const std::vector<TensorCoreStructure>& structures);

}  // namespace numeq::core
