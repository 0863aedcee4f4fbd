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
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq::core {

using namespace detail;  // shapes.hpp: layouts and broadcasting shared with the other walker

namespace {

// Whether every finite value of `in` is a value of cast's format that the cast keeps as it is.
bool fits(const Format& in, const Cast& out) {
  const Format& o = out.format;
  if (in.is_integer() || o.is_integer()) return in == o;
  if (!in.has_zero || !o.has_zero) return in == o && !out.flushes_outputs();
  if (in.is_signed && !o.is_signed) return false;
  if (in.mantissa_bits > o.mantissa_bits) return false;
  if (max_finite(in) > max_finite(o)) return false;
  if (in.emin() - in.mantissa_bits < o.emin() - o.mantissa_bits) return false;
  if (out.flushes_outputs() && in.emin() - in.mantissa_bits < o.emin()) return false;
  return true;
}

// The cast whose values a node's result is (nullopt: not one cast).
std::optional<Cast> result_cast(const PlanNode& n) {
  switch (n.kind) {
    case NodeKind::sequential:
    case NodeKind::lanes:
    case NodeKind::tree:
    case NodeKind::group:
    case NodeKind::term: return n.arithmetic.accumulate;
    case NodeKind::pairwise: {
      const std::optional<Cast> child = result_cast(n.children[0]);
      if (child && fits(child->format, n.arithmetic.accumulate)) return n.arithmetic.accumulate;
      return std::nullopt;
    }
    case NodeKind::chunked:
    case NodeKind::decompose: return result_cast(n.children[1]);
    case NodeKind::split:
      return n.split_mode == SplitMode::serial ? std::optional<Cast>(n.through) : result_cast(n.children[1]);
    case NodeKind::fused: return n.fused.output;
    case NodeKind::permute: return result_cast(n.children[0]);
  }
  return std::nullopt;
}

bool result_fits(const PlanNode& n, const Cast& into) {
  const std::optional<Cast> c = result_cast(n);
  return c && fits(c->format, into);
}

// ---- the product of (1 + delta) above a value ----
struct Factor {
  double all = 0;  // every rounding, deterministically: prod (1 + rho) - 1 (used for eta terms)
  double det = 0;  // the deterministic roundings only (probabilistic kind)
  double s2 = 0;   // sum u_k^2 of the random roundings (probabilistic kind)
  double s2p = 0;  // sum u_k^2 / (1 - u_k)
};

Factor combine(const Factor& a, const Factor& b) {
  return Factor{comb(a.all, b.all), comb(a.det, b.det), add_up(a.s2, b.s2), add_up(a.s2p, b.s2p)};
}

// (1 + rho)^c - 1 for c = 0, 1, ..., upward, kept per rho.
class Powers {
 public:
  explicit Powers(double rho) : rho_(rho) {}
  double operator()(std::size_t c) {
    if (rho_ == 0) return 0;
    while (pw_.size() <= c) pw_.push_back(comb(pw_.back(), rho_));
    return pw_[c];
  }

 private:
  double rho_;
  std::vector<double> pw_{0.0};
};

// Affine bounds on an operand as a node sees it: |x'| <= alpha |x| + beta.
struct Affine {
  double alpha = 1;
  double beta = 0;
};

// error += w |a'||b'| + ca |a'| + cb |b'| + c0, rewritten for |a'| <= A(|a|), |b'| <= B(|b|).
struct Poly {
  double w = 0, ca = 0, cb = 0, c0 = 0;
};
Poly through(const Poly& p, const Affine& a, const Affine& b) {
  Poly q;
  q.w = mul_up(p.w, mul_up(a.alpha, b.alpha));
  q.ca = add_up(mul_up(p.w, mul_up(a.alpha, b.beta)), mul_up(p.ca, a.alpha));
  q.cb = add_up(mul_up(p.w, mul_up(a.beta, b.alpha)), mul_up(p.cb, b.alpha));
  q.c0 = add_up(add_up(mul_up(p.w, mul_up(a.beta, b.beta)), mul_up(p.ca, a.beta)), add_up(mul_up(p.cb, b.beta), p.c0));
  return q;
}

class Walker;

// What a node reduces: terms of the plan (values or products), or values computed by other
// nodes (partials). Indices are the source's own.
class Source {
 public:
  virtual ~Source() = default;
  virtual bool products() const = 0;
  // Item i's value passes the roundings in f (everything from it to the root); `ar` is the
  // arithmetic of the leaf that takes it (its product rounding applies to product terms).
  virtual void item(std::size_t i, const Factor& f, const Arithmetic& ar) = 0;
  // Products only: error += p in the operands as this source hands them out.
  virtual void add(std::size_t i, const Poly& p) = 0;
  // Whether item i is already a value of cast (rounding it alone into cast is exact).
  virtual bool exact_in(std::size_t i, const Cast& cast) const = 0;
};

class Walker {
 public:
  Walker(bool probabilistic, double lambda) : prob_(probabilistic), lambda_(lambda) {}

  // One more rounding r after f.
  Factor apply(const Factor& f, const Rounder& r) {
    if (r.exact || r.rho == 0) return f;
    Factor g = f;
    g.all = comb(f.all, r.rho);
    if (prob_ && r.random) {
      g.s2 = add_up(f.s2, mul_up(r.u, r.u));
      g.s2p = add_up(f.s2p, up(r.u * r.u / (1 - r.u)));
      u_max_ = std::max(u_max_, r.u);
    } else {
      g.det = comb(f.det, r.rho);
    }
    return g;
  }
  // c roundings r after f; `pw` holds r's powers.
  Factor apply_n(const Factor& f, const Rounder& r, Powers& pw, std::size_t c) {
    if (c == 0 || r.exact || r.rho == 0) return f;
    Factor g;
    g.all = pw(c);
    if (prob_ && r.random) {
      const double cd = static_cast<double>(c);
      g.s2 = mul_up(cd, mul_up(r.u, r.u));
      g.s2p = mul_up(cd, up(r.u * r.u / (1 - r.u)));
      u_max_ = std::max(u_max_, r.u);
    } else {
      g.det = g.all;
    }
    return combine(f, g);
  }
  // The weight of a value under f, counting a random product when one is used.
  double weight(const Factor& f) {
    if (!prob_) return f.all;
    if (f.s2 == 0) return f.det;
    ++random_products_;
    const double x = add_up(mul_up(lambda_, up(std::sqrt(f.s2))), f.s2p);
    // expm1 is within a few ulps in every libm numeq builds with; 2^-40 relative covers it.
    const double e = up(std::expm1(x) * (1 + 0x1p-40));
    return comb(f.det, e);
  }
  void absolute(double eta, const Factor& f) {
    if (eta != 0) abs_ = add_up(abs_, mul_up(eta, add_up(1.0, f.all)));
  }

  Factor visit(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f, bool init);

  double abs_ = 0;
  std::size_t random_products_ = 0;
  double u_max_ = 0;

 private:
  Factor sequential(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f, bool init);
  Factor lanes(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f, bool init);
  Factor tree(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f, bool init);
  Factor fused(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f, bool init);
  Factor decompose(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f, bool init);
  Factor explicit_tree(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f, bool init);
  void group(const PlanNode& g, Source& src, std::size_t begin, const Factor& f);

  bool prob_;
  double lambda_;
};

// ---- sources ----

// The plan's own terms: x_k (sums) or a_k * b_k, after the plan's input casts.
class TermSource final : public Source {
 public:
  TermSource(Walker& w, bool prods, std::size_t n, const Affine& a, const Affine& b)
      : walker_(w), products_(prods), a_(a), b_(b), W(n, 0.0) {
    if (prods) {
      Ca.assign(n, 0.0);
      Cb.assign(n, 0.0);
    }
  }
  bool products() const override { return products_; }
  void item(std::size_t i, const Factor& f, const Arithmetic& ar) override {
    Factor g = f;
    if (products_ && ar.product == ProductMode::rounded) {
      const Rounder rp = rounder(ar.product_cast);
      walker_.absolute(eta_value(rp), f);
      g = walker_.apply(f, rp);
    }
    add(i, Poly{walker_.weight(g), 0, 0, 0});
  }
  void add(std::size_t i, const Poly& p) override {
    if (!products_) {
      // |x'| <= alpha |x| + beta.
      W[i] = add_up(W[i], mul_up(add_up(p.w, p.ca), a_.alpha));
      C0 = add_up(C0, add_up(mul_up(add_up(p.w, p.ca), a_.beta), p.c0));
      return;
    }
    const Poly q = through(p, a_, b_);
    W[i] = add_up(W[i], q.w);
    Ca[i] = add_up(Ca[i], q.ca);
    Cb[i] = add_up(Cb[i], q.cb);
    C0 = add_up(C0, q.c0);
  }
  bool exact_in(std::size_t, const Cast&) const override { return false; }

  Walker& walker_;
  bool products_;
  Affine a_, b_;
  std::vector<double> W, Ca, Cb;
  double C0 = 0;
};

class PermutedSource final : public Source {
 public:
  PermutedSource(Source& parent, std::vector<std::size_t> map) : parent_(parent), map_(std::move(map)) {}
  bool products() const override { return parent_.products(); }
  void item(std::size_t i, const Factor& f, const Arithmetic& ar) override { parent_.item(map_[i], f, ar); }
  void add(std::size_t i, const Poly& p) override { parent_.add(map_[i], p); }
  bool exact_in(std::size_t i, const Cast& c) const override { return parent_.exact_in(map_[i], c); }

 private:
  Source& parent_;
  std::vector<std::size_t> map_;
};

// Values computed by other nodes: item i visits the node that computes it.
class PartialSource final : public Source {
 public:
  using Visit = std::function<void(std::size_t, const Factor&)>;
  using Exact = std::function<bool(std::size_t, const Cast&)>;
  PartialSource(Visit v, Exact e) : visit_(std::move(v)), exact_(std::move(e)) {}
  bool products() const override { return false; }
  void item(std::size_t i, const Factor& f, const Arithmetic&) override { visit_(i, f); }
  void add(std::size_t, const Poly&) override {
    throw numeq::error("plan: a node that reduces products (fused, decompose) was given partial values");
  }
  bool exact_in(std::size_t i, const Cast& c) const override { return exact_(i, c); }

 private:
  Visit visit_;
  Exact exact_;
};

// Products of decompose pieces a_i * b_j of the terms [offset, offset + len) of the parent.
class PieceSource final : public Source {
 public:
  PieceSource(Walker& w, Source& parent, std::size_t offset, const Affine& a, const Affine& b)
      : walker_(w), parent_(parent), offset_(offset), a_(a), b_(b) {}
  bool products() const override { return true; }
  void item(std::size_t i, const Factor& f, const Arithmetic& ar) override {
    Factor g = f;
    if (ar.product == ProductMode::rounded) {
      const Rounder rp = rounder(ar.product_cast);
      walker_.absolute(eta_value(rp), f);
      g = walker_.apply(f, rp);
    }
    add(i, Poly{walker_.weight(g), 0, 0, 0});
  }
  void add(std::size_t i, const Poly& p) override { parent_.add(offset_ + i, through(p, a_, b_)); }
  bool exact_in(std::size_t, const Cast&) const override { return false; }

 private:
  Walker& walker_;
  Source& parent_;
  std::size_t offset_;
  Affine a_, b_;
};

// ---- the node walk (the cases of evaluate.cpp, reduce_node) ----

Factor Walker::visit(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f, bool init) {
  const std::size_t n = end - begin;
  const Rounder r = rounder(node.arithmetic.accumulate);
  switch (node.kind) {
    case NodeKind::sequential: return sequential(node, src, begin, end, f, init);
    case NodeKind::lanes: return lanes(node, src, begin, end, f, init);
    case NodeKind::tree: return tree(node, src, begin, end, f, init);
    case NodeKind::pairwise: {
      if (n <= node.size) return visit(node.children[0], src, begin, end, f, init);
      std::size_t half = n / 2;
      half -= half % node.multiple;
      if (half == 0) half = std::min(n, node.multiple);
      if (half >= n)
        throw numeq::error("plan: a pairwise node (leaf " + std::to_string(node.size) + ", multiple " +
                           std::to_string(node.multiple) + ") cannot split a range of " + std::to_string(n) + " terms");
      // add(left, right), then init + that.
      Factor fp = f;
      if (init) {
        absolute(eta_add(r), f);
        fp = apply(f, r);
      }
      absolute(eta_add(r), fp);
      const Factor fk = apply(fp, r);
      visit(node, src, begin, begin + half, fk, false);
      visit(node, src, begin + half, end, fk, false);
      return apply(f, r);
    }
    case NodeKind::chunked: {
      const std::size_t size = node.size;
      const std::size_t parts = (n + size - 1) / size;
      PartialSource partials(
          [&](std::size_t i, const Factor& g) {
            visit(node.children[0], src, begin + i * size, std::min(end, begin + (i + 1) * size), g, false);
          },
          [&](std::size_t, const Cast& c) { return result_fits(node.children[0], c); });
      return visit(node.children[1], partials, 0, parts, f, init);
    }
    case NodeKind::split: {
      std::vector<std::size_t> start = split_starts(n, node.size);
      const std::size_t parts = start.size() - 1;
      for (std::size_t& s : start) s += begin;
      const Rounder rt = rounder(node.through);
      if (node.split_mode == SplitMode::serial) {
        // acc = through(inner(part, init = acc)), part by part: the last part first here.
        Factor g = f;
        for (std::size_t p = parts; p-- > 0;) {
          absolute(eta_value(rt), g);
          g = visit(node.children[0], src, start[p], start[p + 1], apply(g, rt), p > 0 || init);
        }
        return g;
      }
      PartialSource partials(
          [&](std::size_t i, const Factor& g) {
            absolute(eta_value(rt), g);
            visit(node.children[0], src, start[i], start[i + 1], apply(g, rt), false);
          },
          [&](std::size_t, const Cast& c) { return fits(node.through.format, c) && !node.through.format.is_integer(); });
      return visit(node.children[1], partials, 0, parts, f, init);
    }
    case NodeKind::fused: return fused(node, src, begin, end, f, init);
    case NodeKind::permute: {
      std::vector<std::size_t> map;
      map.reserve(n);
      for (std::size_t block = begin; block < end; block += node.size) {
        const std::size_t len = std::min(node.size, end - block);
        for (const std::size_t i : node.order)
          if (i < len) map.push_back(block + i);
      }
      PermutedSource permuted(src, std::move(map));
      return visit(node.children[0], permuted, 0, n, f, init);
    }
    case NodeKind::group:
    case NodeKind::term: return explicit_tree(node, src, begin, end, f, init);
    case NodeKind::decompose: return decompose(node, src, begin, end, f, init);
  }
  return f;
}

// acc = init (or +0, or the first term rounded into the accumulator); acc = add(acc, term).
Factor Walker::sequential(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f,
                          bool init) {
  const std::size_t m = end - begin;
  const Arithmetic& ar = node.arithmetic;
  const Rounder r = rounder(ar.accumulate);
  Powers pw(r.rho);
  const double ea = eta_add(r);
  double local = 0;  // sum of eta (1 + roundings after it), before f
  std::size_t k = 0;
  if (!init && !node.start_from_zero && m > 0) {
    // first_value: the term alone rounded into the accumulator, then m - 1 additions.
    const bool exact = src.exact_in(begin, ar.accumulate);
    const std::size_t count = (m - 1) + (exact ? 0 : 1);
    src.item(begin, apply_n(f, r, pw, count), ar);
    if (!exact) local = add_up(local, mul_up(eta_value(r), add_up(1.0, pw(m - 1))));
    k = 1;
  }
  for (std::size_t i = k; i < m; ++i) {
    src.item(begin + i, apply_n(f, r, pw, m - i), ar);
    local = add_up(local, mul_up(ea, add_up(1.0, pw(m - 1 - i))));
  }
  absolute(local, f);
  return apply_n(f, r, pw, m);
}

// numpy's unrolled pairwise leaf (plan.hpp, lanes).
Factor Walker::lanes(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f,
                     bool init) {
  const std::size_t n = end - begin, L = node.size;
  const Arithmetic& ar = node.arithmetic;
  const Rounder r = rounder(ar.accumulate);
  Powers pw(r.rho);
  const double ea = eta_add(r);
  // The closing init + result.
  Factor ft = f;
  if (init) {
    absolute(ea, f);
    ft = apply(f, r);
  }
  const auto chain = [&](std::size_t first, std::size_t count, const Factor& g) {
    // `count` terms added one by one to a running value that continues with g.
    double local = 0;
    for (std::size_t i = 0; i < count; ++i) {
      src.item(first + i, apply_n(g, r, pw, count - i), ar);
      local = add_up(local, mul_up(ea, add_up(1.0, pw(count - 1 - i))));
    }
    absolute(local, g);
  };
  if (n < L) {
    chain(begin, n, ft);  // res = 0., then every term in order
    return apply(f, r);
  }
  const std::size_t q = n / L, tail = n % L, body = n - tail;
  chain(begin + body, tail, ft);
  const Factor fr = apply_n(ft, r, pw, tail);  // the combined lanes pass the tail's additions
  // The combine tree, neighbours first, level by level: depth of each lane, and each addition's
  // count of additions above it.
  std::vector<std::size_t> parent;  // node ids: lanes 0..L-1, then additions
  std::vector<std::size_t> level(L);
  parent.assign(L, SIZE_MAX);
  for (std::size_t j = 0; j < L; ++j) level[j] = j;
  while (level.size() > 1) {
    std::vector<std::size_t> next;
    for (std::size_t j = 0; j + 1 < level.size(); j += 2) {
      const std::size_t id = parent.size();
      parent.push_back(SIZE_MAX);
      parent[level[j]] = id;
      parent[level[j + 1]] = id;
      next.push_back(id);
    }
    if (level.size() % 2 != 0) next.push_back(level.back());
    level.swap(next);
  }
  const auto above = [&](std::size_t id) {
    std::size_t d = 0;
    for (std::size_t p = parent[id]; p != SIZE_MAX; p = parent[p]) ++d;
    return d;
  };
  double local = 0;
  for (std::size_t id = L; id < parent.size(); ++id) local = add_up(local, mul_up(ea, add_up(1.0, pw(above(id)))));
  absolute(local, fr);
  for (std::size_t j = 0; j < L; ++j) {
    const Factor fl = apply_n(fr, r, pw, above(j));
    // Lane j: its first term rounded into the accumulator, then q - 1 additions.
    const bool exact = src.exact_in(begin + j, ar.accumulate);
    src.item(begin + j, apply_n(fl, r, pw, (q - 1) + (exact ? 0 : 1)), ar);
    double lane = exact ? 0.0 : mul_up(eta_value(r), add_up(1.0, pw(q - 1)));
    for (std::size_t p = 1; p < q; ++p) {
      src.item(begin + j + p * L, apply_n(fl, r, pw, q - p), ar);
      lane = add_up(lane, mul_up(ea, add_up(1.0, pw(q - 1 - p))));
    }
    absolute(lane, fl);
  }
  return apply(f, r);
}

// Groups of `arity` in order, level by level; init added last.
Factor Walker::tree(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f,
                    bool init) {
  const std::size_t n = end - begin, a = node.size;
  const Arithmetic& ar = node.arithmetic;
  const Rounder r = rounder(ar.accumulate);
  Powers pw(r.rho);
  const double ea = eta_add(r);
  Factor fv = f;  // the tree's value passes the init addition
  if (init) {
    absolute(ea, f);
    fv = apply(f, r);
  }
  if (n == 0) return apply(f, r);
  // Level sizes: items n, then ceil(n / a) group values, ... down to 1.
  std::vector<std::size_t> sizes{n};
  do sizes.push_back((sizes.back() + a - 1) / a);
  while (sizes.back() > 1);
  // above[l][e]: additions element e of level l passes after it is formed.
  std::vector<std::vector<std::size_t>> above(sizes.size());
  above.back().assign(1, 0);
  double local = 0;
  for (std::size_t l = sizes.size() - 1; l-- > 0;) {
    above[l].assign(sizes[l], 0);
    for (std::size_t e = 0; e < sizes[l]; ++e) {
      const std::size_t g = e / a, p = e % a, gsize = std::min(a, sizes[l] - g * a);
      above[l][e] = gsize - std::max<std::size_t>(p, 1) + above[l + 1][g];
      if (p >= 1) local = add_up(local, mul_up(ea, add_up(1.0, pw(gsize - 1 - p + above[l + 1][g]))));
    }
  }
  absolute(local, fv);
  for (std::size_t e = 0; e < n; ++e) {
    std::size_t count = above[0][e];
    if (e % a == 0 && !src.exact_in(begin + e, ar.accumulate)) {
      ++count;  // first_value: the group's first term rounded into the accumulator
      absolute(mul_up(eta_value(r), add_up(1.0, pw(above[0][e]))), fv);
    }
    src.item(begin + e, apply_n(fv, r, pw, count), ar);
  }
  return apply(f, r);
}

// A chain of fused steps along the range; init is the first step's c.
Factor Walker::fused(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f,
                     bool init) {
  if (!src.products()) throw numeq::error("plan: a fused node reduces products; use it for dot and matmul");
  const FusedStep& s = node.fused;
  const std::size_t K = end - begin, step = static_cast<std::size_t>(std::max(1, s.n));
  const std::size_t steps = std::max<std::size_t>(1, (K + step - 1) / step);
  const Rounder ro = rounder(s.output);
  const int F = s.fraction_bits;
  // a_F: what one cut term loses at most, in units of 2^E.
  const double aF = std::ldexp(s.alignment == Alignment::truncate ? 1.0 : 0.5, -F);
  const int ma = s.a_format.mantissa_bits, mb = s.b_format.mantissa_bits;
  const bool encoded = s.max_exponent == MaxExponent::encoded;
  const bool zeros = s.zeros == ZeroTerms::fp32_emin;
  const bool product_exact_at_E = ma + mb + (encoded ? 0 : 1) <= F;
  // Irregular exponents (see the file comment): an operand read above its value.
  const int ea_min = s.a_format.emin(), eb_min = s.b_format.emin();
  const bool a_irregular = encoded || zeros, b_irregular = a_irregular;
  const int za = encoded ? (zeros ? std::max(ea_min, -126) : ea_min) : -126;
  const int zb = encoded ? (zeros ? std::max(eb_min, -126) : eb_min) : -126;
  const double za0 = std::ldexp(1.0, std::max(ea_min, -126)), zb0 = std::ldexp(1.0, std::max(eb_min, -126));
  // c's and the floor's candidates.
  double zc = 0;
  if (zeros) zc = std::ldexp(1.0, -126);
  if (encoded) zc = std::max(zc, std::ldexp(1.0, s.c_format.emin()));
  if (s.exponent_floor != no_exponent_floor) zc = add_up(zc, std::ldexp(1.0, std::max(s.exponent_floor, -1074)));
  // From the last step back: g is what follows step t's result.
  Factor g = f;
  for (std::size_t t = steps; t-- > 0;) {
    const std::size_t k0 = begin + t * step, k1 = std::min(end, k0 + step);
    const std::size_t np = k1 > k0 ? k1 - k0 : 0;
    const bool has_c = t > 0 || init;
    const std::size_t m = np + (has_c ? 1 : 0);
    const int c_bits = t > 0 ? std::min(s.output.format.mantissa_bits, s.c_format.mantissa_bits) : s.c_format.mantissa_bits;
    const bool max_exact = product_exact_at_E && (!has_c || c_bits <= F);
    const std::size_t m_rel = (max_exact && m > 0) ? m - 1 : m;
    const double rho_align = mul_up(aF, static_cast<double>(m_rel));
    // The alignment is deterministic; the output rounding may be random (probabilistic kind).
    Factor fs = g;
    if (rho_align > 0) {
      Rounder align;
      align.rho = rho_align;
      fs = apply(fs, align);
    }
    fs = apply(fs, ro);
    // Absolute parts: c's and the floor's candidates, then the output's eta.
    const double scale = mul_up(mul_up(aF, static_cast<double>(m)), add_up(1.0, ro.rho));
    absolute(add_up(mul_up(scale, zc), eta_value(ro)), g);
    for (std::size_t k = k0; k < k1; ++k) {
      src.item(k, fs, Arithmetic{});
      if (a_irregular || b_irregular) {
        // m terms each losing up to a_F 2^E_k, 2^E_k <= 2^za (|b| + zb0) + 2^zb (|a| + za0).
        const double c = mul_up(scale, add_up(1.0, g.all));
        Poly p;
        p.cb = mul_up(c, std::ldexp(1.0, za));
        p.ca = mul_up(c, std::ldexp(1.0, zb));
        p.c0 = add_up(mul_up(p.cb, zb0), mul_up(p.ca, za0));
        src.add(k, p);
      }
    }
    g = fs;  // the step's c passes this step
  }
  return g;
}

// Explicit summation trees (explicit_tree.cpp).
void Walker::group(const PlanNode& g, Source& src, std::size_t begin, const Factor& f) {
  const Arithmetic& ar = g.arithmetic;
  const Rounder r = rounder(ar.accumulate);
  const std::size_t m = g.children.size();
  absolute(eta_add(r, m), f);
  const Factor fin = apply(f, r);
  const bool two_terms = m == 2 && g.children[0].kind == NodeKind::term && g.children[1].kind == NodeKind::term;
  for (std::size_t i = 0; i < m; ++i) {
    const PlanNode& c = g.children[i];
    if (c.kind != NodeKind::term) {
      group(c, src, begin, fin);
      continue;
    }
    Factor fc = fin;
    if (two_terms && i == 0 && !src.exact_in(begin + c.size, ar.accumulate)) {
      // The first of two terms is rounded into the accumulator before the addition.
      absolute(eta_value(r), fin);
      fc = apply(fin, r);
    }
    src.item(begin + c.size, fc, ar);
  }
}

Factor Walker::explicit_tree(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f,
                             bool init) {
  const std::size_t terms = explicit_term_count(node);
  if (terms != end - begin)
    throw numeq::error("plan: an explicit tree (" + std::string(to_string(node.kind)) + " node) of " +
                       std::to_string(terms) + " terms cannot reduce a range of " + std::to_string(end - begin) +
                       " terms; its terms must number exactly the range's length");
  const Arithmetic& ar = node.arithmetic;
  const Rounder r = rounder(ar.accumulate);
  Factor fv = f;
  if (init) {
    absolute(eta_add(r), f);
    fv = apply(f, r);
  }
  if (node.kind == NodeKind::term) {
    Factor ft = fv;
    if (!src.exact_in(begin + node.size, ar.accumulate)) {
      absolute(eta_value(r), fv);
      ft = apply(fv, r);
    }
    src.item(begin + node.size, ft, ar);
  } else {
    group(node, src, begin, fv);
  }
  return apply(f, r);
}

// Operand pieces (decompose): affine bounds of piece i and of the residual.
Factor Walker::decompose(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f,
                         bool init) {
  if (!src.products())
    throw numeq::error("plan: a decompose node splits the operands of products; use it for dot and matmul");
  const std::size_t n = end - begin, pieces = node.multiple, size = node.size;
  const Rounder rp = rounder(node.through);
  const double eta = eta_value(rp);
  std::vector<Affine> piece(pieces);
  Affine rest;  // |r_i| <= rest.alpha |x| + rest.beta
  for (std::size_t i = 0; i < pieces; ++i) {
    piece[i] = Affine{mul_up(add_up(1.0, rp.rho), rest.alpha), add_up(mul_up(add_up(1.0, rp.rho), rest.beta), eta)};
    rest = Affine{mul_up(rp.rho, rest.alpha), add_up(mul_up(rp.rho, rest.beta), eta)};
  }
  const std::size_t passes = node.order.size() / 2;
  const std::size_t blocks = (n + size - 1) / size;
  PartialSource partials(
      [&](std::size_t p, const Factor& g) {
        const std::size_t block = p / passes, q = p % passes;
        const std::size_t b0 = begin + block * size, len = std::min(size, end - b0);
        PieceSource ps(*this, src, b0, piece[node.order[2 * q]], piece[node.order[2 * q + 1]]);
        visit(node.children[0], ps, 0, len, g, false);
      },
      [&](std::size_t, const Cast& c) { return result_fits(node.children[0], c); });
  const Factor gi = visit(node.children[1], partials, 0, blocks * passes, f, init);
  // What the passes leave out: sum_{i,j} |mult(i,j) - 1| |a_i||b_j| + |r_a||b| + |a||r_b| + |r_a||r_b|.
  std::vector<std::size_t> mult(pieces * pieces, 0);
  for (std::size_t q = 0; q < passes; ++q) ++mult[node.order[2 * q] * pieces + node.order[2 * q + 1]];
  Poly d;
  const auto add_product = [&](const Affine& x, const Affine& y, double times) {
    d.w = add_up(d.w, mul_up(times, mul_up(x.alpha, y.alpha)));
    d.ca = add_up(d.ca, mul_up(times, mul_up(x.alpha, y.beta)));
    d.cb = add_up(d.cb, mul_up(times, mul_up(x.beta, y.alpha)));
    d.c0 = add_up(d.c0, mul_up(times, mul_up(x.beta, y.beta)));
  };
  for (std::size_t i = 0; i < pieces; ++i)
    for (std::size_t j = 0; j < pieces; ++j) {
      const std::size_t k = mult[i * pieces + j];
      if (k != 1) add_product(piece[i], piece[j], static_cast<double>(k == 0 ? 1 : k - 1));
    }
  add_product(rest, Affine{1, 0}, 1);
  add_product(Affine{1, 0}, rest, 1);
  add_product(rest, rest, 1);
  const double grow = add_up(1.0, f.all);
  const Poly dropped{mul_up(d.w, grow), mul_up(d.ca, grow), mul_up(d.cb, grow), mul_up(d.c0, grow)};
  for (std::size_t k = begin; k < end; ++k) src.add(k, dropped);
  return gi;
}

// ---- the plan as a whole ----

struct Walk {
  std::vector<double> W, Ca, Cb;  // Ca, Cb empty when all zero (or for sums)
  double init = 0;
  double absolute = 0;
  double failure = 0;
  std::size_t random_products = 0;  // probabilistic: products of (1 + delta) the union bound counts
  double u_max = 0;
  bool data_walk = false;           // probabilistic: bound_probabilistic.cpp's walk applies too
  bool products = false;
  // Overflow: whether a cast before the output can turn an overflow into a finite value, and
  // the magnitude below which nothing in the plan overflows.
  bool finite_overflow = false;
  double threshold = kInf;
  // Input casts: the magnitude an input may have before its cast can saturate (kInf: none).
  double input_threshold_a = kInf, input_threshold_b = kInf;
  double initial = 0;  // |plan.initial|
  OutputCastBound output{Cast{}};  // plan.output's share, its figures worked out once per walk
};

void collect_casts(const PlanNode& n, std::vector<Cast>& casts, std::vector<bool>& infinite) {
  const auto add = [&](const Cast& c, bool inf = false) {
    casts.push_back(c);
    infinite.push_back(inf);
  };
  if (n.kind != NodeKind::fused && n.kind != NodeKind::permute && n.kind != NodeKind::chunked &&
      n.kind != NodeKind::decompose)
    add(n.arithmetic.accumulate);
  if (n.arithmetic.product == ProductMode::rounded) add(n.arithmetic.product_cast);
  if (n.kind == NodeKind::split || n.kind == NodeKind::decompose) add(n.through);
  if (n.kind == NodeKind::fused) add(n.fused.output, n.fused.overflow == OverflowRule::infinity);
  for (const PlanNode& c : n.children) collect_casts(c, casts, infinite);
}

Walk walk(const Plan& plan, std::size_t n, bool with_init, bool products, const BoundOptions& options) {
  validate(plan);
  if (options.kind == BoundKind::probabilistic && !(options.lambda > 0 && std::isfinite(options.lambda)))
    throw numeq::error("options.lambda: expected a positive finite number, got " + std::to_string(options.lambda));
  Walker w(options.kind == BoundKind::probabilistic, options.lambda);
  Affine ia, ib;
  double eta_ia = 0, eta_ib = 0, rho_ia = 0, rho_ib = 0;
  Walk out;
  if (plan.input_a) {
    const Rounder r = rounder(*plan.input_a);
    rho_ia = r.rho;
    eta_ia = eta_value(r);
    ia = Affine{add_up(1.0, rho_ia), eta_ia};
    if (r.finite_overflow) out.input_threshold_a = r.threshold;
  }
  if (plan.input_b && products) {
    const Rounder r = rounder(*plan.input_b);
    rho_ib = r.rho;
    eta_ib = eta_value(r);
    ib = Affine{add_up(1.0, rho_ib), eta_ib};
    if (r.finite_overflow) out.input_threshold_b = r.threshold;
  }
  TermSource terms(w, products, n, ia, ib);
  // After the reduction: + initial, then + c (c last), both in the outermost arithmetic.
  const Rounder ro = rounder(outer_cast(plan));
  const bool c_last = with_init && plan.c_placement == CPlacement::last;
  Factor f;
  Factor c_factor;
  if (c_last) {
    w.absolute(eta_add(ro), f);
    c_factor = w.apply(f, ro);
    f = c_factor;
  }
  if (plan.initial) {
    out.initial = std::fabs(*plan.initial);
    // initial + value: the rounding also scales |initial| (the exact value includes it).
    w.absolute(add_up(eta_add(ro), mul_up(ro.rho, out.initial)), f);
    f = w.apply(f, ro);
  }
  const Factor fi = w.visit(plan.reduction, terms, 0, n, f, with_init && !c_last);
  if (with_init) out.init = w.weight(c_last ? c_factor : fi);
  // The input casts' own errors: |x' - x| (sums), |a'b' - ab| (products), once each.
  if (plan.input_a || (plan.input_b && products)) {
    for (std::size_t k = 0; k < n; ++k) {
      if (!products) {
        terms.W[k] = add_up(terms.W[k], rho_ia);
        terms.C0 = add_up(terms.C0, eta_ia);
        continue;
      }
      // (rho_a|a| + eta_a)((1 + rho_b)|b| + eta_b) + |a|(rho_b|b| + eta_b).
      terms.W[k] = add_up(terms.W[k], add_up(mul_up(rho_ia, ib.alpha), rho_ib));
      terms.Ca[k] = add_up(terms.Ca[k], add_up(mul_up(rho_ia, eta_ib), eta_ib));
      terms.Cb[k] = add_up(terms.Cb[k], mul_up(eta_ia, ib.alpha));
      terms.C0 = add_up(terms.C0, mul_up(eta_ia, eta_ib));
    }
  }
  out.products = products;
  out.W = std::move(terms.W);
  if (products) {
    const auto nonzero = [](const std::vector<double>& v) {
      return std::any_of(v.begin(), v.end(), [](double x) { return x != 0; });
    };
    if (nonzero(terms.Ca)) out.Ca = std::move(terms.Ca);
    if (nonzero(terms.Cb)) out.Cb = std::move(terms.Cb);
  }
  out.absolute = add_up(w.abs_, terms.C0);
  out.random_products = w.random_products_;
  out.u_max = w.u_max_;
  if (options.kind == BoundKind::probabilistic && w.random_products_ > 0) {
    const double per = 2 * std::exp(-options.lambda * options.lambda * (1 - w.u_max_) * (1 - w.u_max_) / 2);
    out.failure = std::min(1.0, up(static_cast<double>(w.random_products_) * per * (1 + 0x1p-40)));
  }
  // The data-driven walk's bound fails with its own probability; the bound returned is the
  // smallest of the three, so it fails only if one of the probabilistic ones does (union bound).
  // Counted whenever the plan is one it models, sums included (which do not use it: the stated
  // probability is then a little high), so that reduction_weights states the same probability,
  // and resolves the same lambda, as dot_bound and matmul_bound for a plan of FMA products,
  // which reduction_weights cannot tell from a sum.
  if (options.kind == BoundKind::probabilistic && DataWalk(plan, n, with_init).supported()) {
    out.data_walk = true;
    out.failure = std::min(1.0, add_up(out.failure, data_walk_failure(options.lambda)));
  }
  // Casts before the output that may turn an overflow into a finite value.
  std::vector<Cast> casts;
  std::vector<bool> infinite;
  collect_casts(plan.reduction, casts, infinite);
  if (c_last || plan.initial) {
    casts.push_back(outer_cast(plan));
    infinite.push_back(false);
  }
  for (std::size_t i = 0; i < casts.size(); ++i) {
    const Rounder r = rounder(casts[i]);
    if (r.exact) continue;
    out.finite_overflow = out.finite_overflow || (r.finite_overflow && !infinite[i]);
    out.threshold = std::min(out.threshold, r.threshold);
  }
  out.output = OutputCastBound(plan.output);
  return out;
}

// options with lambda chosen from failure_probability when that is set (probabilistic kind): the
// smallest lambda >= 1 whose per-element failure probability is at most failure_probability.
// With N the products of the union bound (u_max their largest unit roundoff) and D = 1 when the
// data-driven walk applies, the failure is at most N 2 exp(-lambda^2 (1 - u_max)^2 / 2) +
// D 2 exp(-lambda^2 / 2) <= (N + D) 2 exp(-lambda^2 (1 - u_max)^2 / 2), which is p at
// lambda = sqrt(2 ln(2 (N + D) / p)) / (1 - u_max). The floor 1 keeps lambda meaningful when
// p is close to 1 (every lambda below it gives a failure bound of 1 anyway for N + D >= 1).
BoundOptions resolved(const Plan& plan, std::size_t n, bool with_init, bool products, const BoundOptions& options) {
  if (!(options.failure_probability >= 0 && options.failure_probability < 1))
    throw numeq::error("options.failure_probability: expected a number in [0, 1) (0: use options.lambda), got " +
                       std::to_string(options.failure_probability));
  if (options.kind != BoundKind::probabilistic || options.failure_probability == 0) return options;
  BoundOptions probe = options;
  probe.failure_probability = 0;
  probe.lambda = 1;
  const Walk w = walk(plan, n, with_init, products, probe);
  const double count = static_cast<double>(w.random_products) + (w.data_walk ? 1.0 : 0.0);
  BoundOptions o = options;
  if (count > 0) {
    const double lambda = std::sqrt(2 * std::log(2 * count / options.failure_probability)) / (1 - w.u_max);
    o.lambda = std::max(1.0, up(lambda * (1 + 0x1p-40)));
  }
  o.failure_probability = 0;  // resolved: lambda now states it
  return o;
}

// x (K roundings of non-negative terms in binary64) made an upper bound of the exact value.
double inflate(double x, std::size_t K) {
  if (!(x < kInf)) return x;
  const double factor = 1 + static_cast<double>(K + 8) * 0x1p-52;
  return up(up(x * factor) + static_cast<double>(2 * K + 4) * 0x1p-1074);
}


void check_emulated(const xt::xarray<double>& emulated, const std::vector<std::size_t>& shape) {
  const std::vector<std::size_t> got(emulated.shape().begin(), emulated.shape().end());
  if (got != shape)
    throw numeq::error("emulated: shape " + shape_text(got) + " differs from the result's shape " + shape_text(shape) +
                       " (pass what the evaluator returned for the same arguments)");
}

// One element's final bound from its pre-cast bound: non-finite inputs give NaN, an emulated
// value that is not finite +Inf, intermediate overflow that may have been absorbed +Inf.
double finish(const Walk& w, double emulated, double pre, double magnitude, bool nonfinite_input,
              bool input_overflow) {
  if (nonfinite_input) return kNaN;
  if (!std::isfinite(emulated)) return kInf;
  if (input_overflow) return kInf;
  if (w.finite_overflow && !(magnitude <= w.threshold)) return kInf;
  return w.output(emulated, pre);
}

// ---- the bound's matmul: C = X Y for non-negative X [M, K], Y [K, N] (row-major) ----
//
// Register-blocked: MR rows times NR columns of C stay in registers over a block of KC of K;
// Y is packed in strips of NR columns (zero-padded), X in panels of MR rows (zero-padded). The
// same source is compiled for AVX-512, AVX2 and the baseline and chosen at run time (results
// differ only within the inflation the caller applies: every order of a non-negative sum is
// covered by it).
constexpr std::size_t kKC = 256, kMB = 64;

// GCC/Clang vector extensions: the micro-kernel states its registers explicitly (the
// auto-vectoriser spills a [4][16] accumulator array to the stack).
typedef double V2 __attribute__((vector_size(16)));
typedef double V4 __attribute__((vector_size(32)));
typedef double V8 __attribute__((vector_size(64)));

// C[MR x NR] += A panel (MR x kc, k-major) * B strip (kc x NR), NR = NV vectors of V.
template <class V, std::size_t MR, std::size_t NV>
[[gnu::always_inline]] inline void micro(const double* __restrict ap, const double* __restrict bp, std::size_t kc,
                                         double* __restrict c, std::size_t ldc) {
  constexpr std::size_t L = sizeof(V) / sizeof(double), NR = NV * L;
  V acc[MR][NV];
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t v = 0; v < NV; ++v) acc[r][v] = V{};
  for (std::size_t k = 0; k < kc; ++k) {
    V b[NV];
    for (std::size_t v = 0; v < NV; ++v) std::memcpy(&b[v], bp + k * NR + v * L, sizeof(V));
    for (std::size_t r = 0; r < MR; ++r) {
      const double a = ap[k * MR + r];
      for (std::size_t v = 0; v < NV; ++v) acc[r][v] += b[v] * a;
    }
  }
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t v = 0; v < NV; ++v) {
      V cur;
      std::memcpy(&cur, c + r * ldc + v * L, sizeof(V));
      cur += acc[r][v];
      std::memcpy(c + r * ldc + v * L, &cur, sizeof(V));
    }
}

