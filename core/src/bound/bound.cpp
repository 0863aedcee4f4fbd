// The bound walker (bound.hpp): one walk of a plan that mirrors the evaluator's walk
// (evaluate.cpp, reduce_node; explicit_tree.cpp; fused.cpp) node for node, and the per-element
// bounds of sum / dot / matmul built from it.
//
// ---- The model (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 2002, ch. 3-4)
//
// Every rounding in a plan rounds the exact value x of its operands (an addition, a multi-term
// group, a fused step's aligned sum, a single value into a cast) into a cast c:
//     |fl(x) - x| <= rho_c |x| + eta_c.
//   rho_c: with p the significand bits of c's format (implicit bit included) and u = 2^-p,
//     nearest (even or away): |fl(x) - x| <= ulp(x)/2 = 2^(e-p+1)/2 with 2^e <= |x|, so <= u|x|
//     (Higham 2002, Thm 2.2);
//     toward zero, upward, downward, odd and stochastic: fl(x) is one of the two neighbours of x,
//     so |fl(x) - x| < ulp(x) <= 2u|x|.
//   eta_c: below 2^emin the grid is uniform with spacing 2^(emin-m) (the smallest subnormal):
//     half of it for nearest, all of it otherwise. Flushing results (FTZ) turns a result below
//     2^emin into zero: the error is then below 2^emin (|x| < 2^emin when the rounded value is
//     subnormal), so eta_c = 2^emin. Flushing inputs (DAZ) drops each operand below 2^emin:
//     one more 2^emin per operand of an addition (and 2^-1022 for a single value, which the
//     rounding kernel flushes only when it is a binary64 subnormal).
//   Integer accumulators add exactly (the evaluator refuses overflow): rho = eta = 0.
// A node with inputs whose exact values are A_i and computed values are within E_i of them:
//     E_node <= sum E_i + rho (sum (A_i + E_i)) + eta,
// linear in the |t_k|: each term's coefficient is multiplied by (1 + rho) per rounding on its path
// and so w_k = prod_path (1 + rho) - 1; every eta is multiplied by the (1 + rho) of the roundings
// after it. The walk below goes from the root down, carrying the product of the roundings above
// a node (a Factor), so every term's weight is formed once (O(n) for any plan but pairwise's
// O(n) nodes).
//
// Fused tensor-core steps (fused.hpp; Blanchard, Higham, Lopez, Mary, Pranesh, SIAM J. Sci.
// Comput. 42(3) C124, 2020, for the block-FMA view): a step aligns its m non-zero terms x_i
// (products, exact, and c) to 2^(E-F) and adds them exactly, then rounds once into `output`.
// Cutting a term toward zero loses less than 2^(E-F) (nearest: at most 2^(E-F-1)) and never more
// than |x_i|. When E is the exponent of a "regular" term j (2^E <= |x_j|: a product of normal
// operands read at ea + eb with significands in [1, 4), c normal, or any term under `normalized`
// / `largest_term`, which read true exponents), 2^E <= max|x_i| <= sum |x_i|, and the term at E is
// itself exact when its bits reach no lower than 2^(E-F) (ma + mb <= F for `encoded`, ma + mb + 1
// <= F for the others; c: its fraction bits <= F), so at most m - 1 terms lose anything:
//     alignment error <= a_F (m - 1 or m) sum |x_i|,  a_F = 2^-F (truncate), 2^-F-1 (nearest).
// E may instead come from an "irregular" candidate: a zero operand (ZeroTerms::fp32_emin reads it
// at 2^-126, so a zero a with b gives 2^(-126 + eb)), a subnormal operand read at its emin
// (encoded), c == 0 or subnormal, or exponent_floor. Such a candidate is bounded by the operands:
// 2^(ea + eb) <= 2^za (|b| + 2^zb0) with za the largest exponent an irregular a is read at, zb0 =
// max(emin_b, -126); these go into per-operand coefficients (a_term / b_term) and `absolute`,
// with m terms each losing up to a_F 2^E. Then the step's rounding: rho_step = (1 + rho_align)
// (1 + rho_out) - 1, the alignment's absolute part multiplied by (1 + rho_out), plus eta_out.
//
// decompose: an operand x is split as x0 = piece(x), x1 = piece(x - x0), ...; with r_i the rest
// before piece i (r_0 = x, exact differences), |r_{i+1}| <= rho |r_i| + eta and
// |x_i| <= |r_i| + |r_{i+1}| <= (1 + rho) |r_i| + eta: affine bounds alpha_i |x| + beta_i. The
// passes compute sum over passes of a_i b_j; the exact a b = sum_{i,j} a_i b_j + r_a b + a r_b -
// r_a r_b, so the dropped part is bounded by the passes missing (or repeated) and the residuals'
// products, each a polynomial in |a|, |b| (Higham 2002, s3.1 for the split of a product).
//
// Input casts (tf32 truncation): |a' - a| <= rho_a |a| + eta_a; the plan sees t' = a' b' with
// |a'| <= (1 + rho_a)|a| + eta_a, and |a'b' - ab| <= (rho_a|a| + eta_a)|b'| + |a|(rho_b|b| + eta_b):
// the bound in the arguments as given is a polynomial in |a_k|, |b_k| again.
//
// ---- Probabilistic bounds (Higham and Mary, SIAM J. Sci. Comput. 41(5) A2815, 2019)
//
// Their Theorem 2.4 (used for inner products in Theorem 3.1): if delta_1 .. delta_n are random
// variables, mean independent (E(delta_k | delta_1 .. delta_{k-1}) = E(delta_k) = 0), |delta_k| <= u,
// then |prod (1 + delta_k) - 1| <= exp(lambda sqrt(n) u + n u^2 / (1 - u)) - 1 with probability at
// least 1 - 2 exp(-lambda^2 (1 - u)^2 / 2). The proof (Azuma-Hoeffding on sum log(1 + delta_k))
// carries over to bounds u_k differing per rounding: the increments lie in intervals of width at
// most 2 u_k / (1 - u_max), giving exp(lambda sqrt(sum u_k^2) + sum u_k^2 / (1 - u_k)) - 1 with the
// same probability, u_max in place of u. What is implemented, per output element:
//   * every round-to-nearest rounding on a term's path is such a delta_k (u_k = 2^-p); every
//     other contribution (directed, odd and stochastic roundings, fused alignment, subnormal and
//     flush terms, decompose residuals, input casts, the output cast) stays deterministic;
//   * a term's weight is (prod over its deterministic roundings (1 + rho) ) *
//     exp(lambda sqrt(S2) + S2') - 1, S2 = sum u_k^2, S2' = sum u_k^2 / (1 - u_k) over its
//     random roundings;
//   * failure_probability = min(1, N * 2 exp(-lambda^2 (1 - u_max)^2 / 2)), N the number of
//     products prod (1 + delta) the bound uses (terms, decompose piece products and c that pass
//     a random rounding): the union bound of Higham and Mary's Theorem 3.1.
// The absolute (eta) parts keep their deterministic factors. dot_bound and matmul_bound also run
// bound_probabilistic.cpp's walk over each element's own data (it models the truncations above
// too) and keep the smallest bound; the failure probabilities add.
//
// ---- Overflow
// The analysis holds when no rounding overflows. A cast that overflows to Inf (or NaN) carries
// the overflow to the output (Inf and NaN propagate through every later node), and a non-finite
// output gets a +Inf bound. A cast that turns an overflow into a finite value (saturation, or
// toward zero / odd / directed roundings, IEEE 754 s7.4) does not: when a plan has one before
// its output cast, an element whose largest possible intermediate magnitude (sum |t_k| + its
// bound + |c|) reaches the smallest range of the plan's casts gets +Inf. The output cast is
// with_output_cast's.
//
// ---- Floating-point evaluation of the bound
// Weights are formed with every operation rounded upward (std::nextafter after round-to-nearest,
// all quantities non-negative), so each weight is at least its exact value. The per-element sums
// sum_k w_k |a_k| |b_k| are formed in binary64 with round-to-nearest: for non-negative terms each
// of the at most K + 2 roundings on a term's path loses at most a factor (1 - 2^-53), so the
// exact sum is at most the computed one times (1 - 2^-53)^-(K+2) <= 1 + (K + 8) 2^-52 (for
// K < 2^40), plus 2^-1074 per operation for underflow; the result is multiplied by that factor
// and rounded upward.

