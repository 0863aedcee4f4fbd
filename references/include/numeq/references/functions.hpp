#pragma once
// Certified elementwise functions: f(x) correctly rounded into any numeq Cast (every rounding mode,
// stochastic included, overflow and subnormal policies), the reference a platform's exp / tanh /
// gelu ... is judged against.
//
// Fast path: for most functions and outputs of at most 40 looked-at bits (significand, plus the
// random bits of stochastic rounding) an enclosure of f(x) is first computed in double arithmetic
// with an error bound proven from the algorithm (references/src/fast_functions.cpp), and its two
// ends rounded through the same kernel; when they agree that is the certified result (the same
// argument as below), otherwise the MPFR loop below decides. Both paths give the same bits; FunctionPath::mpfr (or the environment variable
// NUMEQ_FUNCTIONS=mpfr) skips the fast path, which the tests use as its oracle.
//
// Method: Ziv's strategy (A. Ziv, "Fast evaluation of elementary mathematical functions with
// correctly rounded last bit", ACM TOMS 17(3), 1991) over MPFR interval enclosures
// (mpfr_value.hpp). At working precision p the true value is enclosed in [lo, hi] by MPFR
// operations rounded outward (MPFR_RNDD / MPFR_RNDU; MPFR manual s4.4: each operation is correctly
// rounded in the requested direction). Every numeq rounding mode is monotone (stochastic too, for
// a fixed draw), so when lo and hi round to the same pattern through numeq's one kernel, so does
// the true value. Otherwise p doubles, from p0 = output precision + 32 (+ random_bits for
// stochastic rounding) up to 2^16 bits, after which numeq::error("... could not certify ...") is
// thrown rather than a result returned that is not certified. Values that are exactly representable
// (exp(0) = 1, exp2(integer), log(1) = 0, sqrt of a square, 1/2^k, sigmoid(0) = 1/2, f(0) = 0 for
// tanh/gelu/gelu_tanh/silu, ...) come out of every MPFR step with a zero ternary value, so the
// enclosure is a point and the loop ends at once; values a tiny distance from a representable
// number (tanh(100) < 1, gelu(1e4) < 1e4, exp(-1e30) > 0) end through open interval endpoints.
//
// Definitions (the mathematical functions of a real x, rounded once):
//   exp(x) = e^x          exp2(x) = 2^x           log(x) = ln x           tanh(x)
//   sigmoid(x) = 1 / (1 + e^-x)                    silu(x) = x * sigmoid(x)
//   gelu(x) = x/2 * (1 + erf(x / sqrt 2))  (evaluated as x/2 * erfc(-x / sqrt 2), no cancellation)
//   gelu_tanh(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))  with 0.044715 = 44715/10^6
//                  exactly (evaluated as x * sigmoid(2 y), the same number)
//   softplus(x) = log(1 + e^x)   sqrt(x)   rsqrt(x) = 1 / sqrt x   reciprocal(x) = 1 / x
//   erf(x) = 2/sqrt(pi) int_0^x e^-t^2 dt       erf_dx(x) = 2/sqrt(pi) e^-x^2
//   sin(x), cos(x), tan(x) (x in radians, no range limit)   atan(x) in (-pi/2, pi/2)
//   mish(x) = x * tanh(softplus(x))
//   gelu_sigmoid(x) = x * sigmoid(1.702 x)  with 1.702 = 1702/1000 exactly (the sigmoid
//                  approximation of GELU: NKI's gelu_apprx_sigmoid, x * torch.sigmoid(1.702 * x)
//                  in nki-library's torch references)
//   gelu_dx(x) = Phi(x) + x phi(x)   (d/dx gelu; Phi(x) = erfc(-x/sqrt 2)/2, phi(x) = e^-x^2/2 / sqrt(2 pi))
//   silu_dx(x) = s + x s (1 - s), s = sigmoid(x)   (d/dx silu)
//   gelu_sigmoid_dx(x) = silu_dx(1.702 x)          (d/dx gelu_sigmoid)
//   The derivatives are evaluated as 1 + d (x >= 0) or d (x < 0) with d's sign fixed by the
//   algebra (e.g. silu_dx = 1 + e (x - 1 - e) / (1 + e)^2 and e (1 + e + x) / (1 + e)^2, e = e^-|x|),
//   so that tails below MPFR's exponent range still round on the right side of 1 or 0.
//   sin, cos and tan are not monotone: they are evaluated at the (exact) argument, each end rounded
//   outward by MPFR (its sin/cos/tan reduce any double argument exactly).
//
// Special values (IEEE 754-2019 s9.2 where it defines the function, the limit otherwise):
//   NaN -> NaN (every function).
//   exp, exp2:  +Inf -> +Inf, -Inf -> +0.
//   log:        +Inf -> +Inf, +-0 -> -Inf, x < 0 (and -Inf) -> NaN.
//   tanh:       +-Inf -> +-1, +-0 -> +-0.
//   sigmoid:    +Inf -> 1, -Inf -> +0.
//   gelu, gelu_tanh, silu: +Inf -> +Inf, -Inf -> -0 (the limit is approached from below), +-0 -> +-0.
//   softplus:   +Inf -> +Inf, -Inf -> +0.
//   mish, gelu_sigmoid: +Inf -> +Inf, -Inf -> -0, +-0 -> +-0.
//   gelu_dx, silu_dx, gelu_sigmoid_dx: +Inf -> 1, -Inf -> -0 (approached from below), +-0 -> 1/2.
//   erf:        +-Inf -> +-1, +-0 -> +-0.    erf_dx: +-Inf -> +0.
//   sin, tan:   +-Inf -> NaN, +-0 -> +-0.    cos: +-Inf -> NaN, +-0 -> 1.
//   atan:       +-Inf -> +-pi/2 rounded (as any other argument), +-0 -> +-0.
//   sqrt:       +Inf -> +Inf, -0 -> -0, x < 0 (and -Inf) -> NaN.
//   rsqrt:      +Inf -> +0, +0 -> +Inf, -0 -> -Inf (s9.2 rSqrt), x < 0 (and -Inf) -> NaN.
//   reciprocal: +-Inf -> +-0, +-0 -> +-Inf.
// An exact infinite result is an exact value: it becomes Inf, or the largest finite value under
// Overflow::saturate or in a format without Inf, as any cast of Inf does. A finite result beyond
// the format's range overflows per the rounding mode (IEEE 754-2019 s7.4). Flushing of inputs
// (DAZ) does not apply to x here (x is taken as given; flush it with a cast first if the platform
// does); flushing of outputs (FTZ) applies to the result.

