// The fast path of certified attention (attention_fast.hpp).
//
// The compensated sums. A sum of n products p_i = fl(x_i y_i) is run as s <- s + p_i by TwoSum
// with the errors pe_i = x_i y_i - p_i (an fma, exact while |p_i| >= 2^-960: Boldo and Muller,
// "Exact and approximated error of the FMA", IEEE TC 60(2), 2011) and se_i (TwoSum's, exact at
// every magnitude) added into c. The exact sum is s + sum_i (pe_i + se_i); c evaluates that sum
// of 2n terms with 2n - 1 additions, so it errs by at most gamma_2n sum |pe_i| + |se_i| (Higham,
// "Accuracy and Stability of Numerical Algorithms", 2nd ed., s4.2), and |pe_i| <= u |p_i|,
// |se_i| <= u |t_i| <= u (1 + gamma_n) m with m = sum |p_i|. m itself is summed in double: its
// computed value m^ >= m (1 - gamma_n). res = fl(s + c) errs by at most u |res| / (1 - u). So
//   |res - exact| <= 2u |res| + F(n) m^,  F(n) = 2.02 n (n + 2) u^2   (n u < 2^-20),
// plus 2^-1073 for a result in the subnormal range. Each bound below is evaluated in double and
// stepped up by an ulp after each rounding (next_up), so the computed bound is at least the real
// one.

#include "attention_fast.hpp"

#include <cmath>

#include "numeq/formats/cpu_dispatch.hpp"

namespace numeq::reference::rows {

namespace {

constexpr double u = 0x1p-53;
// Products of magnitude at least this have exact fma residuals (the floor of double_interval.hpp).
constexpr double kProductFloor = interval_detail::kResidualFloor;
// Weights below this take no part in the compensated sum: their whole contribution is bounded
// by their sum times the column's largest |v| (a product of two doubles above the floor needs
// |v| >= 2^-960 / 2^-400).
constexpr double kTinyWeight = 0x1p-400;
constexpr double kValueFloor = 0x1p-560;

double upward_product(double a, double b) { return next_up(a * b); }
double upward_sum(double a, double b) { return next_up(a + b); }

// F(n) of the compensated sum's bound (header comment).
double compensation_factor(std::size_t n) {
  const double nd = static_cast<double>(n);
  return next_up(next_up(2.02 * nd * (nd + 2)) * u * u);
}

// The bound on |res - exact| of one compensated sum.
double compensated_error(double res, double magnitude, double factor) {
  return upward_sum(upward_sum(upward_product(2 * u, std::fabs(res)), upward_product(factor, magnitude)), 0x1p-1073);
}

// One step of the compensated sum (header comment): s += x y by TwoSum, the product's fma
// residual and the sum's error into c, |fl(x y)| into m. Inlined into the loops below, which
// run it across contiguous lanes so that it vectorises.
[[gnu::always_inline]] inline void compensated_step(double x, double y, double& s, double& c, double& m) {
  const double p = x * y;
  const double pe = std::fma(x, y, -p);
  const double t = s + p;
  const double bv = t - s, av = t - bv;
  const double se = (s - av) + (p - bv);
  s = t;
  c += pe + se;
  m += std::fabs(p);
}

// Scores of one query row against keys [0, n) of a batch: key_t is [d][stride] (k transposed).
// The loop runs over keys, contiguous.
NUMEQ_X86_64_V3_CLONE void compensated_scores(const double* q, const double* key_t, std::size_t d, std::size_t stride,
                                              std::size_t n, double* s, double* c, double* m) {
  for (std::size_t j = 0; j < n; ++j) s[j] = c[j] = m[j] = 0;
  for (std::size_t x = 0; x < d; ++x) {
    const double qx = q[x];
    const double* kr = key_t + x * stride;
    for (std::size_t j = 0; j < n; ++j) compensated_step(qx, kr[j], s[j], c[j], m[j]);
  }
}

// sum_j w[j] v[keys[j], :] over the weighted keys, for the dv columns at once (contiguous).
NUMEQ_X86_64_V3_CLONE void compensated_weighted_sum(const double* w, const std::size_t* keys, std::size_t n,
                                                    const double* v, std::size_t dv, double* s, double* c, double* m) {
  for (std::size_t x = 0; x < dv; ++x) s[x] = c[x] = m[x] = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double* vr = v + keys[j] * dv;
    for (std::size_t x = 0; x < dv; ++x) compensated_step(w[j], vr[x], s[x], c[x], m[x]);
  }
}

}  // namespace

