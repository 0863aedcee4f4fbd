#pragma once
// Welford's update and bn_aggr's merges in running-bound arithmetic (tracked.hpp), private to
// cases/: the one implementation behind the layernorm's bn_stats and welford variants
// (normalization.cpp) and the public bn_stats / bn_aggr (numeq/cases/bn_stats.hpp, moments.cpp).

#include <cstddef>
#include <span>
#include <utility>

#include "numeq/cases/bn_stats.hpp"
#include "tracked.hpp"

namespace numeq::cases::detail {

struct Moments {
  Tracked count, mean, m2;  // m2 = sum of squared deviations (var * count)
};

// The compute cast of a format the running bounds can take (Figueroa's condition, tracked.hpp:
// products exact in binary64, quotients correctly rounded through it); numeq::error naming
// `compute` otherwise.
Compute compute_cast(const Format& compute);

// Welford's update over xs[first], xs[first + step], ... below end (Welford, Technometrics 4(3),
// 1962): mean_k = mean_{k-1} + (x - mean_{k-1}) / k, M2_k = M2_{k-1} + (x - mean_{k-1})(x - mean_k),
// each step's exact counterpart the same update in real arithmetic; count k.
Moments welford(std::span<const Tracked> xs, std::size_t first, std::size_t end, std::size_t step, const Compute& C);

// bn_aggr's merge of (count, mean, M2) statistics in order (at least one), in the compute format:
// (mean, population variance), as numeq/cases/bn_stats.hpp states it.
std::pair<Tracked, Tracked> bn_aggregate(std::span<const Moments> parts, BnAggrMerge merge, const Compute& C);

}  // namespace numeq::cases::detail
