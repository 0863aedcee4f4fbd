#pragma once
// Softmax, log-softmax, layernorm and rmsnorm of the operation catalogue as a platform computes
// them, with a per-element bound on the distance to the exact result (numeq::reference's
// composite.hpp definitions), from one call.
//
// Every operation runs in a compute format (fp32 by default; one of at most 24 significand bits)
// from inputs of any format (cast into it, nearest even), and casts its results into `out`:
//   * maxima are exact;
//   * sums follow the platform's plan core::plan_for(platform, Operation::sum, compute, compute),
//     evaluated by core::evaluate and bounded by core::reduction_weights / core::with_output_cast;
//   * elementwise functions (exp, log, rsqrt) follow the platform's function model (the
//     correctly rounded value in the emulation, the model's ulp budget in the bound:
//     elementwise.hpp);
//   * subtractions, products and divisions round once into the compute format (IEEE 754).
// The bound is propagated through the stages in the same pass: every intermediate carries its
// value and a bound on its distance to the exact counterpart (Wilkinson's running error analysis,
// made rigorous for finite perturbations: cases/src/catalogue/tracked.hpp), and the output cast is added by
// core::with_output_cast. It covers any device that follows the same stages with functions within
// their budgets and sums of the plan's structure, not just the emulation.
//
// Softmax variants (Blanchard, D. Higham and N. Higham, "Accurately computing the log-sum-exp and
// softmax functions", IMA J. Numer. Anal. 41(4), 2021, analyse the first two):
//   plain           e^{x_i} / sum_j e^{x_j}: overflows for x beyond ~88 in fp32 (the bound is then
//                   infinite, or capped at max(y, 1 - y) since softmax lies in [0, 1]);
//   max_subtracted  m = max_j x_j; e^{x_i - m} / sum_j e^{x_j - m} (the usual kernel);
//   online          blocks of `block` elements as in flash attention (Milakov and Gimelshein,
//                   "Online normalizer calculation for softmax", arXiv:1805.02867): per block its
//                   maximum m_b and sum s_b = sum e^{x_j - m_b}; the running (m, d) merged as
//                   m' = max(m, m_b), d' = d e^{m - m'} + s_b e^{m_b - m'}; finally
//                   e^{x_i - m} / d. block = n is max_subtracted with one more rescaling.
// log_softmax: (x_i - m) - log(sum_j e^{x_j - m}) with the same variants (m = 0 for plain).
//
// Layernorm variants (variance: Chan, Golub and LeVeque, "Algorithms for computing the sample
// variance: analysis and recommendations", Amer. Statist. 37(3), 1983):
//   two_pass   mean = sum(x) / n, var = sum((x - mean)^2) / n, both sums under the plan;
//   welford    one sequential Welford update over the row (Welford 1962), in the compute format;
//   bn_stats   Trainium's nki.isa.bn_stats / bn_aggr (FACTS.md s3): chunks of 512 elements, each
//              giving (count, mean, var * count) for its even and its odd elements (each by a
//              Welford pass: bn_stats streams its input once; the order inside is not documented),
//              merged in order by bn_aggr as the platform's assumption bn_aggr_merge says: chan
//              (the pairwise update of Chan, Golub and LeVeque) or naive (sum of counts * means and
//              of var * count + count * mean^2, then E[x^2] - mean^2). Needs a platform with that
//              assumption (trainium.*). The instructions' arithmetic, as values: bn_stats.hpp.
// then y = (x - mean) * rsqrt(var + eps) (* gamma) (+ beta), eps cast into the compute format.
// rmsnorm: y = x * rsqrt(sum(x^2) / n + eps) (* gamma) (+ beta).
//
// Bounds: NaN where the row (or gamma/beta element) holds a non-finite input (no claim); +Inf
// where a finite input's computation overflows or divides by a quantity its bound does not keep
// away from zero (no claim). Rows run on numeq::parallel_for threads; results do not depend on
// the thread count. Element i (C order) of a stochastic output uses draw i, as casts do.
// Errors (numeq::error naming the argument): axis out of range, online block 0 or not dividing the
// axis length, eps negative or not finite, gamma/beta not of shape {n}, a compute format the
// platform has no sum plan for (the message lists what it has), a non-floating output.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <xtensor/xarray.hpp>

#include "numeq/cases/emulation.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/composite.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::cases {

enum class SoftmaxVariant : std::uint8_t { plain, max_subtracted, online };
using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)
SoftmaxVariant softmax_variant_by_name(std::string_view name, std::string_view parameter = "variant");

struct SoftmaxOptions {
  SoftmaxVariant variant = SoftmaxVariant::max_subtracted;
  std::size_t block = 0;              // online: elements per block (> 0, dividing the axis length)
  Format compute = formats::fp32;
  // softmax: e_j * (1 / s), the reciprocal of the sum rounded first and each numerator multiplied
  // by it (two roundings; NKI kernels: nisa.reciprocal then tensor_scalar multiply), instead of
  // e_j / s (one rounding)
  bool reciprocal = false;
};

// Along `axis` (negative counts from the end); results have x's shape.
Emulation softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, const core::Platform& platform, const Cast& out,
                  const SoftmaxOptions& options = {});
Emulation log_softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, const core::Platform& platform,
                      const Cast& out, const SoftmaxOptions& options = {});

enum class LayernormVariant : std::uint8_t { two_pass, welford, bn_stats };
LayernormVariant layernorm_variant_by_name(std::string_view name, std::string_view parameter = "variant");

struct NormOptions {
  LayernormVariant variant = LayernormVariant::two_pass;  // layernorm only
  Format compute = formats::fp32;
};

// Over the last axis; gamma, beta and eps as numeq::reference::layernorm / rmsnorm take them.
Emulation layernorm(const xt::xarray<double>& x, const reference::NormParameters& parameters,
                    const core::Platform& platform, const Cast& out, const NormOptions& options = {});
Emulation rmsnorm(const xt::xarray<double>& x, const reference::NormParameters& parameters,
                  const core::Platform& platform, const Cast& out, const NormOptions& options = {});

}  // namespace numeq::cases
