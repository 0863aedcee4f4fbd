#pragma once
// The node walk's algebra (private to bound_walk.cpp): products of (1 + delta) (Factor), affine
// bounds on operands, error polynomials, the Walker that accumulates them, and the sources of
// the terms a node reduces.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xbroadcast.hpp>

#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/exact.hpp"

#include "bound_probabilistic.hpp"
#include "bound_rounder.hpp"
#include "shapes.hpp"

namespace numeq::core::bound_detail {

using namespace detail;  // shapes.hpp

// ---- the product of (1 + delta) above a value ----
struct Factor {
  double all = 0;  // every rounding, deterministically: prod (1 + rho) - 1 (used for eta terms)
  double det = 0;  // the deterministic roundings only (probabilistic kind)
  double s2 = 0;   // sum u_k^2 of the random roundings (probabilistic kind)
  double s2p = 0;  // sum u_k^2 / (1 - u_k)
};

inline Factor combine(const Factor& a, const Factor& b) {
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

// What each addition of a chain of additions costs: the rounding into the accumulate cast, its
// powers (1 + rho)^c - 1 for c additions in a row, and eta of one two-operand addition.
// Unpacked where used: `auto [r, pw, ea] = AdditionCost(node.arithmetic.accumulate);`.
struct AdditionCost {
  Rounder r;
  Powers pw;
  double ea;
  explicit AdditionCost(const Cast& accumulate) : r(rounder(accumulate)), pw(r.rho), ea(eta_add(r)) {}
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
inline Poly through(const Poly& p, const Affine& a, const Affine& b) {
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
  // The factor a node's value carries when the closing init + value addition follows (init): that
  // addition's absolute term at f, then its rounding; f itself without init.
  Factor through_init(const Factor& f, const Rounder& r, bool init) {
    if (!init) return f;
    absolute(eta_add(r), f);
    return apply(f, r);
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

}  // namespace numeq::core::bound_detail