// Rows [0, rows) of C (ldc = N padded to NR) from X rows (length K) and Y packed in strips of
// K x NR; apack holds ceil(kMB / MR) panels of kKC x MR.
template <class V, std::size_t MR, std::size_t NV>
[[gnu::always_inline]] inline void block_rows(const double* X, std::size_t K, const double* Yp, std::size_t strips,
                                              double* C, std::size_t ldc, std::size_t rows, double* apack) {
  constexpr std::size_t NR = NV * (sizeof(V) / sizeof(double));
  const std::size_t panels = (rows + MR - 1) / MR;
  for (std::size_t k0 = 0; k0 < K; k0 += kKC) {
    const std::size_t kc = std::min(kKC, K - k0);
    for (std::size_t p = 0; p < panels; ++p)
      for (std::size_t k = 0; k < kc; ++k)
        for (std::size_t r = 0; r < MR; ++r) {
          const std::size_t row = p * MR + r;
          apack[(p * kKC + k) * MR + r] = row < rows ? X[row * K + k0 + k] : 0.0;
        }
    for (std::size_t s = 0; s < strips; ++s)
      for (std::size_t p = 0; p < panels; ++p)
        micro<V, MR, NV>(apack + p * kKC * MR, Yp + (s * K + k0) * NR, kc, C + p * MR * ldc + s * NR, ldc);
  }
}

