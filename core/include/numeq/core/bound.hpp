#pragma once
// Error bounds by walking a plan: the one bound walker. It reads the same Plan the evaluator
// runs (plan.hpp), so a bound always describes the arithmetic that produced the emulation.
//
// Model (FACTS.md s4; Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., ch. 3-4).
// A node that rounds the exact sum of its inputs x_i commits an error of at most
//     rho_node * sum_i |x_i|  +  eta_node
// (rho: the node's relative error: u of its accumulate cast for nearest rounding, 2u for directed,
// odd and stochastic rounding; for a fused tensor-core step also the alignment loss of
// fused.hpp step 4; eta: what a rounding can lose in the subnormal range or by flushing). A term
// t_k that passes through the nodes on its path from leaf to root therefore carries the weight
//     w_k = prod_{nodes on the path} (1 + rho_node) - 1
// and the value before the plan's output cast is within
//     sum_k w_k |t_k|  +  w_init |c|  +  absolute
// of the exact sum. Weights depend on the plan and n only, never on the data, so a matmul's
// bound is one more matmul in float64: (|A| diag(w)) |B| (rounded upward so that the bound
// computed in floating point is still a bound). The plan's output cast adds its own rounding,
// stated against the emulated output (with_output_cast).
//
// Probabilistic bounds, two of them; the kind returns, per element, the smallest of the two and
// the deterministic bound (which always holds), so it fails only where one of the probabilistic
// ones does: the stated failure_probability is the sum of theirs (a union bound).
//
// (1) Per path (Higham and Mary, SIAM J. Sci. Comput. 41(5), 2019, Theorem 3.1): errors of
// round-to-nearest nodes are treated as mean-independent random variables and the product over a
// path is bounded with lambda * sqrt(sum_j u_j^2)-type terms; truncation (fused alignment,
// toward-zero, directed) stays deterministic. Stated precisely (bound.cpp derives it): each
// round-to-nearest rounding on a term's path is a mean-independent delta with |delta| <= u_k;
// the term's weight is
//     prod_{deterministic roundings} (1 + rho) * exp(lambda sqrt(sum u_k^2) + sum u_k^2/(1-u_k)) - 1,
// and its failure probability is min(1, N * 2 exp(-lambda^2 (1 - u_max)^2 / 2)) with N the number
// of such products (terms, decompose piece products, c) that pass a random rounding: Higham and
// Mary's Theorem 2.4 per product, a union bound over them (their Theorem 3.1). Absolute (eta)
// terms, fused alignment, directed/odd/stochastic roundings and the output cast stay
// deterministic. reduction_weights gives these weights.
//
// (2) Following the data (dot_bound and matmul_bound, for plans of sequential, chunked, permute
// and fused nodes with truncating alignment and `encoded` exponents: every built-in dot and
// matmul plan; bound_probabilistic.cpp derives it). The value before the output cast is exactly
// s + sum_r e_r over the plan's roundings r; each e_r is split into its conditional mean beta_r
// and a rest eps_r (martingale differences). The model:
//   * round to nearest and stochastic rounding: beta_r = 0, |e_r| <= u |v_r| + eta;
//   * a fused step's alignment cuts toward zero: product t_i loses -sign(t_i) theta_i g (g the
//     step's grid 2^(E-F), theta_i in [0, 1)). Not zero-mean. Assumption: given the past, every
//     product the reduction cuts has the same conditional mean mu of theta (the lost bits'
//     distribution depends neither on the product's sign nor on the step). The means then add
//     to -mu sum_steps g sum_{cut products} sign(t_i), bounded from the data (which products
//     are cut, their signs; signs cancel across steps as well as within one), and each rest
//     lies in an interval of width g;
//   * everything else (toward-zero step outputs, directed roundings, a cut accumulator, subnormal
//     and flush terms): deterministic, no assumption; input casts: computed from the data.
// Magnitudes |v_r| come from the exact partial sums of the element's own data plus an error
// bound; a rounding the operands' bits show to be exact commits nothing. Azuma-Hoeffding (maximal
// form) gives, per element, with probability at least 1 - 2 exp(-lambda^2 / 2):
//     |v - s| <= sum of the means' bounds + deterministic part + lambda sqrt(sum_r h_r^2).
// One martingale per element: no union bound over terms. sum_bound uses (1) only.
//
// BoundOptions::failure_probability > 0 chooses lambda (>= 1) as the smallest for which the
// stated per-element failure probability is at most that value.
//
// Non-finite inputs give a NaN bound (no bound is meaningful); a finite input whose emulated
// output is not finite gives +Inf. Where a cast before the output may turn an overflow into a
// finite value (saturation, toward zero, odd, directed), an element whose intermediates could
// reach that cast's range gets +Inf; a saturated output (the largest finite value under such an
// output cast) gets +Inf too, as it may stand for any larger value.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/core/plan.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::core {

