#pragma once
// The MPFR oracle of the composite operations and the row generators their tests share
// (test_composite.cpp, test_composite_attention.cpp, test_composite_within.cpp). What follows is test_composite.cpp's account:
//
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
// NUMEQ_SWEEP_SCALE (default 1; e.g. 0.05 under sanitizers) scales the number of random rows
// (scaled()).


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
#include "oracle/mpfr_steps.hpp"
#include "oracle/test_support.hpp"

// Unnamed: each test executable includes this once.
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

constexpr mpfr_prec_t work_precision() { return kWork; }
using Big = numeq_oracle::Big<work_precision>;  // the test's own owning mpfr_t (oracle/mpfr_steps.hpp)
using numeq_oracle::force_positive;
using numeq_oracle::tiny_positive;
using numeq_oracle::to_odd;

void exact(int ternary) {
  if (ternary != 0) g_oracle_inexact.fetch_add(1);
}
void set_d(mpfr_ptr r, double x) { exact(mpfr_set_d(r, x, MPFR_RNDN)); }
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
[[maybe_unused]] std::vector<Big> softmax_oracle(const xt::xarray<double>& x, std::ptrdiff_t axis, bool log) {
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

[[maybe_unused]] std::vector<Big> norm_oracle(const xt::xarray<double>& x, const Norm& p) {
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

[[maybe_unused]] std::vector<Big> attention_oracle(const Attention& a) {
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

[[maybe_unused]] std::vector<double> softmax_row_input(std::mt19937_64& rng, const Format& f, std::size_t n,
                                                       unsigned kind) {
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

[[maybe_unused]] std::vector<double> norm_row_input(std::mt19937_64& rng, const Format& f, std::size_t n,
                                                    unsigned kind) {
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

}  // namespace
