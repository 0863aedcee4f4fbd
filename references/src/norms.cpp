// Certified layernorm and rmsnorm (composite.hpp): exact scaled forms A_j and D, Ziv's loop per
// element after a fast path in double intervals.

#include "numeq/references/composite.hpp"
#include "numeq/formats/cpu_dispatch.hpp"

#include "composite_rows.hpp"
#include "fast_functions.hpp"

namespace numeq::reference {

namespace {

using namespace rows;

// ---- layernorm and rmsnorm ----

void check_affine(const xt::xarray<double>* v, std::size_t n, const char* parameter) {
  if (v == nullptr) return;
  if (v->dimension() != 1 || v->size() != n)
    throw numeq::error(std::string(parameter) + ": expected shape (" + std::to_string(n) +
                       ",) (the last axis of x), got " + std::to_string(v->dimension()) + "-d of " +
                       std::to_string(v->size()) + " element(s)");
}

// The fast path of one row (x finite), in double arithmetic with proven error bounds: S and
// Q = sum x_j^2 enclosed by Sum2 / Dot2 (exact where no addition or product rounds: most bf16 and
// fp32 rows), D = n Q - S^2 + n^2 eps (or n Q + n^2 eps) and its root in double intervals rounded
// outward (double_interval.hpp), then per element, branch-free so that the loop vectorises:
//   a = fma(n, x_j, -S_end) for each end of S (n x_j alone for rmsnorm): one rounding, |d| <= u;
//   t = fl(fl(a * fl(1/r_lo)) * gamma_j): three more roundings, so a gamma_j / r_lo lies within
//   t / (1 -+ u)^4; the exact a gamma_j / r (r in [r_lo, r_hi]) lies between t r_lo / r_hi (1 - u)^4
//   and t / (1 - u)^4 in magnitude, enclosed by t * fl(r_lo / r_hi) (1 - 2^-47) and t (1 + 2^-47)
//   (u = 2^-53; the 2^-47 margins also cover the roundings of those two products);
//   + beta_j: each end's sum rounds once (|d| <= u), then moves outward by 8u of itself.
// Every intermediate must be a finite double of magnitude >= 2^-960 (kResidualFloor: no
// subnormal loses relative accuracy), and the enclosure must not hold zero (the sign of a zero
// result is the MPFR loop's to settle); other elements, rows whose D is not enclosed away from
// zero (cancellation in n Q - S^2: nearly constant rows), and non-finite gamma_j or beta_j are
// left to the MPFR loop. `todo` holds row positions; decided ones are removed. n <= 2^26 keeps n
// and n^2 exact doubles. NUMEQ_FUNCTIONS=mpfr turns it off.
struct NormEnclosures {
  std::vector<double> lo, hi;
};

template <bool Centred, bool Gamma, bool Beta>
[[gnu::always_inline]] inline void enclose_norm_row(const double* xs, std::size_t n, double count, double s_lo,
                                                    double s_hi, double inverse, double shrink, const double* gamma,
                                                    const double* beta, double* lo, double* hi) {
  using interval_detail::kResidualFloor;
  constexpr double grow = 1 + 0x1p-47;
  constexpr double away = 0x1p-50;  // 8u: each end of a sum moves out by this much of itself
  for (std::size_t j = 0; j < n; ++j) {
    const double g = Gamma ? gamma[j] : 1.0;
    const double a0 = Centred ? std::fma(count, xs[j], -s_hi) : count * xs[j];
    const double a1 = Centred ? std::fma(count, xs[j], -s_lo) : a0;
    const double p0 = a0 * inverse, p1 = a1 * inverse;
    const double t0 = Gamma ? p0 * g : p0, t1 = Gamma ? p1 * g : p1;
    const double tmin = std::min(t0, t1), tmax = std::max(t0, t1);
    // Magnitudes of every intermediate: the smallest must clear the floor, the largest be finite
    // (NaN fails both comparisons).
    const double small = std::min(std::min(std::fabs(a0), std::fabs(a1)),
                                  std::min(std::min(std::fabs(p0), std::fabs(p1)), std::min(std::fabs(t0), std::fabs(t1))));
    double l = tmin * (tmin > 0 ? shrink : grow);
    double h = tmax * (tmax > 0 ? grow : shrink);
    bool ok = small >= kResidualFloor && std::fabs(l) <= std::numeric_limits<double>::max() &&
              std::fabs(h) <= std::numeric_limits<double>::max();
    if constexpr (Beta) {
      const double sl = l + beta[j], sh = h + beta[j];
      ok = ok && std::min(std::fabs(sl), std::fabs(sh)) >= kResidualFloor &&
           std::max(std::fabs(sl), std::fabs(sh)) <= std::numeric_limits<double>::max();
      l = sl - std::fabs(sl) * away;
      h = sh + std::fabs(sh) * away;
    }
    ok = ok && (l > 0 || h < 0);
    // A failed element gets an empty enclosure (lo > hi), which nothing decides.
    lo[j] = ok ? l : 1.0;
    hi[j] = ok ? h : 0.0;
  }
}

NUMEQ_X86_64_V3_CLONE void norm_fast(std::vector<std::size_t>& todo, const double* xs, std::size_t n,
                                     const NormParameters& parameters, bool centred, std::size_t base,
                                     const RowOutput& row) {
  if (todo.empty() || default_function_path() != FunctionPath::fast || !(row.within > 0 || fast::suits(row.out)) ||
      n > (std::size_t{1} << 26))
    return;
  Sum2 sum, squares;
  if (centred)
    for (std::size_t j = 0; j < n; ++j) sum.add(xs[j]);
  for (std::size_t j = 0; j < n; ++j) squares.add_product(xs[j], xs[j]);
  const std::optional<DoubleInterval> S = centred ? sum.enclosure() : DoubleInterval::point(0),
                                      Q = squares.enclosure();
  if (!S || !Q) return;
  using P = DoubleInterval;
  const double count = static_cast<double>(n);
  DoubleInterval D = P::point(count) * *Q + P::point(count * count) * P::point(parameters.eps);
  if (centred) D = D - square(*S);
  if (!D.finite() || !(D.lo > 0)) return;
  const DoubleInterval root = sqrt(D);
  const double inverse = 1 / root.lo, shrink = root.lo / root.hi * (1 - 0x1p-47);
  if (!(root.lo >= interval_detail::kResidualFloor) || !(inverse >= interval_detail::kResidualFloor) ||
      !std::isfinite(inverse))
    return;
  const double* gamma = parameters.gamma ? parameters.gamma->data() : nullptr;
  const double* beta = parameters.beta ? parameters.beta->data() : nullptr;
  thread_local NormEnclosures e;
  e.lo.resize(n);
  e.hi.resize(n);
  const auto run = [&]<bool Centred>() {
    if (gamma && beta)
      enclose_norm_row<Centred, true, true>(xs, n, count, S->lo, S->hi, inverse, shrink, gamma, beta, e.lo.data(), e.hi.data());
    else if (gamma)
      enclose_norm_row<Centred, true, false>(xs, n, count, S->lo, S->hi, inverse, shrink, gamma, beta, e.lo.data(), e.hi.data());
    else if (beta)
      enclose_norm_row<Centred, false, true>(xs, n, count, S->lo, S->hi, inverse, shrink, gamma, beta, e.lo.data(), e.hi.data());
    else
      enclose_norm_row<Centred, false, false>(xs, n, count, S->lo, S->hi, inverse, shrink, gamma, beta, e.lo.data(), e.hi.data());
  };
  if (centred)
    run.template operator()<true>();
  else
    run.template operator()<false>();
  std::size_t kept = 0;
  for (const std::size_t j : todo)
    if (!(e.lo[j] <= e.hi[j] && decide(row, base + j, {e.lo[j], e.hi[j], false, false}))) todo[kept++] = j;
  todo.resize(kept);
}

xt::xarray<double> norm_like(const xt::xarray<double>& x, const NormParameters& parameters, const Cast& out,
                             bool centred, double within = 0) {
  const char* what = centred ? "layernorm" : "rmsnorm";
  if (x.dimension() == 0) throw numeq::error(std::string("x: ") + what + " needs at least one axis (it normalises the last)");
  if (!(parameters.eps >= 0) || !std::isfinite(parameters.eps))
    throw numeq::error("eps: must be finite and >= 0, got " + std::to_string(parameters.eps));
  const std::vector<std::size_t> shape(x.shape().begin(), x.shape().end());
  const std::size_t n = shape.back();
  check_affine(parameters.gamma, n, "gamma");
  check_affine(parameters.beta, n, "beta");
  const std::size_t rows = n == 0 ? 0 : x.size() / n;
  const double* data = x.data();
  const double* gamma = parameters.gamma ? parameters.gamma->data() : nullptr;
  const double* beta = parameters.beta ? parameters.beta->data() : nullptr;
  return run_rows(shape, rows, out, what, within, [&](std::size_t row_index, const RowOutput& row) {
    const std::size_t base = row_index * n;
    const double* xs = data + base;
    bool finite = true;
    for (std::size_t j = 0; j < n; ++j) finite = finite && std::isfinite(xs[j]);
    auto nan_row = [&] {
      for (std::size_t j = 0; j < n; ++j) row.bits[base + j] = exact_pattern(kNaN, out, row.random(base + j));
    };
    if (!finite) return nan_row();
    // The fast path first; the MPFR loop below decides what it leaves.
    thread_local std::vector<std::size_t> todo;
    todo.resize(n);
    std::iota(todo.begin(), todo.end(), std::size_t{0});
    norm_fast(todo, xs, n, parameters, centred, base, row);
    if (todo.empty()) return;
    Scratch& s = scratch();
    s.reserve(n);
    // The scaled forms (composite.hpp): A_j = n x_j - S (or n x_j), D = n Q - S^2 + n^2 eps (or
    // n Q + n^2 eps), y_j = A_j / sqrt(D) * gamma_j + beta_j; A and D are exact dyadics.
    thread_local Mpfr sum(64), squares(64), t(64), u(64), radicand(64), eps(64);
    exact_sum(sum, xs, n, 1);
    exact_dot(squares, xs, xs, n);
    exact_mul_ui(t, squares, n);                    // n Q
    exact_set(eps, parameters.eps);
    exact_mul_ui(u, eps, n);
    exact_mul_ui(radicand, u, n);                   // n^2 eps
    exact_add(u, t, radicand);                      // n Q + n^2 eps
    if (centred) {
      exact_mul(t, sum, sum);
      exact_sub(radicand, u, t);                    // n Q - S^2 + n^2 eps >= 0 (Cauchy-Schwarz)
    } else {
      mpfr_swap(radicand, u);
    }
    if (mpfr_zero_p(radicand)) return nan_row();    // every A_j is 0 too: 0/0
    // Round-to-nearest signs of x_j - mean when it is zero: mean is -0 only for a row of -0
    // (a sum of zeros is -0 only when all are), and (-0) - (+0) = -0, every other zero
    // difference +0 (IEEE 754 s6.3).
    const bool mean_negative_zero = std::all_of(xs, xs + n, [](double v) { return v == 0 && std::signbit(v); });
    for (const std::size_t j : todo) {
      exact_set(u, xs[j]);
      if (centred) {
        exact_mul_ui(t, u, n);
        exact_sub(s.exact[j], t, sum);
        if (mpfr_zero_p(s.exact[j]))
          mpfr_set_zero(s.exact[j], xs[j] == 0 && std::signbit(xs[j]) && mpfr_zero_p(sum) && !mean_negative_zero ? -1 : 1);
      } else {
        exact_mul_ui(s.exact[j], u, n);             // keeps x_j's zero sign
      }
    }
    std::vector<std::size_t> pending;
    for (const std::size_t j : todo) {
      const double g = gamma ? gamma[j] : 1.0;
      const double b = beta ? beta[j] : 0.0;
      const bool zero = mpfr_zero_p(s.exact[j]) != 0;
      // Signs and special values of a_j * g + b with a_j = A_j / sqrt(D), finite.
      double special = 0;
      bool is_special = true;
      if (std::isnan(g) || std::isnan(b)) {
        special = kNaN;
      } else if (std::isinf(g)) {
        const double product = zero ? kNaN : ((mpfr_signbit(s.exact[j]) != 0) != (g < 0) ? -kInf : kInf);
        special = (std::isinf(b) && std::isinf(product) && (b < 0) != (product < 0)) ? kNaN : product + b;
      } else if (std::isinf(b)) {
        special = b;
      } else {
        is_special = false;
      }
      if (is_special)
        row.bits[base + j] = exact_pattern(special, out, row.random(base + j));
      else
        pending.push_back(base + j);
    }
    Interval& root = s.t0;
    auto prepare = [&](mpfr_prec_t p) {
      root.set_precision(p);
      s.t1.set_precision(p);
      s.t2.set_precision(p);
      s.t3.set_precision(p);
      set_point(s.t1, radicand);
      ia::sqrt(root, s.t1);
    };
    auto enclose = [&](std::size_t e, Interval& r, mpfr_prec_t) {
      const std::size_t j = e - base;
      set_point(s.t1, s.exact[j]);
      Interval* y = &s.t2;
      ia::div(*y, s.t1, root);
      bool zero_negative = mpfr_signbit(s.exact[j]) != 0;
      if (gamma) {
        s.t1.set(gamma[j]);
        ia::mul(s.t3, *y, s.t1);
        y = &s.t3;
        zero_negative = zero_negative != std::signbit(gamma[j]);
      }
      if (beta) {
        s.t1.set(beta[j]);
        ia::add(r, *y, s.t1);
        zero_negative = zero_negative && std::signbit(beta[j]);
      } else {
        mpfr_set(r.lo.value, y->lo.value, MPFR_RNDD);
        mpfr_set(r.hi.value, y->hi.value, MPFR_RNDU);
        r.lo.open = y->lo.open;
        r.hi.open = y->hi.open;
      }
      settle_zero_sign(r, zero_negative);
    };
    certify_row(pending, row, prepare, enclose, what);
  });
}

}  // namespace

xt::xarray<double> layernorm(const xt::xarray<double>& x, const NormParameters& parameters, const Cast& out) {
  return norm_like(x, parameters, out, true);
}

xt::xarray<double> rmsnorm(const xt::xarray<double>& x, const NormParameters& parameters, const Cast& out) {
  return norm_like(x, parameters, out, false);
}

xt::xarray<double> layernorm(const xt::xarray<double>& x, const NormParameters& parameters, Within within) {
  return norm_like(x, parameters, kBinary64, true, checked(within));
}

xt::xarray<double> rmsnorm(const xt::xarray<double>& x, const NormParameters& parameters, Within within) {
  return norm_like(x, parameters, kBinary64, false, checked(within));
}

}  // namespace numeq::reference
