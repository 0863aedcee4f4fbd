#include "numeq/cases/port.hpp"

#include "verdict_text.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

#include "numeq/formats/error.hpp"
#include "numeq/formats/shape.hpp"

namespace numeq::cases {

namespace {

using detail::number;
using detail::same_value;



std::string indented(const std::string& text) {
  std::string out = "    ";
  for (const char c : text) {
    out.push_back(c);
    if (c == '\n') out += "  ";
  }
  return out;
}

}  // namespace

PortVerdict compare_port(const xt::xarray<double>& gpu, const xt::xarray<double>& trainium, const Op& op,
                         const core::Platform& gpu_platform, const core::Platform& trainium_platform,
                         const CompareOptions& options) {
  if (gpu.shape() != trainium.shape())
    throw numeq::error("trainium_output: shape " + shape_text(trainium) + " differs from gpu_output's " + shape_text(gpu));
  CompareOptions each = options;
  each.failure_probability = options.failure_probability / 2;  // a union bound over the two platforms
  PortVerdict v;
  v.gpu = compare(gpu, op, gpu_platform, each);
  v.trainium = compare(trainium, op, trainium_platform, each);
  v.elements = gpu.size();
  const std::shared_ptr<const Emulation> kept_g = check_emulation(op, gpu_platform, each, v.elements);
  const std::shared_ptr<const Emulation> kept_t = check_emulation(op, trainium_platform, each, v.elements);
  const Emulation &eg = *kept_g, &et = *kept_t;
  const xt::xarray<double> bound = cross_platform_bound(eg, et);
  struct Scored {
    double ratio;
    std::size_t i;
  };
  std::vector<Scored> all;
  // Elements beyond the bound where each output is its own platform's value: the platforms
  // themselves differ there (one overflows to Inf, the other does not), not an output.
  std::size_t platforms_differ = 0, first_platforms_differ = v.elements;
  for (std::size_t i = 0; i < v.elements; ++i) {
    const double g = gpu.data()[i], t = trainium.data()[i], B = bound.data()[i];
    if (same_value(g, t)) {
      ++v.equal;
      continue;
    }
    const double d = std::abs(g - t);
    // Special values must agree; a finite difference must lie within a finite bound.
    const bool beyond = !std::isfinite(d) || !std::isfinite(B) || d > B * (1 + 0x1p-50);
    const double ratio = !std::isfinite(d) || !std::isfinite(B) ? std::numeric_limits<double>::infinity()
                                                                 : (B > 0 ? d / B : std::numeric_limits<double>::infinity());
    if (beyond) {
      ++v.beyond;
      if (same_value(g, eg.values.data()[i]) && same_value(t, et.values.data()[i])) {
        ++platforms_differ;
        first_platforms_differ = std::min(first_platforms_differ, i);
      }
    }
    v.max_difference_over_bound = std::max(v.max_difference_over_bound, ratio);
    all.push_back({ratio, i});
  }
  const std::size_t keep = std::min(options.worst, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end(),
                    [](const Scored& x, const Scored& y) { return x.ratio > y.ratio || (x.ratio == y.ratio && x.i < y.i); });
  for (std::size_t j = 0; j < keep; ++j) {
    const std::size_t i = all[j].i;
    PortElement w;
    std::size_t flat = i;
    w.index.resize(gpu.dimension());
    for (std::size_t d = gpu.dimension(); d-- > 0;) {
      w.index[d] = flat % gpu.shape()[d];
      flat /= gpu.shape()[d];
    }
    w.gpu = gpu.data()[i];
    w.trainium = trainium.data()[i];
    w.difference = std::abs(w.gpu - w.trainium);
    w.bound = bound.data()[i];
    v.worst.push_back(w);
  }
  v.passed = v.gpu.passed && v.trainium.passed && v.beyond == 0;
  const std::string n = std::to_string(v.elements);
  std::string d = "gpu output: " + std::string(to_string(v.gpu.tier)) +
                  (v.gpu.explained_by.empty() ? "" : " (" + v.gpu.explained_by + ")") +
                  "; trainium output: " + std::string(to_string(v.trainium.tier)) +
                  (v.trainium.explained_by.empty() ? "" : " (" + v.trainium.explained_by + ")") + "; ";
  if (v.beyond > 0) {
    d += std::to_string(v.beyond) + " of " + n + " elements differ by more than the cross-platform bound (worst " +
         number(v.max_difference_over_bound, 3) + "x)";
    if (platforms_differ > 0) {
      const std::size_t i = first_platforms_differ;
      d += "; at " + std::to_string(platforms_differ) + " of them each output is its own platform's value: the "
           "platforms themselves differ there (first: element " + std::to_string(i) + " (C order): gpu " +
           number(gpu.data()[i]) + ", trainium " + number(trainium.data()[i]) +
           "; a special value on one platform and not the other, an overflow or a NaN, passes only where both agree)";
    }
    if (platforms_differ < v.beyond)
      d += "; at the other " + std::to_string(v.beyond - platforms_differ) + ", at least one output is not what its "
           "platform computes";
  } else {
    d += std::to_string(v.elements - v.equal) + " of " + n +
         " elements differ, all within the cross-platform bound: the difference is explained by the two platforms' "
         "arithmetic";
    if (v.gpu.tier <= Tier::variant && v.trainium.tier <= Tier::variant)
      d += " (bit-exact with " + v.gpu.explained_by + " and " + v.trainium.explained_by + " respectively)";
  }
  v.diagnosis = d;
  return v;
}

std::string describe(const PortVerdict& v) {
  std::ostringstream s;
  s << (v.passed ? "PASS" : "FAIL") << " (port check): " << v.diagnosis;
  s << "\n  gpu output against " << v.gpu.platform << ":\n" << indented(describe(v.gpu));
  s << "\n  trainium output against " << v.trainium.platform << ":\n" << indented(describe(v.trainium));
  s << "\n  difference: " << v.elements - v.equal << " of " << v.elements << " elements differ, " << v.beyond
    << " beyond the cross-platform bound; worst difference/bound " << number(v.max_difference_over_bound, 3);
  for (const PortElement& w : v.worst) {
    s << "\n  " << (w.difference > w.bound || !std::isfinite(w.difference) ? "! [" : "  [");
    for (std::size_t d = 0; d < w.index.size(); ++d) s << (d ? "," : "") << w.index[d];
    s << "] gpu " << number(w.gpu) << ", trainium " << number(w.trainium) << ", difference " << number(w.difference, 3)
      << ", bound " << number(w.bound, 3);
  }
  return s.str();
}

}  // namespace numeq::cases