enum class BoundKind : std::uint8_t { deterministic, probabilistic };
using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)
// numeq::error naming `parameter` and listing the valid names otherwise.
BoundKind bound_kind_by_name(std::string_view name, std::string_view parameter = "kind");

struct BoundOptions {
  BoundKind kind = BoundKind::deterministic;
  // Probabilistic only: the lambda of Higham and Mary; positive and finite.
  double lambda = 6.0;
  // Probabilistic only: when > 0, lambda is chosen instead as the smallest (>= 1) whose per-element
  // failure probability is at most this; in [0, 1).
  double failure_probability = 0;
};

// What the walk of a plan over n terms gives. The value before the output cast differs from the
// exact sum of the terms (and c, when with_init) by at most
//     sum_k term[k] * |t_k| + init * |c| + absolute
// where t_k is the k-th term as the plan receives it: x_k for a sum, the exact product
// a_k * b_k of the arguments as given (input casts such as tf32 truncation are part of the plan
// and of the weights). When the terms are themselves computed values t^_k within e_k of exact
// ones, the bound against the exact terms is sum_k (term[k] |t^_k| + e_k) + ...
struct ReductionWeights {
  std::vector<double> term;         // n weights, each >= 0
  double init = 0;                  // weight of |c| (0 when !with_init)
  double absolute = 0;              // underflow and flush contributions, summed over the plan
  double failure_probability = 0;   // probabilistic: P(bound fails) per element is at most this
  // Products only (dot, matmul): coefficients of |a_k| and |b_k| (the arguments as given), added
  // as sum_k (a_term[k] |a_k| + b_term[k] |b_k|). They carry absolute errors that scale with one
  // operand: an input cast or a decompose piece of a subnormal operand, and a fused step whose
  // alignment exponent comes from a zero or subnormal operand (ZeroTerms::fp32_emin reads a zero
  // at 2^-126, so 0 * b takes the exponent -126 + e(b)). Both empty when every coefficient is
  // zero; tiny (about 2^-100 relative) otherwise, but needed for a bound that holds for all data.
  std::vector<double> a_term, b_term;
};
// Whether the terms are products is read from the plan: fused and decompose nodes, input_b and
// ProductMode::rounded make them products; otherwise the weights are those of a sum of values
// (which equal those of fma products). A plan's `initial` value is part of the exact sum.
ReductionWeights reduction_weights(const Plan& plan, std::size_t n, bool with_init, const BoundOptions& options = {});