#include "numeq/core/bound.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <xtensor/xbroadcast.hpp>

#include "numeq/formats/error.hpp"
#include "bound_probabilistic.hpp"
#include "bound_rounder.hpp"
#include "shapes.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/round_and_pack.hpp"

#include "bound_walk.hpp"

namespace numeq::core {

using namespace detail;  // shapes.hpp
using namespace bound_detail;

BoundKind bound_kind_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<BoundKind>, name, parameter, "bound kind");
}

ReductionWeights reduction_weights(const Plan& plan, std::size_t n, bool with_init, const BoundOptions& options) {
  // Products unless the plan can only reduce values: the weights of a value sum are those of
  // products with exact operands, except for nodes that only take products.
  bool products = false;
  std::function<void(const PlanNode&)> scan = [&](const PlanNode& node) {
    if (node.kind == NodeKind::fused || node.kind == NodeKind::decompose || plan.input_b ||
        node.arithmetic.product == ProductMode::rounded)
      products = true;
    for (const PlanNode& c : node.children) scan(c);
  };
  scan(plan.reduction);
  Walk w = walk(plan, n, with_init, products, resolved(plan, n, with_init, products, options));
  ReductionWeights r;
  r.term = std::move(w.W);
  r.init = w.init;
  r.absolute = w.absolute;
  r.failure_probability = w.failure;
  r.a_term = std::move(w.Ca);
  r.b_term = std::move(w.Cb);
  return r;
}

