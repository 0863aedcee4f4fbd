#pragma once
// The operation catalogue's one object. An Op holds an operation on given inputs and yields, from
// the same object, the three things numeq exists for:
//   exact / reference  the exact result (long accumulator or MPFR), and its correctly rounded value
//                      in the output cast;
//   emulate(platform)  the platform's result, bit for bit, with a per-element bound on its
//                      distance to the exact result, computed in the same pass from the same plan
//                      (core/bound.hpp);
// and compare(actual, op, platform) (verdict.hpp) judges a device's output against both.
//
// Bounds are stated three ways (tolerance()): absolute per element, in ULPs of the output format,
// and as the tightest (rtol, atol) pair of assert_close form |x - ref| <= atol + rtol * |ref| that
// covers them on the given data. Two platforms are compared through cross_platform_bound().

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/cases/attention.hpp"
#include "numeq/cases/bound_source.hpp"
#include "numeq/cases/diagnosis.hpp"
#include "numeq/cases/emulation.hpp"
#include "numeq/cases/normalization.hpp"
#include "numeq/cases/quantized.hpp"
#include "numeq/core/bound.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/exact.hpp"
#include "numeq/references/functions.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::cases {

// What an Op computes once and keeps (Op::exact_values, Op::reference_values): shared by the
// copies of an Op, filled on first use, safe to fill from several threads.
struct OpCache {
  std::once_flag exact_once, reference_once, within_once;
  reference::ExactValues exact;
  reference::ExactValues within;
  xt::xarray<double> reference;
  // Op::emulation's results by platform name, registry generation and bound options: a review
  // checks one output against a platform, then the port between two, then the tolerance, each
  // needing the same emulation and bound. The last few are kept (each holds two output-sized arrays).
  std::mutex emulations_mutex;
  std::vector<std::pair<std::string, std::shared_ptr<const Emulation>>> emulations;
};

struct Op {
  std::string name;       // "matmul", "sum", ...
  std::string signature;  // e.g. "a[64,128] bf16 @ b[128,32] bf16 -> fp32"
  Cast out;               // the output cast: the reference is rounded into it
  // The length of the sum each element reduces (K of a matmul or dot; 0 where the op has none the
  // platform tiles): the variant search's K tiles divide it.
  std::size_t reduction_length = 0;
  // The exact result as hi + lo (double-double). Operations whose exact value MPFR certifies
  // only to binary64 return it with lo = 0 and set exact_relative_error = 2^-53.
  std::function<reference::ExactValues()> exact;
  double exact_relative_error = 0;
  // Optional: the exact result to within a proven relative error (reference::Within), where
  // exact() pays for certifying every element's binary64 rounding and this does not (softmax,
  // log_softmax, the normalisations: their fast enclosures, 2^-40; attention: a radius per
  // element, ExactValues::radius, with exact_within_error 0). Checks take it (check_exact).
  std::function<reference::ExactValues()> exact_within;
  double exact_within_error = 0;
  // The exact result rounded correctly into `out`.
  std::function<xt::xarray<double>()> reference;
  // Optional: one element of the reference from check_exact()'s (hi, lo), where hi + lo settles
  // the rounding (nullopt where it does not: an MPFR-certified hi or an enclosure's midpoint next
  // to a rounding boundary of out); the reference then costs one pass over the exact result
  // instead of a second exact computation. Where an element gives nullopt, reference_at computes
  // those elements, or else reference() the whole reference.
  std::function<std::optional<double>(double hi, double lo, double radius)> reference_from_exact;
  // Optional: the reference at the given flat indices only (in their order), for the elements
  // reference_from_exact leaves open; without it those cost the whole reference().
  std::function<std::vector<double>(const std::vector<std::size_t>& elements)> reference_at;
  // The platform's result and its bound.
  std::function<Emulation(const core::Platform&, const core::BoundOptions&)> emulate;
  // Optional: the platform's result alone (the variant search compares bits, not bounds); without
  // it emulate() serves.
  std::function<xt::xarray<double>(const core::Platform&)> values;
  // Optional: what of a platform this op's emulation reads, as text (a matmul: its plan's JSON);
  // two platforms with the same key emulate it alike, so the variant search tries one of them.
  // Without it the whole platform is the key.
  std::function<std::string(const core::Platform&)> model_key;
  // Optional: a smaller op whose result holds the given elements of this one's (flat indices, C
  // order), and where they lie in it (flat). The variant search (variants.hpp) emulates it first,
  // so that a variant that differs somewhere costs a few rows, not the whole result.
  std::function<std::pair<Op, std::vector<std::size_t>>(const std::vector<std::size_t>& elements)> restrict_to;

  // Optional: where one element's worst-case bound comes from, step by step of the platform's
  // model (bound_source.hpp); flat index (C order) and the element's emulated value. Without it the
  // verdict splits the bound into the output rounding and the op's stages before it.
  std::function<std::vector<BoundShare>(const core::Platform&, std::size_t flat, double emulated)> bound_sources;

