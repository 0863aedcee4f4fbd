// The one builder of tensor-core reductions (tensor_core.hpp).

#include "numeq/core/tensor_core.hpp"

#include <cstddef>
#include <string>
#include <vector>

#include "numeq/formats/error.hpp"

namespace numeq::core {

TensorCoreStructure tensor_core_structure_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<TensorCoreStructure>, name, parameter, "tensor-core structure");
}

Format accumulator_format(const FusedStep& step) {
  return step.output.format == nvidia::e8m13 ? formats::fp32 : step.output.format;
}

PlanNode tensor_core_reduction(const FusedStep& step, TensorCoreStructure structure) {
  if (structure == TensorCoreStructure::chain) return fused(step);
  const std::size_t n = static_cast<std::size_t>(step.n);
  const std::size_t size = structure == TensorCoreStructure::c_last ? n : 2 * n;
  PlanNode instruction = fused(step);
  if (structure == TensorCoreStructure::halves) {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < size; ++i)
      if (i % 4 < 2) order.push_back(i);
    for (std::size_t i = 0; i < size; ++i)
      if (i % 4 >= 2) order.push_back(i);
    instruction = permute(size, order, instruction);
  }
  // c added after the instruction by one nearest-even addition in the accumulator's format.
  const Arithmetic add{Cast{accumulator_format(step), Rounding::nearest_even}};
  return chunked(size, instruction, sequential(add));
}

std::vector<TensorCoreCandidate> tensor_core_candidates(const Format& in, const Format& out,
                                                        const std::vector<int>& n,
                                                        const std::vector<int>& fraction_bits,
                                                        const std::vector<Cast>& step_outputs,
                                                        const std::vector<TensorCoreStructure>& structures) {
  const Format c = out == formats::fp16 ? formats::fp16 : formats::fp32;
  // Checked before any plan is built: a halves instruction holds 2n positions.
  for (int steps : n)
    if (steps < 1 || steps > max_products)
      throw numeq::error("n: " + std::to_string(steps) + " products per step is outside 1 .. " +
                         std::to_string(max_products));
  for (int bits : fraction_bits)
    if (bits < 0 || bits > max_fraction_bits)
      throw numeq::error("fraction_bits: " + std::to_string(bits) + " is outside 0 .. " +
                         std::to_string(max_fraction_bits));
  std::vector<TensorCoreCandidate> plans;
  for (int steps : n)
    for (int bits : fraction_bits)
      for (const Cast& so : step_outputs)
        for (TensorCoreStructure st : structures) {
          // The measured defaults otherwise (fused.hpp: truncation, encoded exponents, zeros at emin).
          const FusedStep s = nvidia::detail::make(steps, bits, in, c, so);
          const std::string label = "n=" + std::to_string(steps) + ",F=" + std::to_string(bits) + ",step=" +
                                    std::string(so.format.name) + " " + std::string(to_string(so.rounding)) +
                                    ",structure=" + std::string(to_string(st));
          Plan p;
          p.name = "generic tensor core " + label;
          p.reduction = tensor_core_reduction(s, st);
          p.c_placement = CPlacement::first;
          p.output = Cast{accumulator_format(s), Rounding::nearest_even};
          plans.push_back({label, std::move(p)});
        }
  return plans;
}

}  // namespace numeq::core