AttentionFastPath::AttentionFastPath(const xt::xarray<double>& q, const xt::xarray<double>& k,
                                     const xt::xarray<double>& v, const AttentionParameters& parameters,
                                     const Cast& out, bool enclosed)
    : q_(q.data()), v_(v.data()), mask_(parameters.mask ? parameters.mask->data() : nullptr) {
  const std::size_t nd = q.dimension();
  lq_ = q.shape()[nd - 2];
  d_ = q.shape()[nd - 1];
  lk_ = k.shape()[nd - 2];
  dv_ = v.shape()[nd - 1];
  std::size_t batches = 1;
  for (std::size_t i = 0; i + 2 < nd; ++i) batches *= q.shape()[i];
  // The per-batch facts serve the MPFR path too (which keys and columns are finite).
  key_finite_.assign(batches * lk_, 1);
  column_finite_.assign(batches * dv_, 1);
  column_max_.assign(batches * dv_, 0.0);
  key_min_.assign(batches, kInf);
  value_min_.assign(batches, kInf);
  const double* ks = k.data();
  for (std::size_t b = 0; b < batches; ++b) {
    for (std::size_t j = 0; j < lk_; ++j)
      for (std::size_t x = 0; x < d_; ++x) {
        const double e = ks[(b * lk_ + j) * d_ + x];
        if (!std::isfinite(e)) key_finite_[b * lk_ + j] = 0;
        else if (e != 0) key_min_[b] = std::min(key_min_[b], std::fabs(e));
      }
    for (std::size_t j = 0; j < lk_; ++j)
      for (std::size_t x = 0; x < dv_; ++x) {
        const double e = v_[(b * lk_ + j) * dv_ + x];
        if (!std::isfinite(e)) {
          column_finite_[b * dv_ + x] = 0;
          continue;
        }
        column_max_[b * dv_ + x] = std::max(column_max_[b * dv_ + x], std::fabs(e));
        if (e != 0) value_min_[b] = std::min(value_min_[b], std::fabs(e));
      }
  }
  enabled_ = default_function_path() == FunctionPath::fast && (enclosed || fast::suits(out)) && d_ > 0;
  if (!enabled_) return;
  scale_ = parameters.scale ? DoubleInterval::point(*parameters.scale)
                            : DoubleInterval::point(1.0) / sqrt(DoubleInterval::point(static_cast<double>(d_)));
  key_t_.resize(batches * d_ * lk_);
  for (std::size_t b = 0; b < batches; ++b)
    for (std::size_t j = 0; j < lk_; ++j)
      for (std::size_t x = 0; x < d_; ++x) key_t_[(b * d_ + x) * lk_ + j] = ks[(b * lk_ + j) * d_ + x];
}

