// Certified composite operations (references/composite.hpp) against an independent MPFR oracle.
//
// The oracle never calls the code under test (nor numeq's rounding kernel). It evaluates each
// definition of composite.hpp with plain MPFR (no intervals) at kWork = 3064 bits, makes the last
// step round to odd at kOraclePrecision = 3000 bits (MPFR_RNDZ one bit short, then the last bit set
// when inexact; Boldo and Melquiond, IEEE TC 57(4), 2008), and numeq_oracle::RoundOracle::cast_value
// rounds that into the Cast under test, compared bit for bit (value, NaN-ness, sign of zero).
//
// Every rational part is exact at these precisions (the inputs are fp32 / bf16 / fp16 values and
// eps a double: sums, products, x_j - x_max, n x_i - S, n Q - S^2 + n^2 eps, q . k; MPFR's ternary
// values are checked for it). The definitions are written so that the last step's operands carry
// their full relative precision, even for results a hair away from a representable number:
//   softmax:     max entries (m of them, the rest summing to T = sum e^(x_j - x_max)):
//                1/m - T / (m (m + T)); the others e^(x_i - x_max) / (m + T)
//   log_softmax: (x_i - x_max) - (log m + log1p(T / m))
//   layernorm:   (n x_i - S) gamma_i / sqrt(n Q - S^2 + n^2 eps) + beta_i   (S, Q: sums of x, x^2)
//   rmsnorm:     n x_i gamma_i / sqrt(n Q + n^2 eps) + beta_i
//   attention:   keys grouped by exactly equal score; with r the mean of v over the top group,
//                r + sum_g w_g (V_g - n_g r) / (n_top + sum_g n_g w_g), w_g = e^(s_g - s_top);
//                when every group's mean equals r (checked exactly: V_g n_top = V_top n_g) the
//                result is r exactly (composite.hpp's rational case).
// Exact results come out of this with zero ternary values (a perfect-square radicand gives an
// exact MPFR sqrt), so directed modes see them exactly. e^x underflowing MPFR's exponent range is
// replaced by MPFR's smallest positive number (its sign is all that matters then).
//
// NUMEQ_SWEEP_SCALE (default 1; e.g. 0.05 under sanitizers) scales the number of random rows.

#include "numeq/references/composite.hpp"

#include <gtest/gtest.h>
#include <mpfr.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/rounding.hpp"
#include "oracle/mpfr_oracle.hpp"
#include "oracle/test_support.hpp"