#include <cstdint>
#include <span>
#include <string_view>

#include <xtensor/xarray.hpp>

#include "numeq/formats/rounding.hpp"

namespace numeq::reference {

enum class Function : std::uint8_t {
  exp,
  exp2,
  log,
  tanh,
  sigmoid,
  gelu,
  gelu_tanh,
  silu,
  softplus,
  sqrt,
  rsqrt,
  reciprocal,
  erf,
  erf_dx,
  sin,
  cos,
  tan,
  atan,
  mish,
  gelu_sigmoid,
  gelu_dx,
  silu_dx,
  gelu_sigmoid_dx
};

std::string_view function_name(Function f);
// Every function's name, in enum order.
std::span<const std::string_view> function_names();
// Throws numeq::error naming `parameter` and listing the valid names.
Function function_by_name(std::string_view name, std::string_view parameter = "function");

// f(x) correctly rounded into out: the bit pattern as numeq::encode gives it (storage placement
// included). `random` is the stochastic draw (the 64 bits numeq::random_bits_at gives for the
// element). Throws numeq::error when the result is NaN and out.format has no NaN, or when out is
// not a floating format.
std::uint64_t evaluate_bits(Function f, double x, const Cast& out, std::uint64_t random = 0);

// Which evaluation evaluate / evaluate_bits use: `fast` (the fast path, MPFR when its rounding
// test fails) or `mpfr` (the MPFR loop for every element). The results are the same bits.
enum class FunctionPath : std::uint8_t { fast, mpfr };
// The path evaluate / evaluate_bits use: NUMEQ_FUNCTIONS = "fast" (the default when unset) or
// "mpfr", read once; any other value throws numeq::error naming the variable.
FunctionPath default_function_path();
std::uint64_t evaluate_bits_with(FunctionPath path, Function f, double x, const Cast& out,
                                 std::uint64_t random = 0);

// Counts since the process started, over all threads: elements whose fast enclosure did not pass
// the rounding test (`fallbacks`), and elements the MPFR loop evaluated (fallbacks included:
// gelu, outputs the fast path does not suit, FunctionPath::mpfr, arguments it has no enclosure
// for).
struct FunctionPathCounts {
  std::uint64_t fallbacks = 0;
  std::uint64_t mpfr = 0;
};
FunctionPathCounts function_path_counts();

// Elementwise: the values of the rounded results (NaN where the format gives NaN). Element i (C
// order) uses the draw numeq::random_bits_at(numeq::random_stream_key(out.seed), i), as casts do.
// Runs on numeq::parallel_for threads; results do not depend on the thread count. Throws
// numeq::error naming the first element (C order) whose result is NaN when out.format has no NaN.
xt::xarray<double> evaluate(Function f, const xt::xarray<double>& x, const Cast& out);
xt::xarray<double> evaluate_with(FunctionPath path, Function f, const xt::xarray<double>& x, const Cast& out);

}  // namespace numeq::reference
