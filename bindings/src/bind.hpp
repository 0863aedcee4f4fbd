#pragma once
// The parts of numeq._core, one registration function per layer: module.cpp calls them all; they
// share the helpers of conversions.hpp and intake.hpp, which call none of them.

#include <pybind11/pybind11.h>

namespace numeq_bindings {

namespace py = pybind11;

// numeq formats, casts, quantisation and the array intake (formats.cpp).
void bind_formats(pybind11::module_& m);
// numeq.reference: exact sums, dot products and matmuls (reference_exact.cpp).
void bind_reference_exact(pybind11::module_& m);
// numeq.reference: certified functions (reference_functions.cpp).
void bind_reference_functions(pybind11::module_& m);
// numeq.reference: softmax, log_softmax, layernorm, rmsnorm, attention (reference_composite.cpp).
void bind_reference_composite(pybind11::module_& m);
// numeq platforms, plans and the plan evaluator (core.cpp).
void bind_core(pybind11::module_& m);
// numeq.reveal_order: order discovery of a Python callable (reveal.cpp).
void bind_reveal(pybind11::module_& m);
// numeq.ops and numeq.compare: the operation catalogue, bounds and verdicts (cases.cpp).
void bind_cases(pybind11::module_& m);
// numeq.ops: the op registry's rows and the one builder of a registered op (registry.cpp).
void bind_registry(pybind11::module_& m);

}  // namespace numeq_bindings
