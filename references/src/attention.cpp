// Certified scaled dot-product attention (composite.hpp): exact scores grouped by value, Ziv's
// loop per output element.

#include "numeq/references/composite.hpp"

#include "attention_fast.hpp"
#include "composite_rows.hpp"

namespace numeq::reference {

namespace {

using namespace rows;

// ---- attention ----

// Whether sqrt(d) is an integer (then the default scale 1/sqrt(d) is the rational 1/root).
std::uint64_t integer_sqrt_or_zero(std::uint64_t d) {
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(d)));
  while (r * r > d) --r;
  while ((r + 1) * (r + 1) <= d) ++r;
  return r * r == d ? r : 0;
}

}  // namespace

void check_attention_shapes(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                            const xt::xarray<double>* mask) {
  auto dims = [](const xt::xarray<double>& a) {
    std::string s = "(";
    for (std::size_t d = 0; d < a.dimension(); ++d) s += (d ? ", " : "") + std::to_string(a.shape()[d]);
    return s + (a.dimension() == 1 ? ",)" : ")");
  };
  if (q.dimension() < 2) throw numeq::error("q: expected shape (..., Lq, d), got " + dims(q));
  if (k.dimension() != q.dimension())
    throw numeq::error("k: expected shape (..., Lk, d) with the batch dimensions of q " + dims(q) + ", got " + dims(k));
  if (v.dimension() != q.dimension())
    throw numeq::error("v: expected shape (..., Lk, dv) with the batch dimensions of q " + dims(q) + ", got " + dims(v));
  const std::size_t nd = q.dimension();
  for (std::size_t d = 0; d + 2 < nd; ++d) {
    if (k.shape()[d] != q.shape()[d]) throw numeq::error("k: batch dimensions " + dims(k) + " differ from q's " + dims(q));
    if (v.shape()[d] != q.shape()[d]) throw numeq::error("v: batch dimensions " + dims(v) + " differ from q's " + dims(q));
  }
  if (k.shape()[nd - 1] != q.shape()[nd - 1])
    throw numeq::error("k: the last dimension (d) must equal q's: q " + dims(q) + ", k " + dims(k));
  if (v.shape()[nd - 2] != k.shape()[nd - 2])
    throw numeq::error("v: the second-to-last dimension (Lk) must equal k's: k " + dims(k) + ", v " + dims(v));
  if (mask != nullptr) {
    bool ok = mask->dimension() == nd;
    for (std::size_t d = 0; ok && d + 2 < nd; ++d) ok = mask->shape()[d] == q.shape()[d];
    ok = ok && mask->shape()[nd - 2] == q.shape()[nd - 2] && mask->shape()[nd - 1] == k.shape()[nd - 2];
    if (!ok) throw numeq::error("mask: expected the score shape (..., Lq, Lk) of q " + dims(q) + " and k " + dims(k) +
                                ", got " + dims(*mask));
  }
}