namespace {

using numeq::Cast;
using numeq::Format;
using numeq::Overflow;
using numeq::Rounding;
using numeq::Subnormals;
using numeq_oracle::same_value;
namespace formats = numeq::formats;
namespace reference = numeq::reference;

constexpr mpfr_prec_t kOraclePrecision = 3000;
constexpr mpfr_prec_t kWork = kOraclePrecision + 64;
constexpr int kMaxReports = 8;
const double kInf = HUGE_VAL;
const double kNan = std::numeric_limits<double>::quiet_NaN();

std::atomic<std::size_t> g_comparisons{0};
std::atomic<int> g_oracle_inexact{0};  // a step meant to be exact was not (an oracle bug)

double sweep_scale() {
  const char* s = std::getenv("NUMEQ_SWEEP_SCALE");
  if (s == nullptr) return 1.0;
  const double v = std::atof(s);
  return v > 0 ? std::min(v, 1.0) : 1.0;
}
std::size_t scaled(std::size_t n, std::size_t at_least = 4) {
  return std::max(at_least, static_cast<std::size_t>(static_cast<double>(n) * sweep_scale() + 0.5));
}

// The test's own owning mpfr_t.
struct Big {
  mpfr_t v;
  explicit Big(mpfr_prec_t p = kWork) { mpfr_init2(v, p); }
  ~Big() { mpfr_clear(v); }
  Big(const Big&) = delete;
  Big& operator=(const Big&) = delete;
  Big(Big&& o) noexcept {
    mpfr_init2(v, MPFR_PREC_MIN);
    mpfr_swap(v, o.v);
  }
};

void exact(int ternary) {
  if (ternary != 0) g_oracle_inexact.fetch_add(1);
}
void set_d(mpfr_ptr r, double x) { exact(mpfr_set_d(r, x, MPFR_RNDN)); }
void tiny_positive(mpfr_ptr b) {
  mpfr_set_zero(b, 1);
  mpfr_nextabove(b);  // 2^(emin - 1)
}
void force_positive(mpfr_ptr b) {  // b > 0 mathematically; MPFR's range may have lost it
  if (mpfr_zero_p(b)) tiny_positive(b);
}

// out (precision kOraclePrecision) = round-to-odd of op's exact value.
template <class Op>
void to_odd(mpfr_ptr out, Op op) {
  Big t(mpfr_get_prec(out) - 1);
  const int ternary = op(t.v, MPFR_RNDZ);
  mpfr_set(out, t.v, MPFR_RNDN);  // exact: one more bit
  if (ternary == 0) return;
  if (mpfr_zero_p(out)) {
    tiny_positive(out);
    if (ternary > 0) mpfr_neg(out, out, MPFR_RNDN);
    return;
  }
  if (mpfr_signbit(out)) mpfr_nextbelow(out);
  else mpfr_nextabove(out);
}

void set_zero(mpfr_ptr r, bool negative) { mpfr_set_zero(r, negative ? -1 : 1); }
void set_special(mpfr_ptr r, double x) { mpfr_set_d(r, x, MPFR_RNDN); }  // NaN, +-Inf, +-0, or exact

std::vector<Big> make_values(std::size_t n) {
  std::vector<Big> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.emplace_back(kOraclePrecision);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Oracles
// ---------------------------------------------------------------------------------------------

// One softmax / log_softmax row; out[i] receives element i.
void softmax_row(const std::vector<double>& x, bool log, const std::vector<mpfr_ptr>& out) {
  const std::size_t n = x.size();
  bool nan_row = false;
  std::size_t finite = 0;
  double xmax = -kInf;
  for (double v : x) {
    if (std::isnan(v) || v == kInf) nan_row = true;
    else if (v != -kInf) {
      ++finite;
      xmax = std::max(xmax, v);
    }
  }
  if (nan_row || finite == 0) {
    for (mpfr_ptr o : out) mpfr_set_nan(o);
    return;
  }
  unsigned long m = 0;
  for (double v : x)
    if (v == xmax) ++m;
  Big xm, total, t;
  set_d(xm.v, xmax);
  mpfr_set_zero(total.v, 1);
  bool others = false;
  std::vector<Big> e;
  e.reserve(n);
  for (std::size_t j = 0; j < n; ++j) {
    e.emplace_back();
    if (x[j] == -kInf || x[j] == xmax) continue;
    set_d(t.v, x[j]);
    exact(mpfr_sub(e[j].v, t.v, xm.v, MPFR_RNDN));
    mpfr_exp(e[j].v, e[j].v, MPFR_RNDN);
    force_positive(e[j].v);
    mpfr_add(total.v, total.v, e[j].v, MPFR_RNDN);
    others = true;
  }
  if (!log) {
    Big den, u, a;
    mpfr_add_ui(den.v, total.v, m, MPFR_RNDN);
    mpfr_mul_ui(u.v, den.v, m, MPFR_RNDN);
    mpfr_div(u.v, total.v, u.v, MPFR_RNDN);  // T / (m (m + T))
    if (others) force_positive(u.v);
    mpfr_set_ui(a.v, 1, MPFR_RNDN);
    for (std::size_t i = 0; i < n; ++i) {
      if (x[i] == -kInf) {
        set_zero(out[i], false);
      } else if (x[i] == xmax) {
        if (!others) {
          to_odd(out[i], [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_div_ui(r, a.v, m, rnd); });
        } else {
          Big inv;
          mpfr_div_ui(inv.v, a.v, m, MPFR_RNDN);
          to_odd(out[i], [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_sub(r, inv.v, u.v, rnd); });
        }
      } else {
        to_odd(out[i], [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_div(r, e[i].v, den.v, rnd); });
      }
    }
    return;
  }
  // log_softmax: L = log m + log1p(T / m)
  Big big_l, lm;
  mpfr_set_zero(big_l.v, 1);
  if (others) {
    mpfr_div_ui(big_l.v, total.v, m, MPFR_RNDN);
    force_positive(big_l.v);
    mpfr_log1p(big_l.v, big_l.v, MPFR_RNDN);
    force_positive(big_l.v);
  }
  if (m > 1) {
    mpfr_set_ui(lm.v, m, MPFR_RNDN);
    mpfr_log(lm.v, lm.v, MPFR_RNDN);
    mpfr_add(big_l.v, big_l.v, lm.v, MPFR_RNDN);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (x[i] == -kInf) {
      mpfr_set_inf(out[i], -1);
    } else if (mpfr_zero_p(big_l.v)) {  // the only finite entry: x - x = +0
      set_zero(out[i], false);
    } else {
      Big d;
      set_d(t.v, x[i]);
      exact(mpfr_sub(d.v, t.v, xm.v, MPFR_RNDN));
      to_odd(out[i], [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_sub(r, d.v, big_l.v, rnd); });
    }
  }
}

// softmax / log_softmax of an array along `axis`: the oracle value of every element (C order).
std::vector<Big> softmax_oracle(const xt::xarray<double>& x, std::ptrdiff_t axis, bool log) {
  const std::vector<std::size_t> shape(x.shape().begin(), x.shape().end());
  const std::size_t rank = shape.size();
  const std::size_t ax = static_cast<std::size_t>(axis < 0 ? axis + static_cast<std::ptrdiff_t>(rank) : axis);
  std::size_t inner = 1;
  for (std::size_t d = ax + 1; d < rank; ++d) inner *= shape[d];
  const std::size_t len = shape[ax];
  const std::size_t outer = x.size() / std::max<std::size_t>(1, len * inner);
  std::vector<Big> values = make_values(x.size());
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t in = 0; in < inner; ++in) {
      std::vector<double> row(len);
      std::vector<mpfr_ptr> out(len);
      for (std::size_t j = 0; j < len; ++j) {
        const std::size_t flat = (o * len + j) * inner + in;
        row[j] = x.data()[flat];
        out[j] = values[flat].v;
      }
      softmax_row(row, log, out);
    }
  return values;
}

struct Norm {
  const std::vector<double>* gamma = nullptr;
  const std::vector<double>* beta = nullptr;
  double eps = 0;
  bool rms = false;
};

void norm_row(const std::vector<double>& x, const Norm& p, const std::vector<mpfr_ptr>& out) {
  const std::size_t n = x.size();
  for (double v : x)
    if (!std::isfinite(v)) {
      for (mpfr_ptr o : out) mpfr_set_nan(o);
      return;
    }
  Big s, q, t, u, radicand, root;
  mpfr_set_zero(s.v, 1);
  mpfr_set_zero(q.v, 1);
  for (double v : x) {
    set_d(t.v, v);
    exact(mpfr_add(s.v, s.v, t.v, MPFR_RNDN));
    exact(mpfr_sqr(t.v, t.v, MPFR_RNDN));
    exact(mpfr_add(q.v, q.v, t.v, MPFR_RNDN));
  }
  exact(mpfr_mul_ui(radicand.v, q.v, n, MPFR_RNDN));
  if (!p.rms) {
    exact(mpfr_sqr(t.v, s.v, MPFR_RNDN));
    exact(mpfr_sub(radicand.v, radicand.v, t.v, MPFR_RNDN));
  }
  set_d(t.v, p.eps);
  exact(mpfr_mul_ui(t.v, t.v, n * n, MPFR_RNDN));
  exact(mpfr_add(radicand.v, radicand.v, t.v, MPFR_RNDN));
  if (mpfr_zero_p(radicand.v)) {  // 0/0
    for (mpfr_ptr o : out) mpfr_set_nan(o);
    return;
  }
  mpfr_sqrt(root.v, radicand.v, MPFR_RNDN);  // exact when the radicand is a square
  for (std::size_t i = 0; i < n; ++i) {
    const double g = p.gamma ? (*p.gamma)[i] : 1.0;
    const bool has_beta = p.beta != nullptr;
    const double b = has_beta ? (*p.beta)[i] : 0.0;
    if (std::isnan(g) || std::isnan(b)) {
      mpfr_set_nan(out[i]);
      continue;
    }
    Big num;  // n x_i - S (layernorm) or n x_i (rmsnorm)
    set_d(t.v, x[i]);
    exact(mpfr_mul_ui(num.v, t.v, n, MPFR_RNDN));
    if (!p.rms) exact(mpfr_sub(num.v, num.v, s.v, MPFR_RNDN));
    enum class Kind { zero, inf, real } kind = Kind::real;
    bool negative = false;
    if (mpfr_zero_p(num.v)) {
      if (std::isinf(g)) {
        mpfr_set_nan(out[i]);
        continue;
      }
      // Round-to-nearest signs: rmsnorm's x_i keeps its sign; layernorm's x_i - mean is +0 for
      // equal values except (-0) - (+0) = -0 (the mean is -0 only for a row of -0 entries).
      const bool all_negative_zero =
          std::all_of(x.begin(), x.end(), [](double v) { return v == 0 && std::signbit(v); });
      const bool zero_negative = x[i] == 0 && std::signbit(x[i]) && (p.rms || !all_negative_zero);
      kind = Kind::zero;
      negative = zero_negative != std::signbit(g);
    } else if (std::isinf(g)) {
      kind = Kind::inf;
      negative = (mpfr_sgn(num.v) < 0) != (g < 0);
    } else if (g == 0) {
      kind = Kind::zero;
      negative = (mpfr_sgn(num.v) < 0) != std::signbit(g);
    } else {
      set_d(u.v, g);
      exact(mpfr_mul(num.v, num.v, u.v, MPFR_RNDN));
    }
    if (has_beta && std::isinf(b)) {
      if (kind == Kind::inf && negative != (b < 0)) mpfr_set_nan(out[i]);
      else set_special(out[i], b);
      continue;
    }
    if (kind == Kind::inf) {
      mpfr_set_inf(out[i], negative ? -1 : 1);
      continue;
    }
    if (kind == Kind::zero) {
      if (!has_beta) set_zero(out[i], negative);
      else if (b == 0) set_zero(out[i], negative && std::signbit(b));
      else set_special(out[i], b);
      continue;
    }
    if (!has_beta) {
      to_odd(out[i], [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_div(r, num.v, root.v, rnd); });
    } else {
      Big quotient(kWork + 64);
      mpfr_div(quotient.v, num.v, root.v, MPFR_RNDN);
      set_d(u.v, b);
      to_odd(out[i], [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_add(r, quotient.v, u.v, rnd); });
    }
  }
}

std::vector<Big> norm_oracle(const xt::xarray<double>& x, const Norm& p) {
  const std::size_t n = x.shape().back();
  std::vector<Big> values = make_values(x.size());
  for (std::size_t r = 0; r < x.size() / n; ++r) {
    std::vector<double> row(x.data() + r * n, x.data() + (r + 1) * n);
    std::vector<mpfr_ptr> out(n);
    for (std::size_t j = 0; j < n; ++j) out[j] = values[r * n + j].v;
    norm_row(row, p, out);
  }
  return values;
}

struct Attention {
  std::vector<std::size_t> batch;
  std::size_t lq = 1, lk = 1, d = 1, dv = 1;
  xt::xarray<double> q, k, v;
  std::optional<xt::xarray<double>> mask;
  std::optional<double> scale;
  bool causal = false;
  std::size_t batches() const {
    std::size_t b = 1;
    for (std::size_t s : batch) b *= s;
    return b;
  }
  std::vector<std::size_t> shape(std::size_t rows, std::size_t cols) const {
    std::vector<std::size_t> s = batch;
    s.push_back(rows);
    s.push_back(cols);
    return s;
  }
};

std::vector<Big> attention_oracle(const Attention& a) {
  const std::size_t nb = a.batches();
  std::vector<Big> values = make_values(nb * a.lq * a.dv);
  std::size_t rd = static_cast<std::size_t>(std::sqrt(static_cast<double>(a.d)));
  while (rd * rd > a.d) --rd;
  while ((rd + 1) * (rd + 1) <= a.d) ++rd;
  const bool square = rd * rd == a.d;
  const bool rational = a.scale.has_value() || square;
  Big inv_sqrt_d, t, u;
  mpfr_set_ui(inv_sqrt_d.v, static_cast<unsigned long>(a.d), MPFR_RNDN);
  mpfr_rec_sqrt(inv_sqrt_d.v, inv_sqrt_d.v, MPFR_RNDN);
  for (std::size_t b = 0; b < nb; ++b)
    for (std::size_t i = 0; i < a.lq; ++i) {
      const double* qi = a.q.data() + (b * a.lq + i) * a.d;
      const double* mrow = a.mask ? a.mask->data() + (b * a.lq + i) * a.lk : nullptr;
      std::vector<mpfr_ptr> out(a.dv);
      for (std::size_t c = 0; c < a.dv; ++c) out[c] = values[(b * a.lq + i) * a.dv + c].v;
      std::vector<std::size_t> taking;
      for (std::size_t j = 0; j < a.lk; ++j)
        if (!(a.causal && j > i) && !(mrow && mrow[j] == -kInf)) taking.push_back(j);
      bool nan_row = taking.empty();
      for (std::size_t t2 = 0; t2 < a.d; ++t2) nan_row = nan_row || !std::isfinite(qi[t2]);
      for (std::size_t j : taking) {
        const double* kj = a.k.data() + (b * a.lk + j) * a.d;
        for (std::size_t t2 = 0; t2 < a.d; ++t2) nan_row = nan_row || !std::isfinite(kj[t2]);
        if (mrow && (std::isnan(mrow[j]) || mrow[j] == kInf)) nan_row = true;
      }
      if (nan_row) {
        for (mpfr_ptr o : out) mpfr_set_nan(o);
        continue;
      }
      // Exact dot products, masks, and the exact group keys.
      const std::size_t nt = taking.size();
      std::vector<Big> dot(nt), mk(nt), key(nt);
      for (std::size_t jj = 0; jj < nt; ++jj) {
        const double* kj = a.k.data() + (b * a.lk + taking[jj]) * a.d;
        mpfr_set_zero(dot[jj].v, 1);
        for (std::size_t t2 = 0; t2 < a.d; ++t2) {
          set_d(t.v, qi[t2]);
          set_d(u.v, kj[t2]);
          exact(mpfr_mul(t.v, t.v, u.v, MPFR_RNDN));
          exact(mpfr_add(dot[jj].v, dot[jj].v, t.v, MPFR_RNDN));
        }
        set_d(mk[jj].v, mrow ? mrow[taking[jj]] : 0.0);
        if (a.scale) {  // key = score, exactly
          set_d(t.v, *a.scale);
          exact(mpfr_mul(key[jj].v, dot[jj].v, t.v, MPFR_RNDN));
          exact(mpfr_add(key[jj].v, key[jj].v, mk[jj].v, MPFR_RNDN));
        } else if (square) {  // key = rd * score
          exact(mpfr_mul_ui(t.v, mk[jj].v, static_cast<unsigned long>(rd), MPFR_RNDN));
          exact(mpfr_add(key[jj].v, dot[jj].v, t.v, MPFR_RNDN));
        }
      }
      auto same_score = [&](std::size_t x1, std::size_t x2) {
        if (rational) return mpfr_equal_p(key[x1].v, key[x2].v) != 0;
        return mpfr_equal_p(dot[x1].v, dot[x2].v) != 0 && mpfr_equal_p(mk[x1].v, mk[x2].v) != 0;
      };
      std::vector<std::size_t> group_of(nt);
      std::vector<std::size_t> reps;  // a member of each group
      for (std::size_t jj = 0; jj < nt; ++jj) {
        std::size_t g = 0;
        while (g < reps.size() && !same_score(reps[g], jj)) ++g;
        if (g == reps.size()) reps.push_back(jj);
        group_of[jj] = g;
      }
      const std::size_t ng = reps.size();
      // Approximate scores (to pick the top group) and e^(s_g - s_top).
      std::vector<Big> score(ng);
      for (std::size_t g = 0; g < ng; ++g) {
        const std::size_t r = reps[g];
        if (a.scale) mpfr_set(score[g].v, key[r].v, MPFR_RNDN);
        else if (square) mpfr_div_ui(score[g].v, key[r].v, static_cast<unsigned long>(rd), MPFR_RNDN);
        else {
          mpfr_mul(score[g].v, dot[r].v, inv_sqrt_d.v, MPFR_RNDN);
          mpfr_add(score[g].v, score[g].v, mk[r].v, MPFR_RNDN);
        }
      }
      std::size_t top = 0;
      for (std::size_t g = 1; g < ng; ++g)
        if (mpfr_cmp(score[g].v, score[top].v) > 0) top = g;
      std::vector<Big> w(ng);
      for (std::size_t g = 0; g < ng; ++g) {
        if (g == top) continue;
        const std::size_t r = reps[g], rt = reps[top];
        if (a.scale) {
          exact(mpfr_sub(w[g].v, key[r].v, key[rt].v, MPFR_RNDN));
        } else if (square) {
          exact(mpfr_sub(w[g].v, key[r].v, key[rt].v, MPFR_RNDN));
          mpfr_div_ui(w[g].v, w[g].v, static_cast<unsigned long>(rd), MPFR_RNDN);
        } else {
          exact(mpfr_sub(w[g].v, dot[r].v, dot[rt].v, MPFR_RNDN));
          mpfr_mul(w[g].v, w[g].v, inv_sqrt_d.v, MPFR_RNDN);
          exact(mpfr_sub(t.v, mk[r].v, mk[rt].v, MPFR_RNDN));
          mpfr_add(w[g].v, w[g].v, t.v, MPFR_RNDN);
        }
        mpfr_exp(w[g].v, w[g].v, MPFR_RNDN);
        force_positive(w[g].v);
      }
      std::vector<unsigned long> count(ng, 0);
      for (std::size_t jj = 0; jj < nt; ++jj) ++count[group_of[jj]];
      for (std::size_t c = 0; c < a.dv; ++c) {
        bool has_nan = false, pos_inf = false, neg_inf = false, all_negative_zero = true;
        std::vector<Big> sum(ng);
        for (Big& s : sum) mpfr_set_zero(s.v, 1);
        for (std::size_t jj = 0; jj < nt; ++jj) {
          const double vv = a.v.data()[(b * a.lk + taking[jj]) * a.dv + c];
          has_nan = has_nan || std::isnan(vv);
          pos_inf = pos_inf || vv == kInf;
          neg_inf = neg_inf || vv == -kInf;
          all_negative_zero = all_negative_zero && vv == 0 && std::signbit(vv);
          if (std::isfinite(vv)) {
            set_d(t.v, vv);
            exact(mpfr_add(sum[group_of[jj]].v, sum[group_of[jj]].v, t.v, MPFR_RNDN));
          }
        }
        if (has_nan || (pos_inf && neg_inf)) {
          mpfr_set_nan(out[c]);
          continue;
        }
        if (pos_inf || neg_inf) {
          mpfr_set_inf(out[c], pos_inf ? 1 : -1);
          continue;
        }
        bool rational_result = true;
        for (std::size_t g = 0; g < ng && rational_result; ++g) {
          exact(mpfr_mul_ui(t.v, sum[g].v, count[top], MPFR_RNDN));
          exact(mpfr_mul_ui(u.v, sum[top].v, count[g], MPFR_RNDN));
          rational_result = mpfr_equal_p(t.v, u.v) != 0;
        }
        if (rational_result) {
          if (mpfr_zero_p(sum[top].v)) set_zero(out[c], all_negative_zero);
          else
            to_odd(out[c], [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_div_ui(r, sum[top].v, count[top], rnd); });
          continue;
        }
        Big mean, num, den, term;
        mpfr_div_ui(mean.v, sum[top].v, count[top], MPFR_RNDN);
        mpfr_set_zero(num.v, 1);
        mpfr_set_ui(den.v, count[top], MPFR_RNDN);
        for (std::size_t g = 0; g < ng; ++g) {
          if (g == top) continue;
          mpfr_mul_ui(term.v, mean.v, count[g], MPFR_RNDN);
          mpfr_sub(term.v, sum[g].v, term.v, MPFR_RNDN);
          mpfr_mul(term.v, term.v, w[g].v, MPFR_RNDN);
          mpfr_add(num.v, num.v, term.v, MPFR_RNDN);
          mpfr_mul_ui(term.v, w[g].v, count[g], MPFR_RNDN);
          mpfr_add(den.v, den.v, term.v, MPFR_RNDN);
        }
        mpfr_div(num.v, num.v, den.v, MPFR_RNDN);
        to_odd(out[c], [&](mpfr_ptr r, mpfr_rnd_t rnd) { return mpfr_add(r, mean.v, num.v, rnd); });
      }
    }
  return values;
}

// ---------------------------------------------------------------------------------------------
// Casts and comparison
// ---------------------------------------------------------------------------------------------
Cast make(const Format& f, Rounding r = Rounding::nearest_even, Overflow o = Overflow::ieee,
          Subnormals s = Subnormals::keep, int random_bits = 32, std::uint64_t seed = 2024) {
  Cast c;
  c.format = f;
  c.rounding = r;
  c.overflow = o;
  c.subnormals = s;
  c.seed = seed;
  c.random_bits = random_bits;
  return c;
}

const Rounding kDeterministic[] = {Rounding::nearest_even, Rounding::nearest_away, Rounding::toward_zero,
                                   Rounding::upward,       Rounding::downward,     Rounding::odd};

// Every deterministic mode (ieee/keep), saturation and FTZ for some, and stochastic rounding with
// draws of 1, 32 and 64 bits (element i uses draw i of the seed's stream, composite.hpp).
std::vector<Cast> sweep_casts() {
  std::vector<Cast> out;
  for (const Format* f : {&formats::fp32, &formats::bf16, &formats::fp16, &formats::e4m3fn}) {
    for (Rounding r : kDeterministic) out.push_back(make(*f, r));
    for (Rounding r : {Rounding::nearest_even, Rounding::upward, Rounding::downward})
      out.push_back(make(*f, r, Overflow::saturate));
    for (Rounding r : {Rounding::nearest_even, Rounding::toward_zero, Rounding::upward})
      out.push_back(make(*f, r, Overflow::ieee, Subnormals::flush_outputs));
    for (int bits : {1, 32, 64}) out.push_back(make(*f, Rounding::stochastic, Overflow::ieee, Subnormals::keep, bits));
  }
  out.push_back(make(formats::fp64));
  out.push_back(make(formats::fp64, Rounding::downward));
  return out;
}

std::string cast_name(const Cast& c) {
  return std::string(c.format.name) + "/" + std::string(numeq::to_string(c.rounding)) + "/" +
         std::string(numeq::to_string(c.overflow)) + "/" + std::string(numeq::to_string(c.subnormals)) +
         (c.rounding == Rounding::stochastic ? "/R" + std::to_string(c.random_bits) : "");
}

std::string list(const double* p, std::size_t n) {
  std::ostringstream s;
  s.precision(17);
  s << "[";
  for (std::size_t i = 0; i < n; ++i) s << (i ? ", " : "") << p[i];
  s << "]";
  return s.str();
}

using Describe = std::function<std::string(std::size_t)>;

// run() under `cast` against the oracle, element by element; returns comparisons made.
std::size_t check(const std::string& what, const std::vector<Big>& oracle, const Cast& cast,
                  const std::function<xt::xarray<double>(const Cast&)>& run, const Describe& describe) {
  xt::xarray<double> got;
  try {
    got = run(cast);
  } catch (const std::exception& e) {
    // Name the inputs of the element the message points at, when it does.
    std::string inputs;
    const std::string message = e.what();
    const std::size_t at = message.find("element ");
    if (at != std::string::npos) {
      const std::size_t k = static_cast<std::size_t>(std::strtoull(message.c_str() + at + 8, nullptr, 10));
      if (k < oracle.size()) inputs = " [element " + std::to_string(k) + ": " + describe(k) + "]";
    }
    ADD_FAILURE() << what << " " << cast_name(cast) << ": threw " << message << inputs;
    return 0;
  }
  if (got.size() != oracle.size()) {
    ADD_FAILURE() << what << " " << cast_name(cast) << ": " << got.size() << " elements, want " << oracle.size();
    return 0;
  }
  numeq_oracle::RoundOracle o(cast.format);
  int reports = 0;
  for (std::size_t k = 0; k < oracle.size(); ++k) {
    const numeq_oracle::Expected e = o.cast_value(oracle[k].v, cast, k);
    EXPECT_FALSE(e.throws);
    if (!same_value(got.data()[k], e.value) && ++reports <= kMaxReports)
      ADD_FAILURE() << what << " " << cast_name(cast) << " element " << k << " " << describe(k) << ": got "
                    << numeq_oracle::describe(got.data()[k]) << " want " << numeq_oracle::describe(e.value);
  }
  EXPECT_EQ(reports, 0) << what << " " << cast_name(cast) << ": " << reports << " mismatches";
  g_comparisons.fetch_add(oracle.size());
  return oracle.size();
}

std::size_t check_all(const std::string& what, const std::vector<Big>& oracle,
                      const std::function<xt::xarray<double>(const Cast&)>& run, const Describe& describe) {
  EXPECT_EQ(g_oracle_inexact.load(), 0) << "oracle: a step meant to be exact was not";
  std::size_t n = 0;
  for (const Cast& c : sweep_casts()) n += check(what, oracle, c, run, describe);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------
// A random value of f: sign, exponent in [elo, ehi] (clamped to f's normal range), random fraction.
double draw(std::mt19937_64& rng, const Format& f, int elo, int ehi) {
  const numeq_oracle::Spec s(f);
  elo = std::max(elo, s.emin);
  ehi = std::min(ehi, s.max_lead() - 1);
  const int e = elo + static_cast<int>(rng() % static_cast<std::uint64_t>(ehi - elo + 1));
  const std::uint64_t frac = rng() & ((std::uint64_t{1} << s.m) - 1);
  const double v = std::ldexp(static_cast<double>((std::uint64_t{1} << s.m) | frac), e - s.m);
  return (rng() & 1) ? -v : v;
}

// A multiple of 2^-3 with |k| <= 15: k/8 and sums of two of them are values of bf16/fp16/fp32.
double grid(std::mt19937_64& rng) { return static_cast<double>(static_cast<int>(rng() % 31) - 15) / 8.0; }

const Format* const kInputFormats[] = {&formats::fp32, &formats::bf16, &formats::fp16};

std::vector<double> softmax_row_input(std::mt19937_64& rng, const Format& f, std::size_t n, unsigned kind) {
  std::vector<double> row(n);
  for (double& v : row) v = draw(rng, f, -4, 3);
  switch (kind % 8) {
    case 0: break;
    case 1:  // spread: up to 2^14 (fp16: its range)
      for (double& v : row) v = draw(rng, f, -2, 14);
      break;
    case 2: {  // many ties
      const double vals[3] = {draw(rng, f, -3, 2), draw(rng, f, -3, 2), draw(rng, f, -3, 2)};
      const std::size_t distinct = 1 + rng() % 3;
      for (double& v : row) v = vals[rng() % distinct];
      break;
    }
    case 3:  // -Inf entries (sometimes all)
      for (double& v : row)
        if (rng() % 3 == 0) v = -kInf;
      break;
    case 4:  // a NaN or +Inf (NaN row), or all -Inf
      if (rng() % 3 == 0) std::fill(row.begin(), row.end(), -kInf);
      else row[rng() % n] = (rng() & 1) ? kNan : kInf;
      break;
    case 5:  // the whole range of the format
      for (double& v : row) v = draw(rng, f, -30, 200);
      break;
    case 6:  // a tie at the maximum next to far smaller entries (1/m - tiny)
      for (double& v : row) v = draw(rng, f, 8, 14);
      for (double& v : row) v = -std::fabs(v);
      row[0] = draw(rng, f, -2, 2);
      if (n > 1) row[n - 1] = row[0];
      break;
    default:  // subnormal-range results: differences around 88..104 (bf16/fp32) or 10..17 (fp16)
      for (double& v : row) v = -std::fabs(draw(rng, f, 3, 6));
      row[0] = 0.0;
      break;
  }
  return row;
}

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax
// ---------------------------------------------------------------------------------------------
class SoftmaxSweep : public ::testing::TestWithParam<bool> {};

TEST_P(SoftmaxSweep, RandomRowsEveryCast) {
  const bool log = GetParam();
  const std::string name = log ? "log_softmax" : "softmax";
  const auto t0 = std::chrono::steady_clock::now();
  std::mt19937_64 rng(log ? 17 : 16);
  std::size_t n_cmp = 0, n_elems = 0;
  for (const Format* f : kInputFormats) {
    for (std::size_t len : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 11u, 16u}) {
      // rows along the last axis of {R, len}, and along axis 1 of {2, len, 3}
      const std::size_t rows = scaled(16);
      std::vector<double> data;
      for (std::size_t r = 0; r < rows; ++r) {
        const std::vector<double> row = softmax_row_input(rng, *f, len, static_cast<unsigned>(r));
        data.insert(data.end(), row.begin(), row.end());
      }
      xt::xarray<double> x = xt::adapt(data, std::vector<std::size_t>{rows, len});
      const std::vector<Big> want = softmax_oracle(x, -1, log);
      auto run = [&](const Cast& c) { return log ? reference::log_softmax(x, -1, c) : reference::softmax(x, -1, c); };
      auto describe = [&](std::size_t k) { return "row " + list(x.data() + (k / len) * len, len); };
      n_cmp += check_all(name + " " + std::string(f->name) + " len " + std::to_string(len), want, run, describe);
      n_elems += x.size();

      std::vector<double> data3;
      for (std::size_t r = 0; r < 6; ++r) {
        const std::vector<double> row = softmax_row_input(rng, *f, len, static_cast<unsigned>(r + 3));
        data3.insert(data3.end(), row.begin(), row.end());
      }
      // data3 holds rows consecutively; lay them out along axis 1 of {2, len, 3}
      xt::xarray<double> x3 = xt::zeros<double>({std::size_t{2}, len, std::size_t{3}});
      for (std::size_t r = 0; r < 6; ++r)
        for (std::size_t j = 0; j < len; ++j) x3((r / 3), j, (r % 3)) = data3[r * len + j];
      const std::vector<Big> want3 = softmax_oracle(x3, 1, log);
      for (std::ptrdiff_t axis : {std::ptrdiff_t{1}, std::ptrdiff_t{-2}}) {
        auto run3 = [&](const Cast& c) {
          return log ? reference::log_softmax(x3, axis, c) : reference::softmax(x3, axis, c);
        };
        auto describe3 = [&](std::size_t k) {
          const std::size_t a = k / (len * 3), cidx = k % 3;
          std::vector<double> row(len);
          for (std::size_t j = 0; j < len; ++j) row[j] = x3(a, j, cidx);
          return "axis-1 row " + list(row.data(), len);
        };
        n_cmp += check(name + " 3-D axis " + std::to_string(axis), want3, make(formats::bf16, Rounding::upward),
                       run3, describe3);
        n_cmp += check(name + " 3-D axis " + std::to_string(axis), want3, make(formats::fp32, Rounding::odd),
                       run3, describe3);
      }
      n_elems += x3.size();
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ %-11s ] %zu elements, %zu comparisons in %.1f s\n", name.c_str(), n_elems, n_cmp, secs);
}

INSTANTIATE_TEST_SUITE_P(All, SoftmaxSweep, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "log_softmax" : "softmax"; });

TEST(Softmax, ExactAndExtremeRows) {
  // Exact results (every mode, stochastic included, must give them unrounded), ties next to tiny
  // terms, underflow far beyond every format, the overflow of log_softmax.
  const std::vector<std::vector<double>> rows = {
      {3.25, 3.25, 3.25, 3.25},
      {7.0, -kInf, 7.0, 7.0, -kInf, 7.0},
      {-kInf, -2.5, -kInf},
      {5.0, 5.0, -1e4},
      {0.0, 0.0, 0.0, -1e4},
      {1.0, -1e4, -1e4, 1.0},
      {0.0, -1e4},
      {0.0, -10.0, -12.0, -16.5, -17.0, -1e4, -kInf, -9.75},
      {0.0, -88.5, -95.0, -100.0, -103.25, -1e4, -104.0, -87.0},
      {1e30, -1e30, 1e30, 0.0, 3e38, 3.3e38, -3e38, 3.3e38},
      {0.0, -70000.0, -65504.0, -65519.0, -65521.0, -65520.0, -65536.0, -448.0},
      {2.0, -1000.0, -1e6, 1.0, -240.0, -464.0, -480.0, -449.0},
  };
  std::size_t n = 0;
  for (const std::vector<double>& row0 : rows) {
    std::vector<double> row(row0.size());
    for (std::size_t j = 0; j < row.size(); ++j) row[j] = static_cast<double>(static_cast<float>(row0[j]));
    xt::xarray<double> x = xt::adapt(row, std::vector<std::size_t>{row.size()});
    for (bool log : {false, true}) {
      const std::vector<Big> want = softmax_oracle(x, 0, log);
      auto run = [&](const Cast& c) { return log ? reference::log_softmax(x, 0, c) : reference::softmax(x, 0, c); };
      auto describe = [&](std::size_t) { return "row " + list(row.data(), row.size()); };
      n += check_all(log ? "log_softmax" : "softmax", want, run, describe);
    }
  }
  // Spot values written out by hand.
  for (Rounding r : numeq_test::kModes) {
    const Cast c = make(formats::bf16, r, Overflow::ieee, Subnormals::keep, 64);
    const xt::xarray<double> x = {3.25, 3.25, 3.25, 3.25};
    const xt::xarray<double> s = reference::softmax(x, -1, c);
    for (double v : s) EXPECT_TRUE(same_value(v, 0.25)) << cast_name(c);
    const xt::xarray<double> one = {-kInf, -2.5, -kInf};
    const xt::xarray<double> ls = reference::log_softmax(one, 0, c);
    EXPECT_TRUE(same_value(ls(1), 0.0)) << cast_name(c) << " " << ls(1);
    EXPECT_TRUE(same_value(ls(0), -kInf)) << cast_name(c);
  }
  const xt::xarray<double> tie = {5.0, 5.0, -1e4};
  EXPECT_EQ(reference::softmax(tie, 0, make(formats::fp32, Rounding::downward))(0), 0.5 - 0x1p-25);
  EXPECT_EQ(reference::softmax(tie, 0, make(formats::fp32, Rounding::upward))(0), 0.5);
  EXPECT_EQ(reference::softmax(tie, 0, make(formats::fp32, Rounding::upward))(2), 0x1p-149);
  std::printf("softmax exact and extreme rows: %zu comparisons\n", n);
}

// ---------------------------------------------------------------------------------------------
// layernorm / rmsnorm
// ---------------------------------------------------------------------------------------------
std::vector<double> norm_row_input(std::mt19937_64& rng, const Format& f, std::size_t n, unsigned kind) {
  std::vector<double> row(n);
  for (double& v : row) v = draw(rng, f, -4, 3);
  const numeq_oracle::Spec s(f);
  switch (kind % 7) {
    case 0: break;
    case 1:
      for (double& v : row) v = draw(rng, f, -12, 12);
      break;
    case 2: {  // base + a few ulps: catastrophic cancellation in x - mean
      const int e = 3 + static_cast<int>(rng() % 8);
      const std::uint64_t lo = std::uint64_t{1} << (s.m - 2);
      const std::uint64_t base = (std::uint64_t{1} << s.m) + lo + rng() % lo;
      const double sign = (rng() & 1) ? -1.0 : 1.0;
      for (double& v : row) {
        const std::int64_t k = static_cast<std::int64_t>(rng() % 15) - 7;
        v = sign * std::ldexp(static_cast<double>(static_cast<std::int64_t>(base) + k), e - s.m);
      }
      break;
    }
    case 3:  // constant row (NaN with eps = 0)
      std::fill(row.begin(), row.end(), row[0]);
      break;
    case 4:  // NaN / Inf entry
      row[rng() % n] = (rng() % 3 == 0) ? kNan : ((rng() & 1) ? kInf : -kInf);
      break;
    case 5:  // small grid values: many exact squares and ties
      for (double& v : row) v = grid(rng);
      break;
    default:  // signed zeros among values (rmsnorm keeps the product sign)
      if (rng() % 2 == 0) {  // mean exactly 0: signed zeros and pairs a, -a (sometimes all -0)
        for (double& v : row) v = (rng() & 1) ? -0.0 : 0.0;
        if (rng() % 3 == 0) {
          std::fill(row.begin(), row.end(), -0.0);
        } else {
          for (std::size_t j = 0; j + 1 < n; j += 2)
            if (rng() % 2 == 0) {
              row[j] = draw(rng, f, -3, 3);
              row[j + 1] = -row[j];
            }
        }
        break;
      }
      for (double& v : row)
        if (rng() % 3 == 0) v = (rng() & 1) ? -0.0 : 0.0;
      if (std::all_of(row.begin(), row.end(), [](double v) { return v == 0; })) row[0] = 1.5;
      break;
  }
  return row;
}

class NormSweep : public ::testing::TestWithParam<bool> {};

TEST_P(NormSweep, RandomRowsEveryCast) {
  const bool rms = GetParam();
  const std::string name = rms ? "rmsnorm" : "layernorm";
  const auto t0 = std::chrono::steady_clock::now();
  std::mt19937_64 rng(rms ? 27 : 26);
  std::size_t n_cmp = 0, n_elems = 0;
  const double eps_values[] = {0.0, 1e-5, 1e-6, 0.75, 0x1p-60, 1e-300};
  std::size_t trial = 0;
  for (const Format* f : kInputFormats) {
    for (std::size_t len : {1u, 2u, 3u, 5u, 8u, 9u, 16u}) {
      for (int affine = 0; affine < 3; ++affine, ++trial) {
        const std::size_t rows = scaled(14);
        std::vector<double> data;
        for (std::size_t r = 0; r < rows; ++r) {
          const std::vector<double> row = norm_row_input(rng, *f, len, static_cast<unsigned>(r + trial));
          data.insert(data.end(), row.begin(), row.end());
        }
        // 2-D or 3-D: normalised over the last axis either way
        const std::vector<std::size_t> shape =
            rows % 2 == 0 ? std::vector<std::size_t>{2, rows / 2, len} : std::vector<std::size_t>{rows, len};
        xt::xarray<double> x = xt::adapt(data, shape);
        std::vector<double> gamma(len), beta(len);
        for (double& g : gamma) g = draw(rng, *f, -3, 2);
        for (double& b : beta) b = draw(rng, *f, -4, 1);
        if (trial % 4 == 3) {  // special parameters: zeros, infinities, NaN
          gamma[rng() % len] = (rng() & 1) ? -0.0 : 0.0;
          gamma[rng() % len] = (rng() & 1) ? kInf : -kInf;
          beta[rng() % len] = (rng() & 1) ? -0.0 : 0.0;
          if (rng() % 2 == 0) beta[rng() % len] = (rng() & 1) ? kInf : -kInf;
          if (rng() % 3 == 0) gamma[rng() % len] = kNan;
        }
        const double eps = eps_values[trial % 6];
        Norm p;
        p.eps = eps;
        p.rms = rms;
        if (affine >= 1) p.gamma = &gamma;
        if (affine >= 2) p.beta = &beta;
        const std::vector<Big> want = norm_oracle(x, p);
        const xt::xarray<double> gx = xt::adapt(gamma, std::vector<std::size_t>{len});
        const xt::xarray<double> bx = xt::adapt(beta, std::vector<std::size_t>{len});
        reference::NormParameters np;
        np.eps = eps;
        np.gamma = affine >= 1 ? &gx : nullptr;
        np.beta = affine >= 2 ? &bx : nullptr;
        auto run = [&](const Cast& c) { return rms ? reference::rmsnorm(x, np, c) : reference::layernorm(x, np, c); };
        auto describe = [&](std::size_t k) {
          std::string s = "row " + list(x.data() + (k / len) * len, len) + " eps " + numeq_oracle::describe(eps);
          if (affine >= 1) s += " gamma " + list(gamma.data(), len);
          if (affine >= 2) s += " beta " + list(beta.data(), len);
          return s;
        };
        n_cmp += check_all(name + " " + std::string(f->name) + " len " + std::to_string(len), want, run, describe);
        n_elems += x.size();
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ %-11s ] %zu elements, %zu comparisons in %.1f s\n", name.c_str(), n_elems, n_cmp, secs);
}

INSTANTIATE_TEST_SUITE_P(All, NormSweep, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "rmsnorm" : "layernorm"; });

xt::xarray<double> vector_array(const std::vector<double>& v) {
  xt::xarray<double> a = xt::zeros<double>({v.size()});
  for (std::size_t i = 0; i < v.size(); ++i) a(i) = v[i];
  return a;
}

TEST(Norm, ExactResultsAndSpecials) {
  struct Case {
    std::vector<double> x, gamma, beta;
    double eps;
    bool rms;
    std::vector<double> want;  // empty: oracle only
  };
  const std::vector<Case> cases = {
      {{-1.0, 1.0}, {}, {}, 0.0, false, {-1.0, 1.0}},
      {{3.5, -0.125}, {}, {}, 0.0, false, {1.0, -1.0}},
      {{0.0, 0.0, 3.0}, {}, {}, 2.0, false, {-0.5, -0.5, 1.0}},
      {{0, 0, 0, 0, 0.75, 0, 0, 0, 0}, {}, {}, 0.0, true, {0, 0, 0, 0, 3.0, 0, 0, 0, 0}},
      {{0, 0, 0, 0, 0.75, 0, 0, 0, 0}, {.5, .5, .5, .5, .5, .5, .5, .5, .5}, {.25, .25, .25, .25, .25, .25, .25, .25, .25},
       0.0, true, {.25, .25, .25, .25, 1.75, .25, .25, .25, .25}},
      {{2.0, -2.0, 2.0, 2.0}, {}, {}, 0.0, true, {1.0, -1.0, 1.0, 1.0}},
      {{-1.0, 1.0}, {}, {1.0, -1.0}, 0.0, false, {0.0, 0.0}},
      {{2.5, 2.5, 2.5}, {}, {}, 0.0, false, {kNan, kNan, kNan}},
      {{0.0, -0.0}, {}, {}, 0.0, true, {kNan, kNan}},
      {{2.5, 2.5}, {}, {}, 1e-5, false, {0.0, 0.0}},
      {{1.0, 2.0, 3.0}, {1.0, kInf, 1.0}, {}, 0.0, false, {}},
      {{1.0, 2.0, 3.0}, {kInf, 1.0, -kInf}, {}, 0.0, false, {-kInf, 0.0, -kInf}},
      {{1.0, 2.0, 3.0}, {kInf, 1.0, kInf}, {-kInf, 2.0, kInf}, 0.0, false, {-kInf, 2.0, kInf}},
      {{1.0, 2.0, 3.0}, {-kInf, -3.0, 1.0}, {-kInf, -0.0, kNan}, 0.0, false, {kNan, -0.0, kNan}},
      {{1.0, 2.0, 3.0}, {kNan, -3.0, 2.0}, {0.0, 0.0, -kInf}, 0.0, false, {kNan, 0.0, -kInf}},
      {{1.0, 2.0, 3.0}, {1.0, -3.0, 1.0}, {}, 0.0, false, {}},
      {{-0.0, 3.0, 0.0, 4.0}, {2.0, 1.0, -2.0, 1.0}, {}, 0.0, true, {}},
      {{-0.0, 2.0, 0.0, -0.0}, {2.0, 1.0, -2.0, 1.0}, {}, 0.0, true, {-0.0, 2.0, -0.0, -0.0}},
      {{-0.0, 3.0}, {2.0, 1.0}, {-0.0, 0.0}, 0.0, true, {}},
      {{-0.0, -0.0}, {}, {}, 1e-5, false, {0.0, 0.0}},
      {{-0.0, -0.0}, {-1.0, 2.0}, {}, 1e-5, false, {-0.0, 0.0}},
      {{-0.0, 0.0, -0.0}, {}, {}, 1e-5, false, {-0.0, 0.0, -0.0}},
      {{-0.0, -0.0, -0.0}, {2.0, -1.0, 1.0}, {-0.0, -0.0, 0.5}, 0.25, false, {0.0, -0.0, 0.5}},
      {{-0.0, 3.0}, {2.0, 1.0}, {0.0, 0.0}, 0.0, true, {}},
      {{1.0, kNan, 2.0}, {}, {}, 1e-5, false, {kNan, kNan, kNan}},
      {{kInf, 1.0}, {}, {}, 1e-5, true, {kNan, kNan}},
      {{1.0, 2.0, 3.0, 5.0}, {1e5, -7e4, 6e4, 65504.0}, {0.0, -100.0, 0.5, 1e4}, 1e-5, false, {}},
      {{-4.0, 0.5, 0.25, 8.0}, {1e5, -7e4, 6e4, 65504.0}, {0.0, -100.0, 0.5, 1e4}, 1e-5, true, {}},
  };
  std::size_t n = 0;
  for (const Case& k : cases) {
    const std::size_t len = k.x.size();
    xt::xarray<double> x = xt::adapt(k.x, std::vector<std::size_t>{len});
    const xt::xarray<double> gx = vector_array(k.gamma);
    const xt::xarray<double> bx = vector_array(k.beta);
    Norm p;
    p.eps = k.eps;
    p.rms = k.rms;
    p.gamma = k.gamma.empty() ? nullptr : &k.gamma;
    p.beta = k.beta.empty() ? nullptr : &k.beta;
    reference::NormParameters np;
    np.eps = k.eps;
    np.gamma = k.gamma.empty() ? nullptr : &gx;
    np.beta = k.beta.empty() ? nullptr : &bx;
    const std::vector<Big> want = norm_oracle(x, p);
    auto run = [&](const Cast& c) { return k.rms ? reference::rmsnorm(x, np, c) : reference::layernorm(x, np, c); };
    auto describe = [&](std::size_t) {
      return std::string(k.rms ? "rmsnorm " : "layernorm ") + list(k.x.data(), len) + " gamma " +
             list(k.gamma.data(), k.gamma.size()) + " beta " + list(k.beta.data(), k.beta.size()) + " eps " +
             numeq_oracle::describe(k.eps);
    };
    n += check_all("norm case", want, run, describe);
    if (!k.want.empty())
      for (Rounding r : numeq_test::kModes) {
        const Cast c = make(formats::fp32, r, Overflow::ieee, Subnormals::keep, 64);
        const xt::xarray<double> got = run(c);
        for (std::size_t i = 0; i < len; ++i)
          EXPECT_TRUE(same_value(got(i), static_cast<double>(static_cast<float>(k.want[i])))
                      || (!std::isfinite(k.want[i]) && same_value(got(i), k.want[i])))
              << describe(i) << " " << cast_name(c) << " element " << i << " got " << numeq_oracle::describe(got(i));
      }
  }
  std::printf("norm exact and special cases: %zu comparisons\n", n);
}

// ---------------------------------------------------------------------------------------------
// attention
// ---------------------------------------------------------------------------------------------
// huge: scales of 1e3 .. 1e5, so that scores lie thousands apart and the far keys' weights
// (e^-50000 and below) leave results a hair away from the top keys' mean of v.
Attention random_attention(std::mt19937_64& rng, const Format& f, std::size_t trial, bool huge = false) {
  Attention a;
  switch (trial % 3) {
    case 0: a.batch = {2}; break;
    case 1: a.batch = {}; break;
    default: a.batch = {1, 3}; break;
  }
  const std::size_t ds[] = {1, 2, 3, 4, 5, 8, 9, 16};
  a.d = ds[rng() % 8];
  a.lq = 1 + rng() % 5;
  a.lk = 1 + rng() % 8;
  a.dv = 1 + rng() % 3;
  const std::size_t nb = a.batches();
  const unsigned kind = static_cast<unsigned>(rng() % 6);
  const int ehi = kind == 1 ? 4 : 1;
  std::vector<double> q(nb * a.lq * a.d), k(nb * a.lk * a.d), v(nb * a.lk * a.dv);
  for (double& x : q) x = draw(rng, f, -4, ehi);
  for (double& x : k) x = draw(rng, f, -4, ehi);
  for (double& x : v) x = draw(rng, f, -6, 6);
  if (kind == 2 || kind == 3) {
    // duplicated keys (equal scores) and v on a grid with equal group means: exact results
    for (std::size_t b = 0; b < nb; ++b) {
      for (std::size_t j = 1; j < a.lk; j += 2)
        for (std::size_t t = 0; t < a.d; ++t) k[(b * a.lk + j) * a.d + t] = k[(b * a.lk + j - 1) * a.d + t];
      for (std::size_t c = 0; c < a.dv; ++c) {
        const double r = grid(rng);
        for (std::size_t j = 0; j < a.lk; ++j) {
          double val = r;
          if (kind == 2 && j % 2 == 1) {
            const double delta = grid(rng);
            val = r + delta;  // and its partner r - delta: the pair's mean is r
            v[(b * a.lk + j - 1) * a.dv + c] = r - delta;
          }
          if (kind == 3 && rng() % 4 == 0) val = grid(rng);  // break the exact case sometimes
          v[(b * a.lk + j) * a.dv + c] = val;
        }
      }
    }
  }
  if (kind == 4) {  // specials
    const std::size_t which = rng() % 3;
    std::vector<double>& target = which == 0 ? q : (which == 1 ? k : v);
    const double specials[] = {kNan, kInf, -kInf};
    target[rng() % target.size()] = specials[rng() % 3];
    if (rng() % 2 == 0) v[rng() % v.size()] = specials[rng() % 3];
  }
  a.q = xt::adapt(q, a.shape(a.lq, a.d));
  a.k = xt::adapt(k, a.shape(a.lk, a.d));
  a.v = xt::adapt(v, a.shape(a.lk, a.dv));
  const double scales[] = {0.125, 0.5, 1.0, -0.75, 0.0, 3.0, 0.1, 37.5};
  const double huge_scales[] = {1e3, 1e4, -1e4, 1e5};
  if (huge) a.scale = huge_scales[rng() % 4];
  else if (rng() % 5 < 2) a.scale = scales[rng() % 8];
  a.causal = rng() % 3 == 0;
  if (rng() % 2 == 0) {
    std::vector<double> m(nb * a.lq * a.lk);
    for (double& x : m) {
      const unsigned u = static_cast<unsigned>(rng() % 10);
      x = u < 5 ? 0.0 : (u < 7 ? -kInf : static_cast<double>(static_cast<int>(rng() % 17) - 8) / 4.0);
    }
    if (kind == 5 && rng() % 2 == 0) m[rng() % m.size()] = (rng() & 1) ? kNan : kInf;
    a.mask = xt::adapt(m, a.shape(a.lq, a.lk));
  }
  return a;
}

std::string describe_attention(const Attention& a, std::size_t k) {
  const std::size_t c = k % a.dv, i = (k / a.dv) % a.lq, b = k / (a.dv * a.lq);
  std::ostringstream s;
  s << "batch " << b << " query " << i << " column " << c << " d " << a.d << " Lk " << a.lk << " q "
    << list(a.q.data() + (b * a.lq + i) * a.d, a.d) << " k ";
  for (std::size_t j = 0; j < a.lk; ++j) s << list(a.k.data() + (b * a.lk + j) * a.d, a.d);
  s << " v[:, c] [";
  for (std::size_t j = 0; j < a.lk; ++j) s << (j ? ", " : "") << a.v.data()[(b * a.lk + j) * a.dv + c];
  s << "]";
  if (a.mask) s << " mask " << list(a.mask->data() + (b * a.lq + i) * a.lk, a.lk);
  if (a.scale) s << " scale " << *a.scale;
  if (a.causal) s << " causal";
  return s.str();
}

xt::xarray<double> run_attention(const Attention& a, const Cast& c) {
  reference::AttentionParameters p;
  p.scale = a.scale;
  p.causal = a.causal;
  p.mask = a.mask ? &*a.mask : nullptr;
  return reference::attention(a.q, a.k, a.v, p, c);
}

TEST(AttentionSweep, RandomCasesEveryCast) {
  const auto t0 = std::chrono::steady_clock::now();
  std::mt19937_64 rng(36);
  std::size_t n_cmp = 0, n_elems = 0;
  const std::size_t cases = scaled(60);
  for (const Format* f : kInputFormats)
    for (std::size_t trial = 0; trial < cases; ++trial) {
      const Attention a = random_attention(rng, *f, trial);
      const std::vector<Big> want = attention_oracle(a);
      n_cmp += check_all("attention " + std::string(f->name), want, [&](const Cast& c) { return run_attention(a, c); },
                         [&](std::size_t k) { return describe_attention(a, k); });
      n_elems += want.size();
    }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ attention   ] %zu elements, %zu comparisons in %.1f s\n", n_elems, n_cmp, secs);
}

// Score spreads of 10^4 .. 10^6 nats: results within e^-10000 .. e^-1000000 of the top group's
// mean of v (composite.hpp promises every element correctly rounded; softmax rows with such
// spreads are certified, and so must these be).
TEST(AttentionSweep, HugeScoreSpreads) {
  std::mt19937_64 rng(37);
  std::size_t n_cmp = 0;
  for (const Format* f : kInputFormats)
    for (std::size_t trial = 0; trial < scaled(8, 2); ++trial) {
      const Attention a = random_attention(rng, *f, trial, true);
      const std::vector<Big> want = attention_oracle(a);
      n_cmp += check_all("attention huge spread " + std::string(f->name), want,
                         [&](const Cast& c) { return run_attention(a, c); },
                         [&](std::size_t k) { return describe_attention(a, k); });
    }
  // The smallest case: scores 1e5 apart, v = [1, 2]: 1 + e^-100000 / (1 + e^-100000).
  Attention a;
  a.lq = 1; a.lk = 2; a.d = 2; a.dv = 1;
  a.q = xt::adapt(std::vector<double>{1.0, 0.0}, std::vector<std::size_t>{1, 2});
  a.k = xt::adapt(std::vector<double>{1.0, 0.0, 0.0, 0.0}, std::vector<std::size_t>{2, 2});
  a.v = xt::adapt(std::vector<double>{1.0, 2.0}, std::vector<std::size_t>{2, 1});
  a.scale = 1e5;
  n_cmp += check_all("attention scale 1e5", attention_oracle(a), [&](const Cast& c) { return run_attention(a, c); },
                     [&](std::size_t k) { return describe_attention(a, k); });
  std::printf("[ attention   ] huge spreads: %zu comparisons\n", n_cmp);
}

TEST(Attention, ExactCausalSpecialAndSpreadCases) {
  std::size_t n = 0;
  auto run_case = [&](Attention a, const std::string& what) {
    const std::vector<Big> want = attention_oracle(a);
    n += check_all(what, want, [&](const Cast& c) { return run_attention(a, c); },
                   [&](std::size_t k) { return describe_attention(a, k); });
    return a;
  };
  // Constant v columns: exactly that constant, every mode.
  {
    Attention a;
    a.lq = 3; a.lk = 5; a.d = 3; a.dv = 2;
    a.q = xt::xarray<double>{{0.5, -1.25, 2.0}, {1.0, 1.0, -0.375}, {3.0, 0.0, 0.25}};
    a.k = xt::xarray<double>{{1.0, 2.0, 3.0}, {-1.0, 0.5, 0.25}, {0.0, 0.0, 1.0}, {2.0, -2.0, 0.5}, {0.125, 4.0, -1.0}};
    a.v = xt::xarray<double>({{static_cast<double>(0.1f), -7.0}, {static_cast<double>(0.1f), -7.0},
                               {static_cast<double>(0.1f), -7.0}, {static_cast<double>(0.1f), -7.0},
                               {static_cast<double>(0.1f), -7.0}});
    run_case(a, "constant v");
    for (Rounding r : numeq_test::kModes) {
      const xt::xarray<double> got = run_attention(a, make(formats::fp32, r, Overflow::ieee, Subnormals::keep, 64));
      for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_TRUE(same_value(got(i, 0), static_cast<double>(0.1f))) << numeq::to_string(r);
        EXPECT_TRUE(same_value(got(i, 1), -7.0)) << numeq::to_string(r);
      }
    }
  }
  // Equal-score groups with equal means; a zero mean (+0); causal with Lq < Lk (top-left).
  {
    Attention a;
    a.lq = 2; a.lk = 4; a.d = 2; a.dv = 3;
    a.q = xt::xarray<double>{{1.0, 0.0}, {0.0, 1.0}};
    a.k = xt::xarray<double>{{1.0, 0.0}, {1.0, 0.0}, {0.0, 1.0}, {5.0, 5.0}};
    a.v = xt::xarray<double>{{1.0, 1.5, 5.0}, {3.0, -1.5, 5.0}, {2.0, 0.0, 5.0}, {kNan, kInf, -kInf}};
    a.causal = true;
    run_case(a, "groups causal");
    a.causal = false;
    xt::xarray<double> m = {{0.0, 0.0, 0.0, -kInf}, {0.0, 0.0, 0.0, -kInf}};
    a.mask = m;
    run_case(a, "groups masked");
    for (Rounding r : numeq_test::kModes) {
      const xt::xarray<double> got = run_attention(a, make(formats::bf16, r, Overflow::ieee, Subnormals::keep, 64));
      EXPECT_TRUE(same_value(got(0, 0), 2.0)) << numeq::to_string(r);
      EXPECT_TRUE(same_value(got(0, 1), 0.0)) << numeq::to_string(r) << " " << got(0, 1);
      EXPECT_TRUE(same_value(got(0, 2), 5.0)) << numeq::to_string(r);
    }
    a.scale = 2.5;
    run_case(a, "groups masked scale");
  }
  // Scores 1e4 apart: the result is a hair off v of the top keys.
  {
    Attention a;
    a.lq = 3; a.lk = 4; a.d = 2; a.dv = 3;
    a.q = xt::xarray<double>{{100.0, 0.0}, {0.0, 0.0}, {30.0, -30.0}};
    a.k = xt::xarray<double>{{100.0, 0.0}, {0.0, 1.0}, {100.0, 0.0}, {-100.0, 50.0}};
    a.v = xt::xarray<double>{{1.0, 0.5, -2.0}, {5.0, 0.5, -3.0}, {1.0, 0.5, -2.0}, {-8.0, 0.25, 7.0}};
    run_case(a, "spread");
    a.scale = 1.0;
    run_case(a, "spread scale 1");
    EXPECT_EQ(run_attention(a, make(formats::fp32, Rounding::upward))(0, 0), 1.0 + 0x1p-23);
    EXPECT_EQ(run_attention(a, make(formats::fp32, Rounding::downward))(0, 0), 1.0);
    EXPECT_EQ(run_attention(a, make(formats::fp32, Rounding::downward))(0, 1), 0.5 - 0x1p-25);
    a.scale = 1e-3;
    run_case(a, "spread scale 1e-3");
  }
  // Specials: excluded keys are never read; NaN / Inf in q, in taking-part k, in the mask.
  {
    Attention a;
    a.lq = 4; a.lk = 4; a.d = 2; a.dv = 3;
    a.q = xt::xarray<double>{{1.0, 0.5}, {0.25, -1.0}, {kNan, 0.0}, {kInf, 0.0}};
    a.k = xt::xarray<double>{{1.0, 1.0}, {0.5, -0.5}, {kNan, kInf}, {2.0, 1.0}};
    a.v = xt::xarray<double>{{1.0, kInf, 2.0}, {2.0, -kInf, kNan}, {kNan, kNan, kNan}, {4.0, kInf, 1.0}};
    a.mask = xt::xarray<double>({{0.0, 0.0, -kInf, 0.0}, {0.0, 0.0, -kInf, 0.25}, {0.0, 0.0, -kInf, 0.0},
                                 {0.0, 0.0, -kInf, 0.0}});
    run_case(a, "specials");
    const xt::xarray<double> got = run_attention(a, make(formats::fp32));
    EXPECT_TRUE(std::isfinite(got(0, 0)) && std::isfinite(got(1, 0)));
    EXPECT_TRUE(std::isnan(got(0, 1)) && std::isnan(got(0, 2)) && std::isnan(got(2, 0)) && std::isnan(got(3, 0)));
    a.mask = xt::xarray<double>({{-kInf, -kInf, -kInf, -kInf}, {0.0, kNan, -kInf, 0.0}, {0.0, kInf, -kInf, 0.0},
                                 {0.0, -kInf, -kInf, 1.0}});
    a.q = xt::xarray<double>{{1.0, 0.5}, {1.0, 0.5}, {1.0, 0.5}, {1.0, 0.5}};
    run_case(a, "mask specials");
    const xt::xarray<double> g2 = run_attention(a, make(formats::fp32));
    EXPECT_TRUE(std::isnan(g2(0, 0)) && std::isnan(g2(1, 0)) && std::isnan(g2(2, 0)) && std::isfinite(g2(3, 0)));
  }
  // Overflow into fp16 and e4m3fn.
  {
    Attention a;
    a.lq = 2; a.lk = 3; a.d = 2; a.dv = 3;
    a.q = xt::xarray<double>{{1.0, 0.5}, {0.25, -1.0}};
    a.k = xt::xarray<double>{{1.0, 1.0}, {0.5, -0.5}, {2.0, 1.0}};
    a.v = xt::xarray<double>{{1e5, -3e5, 60000.0}, {2e5, -1e5, 65504.0}, {7e4, -7e4, 65504.0}};
    run_case(a, "overflow");
  }
  std::printf("attention cases: %zu comparisons\n", n);
}

