// Tolerances over draws of an input family (family_tolerance.hpp).

#include "numeq/cases/family_tolerance.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "numeq/core/bound.hpp"
#include "numeq/formats/error.hpp"

namespace numeq::cases {

Requirement requirement(const Op& op, const Emulation& platform, const Emulation* against) {
  Requirement r;
  const std::size_t n = platform.values.size();
  if (platform.bound.size() != n || (against && (against->values.size() != n || against->bound.size() != n)))
    throw numeq::error("against: its output has " + std::to_string(against ? against->values.size() : 0) +
                       " elements, the platform's " + std::to_string(n));
  r.need.reserve(n);
  r.expected.reserve(n);
  r.judged.reserve(n);
  r.computed.reserve(n);
  // The output cast's own rounding at a value (nothing before it): what a platform's bound holds
  // for any draw that lands there.
  const core::OutputCastBound output_rounding(op.out);
  const auto computed_part = [&](const Emulation& e, std::size_t i) {
    return std::max(0.0, e.bound.data()[i] - output_rounding(e.values.data()[i], 0.0));
  };
  double exact_error = 0;
  const reference::ExactValues* ex = against ? nullptr : &op.check_exact(exact_error);
  const xt::xarray<double>* ref = against ? nullptr : &op.reference_values();
  for (std::size_t i = 0; i < n; ++i) {
    double need = 0, expected = 0, judged = 0, computed = 0;
    if (against) {
      need = platform.bound.data()[i] + against->bound.data()[i];
      computed = computed_part(platform, i) + computed_part(*against, i);
      expected = platform.values.data()[i];
      judged = against->values.data()[i];
    } else {
      expected = ref->data()[i];
      // The reference's own distance to the exact value, with the slack of its two subtractions
      // and the exact value's own stated error (check_exact).
      const double hi = ex->hi.data()[i];
      const double radius = ex->radius.empty() ? 0.0 : ex->radius[i];
      const double d = (std::abs((expected - hi) - ex->lo.data()[i]) + std::abs(hi) * exact_error + radius) * (1 + 0x1p-50);
      need = platform.bound.data()[i] + d;
      computed = computed_part(platform, i);
      judged = platform.values.data()[i];
    }
    if (!std::isfinite(need) || !std::isfinite(expected) || !std::isfinite(judged)) {
      ++r.unbounded;
      continue;
    }
    r.need.push_back(need);
    r.expected.push_back(expected);
    r.judged.push_back(judged);
    r.computed.push_back(std::min(computed, need));
  }
  const double per_element = platform.failure_probability + (against ? against->failure_probability : 0.0);
  r.failure_probability = std::min(1.0, per_element * static_cast<double>(n));
  return r;
}

ToleranceForms fit_tolerance(const std::vector<Requirement>& draws, const Format& out, double margin) {
  if (!(margin >= 1) || !std::isfinite(margin))
    throw numeq::error("margin: " + std::to_string(margin) +
                       " is not a finite number >= 1 (the tolerance would not cover the draws' own needs)");
  std::size_t total = 0;
  for (const Requirement& r : draws) {
    if (!r.computed.empty() && r.computed.size() != r.need.size())
      throw numeq::error("draws: a requirement's computed part has " + std::to_string(r.computed.size()) +
                         " elements, its need " + std::to_string(r.need.size()));
    total += r.need.size();
  }
  ToleranceForms f;
  if (total == 0) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return {nan, nan, nan, nan, 0, nan, nan, nan};
  }
  xt::xarray<double> fitted = xt::zeros<double>({total});
  xt::xarray<double> expected = xt::zeros<double>({total});
  const double eps = out.is_integer() ? 0.0 : std::ldexp(1.0, -out.mantissa_bits);
  const UlpOf ulp_of_out(out);
  std::size_t j = 0;
  double smallest_top = std::numeric_limits<double>::infinity();  // over draws with a positive finite max|y|
  for (const Requirement& r : draws) {
    double top = 0, most = 0, finite_top = 0;
    for (std::size_t i = 0; i < r.need.size(); ++i, ++j) {
      // The margin on the computed part (all of the need where the draw does not split it).
      const double computed = r.computed.empty() ? r.need[i] : std::clamp(r.computed[i], 0.0, r.need[i]);
      const double y = r.expected[i], need = r.need[i] + (margin - 1) * computed;
      const double ulp = ulp_of_out(y);
      f.ulps = std::max(f.ulps, need / ulp);
      // The need at the worst position in y's binade: u ulps at |y| need u * ulp(y) <= u * eps * |y|.
      fitted.data()[j] = out.is_integer() ? need : std::max(need, need / ulp * eps * std::abs(y));
      expected.data()[j] = y;
      top = std::max(top, std::abs(y));
      if (std::isfinite(y)) finite_top = std::max(finite_top, std::abs(y));
      most = std::max(most, need);
    }
    if (finite_top > 0) smallest_top = std::min(smallest_top, finite_top);
    if (!r.need.empty()) f.max_rtol = std::max(f.max_rtol, top > 0 ? most / top : std::numeric_limits<double>::infinity());
  }
  const Tolerance t = tolerance(fitted, expected, out);
  f.rtol = t.rtol;
  f.atol = t.atol;
  f.atol_rel = std::isfinite(smallest_top) ? f.atol / smallest_top : 0.0;
  f.max_abs = t.max_abs;
  f.rtol_only = t.rtol_only;
  f.atol_only = t.atol_only;
  return f;
}

FamilyTolerance family_tolerance(const std::function<Op(std::uint64_t seed)>& draw,
                                 const std::vector<std::uint64_t>& seeds, const core::Platform& platform,
                                 const core::Platform* against, core::BoundKind kind, double failure_probability,
                                 double margin, std::optional<double> lambda) {
  if (seeds.empty()) throw numeq::error("seeds: at least one calibration draw is needed");
  if (lambda && !(*lambda > 0 && std::isfinite(*lambda)))
    throw numeq::error("lam: expected a positive finite lambda, got " + std::to_string(*lambda));
  if (kind == core::BoundKind::probabilistic && !lambda && !(failure_probability > 0 && failure_probability < 1))
    throw numeq::error("failure_probability: " + std::to_string(failure_probability) +
                       " is not in (0, 1); the probabilistic bound fails with at most this per draw");
  FamilyTolerance out;
  std::vector<Requirement> reqs;
  std::optional<Format> fmt;  // a copy: the draw's op ends with its iteration
  for (const std::uint64_t seed : seeds) {
    const Op op = draw(seed);
    fmt = op.out.format;
    core::BoundOptions o;
    o.kind = kind;
    // The draw's failure probability spread over its elements (a union bound), or lambda's.
    if (lambda)
      o.lambda = *lambda;
    else if (kind == core::BoundKind::probabilistic)
      o.failure_probability = failure_probability / static_cast<double>(std::max<std::size_t>(1, op.reference_values().size()));
    const Emulation e = *op.emulation(platform, o);
    if (against) {
      const Emulation other = *op.emulation(*against, o);
      reqs.push_back(requirement(op, e, &other));
    } else {
      reqs.push_back(requirement(op, e, nullptr));
    }
    out.unbounded += reqs.back().unbounded;
    out.failure_probability = std::max(out.failure_probability, reqs.back().failure_probability);
  }
  out.forms = fit_tolerance(reqs, *fmt, margin);
  out.draws = reqs.size();
  out.tier = out.failure_probability > 0 ? Tier::probabilistic : Tier::deterministic;
  return out;
}

}  // namespace numeq::cases