  // Optional: the op's models of its kernels' mistakes (diagnosis.hpp), tried on a failing output;
  // the verdict adds the patterns any output shows.
  std::function<std::vector<Diagnosis>(const DiagnosisData&)> diagnose;

  // The exact result and the reference, computed on first use and kept: every compare, port check
  // and variant search of this op (and of its copies) shares one exact computation. The
  // reference comes from the exact value where reference_from_exact allows, else reference().
  const reference::ExactValues& exact_values() const;
  // emulate(platform, options), computed once per platform name and options and kept (OpCache);
  // every check of this op calls this, not emulate.
  std::shared_ptr<const Emulation> emulation(const core::Platform& platform, const core::BoundOptions& options) const;
  // What a check (compare, requirement) measures errors against: exact_within() (kept) where the
  // op has it, else exact_values(); `relative_error` receives the values' stated relative error.
  // The check's slack includes it, so a verdict never rests on the difference.
  const reference::ExactValues& check_exact(double& relative_error) const;
  const xt::xarray<double>& reference_values() const;
  std::shared_ptr<OpCache> cache = std::make_shared<OpCache>();
};

// ---- built-in operations (inputs are copied into the Op; values of in_fmt, checked) ----

// a[..., M, K] @ b[..., K, N] (+ c broadcast to the result: a bias of shape [N], or a full c),
// batch axes broadcast as numpy does, under the platform's matmul plan for (in_fmt, out.format).
Op matmul(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
          std::string_view in_fmt, const Cast& out);

// Reductions along `axis` of x (values of in_fmt): computed in `compute` (the platform's sum plan
// for compute -> compute; inputs widen exactly), then cast into out.
//   sum   the plan's sum;
//   mean  the plan's sum divided by the length, rounded once in `compute` (numpy: add.reduce,
//         then true_divide in the same dtype);
//   max   exact in every format (NaN propagates, as numpy's max and CUDA's fmaxf-free reductions
//         on NaN-free data agree); bound 0 before the output cast.
enum class Reduction : std::uint8_t { sum, mean, max };
using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)
Reduction reduction_by_name(std::string_view name, std::string_view parameter = "reduction");
Op reduce(Reduction kind, const xt::xarray<double>& x, std::ptrdiff_t axis, std::string_view in_fmt,
          const Cast& out, std::string_view compute = "fp32");
// Over several axes (numpy's axis tuple; every axis for axis=None; none: each element alone).
// Every platform but numpy reduces each element's terms in C order of the axes by its sum plan;
// numpy's order follows x's memory layout, given as numpy's `strides` (bytes, or any consistent
// unit; empty: C-contiguous) and `buffered` (numpy copies the input: misaligned or byte-swapped)
// (core/numpy_reduction.hpp).
Op reduce(Reduction kind, const xt::xarray<double>& x, const std::vector<std::ptrdiff_t>& axes,
          std::string_view in_fmt, const Cast& out, std::string_view compute = "fp32",
          const std::vector<std::ptrdiff_t>& strides = {}, bool buffered = false);

// The sum of squares of x along its last axis, as a kernel computes it: each square rounded into
// `compute`, summed by the platform's sum plan for compute, cast into out. The exact result is
// the exact squares' sum; the bound adds each row's squaring errors (exactly known from the data:
// 0 for bf16 and fp16 into fp32) to the plan's bound. in_fmt of at most 26 bits (fp32 and below).
Op sum_of_squares(const xt::xarray<double>& x, std::string_view in_fmt, const Cast& out,
                  std::string_view compute = "fp32");

// f(x) elementwise under the platform's function model (cases/elementwise.hpp); the exact value
// is MPFR's, correctly rounded to binary64.
Op function(reference::Function f, const xt::xarray<double>& x, std::string_view in_fmt, const Cast& out);

// Softmax / log-softmax along `axis` in the variant of `options` (cases/normalization.hpp).
Op softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, std::string_view in_fmt, const Cast& out,
           const SoftmaxOptions& options = {}, bool log = false);

// Layernorm / rmsnorm over the last axis; gamma and beta (may be null) of shape {n} are copied.
Op layernorm(const xt::xarray<double>& x, const xt::xarray<double>* gamma, const xt::xarray<double>* beta, double eps,
             std::string_view in_fmt, const Cast& out, const NormOptions& options = {});
Op rmsnorm(const xt::xarray<double>& x, const xt::xarray<double>* gamma, const xt::xarray<double>* beta, double eps,
           std::string_view in_fmt, const Cast& out, const NormOptions& options = {});

// Scaled dot-product attention (cases/attention.hpp): naive or flash; mask (may be null) as
// numeq::reference::attention takes it. The exact value is MPFR's, correctly rounded to binary64.
Op attention(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
             const xt::xarray<double>* mask, bool causal, std::optional<double> scale, std::string_view in_fmt,
             const Cast& out, const AttentionOptions& options = {});