[[gnu::target("avx512f")]] void block_rows_avx512(const double* X, std::size_t K, const double* Yp,
                                                  std::size_t strips, double* C, std::size_t ldc, std::size_t rows,
                                                  double* apack) {
  block_rows<V8, 8, 2>(X, K, Yp, strips, C, ldc, rows, apack);
}
[[gnu::target("avx2")]] void block_rows_avx2(const double* X, std::size_t K, const double* Yp, std::size_t strips,
                                             double* C, std::size_t ldc, std::size_t rows, double* apack) {
  block_rows<V4, 4, 2>(X, K, Yp, strips, C, ldc, rows, apack);
}
void block_rows_portable(const double* X, std::size_t K, const double* Yp, std::size_t strips, double* C,
                         std::size_t ldc, std::size_t rows, double* apack) {
  block_rows<V2, 4, 2>(X, K, Yp, strips, C, ldc, rows, apack);
}

struct BlockKernel {
  std::size_t mr, nr;
  void (*run)(const double*, std::size_t, const double*, std::size_t, double*, std::size_t, std::size_t, double*);
};
BlockKernel block_kernel() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {8, 16, block_rows_avx512};
  if (__builtin_cpu_supports("avx2")) return {4, 8, block_rows_avx2};
#endif
  return {4, 4, block_rows_portable};
}

}  // namespace

