#pragma once
// The plan evaluator: one implementation that reproduces, bit for bit, any platform whose
// arithmetic a Plan states (plan.hpp). Sums along an axis, dot products along the last axis (with
// an optional c) and matmuls (with an optional c), multi-threaded over output elements; each
// element is reduced by the plan alone, so results never depend on the thread count.
//
// Inputs are doubles holding values of the platform's input formats (the Python layer checks
// them against in_fmt). Products of two inputs must be exact in binary64, which holds for every
// format up to fp32 (24-bit significands: 48-bit products, exponents far inside binary64's
// range); an input pair whose significands together exceed 53 bits is refused with an error
// naming the argument. Plans may still accumulate in fp64 (numpy's float64 sum).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include <xtensor/xarray.hpp>

#include "numeq/core/plan.hpp"
#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/widen.hpp"

namespace numeq::core {

// One reduction: x_0 .. x_{n-1} (sum), or a_k * b_k (dot, b non-empty, same length) plus c.
double evaluate(std::span<const double> a, std::span<const double> b, std::optional<double> c, const Plan& plan);

// Sum of x along `axis` (negative counts from the end) under the plan.
xt::xarray<double> sum(const xt::xarray<double>& x, std::ptrdiff_t axis, const Plan& plan);

// a[..., K] . b[..., K] along the last axis, leading axes broadcast as numpy does; c (may be null)
// broadcasts to the result shape.
xt::xarray<double> dot(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                       const Plan& plan);

// a[..., M, K] @ b[..., K, N] (+ c broadcast to the result), batch axes broadcast as numpy does.
xt::xarray<double> matmul(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                          const Plan& plan);

// Consecutive rows of a matrix held in one C-ordered array read in place: `rows` rows of
// elements of `type` (numeq::widen's element types), as many columns as the matrix has.
struct RowBlock {
  const void* data = nullptr;
  ElementType type{};
  std::size_t rows = 0;
};

// stationary^T @ moving for stationary [K, M] and moving [K, N], each given as row blocks along K
// (the Tensor Engine's layout, K on partitions: a kernel's K tiles, read where they lie), for the
// plans the fp32 chain kernels compute (fp32 fma chains whole or cut into tiles and groups:
// cuda_core.fp32, Trainium's PE plans) and element types whose every value is an fp32 value
// (holds_fp32_values): matmul's result on the widened values, without concatenating, transposing
// or widening copies or the check that every value is an fp32 value (an NKI kernel's emulation
// computes one PSUM chain per call, and those passes cost it as much as the chain). nullopt,
// computing nothing, for any other plan or type. Throws numeq::error naming stationary or moving
// when their rows differ in number or a byte lies outside its format's bit patterns.
std::optional<xt::xarray<double>> matmul_row_blocks(std::span<const RowBlock> stationary,
                                                    std::span<const RowBlock> moving, std::size_t M, std::size_t N,
                                                    const Plan& plan);

// Whether every value of the element type is an fp32 value: fp32 itself, floating formats within
// it (bf16, fp16, the fp8 / fp6 / fp4 formats), integers of 1 or 2 bytes.
bool holds_fp32_values(const ElementType& type);

// The exact sum x + y rounded once into cast (IEEE 754 zero signs and specials; inputs flushed
// first under Subnormals::flush_inputs / flush_both). x and y are any doubles. This is the one
// addition every plan node performs.
double add_rounded(double x, double y, const Cast& cast);

namespace detail {
// Which code matmul runs for the plans it has kernels for (fp32 fma chains such as
// cuda_core.fp32; fused tensor-core chains), for tests and benchmarks: `automatic` (the default)
// takes the widest vector instructions the CPU has, `none` walks the plan element by element
// (the reference the kernels are tested against). The fused-chain kernel needs AVX-512; under
// `portable` and `avx2` those plans are walked element by element. Returns false, changing
// nothing, when the CPU lacks the instructions. Process-wide; not for use while other threads
// run matmul. Results are the same under every choice.
bool set_matmul_kernel(KernelChoice kernel);
}  // namespace detail

}  // namespace numeq::core