// Scaled fp8 matmul (cases/quantized.hpp): a[M, K], b[K, N] fp8 values with scales laid out as
// options.scaling says. The exact result is sum_k (a_ik s_a) (b_kj s_b), each product exact in
// binary64 (an 8-bit value times an fp32 scale fits), accumulated in the long accumulator.
Op scaled_fp8_matmul(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>& scale_a,
                     const xt::xarray<double>& scale_b, std::string_view in_fmt, const ScaledMatmulOptions& options = {});

// int8 (or uint8) a[M, K] @ b[K, N] accumulated in int32 (the Op of cases::int8_matmul): exact, or an error naming the first
// overflowing element (Int32Overflow::error), or two's complement wraparound when asked for.
Op integer_matmul(const xt::xarray<double>& a, const xt::xarray<double>& b,
                  Int32Overflow overflow = Int32Overflow::error);

// integer_matmul followed by requantisation to int8 / uint8 (cases::int8_matmul_requantized: the
// fp32 epilogue fp32(fp32(acc) * fp32(multiplier)), rounded, zero point added, clamped). The exact
// result is the real clamp(acc * multiplier + zero_point, qmin, qmax) with the multiplier as given;
// the reference is round(acc * multiplier) + zero_point, clamped, rounded exactly (deterministic
// roundings only: numeq::error naming `rounding` for odd and stochastic).
Op integer_matmul_requantized(const xt::xarray<double>& a, const xt::xarray<double>& b, const Requantization& r,
                              Int32Overflow overflow = Int32Overflow::error);

// x (values of in_fmt) cast into `out` (any rounding, overflow and subnormal policy); the exact
// result is x itself, the bound the cast's own rounding (cases::cast). Platforms cast alike.
Op conversion(const xt::xarray<double>& x, std::string_view in_fmt, const Cast& out);

// Integer quantisation of x (values of in_fmt) with per-group scales and zero points
// (cases::quantize; groups as formats/quantize.hpp: parameter arrays of x's rank, blocks of
// block_size along axis). The exact result is clamp(x / scale + zero_point, qmin, qmax), a real
// number; the reference and the emulation are its integer code.
Op quantization(const xt::xarray<double>& x, std::string_view in_fmt, const Quantization& q,
                const xt::xarray<double>& scale, const xt::xarray<std::int64_t>& zero_point, int axis = 0,
                std::size_t block_size = 1);

// Dequantisation of integer codes: (codes - zero_point) * scale, exact (an 8-bit code times an
// fp32 scale), rounded into out.
Op dequantization(const xt::xarray<double>& codes, const Quantization& q, const xt::xarray<double>& scale,
                  const xt::xarray<std::int64_t>& zero_point, int axis, std::size_t block_size, const Cast& out);

// ---- bounds as tolerances ----

struct Tolerance {
  double max_abs = 0;     // max_i bound_i
  double max_ulps = 0;    // max_i bound_i / ulp_out(reference_i)
  double rtol_only = 0;   // the smallest rtol that covers every bound with atol = 0 (Inf if a reference is 0)
  double atol_only = 0;   // the smallest atol with rtol = 0 (= max_abs)
  // The covering pair (every bound_i <= atol + rtol |reference_i|) that minimises the total
  // allowance sum_i (atol + rtol |reference_i|) on the given data.
  double rtol = 0;
  double atol = 0;
  double max_reference = 0;   // max_i |reference_i| over the elements that take part
  std::size_t unbounded = 0;  // elements whose bound is not finite (left out of every form)
};
// ulp_out(x): the spacing of `out` at |x| (the subnormal spacing below the smallest normal; at
// max_finite above it). Non-finite bounds are skipped (a NaN bound is no bound).
Tolerance tolerance(const xt::xarray<double>& bound, const xt::xarray<double>& reference, const Format& out);
double ulp_of(double x, const Format& f);
// ulp_of with f's limits worked out once, for loops over elements.
class UlpOf {
 public:
  explicit UlpOf(const Format& f);
  // Inline: the verdict and the tolerance fit ask it per element.
  double operator()(double x) const {
    if (integer_) return 1.0;
    // Beyond the largest finite value (Inf included) the top binade's spacing; NaN reads as 0.
    const double ax = std::min(std::abs(x), max_);
    return binade_spacing(std::isnan(ax) ? 0.0 : ax, emin_, mantissa_bits_);
  }

 private:
  bool integer_;
  double max_;
  int emin_, mantissa_bits_;
};

// |platform A - platform B| per element: bound_A + bound_B (FACTS.md s4: two implementations).
// In ULPs: if the unrounded values differ by d ulps the outputs may differ by floor(d) + 1.
xt::xarray<double> cross_platform_bound(const Emulation& a, const Emulation& b);

// "[64,128]": an array's shape as an Op's signature writes it (messages use numeq::shape_text,
// numpy's "(64, 128)").
std::string signature_shape(const xt::xarray<double>& x);

}  // namespace numeq::cases
