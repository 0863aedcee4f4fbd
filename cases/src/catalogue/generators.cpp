#include "numeq/cases/generators.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/random.hpp"

namespace numeq::cases {

namespace {

// A stream of uniform and normal draws for one array: draw i depends only on (seed, stream, i).
class Draws {
 public:
  Draws(std::uint64_t seed, std::uint64_t stream) : key_(random_stream_key(seed ^ (stream * 0x9E3779B97F4A7C15ull))) {}
  // Uniform in (0, 1): 53 random bits, centred in their cell (never 0 or 1).
  double uniform(std::uint64_t i) const {
    return (static_cast<double>(random_bits_at(key_, i) >> 11) + 0.5) * 0x1p-53;
  }
  // N(0, 1) by Box-Muller from draws 2i and 2i + 1.
  double normal(std::uint64_t i) const {
    const double u1 = uniform(2 * i), u2 = uniform(2 * i + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  std::uint64_t bits(std::uint64_t i) const { return random_bits_at(key_, i); }

 private:
  std::uint64_t key_;
};

}  // namespace

Distribution distribution_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<Distribution>, name, parameter, "generator");
}

std::vector<Distribution> all_distributions() {
  std::vector<Distribution> out;
  for (const auto& [d, name] : enum_names<Distribution>) out.push_back(d);
  return out;
}

xt::xarray<double> generate(const Generator& g, const Format& format, const std::vector<std::size_t>& shape) {
  if (format.is_integer())
    throw numeq::error("format: generators draw floating values; " + std::string(format.name) +
                       " is an integer format (quantize floating values instead)");
  if (!std::isfinite(g.scale) || g.scale <= 0)
    throw numeq::error("scale: expected a positive finite number, got " + std::to_string(g.scale));
  xt::xarray<double> out = xt::zeros<double>(shape);
  const std::size_t n = out.size();
  if (n == 0) return out;
  const std::size_t channels = shape.empty() ? 1 : std::max<std::size_t>(shape.back(), 1);
  const Draws draws(g.seed, static_cast<std::uint64_t>(g.distribution) + 1);
  const Cast cast{format, Rounding::nearest_even, Overflow::saturate};
  const double max = decode_bits(format, format.max_finite_magnitude() << format.storage_shift);
  const double min_normal = std::ldexp(1.0, format.emin());
  const double u = std::ldexp(1.0, -format.precision());
  double* v = out.data();
  switch (g.distribution) {
    case Distribution::normal:
      for (std::size_t i = 0; i < n; ++i) v[i] = draws.normal(i) * g.scale;
      break;
    case Distribution::uniform:
      for (std::size_t i = 0; i < n; ++i) v[i] = (2.0 * draws.uniform(i) - 1.0) * g.scale;
      break;
    case Distribution::lognormal:
      for (std::size_t i = 0; i < n; ++i) {
        const double sign = (draws.bits(n * 4 + i) & 1) ? -1.0 : 1.0;
        v[i] = sign * std::exp(1.5 * draws.normal(i)) * g.scale;
      }
      break;
    case Distribution::outlier_channels: {
      // 1% of the channels, at least one, chosen by a seeded partial shuffle.
      const std::size_t outliers = std::max<std::size_t>(1, channels / 100);
      std::vector<std::size_t> order(channels);
      for (std::size_t c = 0; c < channels; ++c) order[c] = c;
      for (std::size_t c = 0; c < outliers; ++c)
        std::swap(order[c], order[c + draws.bits(n * 4 + c) % (channels - c)]);
      std::vector<double> factor(channels, 1.0);
      for (std::size_t c = 0; c < outliers; ++c) factor[order[c]] = 100.0;
      for (std::size_t i = 0; i < n; ++i) v[i] = draws.normal(i) * g.scale * factor[i % channels];
      break;
    }
    case Distribution::cancellation: {
      // Row by row along the last axis: pairs x, -x (1 + d), then a seeded shuffle of the row.
      for (std::size_t row = 0; row < n / channels; ++row) {
        double* r = v + row * channels;
        for (std::size_t c = 0; c + 1 < channels; c += 2) {
          const std::size_t i = row * channels + c;
          const double x = round_to_format(draws.normal(i) * g.scale, cast);
          r[c] = x;
          r[c + 1] = -x * (1.0 + draws.normal(i + 1) * u);
        }
        if (channels % 2 != 0) r[channels - 1] = draws.normal(row * channels + channels - 1) * g.scale * u;
        for (std::size_t c = channels; c > 1; --c)
          std::swap(r[c - 1], r[draws.bits(n * 4 + row * channels + c) % c]);
      }
      break;
    }
    case Distribution::near_overflow:
      for (std::size_t i = 0; i < n; ++i) {
        const double sign = (draws.bits(n * 4 + i) & 1) ? -1.0 : 1.0;
        v[i] = sign * max * (0.25 + 0.75 * draws.uniform(i));
      }
      break;
    case Distribution::subnormal_rich:
      for (std::size_t i = 0; i < n; ++i) {
        const double sign = (draws.bits(n * 4 + i) & 1) ? -1.0 : 1.0;
        const double w = draws.uniform(i);
        v[i] = sign * (i % 2 == 0 ? min_normal * w : min_normal * (1.0 + 15.0 * w));
      }
      break;
    case Distribution::small_integers:
      for (std::size_t i = 0; i < n; ++i)
        v[i] = (static_cast<double>(draws.bits(i) % 17) - 8.0) * g.scale;
      break;
  }
  for (std::size_t i = 0; i < n; ++i) v[i] = round_to_format(v[i], cast);
  return out;
}

}  // namespace numeq::cases
