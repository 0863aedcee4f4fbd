// Scaled dot-product attention under a platform (attention.hpp): naive and FlashAttention-2
// variants, emulated values and running error bounds (tracked.hpp) in one pass.

#include "numeq/cases/attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "numeq/core/bound.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/shape.hpp"
#include "input_check.hpp"
#include "tracked.hpp"

namespace numeq::cases {

namespace {

using detail::kInf;
using detail::kNaN;
using detail::Tracked;
using reference::Function;

struct Sizes {
  std::size_t batches = 1, lq = 0, lk = 0, d = 0, dv = 0;
};

// The shapes numeq::reference::attention accepts (its definitions are the oracle's).
Sizes check_shapes(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                   const xt::xarray<double>* mask) {
  if (q.dimension() < 2) throw numeq::error("q: expected shape (..., Lq, d), got " + shape_text(q));
  const std::size_t nd = q.dimension();
  if (k.dimension() != nd)
    throw numeq::error("k: expected shape (..., Lk, d) with the batch dimensions of q " + shape_text(q) + ", got " + shape_text(k));
  if (v.dimension() != nd)
    throw numeq::error("v: expected shape (..., Lk, dv) with the batch dimensions of q " + shape_text(q) + ", got " + shape_text(v));
  Sizes s;
  for (std::size_t i = 0; i + 2 < nd; ++i) {
    if (k.shape()[i] != q.shape()[i]) throw numeq::error("k: batch dimensions " + shape_text(k) + " differ from q's " + shape_text(q));
    if (v.shape()[i] != q.shape()[i]) throw numeq::error("v: batch dimensions " + shape_text(v) + " differ from q's " + shape_text(q));
    s.batches *= q.shape()[i];
  }
  if (k.shape()[nd - 1] != q.shape()[nd - 1])
    throw numeq::error("k: the last dimension (d) must equal q's: q " + shape_text(q) + ", k " + shape_text(k));
  if (v.shape()[nd - 2] != k.shape()[nd - 2])
    throw numeq::error("v: the second-to-last dimension (Lk) must equal k's: k " + shape_text(k) + ", v " + shape_text(v));
  s.lq = q.shape()[nd - 2];
  s.d = q.shape()[nd - 1];
  s.lk = k.shape()[nd - 2];
  s.dv = v.shape()[nd - 1];
  if (mask != nullptr) {
    bool ok = mask->dimension() == nd;
    for (std::size_t i = 0; ok && i + 2 < nd; ++i) ok = mask->shape()[i] == q.shape()[i];
    ok = ok && mask->shape()[nd - 2] == s.lq && mask->shape()[nd - 1] == s.lk;
    if (!ok)
      throw numeq::error("mask: expected the score shape (..., Lq, Lk) of q " + shape_text(q) + " and k " + shape_text(k) + ", got " +
                         shape_text(*mask));
  }
  return s;
}

// Every finite element must be a value of the format both GEMMs read.
void check_values(const xt::xarray<double>& a, const char* name, const Format& f) {
  const std::size_t i =
      detail::first_changed_by_rounding(a.data(), a.size(), f, [](double x) { return !std::isfinite(x); });
  if (i < a.size())
    throw numeq::error(std::string(name) + ": element " + std::to_string(i) + " (" + std::to_string(a.data()[i]) +
                       ") is not a value of in_fmt " + std::string(f.name));
}

void check_block(std::size_t block, std::size_t length, const char* name, const char* axis) {
  if (block == 0) throw numeq::error(std::string(name) + ": must be positive for the flash variant");
  if (length % block != 0)
    throw numeq::error(std::string(name) + ": " + std::to_string(block) + " does not divide " + axis + " = " +
                       std::to_string(length));
}

// The platform's arithmetic for attention: both GEMM plans, the fp32 sum plan and exp.
struct Machine {
  detail::Compute compute{Cast{formats::fp32}};
  Cast p_cast;               // what P is rounded to before the second GEMM
  core::Plan qk, pv, sum;
  detail::FunctionStep exp;
};

// The second GEMM's error at one output element when its P operand is computed: p^_k within e_k
// of the exact p_k, v_k exact inputs, c^ (may be absent) within e_c of the exact c. A device
// following the plan on its own p'_k (within e_k of p_k, so |p'_k| <= |p^_k| + 2 e_k) and c'
// errs against sum_k p_k v_k + c by at most (bound.hpp's ReductionWeights, stated on the terms
// the plan receives, plus the distance of those terms to the exact ones)
//   sum_k [w_k (|p^_k| + 2 e_k) + e_k + b_term_k] |v_k| + sum_k a_term_k (|p^_k| + 2 e_k)
//   + init (|c^| + 2 e_c) + e_c + absolute,
// before the plan's output cast (core::with_output_cast adds it). Per row, coefficient[k] holds
// the bracket and row_constant the terms that do not depend on the column.
struct RowWeights {
  std::vector<double> coefficient;
  double row_constant = 0;
};

void row_weights(const Tracked* p, std::size_t n, const core::ReductionWeights& w, RowWeights& out) {
  out.coefficient.resize(n);
  double constant = w.absolute;
  for (std::size_t k = 0; k < n; ++k) {
    const double reach = std::abs(p[k].value) + 2 * p[k].bound;
    out.coefficient[k] = w.term[k] * reach + p[k].bound + (w.b_term.empty() ? 0.0 : w.b_term[k]);
    if (!w.a_term.empty()) constant += w.a_term[k] * reach;
  }
  out.row_constant = constant;
}

// Binary64 evaluation of a bound summed from n non-negative terms: at most (n + 2) 2^-53
// relative below the real sum; the factor keeps it a bound (as tracked.hpp's kSafety does).
double safety(std::size_t n) { return 1.0 + 0x1p-40 + static_cast<double>(n + 4) * 0x1p-52; }

// The output element after `out` (emit of normalization.cpp): the value and its bound, capped by
// the distance to the ends of the range [lo, hi] the exact result lies in.
void emit(const Tracked& y, const Cast& out, const core::OutputCastBound& out_bound, std::size_t index, bool claim,
          double lo, double hi, double* values, double* bounds) {
  const double v = round_to_format(y.value, out, index);
  values[index] = v;
  if (!claim) {
    bounds[index] = kNaN;
    return;
  }
  double b = kInf;
  if (!std::isnan(v) && std::isfinite(y.value) && std::isfinite(y.bound)) b = out_bound(v, y.bound);
  if (std::isfinite(v) && lo <= hi) {
    // The exact result is a convex combination of values in [lo, hi]; the binary64 differences
    // are rounded, so move them up by one ulp.
    const double cap = std::nextafter(std::max(std::abs(v - lo), std::abs(v - hi)), kInf);
    b = std::min(b, cap);
  }
  bounds[index] = b;
}

}  // namespace

namespace {

// The scale in fp32, tracked against the exact one: a given double is exact; 1/sqrt(d) in
// binary64 is within 2^-52 relative of the real number (two correctly rounded operations).
Tracked attention_scale(const reference::AttentionParameters& parameters, const Sizes& n, const detail::Compute& C) {
  if (parameters.scale) {
    if (!std::isfinite(*parameters.scale))
      throw numeq::error("scale: must be finite, got " + std::to_string(*parameters.scale));
    return detail::input(*parameters.scale, C);
  }
  if (n.d == 0) throw numeq::error("q: the default scale 1/sqrt(d) needs d >= 1 (q has d = 0); pass a scale");
  const double s = 1.0 / std::sqrt(static_cast<double>(n.d));
  Tracked scale = detail::input(s, C);
  scale.bound = (scale.bound + s * 0x1p-51) * (1 + 0x1p-50);
  return scale;
}

// What both variants read of the problem's rows: the scores S = Q K^T under the plan with their
// bound from the plan's walker (exact inputs), which keys take part, each row's tracked scores
// and the range of its exact result.
struct Rows {
  const Sizes& n;
  const reference::AttentionParameters& parameters;
  const detail::Compute& C;
  Tracked scale;
  const xt::xarray<double>& v;
  const double* qs;
  const double* vs;
  const double* ms;  // the additive mask, or nullptr
  xt::xarray<double> S, S_bound;
  std::vector<char> key_finite;  // per (batch, key): k and v finite