// ---------------------------------------------------------------------------------------------
// Long rows, many rows (split over threads), other output formats
// ---------------------------------------------------------------------------------------------
std::vector<Cast> few_casts() {
  return {make(formats::bf16, Rounding::nearest_even), make(formats::fp32, Rounding::downward),
          make(formats::fp16, Rounding::odd),
          make(formats::bf16, Rounding::stochastic, Overflow::ieee, Subnormals::keep, 16)};
}

TEST(Composite, LongRowsAndManyRows) {
  std::mt19937_64 rng(91);
  std::size_t n = 0;
  const std::vector<std::vector<std::size_t>> shapes = {{2, scaled(1024, 64)}, {scaled(600, 40), 8}, {3, 257}};
  for (const std::vector<std::size_t>& shape : shapes) {
    std::vector<double> data(shape[0] * shape[1]);
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = i % 97 == 5 ? -kInf : draw(rng, formats::bf16, -3, 3);
    const xt::xarray<double> x = xt::adapt(data, shape);
    const std::size_t len = shape[1];
    auto describe = [&](std::size_t k) { return "row " + std::to_string(k / len) + " of length " + std::to_string(len); };
    for (bool log : {false, true}) {
      const std::vector<Big> want = softmax_oracle(x, -1, log);
      for (const Cast& c : few_casts())
        n += check(log ? "long log_softmax" : "long softmax", want, c,
                   [&](const Cast& cc) { return log ? reference::log_softmax(x, -1, cc) : reference::softmax(x, -1, cc); },
                   describe);
    }
    std::vector<double> finite = data;
    for (double& v : finite)
      if (std::isinf(v)) v = 0.5;
    const xt::xarray<double> xf = xt::adapt(finite, shape);
    std::vector<double> gamma(len);
    for (double& g : gamma) g = draw(rng, formats::bf16, -2, 2);
    const xt::xarray<double> gx = vector_array(gamma);
    for (bool rms : {false, true}) {
      Norm p;
      p.eps = 1e-5;
      p.rms = rms;
      p.gamma = &gamma;
      reference::NormParameters np;
      np.eps = 1e-5;
      np.gamma = &gx;
      const std::vector<Big> want = norm_oracle(xf, p);
      for (const Cast& c : few_casts())
        n += check(rms ? "long rmsnorm" : "long layernorm", want, c,
                   [&](const Cast& cc) { return rms ? reference::rmsnorm(xf, np, cc) : reference::layernorm(xf, np, cc); },
                   describe);
    }
  }
  // attention: many batches, and one long key sequence
  for (int which = 0; which < 2; ++which) {
    Attention a;
    a.batch = which == 0 ? std::vector<std::size_t>{scaled(64, 8)} : std::vector<std::size_t>{};
    a.lq = which == 0 ? 3 : 4;
    a.lk = which == 0 ? 5 : scaled(300, 40);
    a.d = 8;
    a.dv = 2;
    const std::size_t nb = a.batches();
    std::vector<double> q(nb * a.lq * a.d), k(nb * a.lk * a.d), v(nb * a.lk * a.dv);
    for (double& x : q) x = draw(rng, formats::bf16, -3, 1);
    for (double& x : k) x = draw(rng, formats::bf16, -3, 1);
    for (double& x : v) x = draw(rng, formats::bf16, -3, 3);
    a.q = xt::adapt(q, a.shape(a.lq, a.d));
    a.k = xt::adapt(k, a.shape(a.lk, a.d));
    a.v = xt::adapt(v, a.shape(a.lk, a.dv));
    a.causal = which == 1;
    const std::vector<Big> want = attention_oracle(a);
    for (const Cast& c : few_casts())
      n += check("attention batches/long", want, c, [&](const Cast& cc) { return run_attention(a, cc); },
                 [&](std::size_t kk) { return describe_attention(a, kk); });
  }
  std::printf("long rows and many rows: %zu comparisons\n", n);
}