std::string_view to_string(BoundKind k) { return k == BoundKind::deterministic ? "deterministic" : "probabilistic"; }

BoundKind bound_kind_by_name(std::string_view name, std::string_view parameter) {
  if (name == "deterministic") return BoundKind::deterministic;
  if (name == "probabilistic") return BoundKind::probabilistic;
  throw numeq::error(std::string(parameter) + ": unknown bound kind '" + std::string(name) +
                     "'; valid kinds: deterministic, probabilistic");
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
}

double OutputCastBound::near_overflow(double e, double B) const {
  // Directed steps where a device's value may pass the overflow threshold (operator() in bound.hpp).
  const double V_up = add_up(up(add_up(e, eta_) / (1 - rho_)), mul_up(2.0, B));
  return add_up(B, std::max(add_up(mul_up(rho_, V_up), eta_), up(V_up - max_)));
}

// No terms, no c and no initial value (or numpy's +0): the exact result is 0, so |emulated| is
// the error itself (0 for the +0 every plan gives). Otherwise the output cast's share below
// would bound a rounding that never happens.
static bool nothing_reduced(std::size_t K, const xt::xarray<double>* c, const Plan& plan) {
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

static xt::xarray<double> matmul_bound_of_kind(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                                const Plan& plan, const xt::xarray<double>& emulated, const BoundOptions& options) {
  const MatmulLayout layout = matmul_layout(a, b, c);
  const std::size_t M = layout.M, K = layout.K, N = layout.N;
  const std::vector<std::size_t>& shape = layout.shape;
  check_emulated(emulated, shape);
  const xt::xarray<double>& fc = layout.fc;
  const BatchOperands& operands = layout.operands;
  const std::vector<std::size_t>& a_of = operands.a_of;
  const std::vector<std::size_t>& b_of = operands.b_of;
  const std::size_t matrices = a_of.size();
  const Walk w = walk(plan, K, c != nullptr, true, options);
  xt::xarray<double> result = xt::xarray<double>::from_shape(shape);
  if (result.size() == 0) return result;
  if (K == 0) {
    // No products (a [.., M, 0] @ b [.., 0, N]): only c, initial and the plan's constant part
    // remain; the operand sums below would index rows and columns of empty matrices.
    for (std::size_t i = 0; i < result.size(); ++i) {
      if (nothing_reduced(K, c, plan)) {
        result.data()[i] = std::fabs(emulated.data()[i]);
        continue;
      }
      double pre = w.absolute, cm = 0;
      bool nonfinite = false;
      if (c) {
        cm = std::fabs(fc.data()[i]);
        nonfinite = !std::isfinite(cm);
        pre = add_up(pre, mul_up(w.init, cm));
      }
      const double magnitude = w.finite_overflow ? add_up(add_up(pre, cm), w.initial) : 0.0;
      result.data()[i] = finish(w, emulated.data()[i], pre, magnitude, nonfinite, false);
    }
    return result;
  }
  const std::size_t a_matrices = M * K == 0 ? 0 : a.size() / (M * K);
  const std::size_t b_matrices = K * N == 0 ? 0 : b.size() / (K * N);
  // Per row of a and per column of b: sum_k Ca_k |a_mk| and sum_k Cb_k |b_kn| (inflated), the
  // largest input (input-cast overflow) and whether all are finite.
  std::vector<double> row_term(a_matrices * M, 0.0), col_term(b_matrices * N, 0.0);
  std::vector<char> row_bad(a_matrices * M, 0), col_bad(b_matrices * N, 0), row_over(a_matrices * M, 0),
      col_over(b_matrices * N, 0);
  parallel_for(a_matrices * M, [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      const double* x = a.data() + r * K;
      double s = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const double v = std::fabs(x[k]);
        if (!std::isfinite(v)) row_bad[r] = 1;
        if (v > w.input_threshold_a) row_over[r] = 1;
        if (!w.Ca.empty()) s += w.Ca[k] * v;
      }
      row_term[r] = inflate(s, K);
    }
  }, 256);
  parallel_for(b_matrices * N, [&](std::size_t begin, std::size_t end) {
    for (std::size_t q = begin; q < end; ++q) {
      const std::size_t s_idx = q / N, nn = q % N;
      const double* y = b.data() + s_idx * K * N + nn;
      double s = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const double v = std::fabs(y[k * N]);
        if (!std::isfinite(v)) col_bad[q] = 1;
        if (v > w.input_threshold_b) col_over[q] = 1;
        if (!w.Cb.empty()) s += w.Cb[k] * v;
      }
      col_term[q] = inflate(s, K);
    }
  }, 256);
  // The matmul of |a| diag(W) and |b|; non-finite inputs are read as 0 there (their elements
  // get NaN below). The magnitude sum |a||b| is needed only for the overflow check; with every
  // weight positive it is at most the weighted sum divided by the smallest weight.
  const double w_min = K == 0 ? 0.0 : *std::min_element(w.W.begin(), w.W.end());
  const bool need_magnitude = w.finite_overflow && !(w_min > 0);
  const BlockKernel kernel = block_kernel();
  const std::size_t kNR = kernel.nr, kMR = kernel.mr;
  const std::size_t strips = (N + kNR - 1) / kNR, ldc = strips * kNR;
  std::vector<double> packed(b_matrices * strips * K * kNR, 0.0);
  std::vector<double> packed_unit(need_magnitude ? packed.size() : 0, 0.0);
  parallel_for(b_matrices * strips, [&](std::size_t begin, std::size_t end) {
    for (std::size_t q = begin; q < end; ++q) {
      const std::size_t s_idx = q / strips, s = q % strips;
      double* out = packed.data() + q * K * kNR;
      for (std::size_t k = 0; k < K; ++k)
        for (std::size_t j = 0; j < kNR; ++j) {
          const std::size_t col = s * kNR + j;
          if (col >= N) continue;
          const double v = std::fabs(b.data()[s_idx * K * N + k * N + col]);
          out[k * kNR + j] = std::isfinite(v) ? v : 0.0;
        }
      if (need_magnitude) std::copy(out, out + K * kNR, packed_unit.data() + q * K * kNR);
    }
  }, 16);
  const std::size_t row_blocks = (M + kMB - 1) / kMB;
  parallel_for(matrices * row_blocks, [&](std::size_t begin, std::size_t end) {
    std::vector<double> X(kMB * K), C(kMB * ldc), Cm, apack(((kMB + kMR - 1) / kMR) * kKC * kMR);
    std::vector<double> Xu;
    if (need_magnitude) {
      Cm.resize(kMB * ldc);
      Xu.resize(kMB * K);
    }
    for (std::size_t task = begin; task < end; ++task) {
      const std::size_t t = task / row_blocks, m0 = (task % row_blocks) * kMB;
      const std::size_t rows = std::min(kMB, M - m0);
      const double* arows = a.data() + (a_of[t] * M + m0) * K;
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t k = 0; k < K; ++k) {
          const double v = std::fabs(arows[r * K + k]);
          const double fv = std::isfinite(v) ? v : 0.0;
          X[r * K + k] = w.W[k] * fv;  // rounded to nearest: inside the inflation's K + 8
          if (need_magnitude) Xu[r * K + k] = fv;
        }
      std::fill(C.begin(), C.end(), 0.0);
      kernel.run(X.data(), K, packed.data() + b_of[t] * strips * K * kNR, strips, C.data(), ldc, rows, apack.data());
      if (need_magnitude) {
        std::fill(Cm.begin(), Cm.end(), 0.0);
        kernel.run(Xu.data(), K, packed_unit.data() + b_of[t] * strips * K * kNR, strips, Cm.data(), ldc, rows,
               apack.data());
      }
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t ra = a_of[t] * M + m0 + r;
        for (std::size_t n = 0; n < N; ++n) {
          const std::size_t qb = b_of[t] * N + n;
          const std::size_t i = (t * M + m0 + r) * N + n;
          double pre = add_up(add_up(inflate(C[r * ldc + n], K), row_term[ra]), add_up(col_term[qb], w.absolute));
          bool nonfinite = row_bad[ra] || col_bad[qb];
          double cm = 0;
          if (c) {
            cm = std::fabs(fc.data()[i]);
            nonfinite = nonfinite || !std::isfinite(cm);
            pre = add_up(pre, mul_up(w.init, cm));
          }
          double magnitude = 0;
          if (w.finite_overflow) {
            const double sum_abs = need_magnitude ? inflate(Cm[r * ldc + n], K) : up(pre / w_min);
            magnitude = add_up(add_up(add_up(sum_abs, pre), cm), w.initial);
          }
          result.data()[i] =
              finish(w, emulated.data()[i], pre, magnitude, nonfinite, row_over[ra] || col_over[qb]);
        }
      }
    }
  }, 1);
  return result;
}