namespace {

// The rows of attention into `out` (enclosed: binary64 enclosures with radii into `radius`);
// `only`: null, or the rows (flat over the batch and query dimensions) to compute, in order, into
// a result of shape {only->size(), dv}.
xt::xarray<double> attention_rows(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                                  const AttentionParameters& parameters, const Cast& out, double* radius,
                                  const std::vector<std::size_t>* only = nullptr) {
  check_attention_shapes(q, k, v, parameters.mask);
  const std::size_t nd = q.dimension();
  const std::size_t lq = q.shape()[nd - 2];
  const std::size_t d = q.shape()[nd - 1];
  const std::size_t lk = k.shape()[nd - 2];
  const std::size_t dv = v.shape()[nd - 1];
  std::size_t batches = 1;
  for (std::size_t i = 0; i + 2 < nd; ++i) batches *= q.shape()[i];
  if (!parameters.scale && d == 0)
    throw numeq::error("q: the default scale 1/sqrt(d) needs d >= 1 (q has d = 0); pass a scale");
  if (parameters.scale && !std::isfinite(*parameters.scale))
    throw numeq::error("scale: must be finite, got " + std::to_string(*parameters.scale));
  std::vector<std::size_t> shape(q.shape().begin(), q.shape().end());
  shape.back() = dv;
  // The scale, exactly: a given double, or 1/sqrt(d): rational (1/root) when d is a square,
  // irrational otherwise. Equal scores are recognised exactly either way (below).
  const std::uint64_t root = parameters.scale ? 0 : integer_sqrt_or_zero(d);
  const bool rational_scale = parameters.scale.has_value() || root != 0;
  const double approx_scale = parameters.scale ? *parameters.scale : 1.0 / std::sqrt(static_cast<double>(d));
  const double* qs = q.data();
  const double* vs = v.data();
  const double* ms = parameters.mask ? parameters.mask->data() : nullptr;
  std::size_t rows = dv == 0 ? 0 : batches * lq;
  if (only != nullptr) {
    for (const std::size_t r : *only)
      if (r >= rows) throw numeq::error("rows: row " + std::to_string(r) + " is beyond the " + std::to_string(rows) +
                                        " rows (batch x query) of the result");
    shape = {only->size(), dv};
    rows = dv == 0 ? 0 : only->size();
  }
  const AttentionFastPath fast(q, k, v, parameters, out, radius != nullptr);
  const double* ks = k.data();
  // An enclosed result's values are binary64 patterns (run_rows: within > 0).
  const double within = radius != nullptr ? 0x1p-53 : 0.0;
  return run_rows(shape, rows, out, "attention", within, [&](std::size_t out_row, const RowOutput& row) {
    const std::size_t row_index = only != nullptr ? (*only)[out_row] : out_row;
    const std::size_t b = row_index / lq;
    const std::size_t i = row_index % lq;
    const std::size_t base = out_row * dv;  // where the row's elements go
    const double* qi = qs + row_index * d;
    const double* kb = ks + b * lk * d;
    const double* vb = vs + b * lk * dv;
    const double* mi = ms ? ms + row_index * lk : nullptr;
    auto fill = [&](std::size_t c, double value) { row.bits[base + c] = exact_pattern(value, out, row.random(base + c)); };
    auto nan_row = [&] {
      for (std::size_t c = 0; c < dv; ++c) fill(c, kNaN);
    };
    // The keys that take part, and whether the row's scores are defined.
    std::vector<std::size_t> keys;
    bool undefined = false;
    for (std::size_t j = 0; j < lk; ++j) {
      if (parameters.causal && j > i) continue;
      const double m = mi ? mi[j] : 0.0;
      if (m == -kInf) continue;
      if (std::isnan(m) || m == kInf) undefined = true;
      undefined = undefined || !fast.key_finite(b, j);
      keys.push_back(j);
    }
    for (std::size_t c = 0; c < d; ++c) undefined = undefined || !std::isfinite(qi[c]);
    if (undefined || keys.empty()) return nan_row();
    // Columns with non-finite values among the taking-part keys are decided now.
    std::vector<std::size_t> pending;
    for (std::size_t c = 0; c < dv; ++c) {
      if (fast.column_finite(b, c)) {
        pending.push_back(base + c);
        continue;
      }
      bool nan = false, pos = false, neg = false;
      for (const std::size_t j : keys) {
        const double value = vb[j * dv + c];
        nan = nan || std::isnan(value);
        pos = pos || value == kInf;
        neg = neg || value == -kInf;
      }
      if (nan || (pos && neg)) fill(c, kNaN);
      else if (pos) fill(c, kInf);
      else if (neg) fill(c, -kInf);
      else pending.push_back(base + c);
    }
    // The fast path decides what it can; Ziv's loop in MPFR the rest.
    fast.decide_row(row_index, base, keys, pending, row);
    if (pending.empty()) return;
    Scratch& s = scratch();
    s.reserve(lk);
    // Exact scores' parts: D_j = q_i . k_j and the mask entry m_j.
    // The shift: a key of (about) the largest score, so that every e^delta is at most about 1.
    // Scores are compared at 64 bits in MPFR's exponent range: dot products of doubles can
    // exceed binary64's (1e200 * 1e200), where double approximations would all be Inf.
    std::size_t ref = keys[0];
    thread_local Mpfr approx(64), best(64);
    for (const std::size_t j : keys) {
      exact_dot(s.exact[j], qi, kb + j * d, d);
      mpfr_mul_d(approx, s.exact[j], approx_scale, MPFR_RNDN);
      mpfr_add_d(approx, approx, mi ? mi[j] : 0.0, MPFR_RNDN);
      if (j == keys[0] || mpfr_greater_p(approx, best)) {
        mpfr_set(best, approx, MPFR_RNDN);
        ref = j;
      }
    }
    // Groups of keys with exactly equal scores. With a rational scale the score itself is exact
    // (scale D_j + m_j, or root * score = D_j + root m_j for scale 1/root); with an irrational
    // scale two scores are equal exactly when both D and m are (composite.hpp), so the pair
    // (D_j, m_j) is the key. Sorting by the key brings equal scores together.
    thread_local Mpfr scaled(64), scale_value(64), mask_value(64);
    std::vector<Mpfr> mask(keys.size());
    std::vector<Mpfr> key;
    key.reserve(keys.size());
    if (parameters.scale) exact_set(scale_value, *parameters.scale);
    for (std::size_t kk = 0; kk < keys.size(); ++kk) {
      const std::size_t j = keys[kk];
      exact_set(mask[kk], mi ? mi[j] : 0.0);
      Mpfr value(64);
      if (parameters.scale) {
        exact_mul(scaled, s.exact[j], scale_value);
        exact_add(value, scaled, mask[kk]);
      } else if (root != 0) {
        exact_mul_ui(scaled, mask[kk], static_cast<unsigned long>(root));
        exact_add(value, s.exact[j], scaled);
      }
      key.push_back(std::move(value));
    }
    auto compare = [&](std::size_t x, std::size_t y) {
      if (rational_scale) return mpfr_cmp(key[x], key[y]);
      const int by_dot = mpfr_cmp(s.exact[keys[x]], s.exact[keys[y]]);
      return by_dot != 0 ? by_dot : mpfr_cmp(mask[x], mask[y]);
    };
    std::vector<std::size_t> order(keys.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return compare(x, y) < 0; });
    std::vector<std::vector<std::size_t>> groups;  // positions in keys
    std::size_t top = 0;                            // the group of `ref`: its score is the shift
    for (std::size_t o = 0; o < order.size(); ++o) {
      if (o == 0 || compare(order[o - 1], order[o]) != 0) groups.emplace_back();
      groups.back().push_back(order[o]);
      if (keys[order[o]] == ref) top = groups.size() - 1;
    }
    // Per group g: delta_g = scale (D_g - D_ref) + (m_g - m_ref), both differences exact.
    const std::size_t ref_position = groups[top].front();
    std::vector<Mpfr> dot_delta(groups.size());
    std::vector<Mpfr> mask_delta(groups.size());
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const std::size_t first = groups[g].front();
      exact_sub(dot_delta[g], s.exact[keys[first]], s.exact[keys[ref_position]]);
      exact_sub(mask_delta[g], mask[first], mask[ref_position]);
    }
    // The result, written around the top group's mean mu = V_top / c_top (V: sum of v[:, c] over
    // a group, c: its size):
    //   out = mu + (sum_{g != top} e^{delta_g} T_g) / (c_top S),  T_g = c_top V_g - c_g V_top,
    //   S = c_top + sum_{g != top} c_g e^{delta_g}.
    // T_g is exact; a group whose mean equals mu has T_g = 0 and drops out exactly. So a column
    // of equal values, or any rational result (every group's mean equal, composite.hpp), comes
    // out as the exact mu, and a result a hair from mu (scores far apart: e^{delta} tiny) has a
    // correction of the right sign however small, where the plain quotient of two sums could not
    // be decided.
    Interval& total = s.t0;
    Interval& scale = s.t1;
    const auto c_top = static_cast<unsigned long>(groups[top].size());
    auto prepare = [&](mpfr_prec_t p) {
      set_precision(s.a, groups.size(), p);
      set_precision(s.b, groups.size(), p);
      total.set_precision(p);
      scale.set_precision(p);
      s.t2.set_precision(p);
      s.t3.set_precision(p);
      if (parameters.scale) {
        scale.set(*parameters.scale);
      } else {
        s.t2.set_si(static_cast<long>(d));
        ia::rec_sqrt(scale, s.t2);
      }
      total.set_si(static_cast<long>(c_top));
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (g == top) continue;
        set_point(s.t2, dot_delta[g]);
        ia::mul(s.t3, scale, s.t2);
        set_point(s.t2, mask_delta[g]);
        ia::add(s.a[g], s.t3, s.t2);   // delta_g
        ia::exp(s.b[g], s.a[g]);       // e^delta_g
        ia::scale(s.t3, s.b[g], static_cast<unsigned long>(groups[g].size()), 1);
        ia::add(s.t2, total, s.t3);
        std::swap(total, s.t2);
      }
    };
    auto enclose = [&](std::size_t e, Interval& r, mpfr_prec_t p) {
      const std::size_t c = e - base;
      // Every term zero: an exact zero, -0 only when every term is -0.
      bool all_zero = true, all_negative_zero = true;
      for (const std::size_t j : keys) {
        const double value = vb[j * dv + c];
        all_zero = all_zero && value == 0;
        all_negative_zero = all_negative_zero && value == 0 && std::signbit(value);
      }
      if (all_zero) {
        mpfr_set_zero(r.lo.value, all_negative_zero ? -1 : 1);
        mpfr_set_zero(r.hi.value, all_negative_zero ? -1 : 1);
        r.lo.open = r.hi.open = false;
        return;
      }
      thread_local Mpfr v_top(64), v_group(64), t(64), u(64), t_group(64);
      thread_local std::vector<double> column;
      auto group_sum = [&](Mpfr& out_sum, std::size_t g) {
        column.clear();
        for (const std::size_t position : groups[g]) column.push_back(vb[keys[position] * dv + c]);
        exact_sum(out_sum, column.data(), column.size(), 1);
      };
      group_sum(v_top, top);
      thread_local Interval numerator(64), other(64), term(64), point(64), denominator(64), correction(64), mu(64);
      for (Interval* each : {&numerator, &other, &term, &point, &denominator, &correction, &mu}) each->set_precision(p);
      numerator.set_si(0);
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (g == top) continue;
        group_sum(v_group, g);
        exact_mul_ui(t, v_group, c_top);
        exact_mul_ui(u, v_top, static_cast<unsigned long>(groups[g].size()));
        exact_sub(t_group, t, u);  // T_g
        if (mpfr_zero_p(t_group)) continue;
        set_point(point, t_group);
        ia::mul(term, s.b[g], point);
        ia::add(other, numerator, term);
        std::swap(numerator, other);
      }
      ia::scale(denominator, total, c_top, 1);
      ia::div(correction, numerator, denominator);
      mu.lo.open = mpfr_div_ui(mu.lo.value, v_top, c_top, MPFR_RNDD) != 0;
      mu.hi.open = mpfr_div_ui(mu.hi.value, v_top, c_top, MPFR_RNDU) != 0;
      ia::add(r, mu, correction);
      settle_zero_sign(r, false);
    };
    certify_row(pending, row, prepare, enclose, "attention");
  }, radius);
}

}  // namespace

xt::xarray<double> attention(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                             const AttentionParameters& parameters, const Cast& out) {
  return attention_rows(q, k, v, parameters, out, nullptr);
}

xt::xarray<double> attention(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                             const AttentionParameters& parameters, const Cast& out,
                             const std::vector<std::size_t>& rows) {
  return attention_rows(q, k, v, parameters, out, nullptr, &rows);
}

EnclosedValues attention_enclosed(const xt::xarray<double>& q, const xt::xarray<double>& k,
                                  const xt::xarray<double>& v, const AttentionParameters& parameters) {
  std::size_t elements = 1;
  for (std::size_t x = 0; x + 1 < q.dimension(); ++x) elements *= q.shape()[x];
  elements *= v.dimension() > 0 ? v.shape()[v.dimension() - 1] : 0;
  std::vector<double> radius(elements, 0.0);
  EnclosedValues r;
  r.mid = attention_rows(q, k, v, parameters, kBinary64, radius.data());
  if (r.mid.size() != radius.size()) throw numeq::error("attention: internal error: radius size");
  r.radius = std::move(radius);
  return r;
}

}  // namespace numeq::reference