// The output cast added to a pre-cast bound: if the value v before the cast is within
// `pre_cast_bound` of the exact s, and `emulated` = cast(v), returns a bound on |emulated - s|
// that also holds for any other value v' within pre_cast_bound of s rounded by the same cast
// (so that it bounds a device that followed the plan's structure in another order).
double with_output_cast(const Cast& output, double emulated, double pre_cast_bound);
// with_output_cast for one cast and many elements: the cast's rounding figures are worked out
// once (per element they were a fifth of a softmax emulation's bound arithmetic).
class OutputCastBound {
 public:
  explicit OutputCastBound(const Cast& output);
  // Inline: every emulated element of a softmax, a norm or attention takes one.
  double operator()(double emulated, double pre_cast_bound) const {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    if (std::isnan(pre_cast_bound)) return std::numeric_limits<double>::quiet_NaN();
    if (!std::isfinite(emulated) || !(pre_cast_bound < kInf)) return kInf;
    const double B = std::max(pre_cast_bound, 0.0);
    if (integer_) return B;  // integer outputs take integers only, unchanged
    const double e = std::fabs(emulated);
    // A saturated result (or a directed rounding's overflow to the largest value) may stand for
    // any larger value.
    if (finite_overflow_ && e >= max_) return kInf;
    // |v| <= |emulated| + rho |v| + eta, so |v| <= (|emulated| + eta) / (1 - rho); any v' within B
    // of the exact s (itself within B of v) has |v'| <= that + 2B, and its rounding errs by at most
    // rho |v'| + eta (for |v'| below the overflow threshold; beyond it, a cast that saturates errs
    // by |v'| - max, and one that overflows gives a non-finite result, outside the statement).
    //
    // Evaluated to nearest, then raised once: seven operations on non-negative numbers, each off by
    // at most 2^-53 relative (or 2^-1075 absolute where a result is subnormal), leave the value
    // above the exact one times (1 - 2^-53)^7; the factor 1 + 2^-49 (rounded too) more than makes up
    // for that, and 2^-1070 for the absolute errors of results below 2^-1022.
    const double V = (e + eta_) / (1 - rho_) + 2 * B;
    if (finite_overflow_ && next_up(V * (1 + 0x1p-50)) > threshold_) return near_overflow(e, B);
    double cast = rho_ * V + eta_;
    // Sharper where nothing flushes: a rounding errs by at most half the spacing at |v'|'s binade
    // (nearest) or the whole spacing (the other modes), and the spacing grows with |v'| (Higham
    // 2002, s2.1; the probabilistic walk's rounding step uses the same). rho V is up to twice that
    // near the top of a binade. |v| is also at most |emulated| plus that part of the spacing at
    // |emulated|'s binade, which keeps the largest value of a binade in it where (e + eta) / (1 -
    // rho) would step over. Both raised: the binade must not come out one too low.
    if (by_spacing_) {
      const double at_e = spacing_at(e);
      const double top = std::min(V, e + at_e + 2 * B) * (1 + 0x1p-50);
      cast = std::min(cast, spacing_at(top));
    }
    return (B + cast) * (1 + 0x1p-49) + 0x1p-1070;
  }

 private:
  // The bound in directed steps where a device's value may pass the overflow threshold.
  double near_overflow(double e, double B) const;
  // spacing_factor_ times the spacing of the output format at v >= 0's binade (its subnormal
  // spacing below the normal range): formats' binade_spacing, read from v's bits (std::ilogb and
  // std::ldexp cost more than the rest of the bound per element).
  double spacing_at(double v) const { return spacing_factor_ * binade_spacing(v, emin_, mantissa_bits_); }
  bool integer_ = false, finite_overflow_ = false;
  double rho_ = 0, eta_ = 0, max_ = 0, threshold_ = 0;
  // The spacing form: formats with subnormals and casts that flush nothing; 1/2 (nearest) or 1 ulp.
  bool by_spacing_ = false;
  double spacing_factor_ = 0;
  int emin_ = 0, mantissa_bits_ = 0;
};

// Per-element bounds on |emulated - exact| for the results of sum / dot / matmul (evaluate.hpp)
// with the same arguments; `emulated` is what that call returned (same shape).
xt::xarray<double> sum_bound(const xt::xarray<double>& x, std::ptrdiff_t axis, const Plan& plan,
                             const xt::xarray<double>& emulated, const BoundOptions& options = {});
xt::xarray<double> dot_bound(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                             const Plan& plan, const xt::xarray<double>& emulated, const BoundOptions& options = {});
xt::xarray<double> matmul_bound(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                                const Plan& plan, const xt::xarray<double>& emulated,
                                const BoundOptions& options = {});

}  // namespace numeq::core