TEST(Composite, OtherOutputFormats) {
  // Formats besides the sweep's: every mode and both overflow policies. Formats without NaN only
  // get inputs without NaN results.
  std::mt19937_64 rng(93);
  std::size_t n = 0;
  std::vector<double> data(12 * 6);
  for (double& v : data) v = draw(rng, formats::fp16, -3, 4);
  const xt::xarray<double> x = xt::adapt(data, std::vector<std::size_t>{12, 6});
  std::vector<double> gamma(6);
  for (double& g : gamma) g = draw(rng, formats::fp16, -1, 3);
  const xt::xarray<double> gx = vector_array(gamma);
  Norm p;
  p.eps = 1e-6;
  p.gamma = &gamma;
  reference::NormParameters np;
  np.eps = 1e-6;
  np.gamma = &gx;
  const std::vector<Big> sm = softmax_oracle(x, -1, false), lsm = softmax_oracle(x, -1, true), ln = norm_oracle(x, p);
  for (const Format* f : {&formats::tf32, &formats::e5m2, &formats::e4m3, &formats::e4m3fnuz, &formats::e5m2fnuz,
                          &formats::e3m2fn, &formats::e2m3fn, &formats::e2m1fn, &formats::e8m0fnu}) {
    for (Rounding r : kDeterministic)
      for (Overflow o : {Overflow::ieee, Overflow::saturate}) {
        const Cast c = make(*f, r, o);
        auto describe = [&](std::size_t k) { return "row " + list(x.data() + (k / 6) * 6, 6); };
        n += check("softmax", sm, c, [&](const Cast& cc) { return reference::softmax(x, -1, cc); }, describe);
        if (f->is_signed) {  // negative results: NaN in e8m0fnu
          n += check("log_softmax", lsm, c, [&](const Cast& cc) { return reference::log_softmax(x, -1, cc); }, describe);
          n += check("layernorm", ln, c, [&](const Cast& cc) { return reference::layernorm(x, np, cc); }, describe);
        }
      }
  }
  std::printf("other output formats: %zu comparisons\n", n);
}