  Rows(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& values,
       const reference::AttentionParameters& p, const Sizes& sizes, const Machine& mc, const Tracked& s)
      : n(sizes), parameters(p), C(mc.compute), scale(s), v(values), qs(q.data()), vs(values.data()),
        ms(p.mask ? p.mask->data() : nullptr) {
    const std::size_t nd = q.dimension();
    std::vector<std::size_t> kt_shape(k.shape().begin(), k.shape().end());
    std::swap(kt_shape[nd - 1], kt_shape[nd - 2]);
    xt::xarray<double> kt = xt::xarray<double>::from_shape(kt_shape);
    for (std::size_t b = 0; b < n.batches; ++b)
      for (std::size_t j = 0; j < n.lk; ++j)
        for (std::size_t c = 0; c < n.d; ++c) kt.data()[(b * n.d + c) * n.lk + j] = k.data()[(b * n.lk + j) * n.d + c];
    S = core::matmul(q, kt, nullptr, mc.qk);
    S_bound = core::matmul_bound(q, kt, nullptr, mc.qk, S);
    const double* ks = k.data();
    key_finite.assign(n.batches * n.lk, 1);
    for (std::size_t key = 0; key < key_finite.size(); ++key) {
      bool f = true;
      for (std::size_t c = 0; c < n.d; ++c) f = f && std::isfinite(ks[key * n.d + c]);
      for (std::size_t c = 0; c < n.dv; ++c) f = f && std::isfinite(vs[key * n.dv + c]);
      key_finite[key] = f;
    }
  }