double with_output_cast(const Cast& output, double emulated, double pre_cast_bound) {
  return OutputCastBound(output)(emulated, pre_cast_bound);
}

OutputCastBound::OutputCastBound(const Cast& output) {
  integer_ = output.format.is_integer();
  if (integer_) return;
  const Rounder r = rounder(output);
  finite_overflow_ = r.finite_overflow;
  rho_ = r.rho;
  eta_ = eta_value(r);
  max_ = r.max;
  threshold_ = r.threshold;
  const Format& f = output.format;
  by_spacing_ = f.has_zero && !output.flushes_inputs() && !output.flushes_outputs();
  spacing_factor_ = output.rounding == Rounding::nearest_even || output.rounding == Rounding::nearest_away ? 0.5 : 1.0;
  emin_ = f.emin();
  mantissa_bits_ = f.mantissa_bits;
}

double OutputCastBound::near_overflow(double e, double B) const {
  // Directed steps where a device's value may pass the overflow threshold (operator() in bound.hpp).
  const double V_up = add_up(up(add_up(e, eta_) / (1 - rho_)), mul_up(2.0, B));
  return add_up(B, std::max(add_up(mul_up(rho_, V_up), eta_), up(V_up - max_)));
}

// No terms, no c and no initial value (or numpy's +0): the exact result is 0, so |emulated| is
// the error itself (0 for the +0 every plan gives). Otherwise the output cast's share below
// would bound a rounding that never happens.

bool bound_detail::nothing_reduced(std::size_t K, const xt::xarray<double>* c, const Plan& plan) {
  return K == 0 && c == nullptr && (!plan.initial || *plan.initial == 0);
}

static xt::xarray<double> sum_bound_of_kind(const xt::xarray<double>& x, std::ptrdiff_t axis, const Plan& plan,
                             const xt::xarray<double>& emulated, const BoundOptions& options) {
  const AxisLayout layout = axis_layout(x, axis);
  const std::size_t outer = layout.outer, inner = layout.inner;
  const std::vector<std::size_t>& out_shape = layout.out_shape;
  check_emulated(emulated, out_shape);
  const std::size_t K = layout.length;
  const Walk w = walk(plan, K, false, false, options);
  xt::xarray<double> result = xt::xarray<double>::from_shape(out_shape);
  parallel_for(outer * inner, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      if (nothing_reduced(K, nullptr, plan)) {
        result.data()[i] = std::fabs(emulated.data()[i]);
        continue;
      }
      const double* base = x.data() + (i / inner) * K * inner + i % inner;
      double s = 0, mag = 0;
      bool nonfinite = false, input_over = false;
      for (std::size_t k = 0; k < K; ++k) {
        const double v = std::fabs(base[k * inner]);
        nonfinite = nonfinite || !std::isfinite(v);
        input_over = input_over || v > w.input_threshold_a;
        s += w.W[k] * v;
        mag += v;
      }
      const double pre = add_up(inflate(s, K), w.absolute);
      const double magnitude = add_up(add_up(inflate(mag, K), pre), w.initial);
      result.data()[i] = finish(w, emulated.data()[i], pre, magnitude, nonfinite, input_over);
    }
  }, std::max<std::size_t>(1, (std::size_t{1} << 14) / std::max<std::size_t>(1, K)));
  return result;
}

