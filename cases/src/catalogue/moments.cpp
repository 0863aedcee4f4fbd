// The Vector engine's statistics (numeq/cases/bn_stats.hpp; moments.hpp): Welford's update and
// bn_aggr's merges in running-bound arithmetic, and bn_stats / bn_aggr over arrays of rows.

#include "moments.hpp"

#include <string>
#include <vector>

#include "numeq/formats/error.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/shape.hpp"

namespace numeq::cases {

namespace detail {

Compute compute_cast(const Format& compute) {
  if (compute.is_integer() || compute.precision() > 24)
    throw numeq::error("compute: " + std::string(compute.name) +
                       " cannot be a compute format (a floating format of at most 24 significand bits: fp32, bf16, "
                       "fp16, ...)");
  return Cast{compute};
}

Moments welford(std::span<const Tracked> xs, std::size_t first, std::size_t end, std::size_t step, const Compute& C) {
  Tracked mean = exact(0), m2 = exact(0);
  std::size_t k = 0;
  for (std::size_t j = first; j < end; j += step) {
    ++k;
    const Tracked delta = sub(xs[j], mean, C);
    mean = add(mean, div(delta, input(static_cast<double>(k), C), C), C);
    m2 = add(m2, mul(delta, sub(xs[j], mean, C), C), C);
  }
  return {input(static_cast<double>(k), C), mean, m2};
}

std::pair<Tracked, Tracked> bn_aggregate(std::span<const Moments> parts, BnAggrMerge merge, const Compute& C) {
  if (merge == BnAggrMerge::chan) {
    // n = na + nb (exact: counts are integers), delta = mean_b - mean_a, mean = mean_a + delta nb / n,
    // M2 = M2_a + M2_b + delta^2 na nb / n.
    Moments acc = parts.front();
    double na = acc.count.value;
    for (std::size_t i = 1; i < parts.size(); ++i) {
      const Moments& b = parts[i];
      const double nb = b.count.value, nn = na + nb;
      const Tracked tn = input(nn, C);
      const Tracked delta = sub(b.mean, acc.mean, C);
      acc.mean = add(acc.mean, mul(delta, div(b.count, tn, C), C), C);
      const Tracked weight = div(input(na * nb, C), tn, C);
      acc.m2 = add(add(acc.m2, b.m2, C), mul(mul(delta, delta, C), weight, C), C);
      na = nn;
    }
    return {acc.mean, div(acc.m2, input(na, C), C)};
  }
  // naive: mean = sum n_i mean_i / n; E[x^2] = sum (M2_i + n_i mean_i^2) / n; var = E[x^2] - mean^2.
  // Each sum starts from its first term (no addition to a zero: a -0 term stays -0).
  double n = 0;
  Tracked s, q;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Moments& p = parts[i];
    n += p.count.value;
    const Tracked ds = mul(p.mean, p.count, C);
    const Tracked dq = add(p.m2, mul(mul(p.mean, p.mean, C), p.count, C), C);
    s = i == 0 ? ds : add(s, ds, C);
    q = i == 0 ? dq : add(q, dq, C);
  }
  const Tracked total = input(n, C);
  const Tracked mean = div(s, total, C);
  return {mean, sub(div(q, total, C), mul(mean, mean, C), C)};
}

}  // namespace detail

BnAggrMerge bn_aggr_merge_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<BnAggrMerge>, name, parameter, "bn_aggr merge");
}

namespace {

// Rows of a [P, k] array, each read through f(row, values of the row rounded into C).
template <class F>
void for_each_row(const xt::xarray<double>& x, const char* parameter, const detail::Compute& C, F&& f) {
  if (x.dimension() != 2)
    throw numeq::error(std::string(parameter) + ": expected shape (partitions, elements), got " + shape_text(x));
  const std::size_t rows = x.shape()[0], k = x.shape()[1];
  parallel_for(rows, [&](std::size_t begin, std::size_t end) {
    std::vector<detail::Tracked> values(k);
    for (std::size_t r = begin; r < end; ++r) {
      for (std::size_t j = 0; j < k; ++j) values[j] = detail::input(x.data()[r * k + j], C);
      f(r, values);
    }
  });
}

}  // namespace

xt::xarray<double> bn_stats(const xt::xarray<double>& x, const Format& compute) {
  const detail::Compute C = detail::compute_cast(compute);
  xt::xarray<double> out = xt::xarray<double>::from_shape({x.dimension() == 2 ? x.shape()[0] : 0, std::size_t{6}});
  for_each_row(x, "x", C, [&](std::size_t r, const std::vector<detail::Tracked>& xs) {
    for (std::size_t parity = 0; parity < 2; ++parity) {
      const detail::Moments m = detail::welford(xs, parity, xs.size(), 2, C);
      out(r, 3 * parity) = m.count.value;
      out(r, 3 * parity + 1) = m.mean.value;
      out(r, 3 * parity + 2) = m.m2.value;
    }
  });
  return out;
}

xt::xarray<double> bn_aggr(const xt::xarray<double>& stats, BnAggrMerge merge, const Format& compute) {
  const detail::Compute C = detail::compute_cast(compute);
  if (stats.dimension() == 2 && (stats.shape()[1] == 0 || stats.shape()[1] % 3 != 0))
    throw numeq::error("stats: " + std::to_string(stats.shape()[1]) +
                       " elements per row; bn_stats triples (count, mean, variance * count) make a positive "
                       "multiple of 3");
  xt::xarray<double> out = xt::xarray<double>::from_shape({stats.dimension() == 2 ? stats.shape()[0] : 0, std::size_t{2}});
  for_each_row(stats, "stats", C, [&](std::size_t r, const std::vector<detail::Tracked>& v) {
    std::vector<detail::Moments> parts;
    for (std::size_t i = 0; i < v.size(); i += 3) parts.push_back({v[i], v[i + 1], v[i + 2]});
    const auto [mean, variance] = detail::bn_aggregate(parts, merge, C);
    out(r, 0) = mean.value;
    out(r, 1) = variance.value;
  });
  return out;
}

}  // namespace numeq::cases
