#pragma once
// The Vector engine's per-partition statistics, nki.isa.bn_stats and nki.isa.bn_aggr, as values:
// the arithmetic the operation catalogue's layernorm (variant bn_stats, normalization.hpp) runs,
// for an NKI emulator that runs the instructions one at a time.
//
// The documented facts (nki.isa.bn_stats / bn_aggr docstrings; FACTS.md s3): bn_stats writes six
// elements per partition, (count, mean, variance * count) of the even-position elements of the
// partition, then the same of the odd-position ones; bn_aggr reads one or more such triples per
// partition and writes (mean, population variance); both compute in fp32 and read at most 512
// elements per bn_stats. The order of the arithmetic is not documented; numeq assumes:
//   bn_stats  Welford's update over each half in order, one rounding into `compute` per
//             operation: delta = x_k - mean, mean += delta / k, M2 += delta * (x_k - mean)
//             (Welford, Technometrics 4(3), 1962); an empty half gives (0, 0, 0);
//   bn_aggr   the triples merged in order, as the platform's assumption bn_aggr_merge says:
//             chan   n = na + nb (counts summed exactly), delta = mean_b - mean_a,
//                    mean_a += delta * (nb / n), M2_a = (M2_a + M2_b) + delta^2 * (na nb / n),
//                    variance = M2 / n (Chan, Golub and LeVeque, Amer. Statist. 37(3), 1983);
//             naive  s = sum mean_i n_i, q = sum (M2_i + mean_i^2 n_i), each sum starting from its
//                    first term, mean = s / n, variance = q / n - mean^2;
//             n the exact sum of the counts rounded once into `compute`.
// Every value read is rounded into `compute` first (nearest even): a no-op for tiles of fp32 or
// narrower values in an fp32 compute. NaN and Inf follow IEEE 754 (a NaN in a half makes its mean
// and M2 NaN); a NaN's sign and payload are not part of the result.

#include <cstdint>

#include <xtensor/xarray.hpp>

#include "numeq/formats/format.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq::cases {

// How bn_aggr merges its triples (the trainium.* platforms' assumption bn_aggr_merge).
enum class BnAggrMerge : std::uint8_t { chan, naive };
using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)
BnAggrMerge bn_aggr_merge_by_name(std::string_view name, std::string_view parameter = "merge");

// bn_stats of the rows of x[P, n]: [P, 6] = (count, mean, M2) of x[p, 0::2], then of x[p, 1::2].
// compute: a floating format of at most 24 significand bits, rounding to nearest even.
xt::xarray<double> bn_stats(const xt::xarray<double>& x, const Format& compute = formats::fp32);

// bn_aggr of stats[P, 3m] (m >= 1 triples (count, mean, M2) per row, merged in order): [P, 2] =
// (mean, population variance).
xt::xarray<double> bn_aggr(const xt::xarray<double>& stats, BnAggrMerge merge,
                           const Format& compute = formats::fp32);

}  // namespace numeq::cases