static xt::xarray<double> dot_bound_of_kind(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                             const Plan& plan, const xt::xarray<double>& emulated, const BoundOptions& options) {
  const DotLayout layout = dot_layout(a, b, c);
  const std::size_t K = layout.K;
  const std::vector<std::size_t>& shape = layout.shape;
  check_emulated(emulated, shape);
  const xt::xarray<double>&fa = layout.fa, &fb = layout.fb, &fc = layout.fc;
  const Walk w = walk(plan, K, c != nullptr, true, options);
  xt::xarray<double> result = xt::xarray<double>::from_shape(shape);
  parallel_for(result.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      if (nothing_reduced(K, c, plan)) {
        result.data()[i] = std::fabs(emulated.data()[i]);
        continue;
      }
      const double* ai = fa.data() + i * K;
      const double* bi = fb.data() + i * K;
      double s = 0, mag = 0;
      bool nonfinite = false, input_over = false;
      for (std::size_t k = 0; k < K; ++k) {
        const double x = std::fabs(ai[k]), y = std::fabs(bi[k]);
        nonfinite = nonfinite || !std::isfinite(x) || !std::isfinite(y);
        input_over = input_over || x > w.input_threshold_a || y > w.input_threshold_b;
        const double p = x * y;
        s += w.W[k] * p;
        if (!w.Ca.empty()) s += w.Ca[k] * x;
        if (!w.Cb.empty()) s += w.Cb[k] * y;
        mag += p;
      }
      const std::size_t ops = 3 * K + 4;
      double pre = add_up(inflate(s, ops), w.absolute);
      double cm = 0;
      if (c) {
        cm = std::fabs(fc.data()[i]);
        nonfinite = nonfinite || !std::isfinite(cm);
        pre = add_up(pre, mul_up(w.init, cm));
      }
      const double magnitude = add_up(add_up(add_up(inflate(mag, K), pre), cm), w.initial);
      result.data()[i] = finish(w, emulated.data()[i], pre, magnitude, nonfinite, input_over);
    }
  }, std::max<std::size_t>(1, (std::size_t{1} << 14) / std::max<std::size_t>(1, K)));
  return result;
}

// The probabilistic bound holds with the stated probability; the deterministic one always. Where
// the deterministic bound is the smaller (short reductions, truncating steps), it is the better
// statement, and the smaller of the two still holds with at least the stated probability.
namespace {
// The bound of the options' kind, of_kind(options) for each kind asked: a probabilistic bound
// never stands above the deterministic one.
template <class OfKind>
xt::xarray<double> no_looser_than_deterministic(const BoundOptions& o, OfKind of_kind) {
  xt::xarray<double> r = of_kind(o);
  if (o.kind != BoundKind::probabilistic) return r;
  BoundOptions deterministic = o;
  deterministic.kind = BoundKind::deterministic;
  const xt::xarray<double> d = of_kind(deterministic);
  for (std::size_t i = 0; i < r.size(); ++i)
    if (d.data()[i] < r.data()[i]) r.data()[i] = d.data()[i];  // NaN stays NaN (no claim either way)
  return r;
}

// The data-driven walk dw for K terms (bound_probabilistic.cpp) over the elements whose bound r is finite: r
// becomes the smaller of the two. a(i), b(i): element i's operands (b with stride bs), c(i) its c.
template <class A, class B, class C>
void tighten(xt::xarray<double>& r, const Plan& plan, const xt::xarray<double>& emulated, const DataWalk& dw,
             std::size_t K, double lambda, std::size_t bs, const A& a_of, const B& b_of, const C& c_of,
             const std::vector<double>& ac, const std::vector<double>& bc, const double* a0, const double* b0) {
  const OutputCastBound output(plan.output);
  parallel_for(r.size(), [&](std::size_t begin, std::size_t end) {
    DataWalk::Scratch scratch;
    for (std::size_t i = begin; i < end; ++i) {
      const double current = r.data()[i];
      if (!(current < kInf)) continue;  // NaN (non-finite input) or +Inf (overflow): kept
      const std::size_t ia = a_of(i), ib = b_of(i);
      const double* c = c_of(i);
      const double pre = dw.pre_cast(a0 + ia, b0 + ib, bs, ac.data() + ia, bc.data() + ib, bs, c, lambda, scratch);
      const double candidate = output(emulated.data()[i], pre);
      if (candidate < current) r.data()[i] = candidate;
    }
  }, std::max<std::size_t>(1, (std::size_t{1} << 12) / std::max<std::size_t>(1, K)));
}
}  // namespace

