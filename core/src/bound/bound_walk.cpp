// The bound walker (bound.hpp's model): the walk over a plan's nodes, collecting each term's
// weight and the constant terms; the algebra and the sources are in bound_walker.hpp.

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
#include "numeq/formats/round_and_pack.hpp"
#include "numeq/formats/shape.hpp"

#include "bound_probabilistic.hpp"
#include "bound_rounder.hpp"
#include "bound_walk.hpp"
#include "bound_walker.hpp"
#include "shapes.hpp"

namespace numeq::core::bound_detail {

using namespace detail;  // shapes.hpp: layouts and broadcasting shared with the other walker

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

// ---- the node walk (the cases of evaluate.cpp, reduce_node) ----

Factor Walker::visit(const PlanNode& node, Source& src, std::size_t begin, std::size_t end, const Factor& f, bool init) {
  const std::size_t n = end - begin;
  const Rounder r = rounder(node.arithmetic.accumulate);
  switch (node.kind) {
    case NodeKind::sequential: return sequential(node, src, begin, end, f, init);
    case NodeKind::lanes: return lanes(node, src, begin, end, f, init);
    case NodeKind::tree: return tree(node, src, begin, end, f, init);
    case NodeKind::pairwise: {
      if (n <= node.leaf) return visit(node.children[0], src, begin, end, f, init);
      const std::size_t half = pairwise_cut(n, node.multiple);
      if (half >= n)
        throw numeq::error("plan: a pairwise node (leaf " + std::to_string(node.leaf) + ", multiple " +
                           std::to_string(node.multiple) + ") cannot split a range of " + std::to_string(n) + " terms");
      // add(left, right), then init + that.
      const Factor fp = through_init(f, r, init);
      absolute(eta_add(r), fp);
      const Factor fk = apply(fp, r);
      visit(node, src, begin, begin + half, fk, false);
      visit(node, src, begin + half, end, fk, false);
      return apply(f, r);
    }
    case NodeKind::chunked: {
      const std::size_t size = node.chunk;
      const std::size_t parts = (n + size - 1) / size;
      PartialSource partials(
          [&](std::size_t i, const Factor& g) {
            visit(node.children[0], src, begin + i * size, std::min(end, begin + (i + 1) * size), g, false);
          },
          [&](std::size_t, const Cast& c) { return result_fits(node.children[0], c); });
      return visit(node.children[1], partials, 0, parts, f, init);
    }
    case NodeKind::split: {
      std::vector<std::size_t> start = split_starts(n, node.parts);
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
      for (std::size_t block = begin; block < end; block += node.block) {
        const std::size_t len = std::min(node.block, end - block);
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
  auto [r, pw, ea] = AdditionCost(ar.accumulate);
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
  const std::size_t n = end - begin, L = node.lanes;
  const Arithmetic& ar = node.arithmetic;
  auto [r, pw, ea] = AdditionCost(ar.accumulate);
  const Factor ft = through_init(f, r, init);  // the closing init + result
  // r, pw and ea captured by name: Clang before 16 cannot capture a structured binding.
  const auto chain = [&, &r = r, &pw = pw, ea = ea](std::size_t first, std::size_t count, const Factor& g) {
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
  const std::size_t n = end - begin, a = node.arity;
  const Arithmetic& ar = node.arithmetic;
  auto [r, pw, ea] = AdditionCost(ar.accumulate);
  const Factor fv = through_init(f, r, init);  // the tree's value passes the init addition
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
  constexpr int z0 = zero_operand_exponent;
  const int za = encoded ? (zeros ? std::max(ea_min, z0) : ea_min) : -126;
  const int zb = encoded ? (zeros ? std::max(eb_min, z0) : eb_min) : -126;
  const double za0 = std::ldexp(1.0, std::max(ea_min, z0)), zb0 = std::ldexp(1.0, std::max(eb_min, z0));
  // c's and the floor's candidates.
  double zc = 0;
  if (zeros) zc = std::ldexp(1.0, z0);
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
    if (two_terms && i == 0 && !src.exact_in(begin + c.index, ar.accumulate)) {
      // The first of two terms is rounded into the accumulator before the addition.
      absolute(eta_value(r), fin);
      fc = apply(fin, r);
    }
    src.item(begin + c.index, fc, ar);
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
  const Factor fv = through_init(f, r, init);
  if (node.kind == NodeKind::term) {
    Factor ft = fv;
    if (!src.exact_in(begin + node.index, ar.accumulate)) {
      absolute(eta_value(r), fv);
      ft = apply(fv, r);
    }
    src.item(begin + node.index, ft, ar);
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
  const std::size_t n = end - begin, pieces = node.pieces, size = node.block;
  const Rounder rp = rounder(node.piece);
  const double eta = eta_value(rp);
  std::vector<Affine> piece(pieces);
  Affine rest;  // |r_i| <= rest.alpha |x| + rest.beta
  for (std::size_t i = 0; i < pieces; ++i) {
    piece[i] = Affine{mul_up(add_up(1.0, rp.rho), rest.alpha), add_up(mul_up(add_up(1.0, rp.rho), rest.beta), eta)};
    rest = Affine{mul_up(rp.rho, rest.alpha), add_up(mul_up(rp.rho, rest.beta), eta)};
  }
  const std::size_t passes = node.passes.size();
  const std::size_t blocks = (n + size - 1) / size;
  PartialSource partials(
      [&](std::size_t p, const Factor& g) {
        const std::size_t block = p / passes, q = p % passes;
        const std::size_t b0 = begin + block * size, len = std::min(size, end - b0);
        PieceSource ps(*this, src, b0, piece[node.passes[q].first], piece[node.passes[q].second]);
        visit(node.children[0], ps, 0, len, g, false);
      },
      [&](std::size_t, const Cast& c) { return result_fits(node.children[0], c); });
  const Factor gi = visit(node.children[1], partials, 0, blocks * passes, f, init);
  // What the passes leave out: sum_{i,j} |mult(i,j) - 1| |a_i||b_j| + |r_a||b| + |a||r_b| + |r_a||r_b|.
  std::vector<std::size_t> mult(pieces * pieces, 0);
  for (const auto& [i, j] : node.passes) ++mult[i * pieces + j];
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

void collect_casts(const PlanNode& n, std::vector<Cast>& casts, std::vector<bool>& infinite) {
  const auto add = [&](const Cast& c, bool inf = false) {
    casts.push_back(c);
    infinite.push_back(inf);
  };
  if (n.kind != NodeKind::fused && n.kind != NodeKind::permute && n.kind != NodeKind::chunked &&
      n.kind != NodeKind::decompose)
    add(n.arithmetic.accumulate);
  if (n.arithmetic.product == ProductMode::rounded) add(n.arithmetic.product_cast);
  if (n.kind == NodeKind::split) add(n.through);
  if (n.kind == NodeKind::decompose) add(n.piece);
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

void check_emulated(const xt::xarray<double>& emulated, const std::vector<std::size_t>& shape) {
  const std::vector<std::size_t> got(emulated.shape().begin(), emulated.shape().end());
  if (got != shape)
    throw numeq::error("emulated: shape " + shape_text(got) + " differs from the result's shape " + shape_text(shape) +
                       " (pass what the evaluator returned for the same arguments)");
}

}  // namespace numeq::core::bound_detail
