#pragma once
// Elementwise functions of the operation catalogue (exp, tanh, sigmoid, gelu, gelu_tanh, silu,
// rsqrt, reciprocal, ... : numeq::reference::Function) as a platform computes them, with a bound
// on every element's distance to the exact f(x), from one call.
//
// Model (core::FunctionModel of the platform, platform.hpp): x is cast into the model's compute
// format (nearest even; exact for inputs of that format or a narrower one), f is evaluated there
// correctly rounded (numeq::reference::evaluate, certified by MPFR) and cast into `out`. That is
// the emulated value. The bound covers every device the model admits, not just the emulation:
// under an ulp budget of N a device may return any compute-format value within N ulps of the
// correctly rounded one, so before the output cast the distance to the exact f(x) is at most
//     (1/2 + N) ulp(|r| + N ulp(r))
// (r the correctly rounded value; the ulp is taken at the largest magnitude a device may return,
// so a budget that crosses into the next binade counts that binade's larger ulp; below the
// smallest normal the subnormal spacing applies; a budget that reaches past the largest finite
// value gives +Inf). core::with_output_cast then adds the output rounding for any such value.
// An input not exact in the compute format adds its conversion error times sup |f'| near x.
//
// Non-finite inputs give a NaN bound (no claim). A finite input whose result overflows, or lies in
// a function's pole (rsqrt(0), reciprocal(0)), gives +Inf.

#include <xtensor/xarray.hpp>

#include "numeq/cases/emulation.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/functions.hpp"

namespace numeq::cases {

// f(x) elementwise under `platform`'s model of f, rounded into `out` (element i of a stochastic
// output uses draw i, as casts do). numeq::error naming `out` for a non-floating output format.
Emulation function(reference::Function f, const xt::xarray<double>& x, const core::Platform& platform, const Cast& out);

}  // namespace numeq::cases