xt::xarray<double> sum_bound(const xt::xarray<double>& x, std::ptrdiff_t axis, const Plan& plan,
                             const xt::xarray<double>& emulated, const BoundOptions& options) {
  const std::size_t K = axis_layout(x, axis).length;
  const BoundOptions o = resolved(plan, K, false, false, options);
  return no_looser_than_deterministic(
      o, [&](const BoundOptions& k) { return sum_bound_of_kind(x, axis, plan, emulated, k); });
}

namespace {

// A dot's or a matmul's bound of the kind asked for, no looser than the deterministic one; a
// probabilistic bound is then tightened by the data (tighten, above) where the plan's data walk
// supports it: by_data(bound, lambda, walk) does that for the product's own layout.
template <class OfKind, class ByData>
xt::xarray<double> product_bound(const xt::xarray<double>& a, bool has_c, const Plan& plan, const BoundOptions& options,
                                 OfKind&& of_kind, ByData&& by_data) {
  const std::size_t K = a.dimension() == 0 ? 0 : a.shape().back();
  const BoundOptions o = resolved(plan, K, has_c, true, options);
  xt::xarray<double> r = no_looser_than_deterministic(o, of_kind);
  if (o.kind != BoundKind::probabilistic || K == 0 || r.size() == 0) return r;
  const DataWalk walk(plan, K, has_c);
  if (walk.supported()) by_data(r, o.lambda, walk);
  return r;
}

// Dot i reads row i of a and of b (K each), and c[i].
void tighten_dot(xt::xarray<double>& r, const DotLayout& layout, const xt::xarray<double>* c, const Plan& plan,
                 const xt::xarray<double>& emulated, double lambda, const DataWalk& walk) {
  const std::vector<double> ac = walk.cast_a(layout.fa.data(), layout.fa.size());
  const std::vector<double> bc = walk.cast_b(layout.fb.data(), layout.fb.size());
  const std::size_t K = layout.K;
  tighten(r, plan, emulated, walk, K, lambda, 1, [K](std::size_t i) { return i * K; },
          [K](std::size_t i) { return i * K; }, [&](std::size_t i) { return c ? layout.fc.data() + i : nullptr; }, ac,
          bc, layout.fa.data(), layout.fb.data());
}

// Element i = (t, m, n): row m of a's matrix a_of[t], column n of b's matrix b_of[t] (stride N).
void tighten_matmul(xt::xarray<double>& r, const MatmulLayout& layout, const xt::xarray<double>& a,
                    const xt::xarray<double>& b, const xt::xarray<double>* c, const Plan& plan,
                    const xt::xarray<double>& emulated, double lambda, const DataWalk& walk) {
  const std::size_t M = layout.M, N = layout.N, K = layout.K;
  const std::vector<std::size_t>& a_of = layout.operands.a_of;
  const std::vector<std::size_t>& b_of = layout.operands.b_of;
  tighten(r, plan, emulated, walk, K, lambda, N,
          [&](std::size_t i) { return (a_of[i / (M * N)] * M + (i / N) % M) * K; },
          [&](std::size_t i) { return b_of[i / (M * N)] * K * N + i % N; },
          [&](std::size_t i) { return c ? layout.fc.data() + i : nullptr; }, walk.cast_a(a.data(), a.size()),
          walk.cast_b(b.data(), b.size()), a.data(), b.data());
}

}  // namespace

xt::xarray<double> dot_bound(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                             const Plan& plan, const xt::xarray<double>& emulated, const BoundOptions& options) {
  return product_bound(
      a, c != nullptr, plan, options, [&](const BoundOptions& k) { return dot_bound_of_kind(a, b, c, plan, emulated, k); },
      [&](xt::xarray<double>& r, double lambda, const DataWalk& walk) {
        tighten_dot(r, dot_layout(a, b, c), c, plan, emulated, lambda, walk);
      });
}

xt::xarray<double> matmul_bound(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                                const Plan& plan, const xt::xarray<double>& emulated, const BoundOptions& options) {
  return product_bound(
      a, c != nullptr, plan, options,
      [&](const BoundOptions& k) { return matmul_bound_of_kind(a, b, c, plan, emulated, k); },
      [&](xt::xarray<double>& r, double lambda, const DataWalk& walk) {
        tighten_matmul(r, matmul_layout(a, b, c), a, b, c, plan, emulated, lambda, walk);
      });
}

}  // namespace numeq::core