// ---------------------------------------------------------------------------------------------
// Threads, stochastic stream, errors
// ---------------------------------------------------------------------------------------------
TEST(Composite, StochasticIndependentOfThreadCount) {
  std::mt19937_64 rng(5);
  std::vector<double> data(40 * 16);
  for (double& v : data) v = draw(rng, formats::fp32, -4, 3);
  const xt::xarray<double> x = xt::adapt(data, std::vector<std::size_t>{40, 16});
  const Cast c = make(formats::bf16, Rounding::stochastic, Overflow::ieee, Subnormals::keep, 64);
  reference::NormParameters np;
  np.eps = 1e-5;
  const std::function<xt::xarray<double>()> ops[] = {
      [&] { return reference::softmax(x, -1, c); }, [&] { return reference::log_softmax(x, 0, c); },
      [&] { return reference::layernorm(x, np, c); }, [&] { return reference::rmsnorm(x, np, c); }};
  for (const auto& op : ops) {
    numeq::set_num_threads(1);
    const xt::xarray<double> one = op();
    numeq::set_num_threads(3);
    const xt::xarray<double> three = op();
    numeq::set_num_threads(0);
    ASSERT_EQ(one.size(), three.size());
    for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same_value(one.data()[i], three.data()[i])) << i;
  }
}

