#pragma once
// Seeded input generators for the operation catalogue: each draws values and rounds them into
// the input format (nearest even, saturating), so every value is exactly a value of that format.
// The draws come from numeq's counter-based generator (formats/random.hpp) keyed by the seed and
// the element's index, so an array does not depend on threads or on how it is cut; transforms
// use only std::log, std::sqrt and std::cos.
//
//   normal            N(0, 1) * scale
//   uniform           U(-1, 1) * scale
//   lognormal         heavy-tailed: +-exp(N(0, 1.5^2)) * scale
//   outlier_channels  N(0, 1) * scale, with 1% of the channels (the last axis; at least one)
//                     100x larger, as in LLM activations
//   cancellation      along the last axis: pairs x, -x(1 + d) with d ~ N(0, 1) * unit roundoff,
//                     shuffled, so each row sums to nearly zero against sum |x|
//   near_overflow     magnitudes uniform in [max / 4, max], random signs (scale ignored)
//   subnormal_rich    half the values subnormal in the format, half in [min_normal, 16 min_normal]
//                     (formats without subnormals: all in the lowest binades; scale ignored)
//   small_integers    integers uniform in [-8, 8] * scale (rounded where the format lacks some)

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/formats/format.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::cases {

enum class Distribution : std::uint8_t {
  normal,
  uniform,
  lognormal,
  outlier_channels,
  cancellation,
  near_overflow,
  subnormal_rich,
  small_integers,
};

using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)
// numeq::error naming `parameter` and listing the valid names otherwise.
Distribution distribution_by_name(std::string_view name, std::string_view parameter = "generator");
// Every distribution, in declaration order.
std::vector<Distribution> all_distributions();

struct Generator {
  Distribution distribution = Distribution::normal;
  std::uint64_t seed = 0;
  double scale = 1.0;  // positive and finite (numeq::error otherwise)
};

// Values of `format` (a floating format) in an array of `shape` (row-major; the last axis is the
// channel / reduction axis).
xt::xarray<double> generate(const Generator& generator, const Format& format, const std::vector<std::size_t>& shape);

}  // namespace numeq::cases