// The probabilistic bound holds with the stated probability; the deterministic one always. Where
// the deterministic bound is the smaller (short reductions, truncating steps), it is the better
// statement, and the smaller of the two still holds with at least the stated probability.
namespace {
xt::xarray<double> smaller_of(xt::xarray<double> probabilistic, const xt::xarray<double>& deterministic) {
  for (std::size_t i = 0; i < probabilistic.size(); ++i) {
    const double p = probabilistic.data()[i], d = deterministic.data()[i];
    if (d < p) probabilistic.data()[i] = d;  // NaN stays NaN (no claim either way)
  }
  return probabilistic;
}
BoundOptions deterministic_of(BoundOptions o) {
  o.kind = BoundKind::deterministic;
  return o;
}

// The data-driven walk (bound_probabilistic.cpp) over the elements whose bound r is finite: r
// becomes the smaller of the two. a(i), b(i): element i's operands (b with stride bs), c(i) its c.
template <class A, class B, class C>
void tighten(xt::xarray<double>& r, const Plan& plan, const xt::xarray<double>& emulated, std::size_t K, bool with_init,
             double lambda, std::size_t bs, const A& a_of, const B& b_of, const C& c_of,
             const std::vector<double>& ac, const std::vector<double>& bc, const double* a0, const double* b0) {
  const DataWalk dw(plan, K, with_init);
  if (!dw.supported()) return;
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
  xt::xarray<double> r = sum_bound_of_kind(x, axis, plan, emulated, o);
  if (o.kind != BoundKind::probabilistic) return r;
  return smaller_of(std::move(r), sum_bound_of_kind(x, axis, plan, emulated, deterministic_of(o)));
}

xt::xarray<double> dot_bound(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                             const Plan& plan, const xt::xarray<double>& emulated, const BoundOptions& options) {
  const std::size_t K = a.dimension() == 0 ? 0 : a.shape().back();
  const BoundOptions o = resolved(plan, K, c != nullptr, true, options);
  xt::xarray<double> r = dot_bound_of_kind(a, b, c, plan, emulated, o);
  if (o.kind != BoundKind::probabilistic) return r;
  r = smaller_of(std::move(r), dot_bound_of_kind(a, b, c, plan, emulated, deterministic_of(o)));
  const DotLayout layout = dot_layout(a, b, c);
  if (layout.K == 0 || r.size() == 0) return r;
  const DataWalk dw(plan, layout.K, c != nullptr);
  if (!dw.supported()) return r;
  const std::vector<double> ac = dw.cast_a(layout.fa.data(), layout.fa.size());
  const std::vector<double> bc = dw.cast_b(layout.fb.data(), layout.fb.size());
  const std::size_t Kd = layout.K;
  tighten(r, plan, emulated, Kd, c != nullptr, o.lambda, 1, [Kd](std::size_t i) { return i * Kd; },
          [Kd](std::size_t i) { return i * Kd; },
          [&](std::size_t i) { return c ? layout.fc.data() + i : nullptr; }, ac, bc, layout.fa.data(), layout.fb.data());
  return r;
}

xt::xarray<double> matmul_bound(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                                const Plan& plan, const xt::xarray<double>& emulated, const BoundOptions& options) {
  const std::size_t K = a.dimension() == 0 ? 0 : a.shape().back();
  const BoundOptions o = resolved(plan, K, c != nullptr, true, options);
  xt::xarray<double> r = matmul_bound_of_kind(a, b, c, plan, emulated, o);
  if (o.kind != BoundKind::probabilistic) return r;
  r = smaller_of(std::move(r), matmul_bound_of_kind(a, b, c, plan, emulated, deterministic_of(o)));
  const MatmulLayout layout = matmul_layout(a, b, c);
  const std::size_t M = layout.M, N = layout.N, Km = layout.K;
  if (Km == 0 || r.size() == 0) return r;
  const DataWalk dw(plan, Km, c != nullptr);
  if (!dw.supported()) return r;
  // Element i = (t, m, n): row m of a's matrix a_of[t], column n of b's matrix b_of[t] (stride N).
  const std::vector<double> ac = dw.cast_a(a.data(), a.size());
  const std::vector<double> bc = dw.cast_b(b.data(), b.size());
  const std::vector<std::size_t>& a_of = layout.operands.a_of;
  const std::vector<std::size_t>& b_of = layout.operands.b_of;
  tighten(r, plan, emulated, Km, c != nullptr, o.lambda, N,
          [&](std::size_t i) { return (a_of[i / (M * N)] * M + (i / N) % M) * Km; },
          [&](std::size_t i) { return b_of[i / (M * N)] * Km * N + i % N; },
          [&](std::size_t i) { return c ? layout.fc.data() + i : nullptr; }, ac, bc, a.data(), b.data());
  return r;
}

}  // namespace numeq::core