void AttentionFastPath::decide_row(std::size_t row_index, std::size_t base, const std::vector<std::size_t>& keys,
                                   std::vector<std::size_t>& pending, const RowOutput& row) const {
  if (!enabled_ || pending.empty()) return;
  const std::size_t b = row_index / lq_;
  const double* qi = q_ + row_index * d_;
  const double* mi = mask_ ? mask_ + row_index * lk_ : nullptr;
  // Every product above the fma floor: the smallest non-zero |q| times the smallest |k|.
  double q_min = kInf;
  for (std::size_t x = 0; x < d_; ++x)
    if (qi[x] != 0) q_min = std::min(q_min, std::fabs(qi[x]));
  if (q_min != kInf && key_min_[b] != kInf && !(q_min * key_min_[b] >= kProductFloor)) return;
  if (value_min_[b] != kInf && !(value_min_[b] >= kValueFloor)) return;

  // Scores D_j = q_i . k_j (compensated) and their bounds, compacted to the keys that take part.
  const std::size_t n = keys.back() + 1;  // keys is ascending: the scores of [0, n) cover it
  const std::size_t nk = keys.size();
  thread_local std::vector<double> s, c, m, dot, error, delta, radius, weight_of;
  s.resize(n);
  c.resize(n);
  m.resize(n);
  compensated_scores(qi, key_t_.data() + b * d_ * lk_, d_, lk_, n, s.data(), c.data(), m.data());
  const double score_factor = compensation_factor(d_);
  dot.resize(nk);
  error.resize(nk);
  const double scale_mid = 0.5 * scale_.lo + 0.5 * scale_.hi;
  std::size_t ref = 0;  // position in keys
  double best = -kInf;
  for (std::size_t at = 0; at < nk; ++at) {
    const std::size_t j = keys[at];
    dot[at] = s[j] + c[j];
    if (!std::isfinite(dot[at]) || !std::isfinite(m[j])) return;
    // The bound of the header comment; three roundings, each within 2^-53 (or 2^-1075).
    error[at] = (2 * u * std::fabs(dot[at]) + score_factor * m[j] + 0x1p-1073) * (1 + 0x1p-50);
    const double approx = dot[at] * scale_mid + (mi ? mi[j] : 0.0);
    if (!(approx <= best)) {
      best = approx;
      ref = at;
    }
  }
  // delta_j = scale (D_j - D_ref) + (m_j - m_ref), computed as dm = fl(fl(a scale_mid) + mm) with
  // a = fl(dot_j - dot_ref), mm = fl(m_j - m_ref). Its distance to the exact delta is at most
  //   scale_hi (E_j + E_ref) + (2u scale_hi + scale_hi - scale_lo) |a| + u (|mm| + |dm|)
  // (each rounding u relative, the scale's own interval), times 1 + 2^-48 for this bound's
  // roundings, plus 2^-1070 below the normal range.
  delta.resize(nk);
  radius.resize(nk);
  weight_of.resize(nk);
  const double dot_ref = dot[ref], error_ref = error[ref], mask_ref = mi ? mi[keys[ref]] : 0.0;
  const double spread_of_a = 2 * u * scale_.hi + (scale_.hi - scale_.lo);
  double widest = 0;
  for (std::size_t at = 0; at < nk; ++at) {
    const double a = dot[at] - dot_ref;
    const double mm = (mi ? mi[keys[at]] : 0.0) - mask_ref;
    const double dm = a * scale_mid + mm;
    radius[at] = (scale_.hi * (error[at] + error_ref) + spread_of_a * std::fabs(a) + u * (std::fabs(mm) + std::fabs(dm)) +
                  0x1p-1070) * (1 + 0x1p-48);
    delta[at] = std::max(dm, -700.0);
    widest = std::max(widest, radius[at]);
    if (!(dm <= 700)) return;  // NaN or an overflowing weight: the MPFR loop
  }
  delta[ref] = 0;  // e^0 = 1 exactly
  radius[ref] = 0;
  if (!(widest <= 0x1p-20)) return;
  fast::exp_many(delta.data(), nk, weight_of.data());
  // e_j lies in [y_j (1 - eps - r_j), y_j (1 + eps + r_j + r_j^2)]: |y_j - e^dm| <= eps y_j
  // (kExpManyError) and e^-r >= 1 - r, e^r <= 1 + r + r^2 for 0 <= r <= 1. So every weight w_j =
  // y_j is within rho w_j of e_j, rho = eps + r_max + r_max^2 (plus 8u for these roundings).
  // Keys whose weight is below kTinyWeight (or whose delta is below -700: e_j < 2^-1000) take no
  // part in the weighted sum; T bounds the sum of their e_j.
  thread_local std::vector<double> weight;
  thread_local std::vector<std::size_t> weighted;
  weight.clear();
  weighted.clear();
  Sum2 weights_sum;
  double tiny_sum = 0, r_max = 0;
  for (std::size_t at = 0; at < nk; ++at) {
    if (delta[at] == -700.0 || weight_of[at] < kTinyWeight) {
      tiny_sum += delta[at] == -700.0 ? 0x1p-1000 : 2 * weight_of[at];
      continue;
    }
    weights_sum.add(weight_of[at]);
    r_max = std::max(r_max, radius[at]);
    weight.push_back(weight_of[at]);
    weighted.push_back(keys[at]);
  }
  const double keys_n = static_cast<double>(nk);
  tiny_sum = upward_product(tiny_sum, upward_sum(1.0, 4 * keys_n * u));
  const double rho = upward_product(upward_sum(fast::kExpManyError + 8 * u, upward_product(r_max, 1 + r_max)), 1 + 0x1p-50);
  // S = sum_j e_j within [Y_lo (1 - eps - r_max), Y_hi (1 + rho) + T], Y = sum of the weights
  // (Sum2's enclosure); the lower factor's two roundings are covered by its 4u.
  const std::optional<DoubleInterval> y_sum = weights_sum.enclosure();
  if (!y_sum) return;
  const DoubleInterval total{y_sum->lo * ((1 - (fast::kExpManyError + 4 * u)) - r_max) * (1 - 2 * u),
                             upward_sum(upward_product(y_sum->hi, 1 + rho), tiny_sum)};
  if (!(total.lo > 0) || !std::isfinite(total.hi)) return;

  // The weighted sums of the value columns: N_c = sum_j e_j v[j, c] lies within
  // res_c +- (2u |res_c| + F m_c + rho (1 + 4 n u) m_c + T max|v[:, c]|): the compensated sum of
  // the weights' products, each weight's distance to its e_j (at most rho w_j; sum_j w_j |v[j, c]|
  // is at most m_c (1 + 4 n u)), and the tiny keys.
  thread_local std::vector<double> sum, comp, magnitude;
  sum.resize(dv_);
  comp.resize(dv_);
  magnitude.resize(dv_);
  compensated_weighted_sum(weight.data(), weighted.data(), weighted.size(), v_ + b * lk_ * dv_, dv_, sum.data(),
                           comp.data(), magnitude.data());
  const double sum_factor = compensation_factor(weighted.size());
  const double spread_factor = upward_product(rho, upward_sum(1.0, 4 * keys_n * u));
  std::size_t kept = 0;
  for (const std::size_t e : pending) {
    const std::size_t x = e - base;
    const double res = sum[x] + comp[x];
    if (!std::isfinite(res) || !std::isfinite(magnitude[x])) {
      pending[kept++] = e;
      continue;
    }
    const double bound = upward_sum(upward_sum(compensated_error(res, magnitude[x], sum_factor),
                                               upward_product(spread_factor, magnitude[x])),
                                    upward_product(tiny_sum, column_max_[b * dv_ + x]));
    const DoubleInterval numerator{interval_detail::sum_bound(res, -bound, false),
                                   interval_detail::sum_bound(res, bound, true)};
    const DoubleInterval y = numerator / total;
    if (!decide(row, e, {y.lo, y.hi, false, false})) pending[kept++] = e;
  }
  pending.resize(kept);
}

}  // namespace numeq::reference::rows
