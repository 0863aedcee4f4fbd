#pragma once
// Tolerances as a function of the problem, not of one data set (numeq tolerances): a platform's
// bound over several draws of an input family, as the three forms a rubric cites.
//
// One draw's *requirement* is, per element, the allowance its output needs: against the exact
// result, the platform's bound plus the reference's own distance to the exact value; between two
// platforms, the sum of their bounds. *fit_tolerance* gives the forms covering every element of
// every draw, with a margin:
//   ulps      in ulps of the output at the expected value;
//   rtol/atol |x - y| <= atol + rtol |y| per element: the least-allowance pair (cases::tolerance)
//             fitted to each element's need at the worst position in its binade (an error of u
//             ulps at |y| needs u ulp(y) <= u eps |y|), so that the pair does not depend on where
//             a fresh draw's values fall in their binades;
//   max_rtol  |x - y| <= max_rtol max|y| per draw (Neuron's max-normalised form).
// The margin (default 2) covers the draw-to-draw spread of the parts of the bound that the data
// determine (input casts, the computation's own bound): for those a correct output's error can
// reach its need, and a fresh draw's need exceeds the largest of D draws' with probability
// 1 / (D + 1). It multiplies each element's *computed* part only: the roundings into the output
// format (the platform's output cast, the reference's own rounding) are bounded alike for any
// draw at the same value, so doubling them would only widen the tolerance past mistakes of an
// ulp or two (for bf16 norms: an unbiased variance at D = 24-40, which torch's default catches).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "numeq/cases/emulation.hpp"
#include "numeq/cases/op.hpp"
#include "numeq/cases/verdict.hpp"

namespace numeq::cases {

struct Requirement {
  std::vector<double> need;      // per element: the allowance on |judged - expected|
  std::vector<double> expected;  // what the output is measured against
  std::vector<double> judged;    // the output of a correct device
  // Per element, the part of `need` from the computation before the output cast: the platform's
  // bound less its output cast's own rounding (both platforms' in the cross form). The rest of
  // `need` (the output roundings, the reference's distance to the exact value) does not grow
  // from draw to draw. Empty: all of `need` counts as computed.
  std::vector<double> computed;
  std::size_t unbounded = 0;     // elements left out: no finite bound, or a non-finite value
  double failure_probability = 0;  // per draw (all elements together); 0: worst-case bound
};

// `platform`: the platform's emulation of `op`. `against` null: that output judged against the
// op's reference; else `against`'s output judged against `platform`'s. The emulations carry their
// per-element failure probabilities; the requirement states the draw's (a union over elements).
// numeq::error naming `against` when the shapes differ.
Requirement requirement(const Op& op, const Emulation& platform, const Emulation* against);

struct ToleranceForms {
  double ulps = 0, rtol = 0, atol = 0, max_rtol = 0;
  // atol over the smallest draw's max|expected| (finite values; 0 when none is positive): the
  // absolute term at any input scale is atol_rel * max|y| of the data at hand.
  double atol_rel = 0;
  // The one-parameter forms over every element of every draw (cases::Tolerance's), with the
  // margin: the largest need, the smallest rtol alone and the smallest atol alone.
  double max_abs = 0, rtol_only = 0, atol_only = 0;
};

// The forms covering every element of every draw, each element's need raised by (margin - 1)
// times its computed part (`margin` >= 1; numeq::error naming `margin` otherwise). NaN forms when
// no draw has an element.
ToleranceForms fit_tolerance(const std::vector<Requirement>& draws, const Format& out, double margin = 2.0);

// The tolerance of a problem over an input family: `draw(seed)` builds the problem's op on the
// family's inputs for one seed (e.g. cases::generate with that seed, then cases::matmul); each of
// `seeds` is one calibration draw. `platform` against the reference, or `against`'s output against
// `platform`'s. `kind` probabilistic: the bound fails with at most `failure_probability` per draw
// (spread over its elements), or, where `lambda` is given, at Higham and Mary's lambda per
// element instead; the tier is probabilistic only where the bound can fail.
struct FamilyTolerance {
  ToleranceForms forms;
  Tier tier = Tier::deterministic;
  double failure_probability = 0;  // per draw
  std::size_t draws = 0;
  std::size_t unbounded = 0;  // elements left out over all draws
};
FamilyTolerance family_tolerance(const std::function<Op(std::uint64_t seed)>& draw,
                                 const std::vector<std::uint64_t>& seeds, const core::Platform& platform,
                                 const core::Platform* against, core::BoundKind kind = core::BoundKind::probabilistic,
                                 double failure_probability = 1e-6, double margin = 2.0,
                                 std::optional<double> lambda = std::nullopt);

}  // namespace numeq::cases