TEST(Composite, Errors) {
  const xt::xarray<double> x = {{1.0, 2.0}, {kNan, 1.0}};
  const Cast no_nan = make(formats::e2m1fn);
  numeq_test::expect_error_mentioning([&] { reference::softmax(x, -1, no_nan); }, "element 2");
  const xt::xarray<double> c = {{1.0, 2.0}, {3.0, 3.0}};
  reference::NormParameters np;
  numeq_test::expect_error_mentioning([&] { reference::layernorm(c, np, no_nan); }, "element 2");
  // Finite results into e2m1fn are fine.
  EXPECT_EQ(reference::softmax(xt::xarray<double>{0.0, 0.0}, 0, no_nan)(0), 0.5);
  // out must be a floating format
  EXPECT_THROW(reference::softmax(c, -1, make(formats::int8)), numeq::error);
  EXPECT_THROW(reference::attention(c, c, c, reference::AttentionParameters{}, make(formats::int8)), numeq::error);
  // shapes and axes
  EXPECT_THROW(reference::softmax(c, 2, make(formats::fp32)), numeq::error);
  EXPECT_THROW(reference::log_softmax(c, -3, make(formats::fp32)), numeq::error);
  const xt::xarray<double> g3 = {1.0, 2.0, 3.0};
  np.gamma = &g3;
  EXPECT_THROW(reference::layernorm(c, np, make(formats::fp32)), numeq::error);
  np.gamma = nullptr;
  np.beta = &g3;
  EXPECT_THROW(reference::rmsnorm(c, np, make(formats::fp32)), numeq::error);
  const xt::xarray<double> q = xt::ones<double>({2, 4});
  const xt::xarray<double> k = xt::ones<double>({5, 4});
  const xt::xarray<double> v = xt::ones<double>({5, 3});
  reference::AttentionParameters ap;
  EXPECT_THROW(reference::attention(q, xt::xarray<double>(xt::ones<double>({5, 3})), v, ap, make(formats::fp32)),
               numeq::error);
  EXPECT_THROW(reference::attention(q, k, xt::xarray<double>(xt::ones<double>({4, 3})), ap, make(formats::fp32)),
               numeq::error);
  const xt::xarray<double> bad_mask = xt::zeros<double>({2, 4});
  ap.mask = &bad_mask;
  EXPECT_THROW(reference::attention(q, k, v, ap, make(formats::fp32)), numeq::error);
}

class CountReport : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("test_composite: %zu comparisons with the MPFR oracle\n", g_comparisons.load());
  }
};
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new CountReport);

}  // namespace