  bool takes_part(std::size_t row, std::size_t j) const {
    if (parameters.causal && j > row % n.lq) return false;
    return !(ms != nullptr && ms[row * n.lk + j] == -kInf);
  }
  // The row's scores x_j = scale S_j (+ mask_j) in fp32, tracked; excluded keys left untouched.
  // Returns whether the row makes a claim (finite inputs, at least one taking-part key).
  bool scores(std::size_t row, std::vector<Tracked>& x) const {
    const std::size_t b = row / n.lq;
    bool claim = false, finite = true;
    for (std::size_t c = 0; c < n.d; ++c) finite = finite && std::isfinite(qs[row * n.d + c]);
    for (std::size_t j = 0; j < n.lk; ++j) {
      if (!takes_part(row, j)) continue;
      claim = true;
      const std::size_t at = row * n.lk + j;
      finite = finite && key_finite[b * n.lk + j];
      Tracked s = detail::mul(Tracked{S.data()[at], S_bound.data()[at]}, scale, C);
      if (ms != nullptr) {
        finite = finite && std::isfinite(ms[at]);
        s = detail::add(s, detail::input(ms[at], C), C);
      }
      x[j] = s;
    }
    return claim && finite;
  }
  // The range of the exact result's column c: the taking-part v_jc.
  void v_range(std::size_t row, std::vector<double>& lo, std::vector<double>& hi) const {
    const std::size_t b = row / n.lq;
    std::fill(lo.begin(), lo.end(), kInf);
    std::fill(hi.begin(), hi.end(), -kInf);
    for (std::size_t j = 0; j < n.lk; ++j) {
      if (!takes_part(row, j)) continue;
      const double* vj = vs + (b * n.lk + j) * n.dv;
      for (std::size_t c = 0; c < n.dv; ++c) {
        lo[c] = std::min(lo[c], vj[c]);
        hi[c] = std::max(hi[c], vj[c]);
      }
    }
  }
};

// Where a variant writes its result: values and bounds, with the casts' bounds.
struct Output {
  double* values;
  double* bounds;
  const Cast& out;
  core::OutputCastBound out_bound, p_bound, pv_bound;
};

// ---- naive: softmax over the whole row, P cast, one GEMM ----------------------------------------
void naive_attention(const Rows& problem, const Machine& mc, const std::vector<std::size_t>& out_shape, Output& dst) {
  const Sizes& n = problem.n;
  const xt::xarray<double>& v = problem.v;
  const detail::Compute& C = mc.compute;
  const std::size_t rows = n.batches * n.lq;
  const double* vs = problem.vs;
  const core::ReductionWeights w_sum = core::reduction_weights(mc.sum, n.lk, false);
  const core::ReductionWeights w_pv = core::reduction_weights(mc.pv, n.lk, false);
  std::vector<std::size_t> p_shape(out_shape);
  p_shape.back() = n.lk;
  xt::xarray<double> P = xt::xarray<double>::from_shape(p_shape);
  std::vector<Tracked> Pt(rows * n.lk);
  std::vector<char> claim(rows);
  parallel_for(
      rows,
      [&](std::size_t begin, std::size_t end) {
        std::vector<Tracked> x(n.lk), e(n.lk);
        for (std::size_t row = begin; row < end; ++row) {
          claim[row] = problem.scores(row, x);
          // Max-subtracted softmax (Blanchard, D. Higham, N. Higham, IMA J. Numer. Anal.
          // 41(4), 2021): the maximum is an exact constant of the emulation and its exact
          // counterpart alike (softmax does not depend on the shift).
          double m = -kInf;
          for (std::size_t j = 0; j < n.lk; ++j)
            if (problem.takes_part(row, j)) m = std::max(m, x[j].value);
          for (std::size_t j = 0; j < n.lk; ++j)
            e[j] = problem.takes_part(row, j) ? detail::apply(mc.exp, detail::sub(x[j], detail::exact(m), C)) : detail::exact(0);
          const Tracked s = detail::reduce(e, mc.sum, w_sum);
          for (std::size_t j = 0; j < n.lk; ++j) {
            Tracked p = problem.takes_part(row, j) ? detail::div(e[j], s, C) : detail::exact(0);
            if (!(mc.p_cast == C)) {
              // The cast of P: core::with_output_cast states its rounding for any value within
              // the bound (a device's P), not only the emulation's.
              const double r = round_to_format(p.value, mc.p_cast);
              p = Tracked{r, dst.p_bound(r, p.bound)};
            }
            Pt[row * n.lk + j] = p;
            P.data()[row * n.lk + j] = p.value;
          }
        }
      },
      2);
  const xt::xarray<double> O = core::matmul(P, v, nullptr, mc.pv);
  parallel_for(
      rows,
      [&](std::size_t begin, std::size_t end) {
        RowWeights rw;
        std::vector<double> pre(n.dv), lo(n.dv), hi(n.dv);
        for (std::size_t row = begin; row < end; ++row) {
          const std::size_t b = row / n.lq;
          row_weights(Pt.data() + row * n.lk, n.lk, w_pv, rw);
          std::fill(pre.begin(), pre.end(), rw.row_constant);
          for (std::size_t j = 0; j < n.lk; ++j) {
            const double cj = rw.coefficient[j];
            if (cj == 0) continue;
            const double* vj = vs + (b * n.lk + j) * n.dv;
            for (std::size_t c = 0; c < n.dv; ++c) pre[c] += cj * std::abs(vj[c]);
          }
          problem.v_range(row, lo, hi);
          for (std::size_t c = 0; c < n.dv; ++c) {
            const std::size_t at = row * n.dv + c;
            const double o = O.data()[at];
            const double pb = pre[c] * safety(n.lk);
            Tracked y{o, std::isfinite(o) && std::isfinite(pb) ? dst.pv_bound(o, pb) : kInf};
            if (lo[c] > hi[c]) y = Tracked{kNaN, kNaN};  // no taking-part key: softmax of only -Inf
            emit(y, dst.out, dst.out_bound, at, claim[row], lo[c], hi[c], dst.values, dst.bounds);
          }
        }
      },
      2);
}

// ---- flash: FlashAttention-2's Algorithm 1 (arXiv:2307.08691) ---------------------------------
void flash_attention(const Rows& problem, const Machine& mc, const AttentionOptions& options, Output& dst) {
  const Sizes& n = problem.n;
  const detail::Compute& C = mc.compute;
  const reference::AttentionParameters& parameters = problem.parameters;
  const std::size_t rows = n.batches * n.lq;
  const double* vs = problem.vs;
  const std::size_t br = options.block_rows, bc = options.block_cols;
  const core::ReductionWeights w_sum = core::reduction_weights(mc.sum, bc, false);
  const core::ReductionWeights w_pv = core::reduction_weights(mc.pv, bc, true);
  // Running state per row: the maximum m (a constant), l and O (tracked).
  std::vector<double> m(rows, -kInf);
  std::vector<Tracked> l(rows, detail::exact(0)), O(rows * n.dv, detail::exact(0));
  std::vector<char> claim(rows);
  std::vector<std::vector<Tracked>> x(rows);  // each row's scores, computed once
  parallel_for(
      rows,
      [&](std::size_t begin, std::size_t end) {
        for (std::size_t row = begin; row < end; ++row) {
          x[row].assign(n.lk, detail::exact(0));
          claim[row] = problem.scores(row, x[row]);
        }
      },
      2);
  xt::xarray<double> Pj = xt::xarray<double>::from_shape({n.lq, bc});
  xt::xarray<double> Cj = xt::xarray<double>::from_shape({n.lq, n.dv});
  xt::xarray<double> Vj = xt::xarray<double>::from_shape({bc, n.dv});
  std::vector<Tracked> Pt(n.lq * bc), Ct(n.lq * n.dv);
  std::vector<char> active(n.lq);
  for (std::size_t b = 0; b < n.batches; ++b) {
    for (std::size_t j0 = 0; j0 < n.lk; j0 += bc) {
      // Per row: the block's P~ (cast) and the rescaled accumulator c = a O, or inactive.
      parallel_for(
          n.lq,
          [&](std::size_t begin, std::size_t end) {
            for (std::size_t i = begin; i < end; ++i) {
              const std::size_t row = b * n.lq + i;
              Tracked* p = Pt.data() + i * bc;
              Tracked* c = Ct.data() + i * n.dv;
              active[i] = 0;
              // Causal: FlashAttention-2 stops at the key block past the row block's last
              // query (n_block_max); every key of a later block is masked for the whole row block.
              const std::size_t last_query = (i / br) * br + br - 1;
              const bool skipped = parameters.causal && j0 > last_query;
              double mb = -kInf;
              for (std::size_t j = j0; j < j0 + bc; ++j)
                if (problem.takes_part(row, j)) mb = std::max(mb, x[row][j].value);
              const double m_new = std::max(m[row], mb);
              if (skipped || m_new == -kInf) {
                // No block at all, or nothing so far: (m, l, O) stay (-Inf, 0, 0) exactly
                // (FlashAttention-2's Check_inf turns the -Inf maximum into 0 for the exponent).
                for (std::size_t t = 0; t < bc; ++t) Pj(i, t) = 0;
                for (std::size_t t = 0; t < n.dv; ++t) Cj(i, t) = 0;
                continue;
              }
              active[i] = 1;
              for (std::size_t t = 0; t < bc; ++t) {
                const std::size_t j = j0 + t;
                Tracked e = detail::exact(0);
                if (problem.takes_part(row, j)) e = detail::apply(mc.exp, detail::sub(x[row][j], detail::exact(m_new), C));
                p[t] = e;
              }
              const Tracked rowsum = detail::reduce(std::span<const Tracked>(p, bc), mc.sum, w_sum);
              if (m[row] == -kInf) {
                // The first block with a taking-part key: l = rowsum, O = P~ V_j from c = 0.
                l[row] = rowsum;
                for (std::size_t t = 0; t < n.dv; ++t) c[t] = detail::exact(0);
              } else {
                const Tracked a = detail::apply(mc.exp, detail::sub(detail::exact(m[row]), detail::exact(m_new), C));
                l[row] = detail::add(detail::mul(a, l[row], C), rowsum, C);
                for (std::size_t t = 0; t < n.dv; ++t) c[t] = detail::mul(a, O[row * n.dv + t], C);
              }
              m[row] = m_new;
              for (std::size_t t = 0; t < bc; ++t) {
                if (!(mc.p_cast == C)) {
                  const double r = round_to_format(p[t].value, mc.p_cast);
                  p[t] = Tracked{r, dst.p_bound(r, p[t].bound)};
                }
                Pj(i, t) = p[t].value;
              }
              for (std::size_t t = 0; t < n.dv; ++t) Cj(i, t) = c[t].value;
            }
          },
          2);
      for (std::size_t t = 0; t < bc; ++t)
        for (std::size_t c = 0; c < n.dv; ++c) Vj(t, c) = vs[(b * n.lk + j0 + t) * n.dv + c];
      // O' = c + cast(P~) V_j under the plan, c its accumulator.
      const xt::xarray<double> Oj = core::matmul(Pj, Vj, &Cj, mc.pv);
      parallel_for(
          n.lq,
          [&](std::size_t begin, std::size_t end) {
            RowWeights rw;
            std::vector<double> pre(n.dv);
            for (std::size_t i = begin; i < end; ++i) {
              if (!active[i]) continue;
              const std::size_t row = b * n.lq + i;
              row_weights(Pt.data() + i * bc, bc, w_pv, rw);
              std::fill(pre.begin(), pre.end(), rw.row_constant);
              for (std::size_t t = 0; t < bc; ++t) {
                const double ct = rw.coefficient[t];
                if (ct == 0) continue;
                const double* vj = vs + (b * n.lk + j0 + t) * n.dv;
                for (std::size_t c = 0; c < n.dv; ++c) pre[c] += ct * std::abs(vj[c]);
              }
              for (std::size_t c = 0; c < n.dv; ++c) {
                const Tracked& acc = Ct[i * n.dv + c];
                const double pb = (pre[c] + w_pv.init * (std::abs(acc.value) + 2 * acc.bound) + acc.bound) * safety(bc);
                const double o = Oj(i, c);
                O[row * n.dv + c] =
                    Tracked{o, std::isfinite(o) && std::isfinite(pb) ? dst.pv_bound(o, pb) : kInf};
              }
            }
          },
          2);
    }
  }
  // Finally O / l (one fp32 division per element, or O * (1 / l)) and the output cast.
  parallel_for(
      rows,
      [&](std::size_t begin, std::size_t end) {
        std::vector<double> lo(n.dv), hi(n.dv);
        for (std::size_t row = begin; row < end; ++row) {
          problem.v_range(row, lo, hi);
          const Tracked inverse = options.reciprocal ? detail::div(detail::exact(1), l[row], C) : Tracked{};
          for (std::size_t c = 0; c < n.dv; ++c) {
            const std::size_t at = row * n.dv + c;
            // No taking-part key: l = 0, which FlashAttention-2 normalises by 1 (a zero row).
            Tracked y = detail::exact(0);
            if (lo[c] <= hi[c])
              y = options.reciprocal ? detail::mul(O[at], inverse, C) : detail::div(O[at], l[row], C);
            emit(y, dst.out, dst.out_bound, at, claim[row], lo[c], hi[c], dst.values, dst.bounds);
          }
        }
      },
      2);
}

}  // namespace

AttentionVariant attention_variant_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<AttentionVariant>, name, parameter, "attention variant");
}

