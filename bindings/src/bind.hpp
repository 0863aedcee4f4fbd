#pragma once
// The parts of numeq._core, one registration function per layer (module.cpp calls them all).

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "numeq/formats/rounding.hpp"

namespace numeq_bindings {

// A Cast from the Python keywords (names checked, numeq::error listing the valid ones).
numeq::Cast make_cast(const std::string& fmt, const std::string& rounding, const std::string& overflow,
                      const std::string& subnormals, std::uint64_t seed, int random_bits);

// numeq.reference: exact sums, dot products and matmuls (reference_exact.cpp).
void bind_reference_exact(pybind11::module_& m);
// numeq.reference: certified functions (reference_functions.cpp).
void bind_reference_functions(pybind11::module_& m);
// numeq.reference: softmax, log_softmax, layernorm, rmsnorm, attention (reference_composite.cpp).
void bind_reference_composite(pybind11::module_& m);
// numeq platforms, plans and the plan evaluator (core.cpp).
void bind_core(pybind11::module_& m);

}  // namespace numeq_bindings