Emulation attention(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                    const reference::AttentionParameters& parameters, const core::Platform& platform,
                    std::string_view in_fmt, const Cast& out, const AttentionOptions& options) {
  validate(out, "out");
  const Sizes n = check_shapes(q, k, v, parameters.mask);
  const bool flash = options.variant == AttentionVariant::flash;
  if (flash) {
    check_block(options.block_rows, n.lq, "block_rows", "Lq");
    check_block(options.block_cols, n.lk, "block_cols", "Lk");
  }
  Machine mc;
  const detail::Compute& C = mc.compute;
  // plan_for names in_fmt and lists the platform's matmuls when it has none for in_fmt.
  mc.qk = core::plan_for(platform, core::Operation::matmul, in_fmt, "fp32");
  const Format& in = format_by_name(in_fmt, "in_fmt");
  mc.p_cast = options.cast_p ? Cast{in} : C.cast;
  mc.pv = options.cast_p ? mc.qk : core::plan_for(platform, core::Operation::matmul, "fp32", "fp32");
  mc.sum = core::plan_for(platform, core::Operation::sum, "fp32", "fp32");
  mc.exp = detail::function_step(platform, Function::exp, C);
  check_values(q, "q", in);
  check_values(k, "k", in);
  check_values(v, "v", in);
  const Tracked scale = attention_scale(parameters, n, C);

  std::vector<std::size_t> out_shape(q.shape().begin(), q.shape().end());
  out_shape.back() = n.dv;
  Emulation result;
  result.values = xt::xarray<double>::from_shape(out_shape);
  result.bound = xt::xarray<double>::from_shape(out_shape);
  if (result.values.size() == 0) return result;
  const Rows problem(q, k, v, parameters, n, mc, scale);
  Output dst{result.values.data(), result.bound.data(), out, core::OutputCastBound(out),
             core::OutputCastBound(mc.p_cast), core::OutputCastBound(mc.pv.output)};
  if (flash)
    flash_attention(problem, mc, options, dst);
  else
    naive_attention(problem, mc, out_shape, dst);
  return result;
}

}  // namespace numeq::cases
