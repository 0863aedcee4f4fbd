// What a verdict says in words: its one-line diagnosis (verdict.hpp, Verdict::diagnosis) and the
// full message (describe).

#include "numeq/cases/verdict.hpp"

#include "verdict_text.hpp"

#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

namespace numeq::cases {

namespace detail {

std::string diagnosis_line(const Verdict& v, const std::string& platform, std::string_view out_format,
                           std::size_t det_only, const FirstFailure& foreign, const FirstFailure& special) {
  const std::size_t N = v.elements;
  const std::string n_text = std::to_string(N);
  std::string line;
  switch (v.tier) {
    case Tier::bit_exact:
      line = "bit-exact with " + platform + "'s emulation on all " + n_text + " elements";
      break;
    case Tier::variant:
      line = "bit-exact with the variant " + v.explained_by + " on all " + n_text + " elements (" +
                    std::to_string(N - v.bit_exact) + " differ from " + platform +
                    "'s default): the hardware computes as this variant does";
      if (!v.also_explained_by.empty()) {
        line += "; so do";
        for (std::size_t j = 0; j < v.also_explained_by.size(); ++j) line += (j ? ", " : " ") + v.also_explained_by[j];
        line += " (the same bits on this data)";
      }
      break;
    case Tier::probabilistic:
    case Tier::deterministic: {
      const bool prob = v.tier == Tier::probabilistic;
      line = std::to_string(N - v.bit_exact) + " of " + n_text + " elements differ from " + platform +
                    "'s emulation and no variant explains them bit for bit; " +
                    (prob ? (v.failure_probability > 0
                                 ? "all lie within the probabilistic bound (fails with probability <= " +
                                       number(v.failure_probability, 3) + ")"
                                 // An op whose model has no probabilistic bound: its worst-case one
                                 // serves (it never fails).
                                 : std::string("all lie within the platform's bound (this op's model bounds the "
                                               "worst case only: it never fails)"))
                          : std::to_string(det_only) +
                                " lie beyond the probabilistic bound but within the worst-case bound: suspicious "
                                "(farther from the exact result than the platform's arithmetic makes likely)");
      break;
    }
    case Tier::violation: {
      std::vector<std::string> parts;
      if (v.not_in_format > 0) {
        parts.push_back(std::to_string(v.not_in_format) + " of " + n_text +
                        " elements of actual are not values of the output format " + std::string(out_format) +
                        " (first: element " + foreign.index + " = " + number(foreign.got) +
                        "): the device output is in another format than the op's out; round it into " +
                        std::string(out_format) + " or build the op with the format the device writes");
      }
      if (v.special_mismatches > 0) {
        parts.push_back(std::to_string(v.special_mismatches) + " of " + n_text +
                        " elements: special value differs from " + platform + "'s (first: element " +
                        special.index + ": got " + number(special.got) + ", the platform gives " +
                        number(special.emulated) + " with bound " + number(special.bound) +
                        "; NaN and +-Inf, and any value where the bound is infinite, must equal the platform's own)");
      }
      const std::size_t out_of_bound = v.violations - v.not_in_format - v.special_mismatches;
      if (out_of_bound > 0) {
        parts.push_back(std::to_string(out_of_bound) + " of " + n_text + " elements lie beyond " + platform +
                        "'s worst-case bound: not explained by the platform's arithmetic nor by any of its " +
                        std::to_string(v.variants_searched) + " variants searched");
      }
      for (std::size_t j = 0; j < parts.size(); ++j) line += (j ? "; " : "") + parts[j];
      break;
    }
  }
  if (!v.passed && v.tier != Tier::violation)
    line += "; the check accepts only " + std::string(to_string(v.accept)) + " or stronger";
  return line;
}

}  // namespace detail

namespace {

using detail::index_text;
using detail::number;

std::string percent(std::size_t part, std::size_t whole) {
  if (whole == 0) return "0%";
  const double p = 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  std::ostringstream s;
  s << std::setprecision(p < 0.1 ? 2 : 3) << p << "%";
  return s.str();
}

}  // namespace

std::string describe(const Verdict& v) {
  std::ostringstream s;
  s << (v.passed ? "PASS" : "FAIL") << " (" << to_string(v.tier) << (v.explained_by.empty() ? "" : ": " + v.explained_by)
    << "): " << v.diagnosis;
  s << "\n  op: " << v.signature << " on " << v.platform << "; accepts " << to_string(v.accept) << " or stronger";
  if (v.failure_probability > 0) s << " (probabilistic bound fails with probability <= " << number(v.failure_probability, 3) << ")";
  const std::size_t differ = v.elements - v.bit_exact;
  s << "\n  elements " << v.elements << ": bit-exact " << v.bit_exact << ", differ " << differ << " ("
    << percent(differ, v.elements) << "); within the probabilistic bound " << v.within_bound
    << ", within the worst-case bound only " << v.deterministic_only << ", violations " << v.violations << " ("
    << percent(v.violations, v.elements) << ")";
  if (v.unwalked > 0)
    s << "; " << v.unwalked << " within the worst-case bound, their probabilistic bound not walked (the check "
      << "fails already)";
  if (v.special_mismatches + v.not_in_format > 0)
    s << "\n  special values: " << v.nan_mismatches << " NaN and " << v.inf_mismatches << " Inf mismatches; "
      << v.not_in_format << " values outside the output format";
  if (!v.concentration.empty()) s << "\n  where: " << v.concentration;
  if (!v.bound_source.empty()) s << "\n  bound's source " << v.bound_source << " (shares of the worst-case bound)";
  if (!v.nearest_variant.empty())
    s << "\n  nearest variant: " << v.nearest_variant << " equals " << v.nearest_variant_matches << " of " << v.elements
      << " elements (" << v.variants_searched << " variants searched)";
  if (!v.diagnoses.empty()) s << "\n  diagnoses (each tested on the data, strongest first):";
  for (const Diagnosis& d : v.diagnoses)
    s << "\n    " << d.kind << " (explains " << number(100 * d.explains, 3) << "%): " << d.detail << " [" << d.evidence << "]";
  // Integer outputs: one unit is one integer, so their errors are said as integers, not ulps.
  const char* unit = v.integer_output ? "" : " ulps";
  s << "\n  " << (v.tolerance_bound == Tier::probabilistic ? "probabilistic" : "worst-case") << " bound as tolerance: max "
    << number(v.tolerance.max_ulps, 3) << unit << ", rtol " << number(v.tolerance.rtol, 3)
    << " atol " << number(v.tolerance.atol, 3) << "; worst error/bound " << number(v.worst_error_over_bound, 3)
    << ", max " << number(v.max_ulps, v.integer_output ? 17 : 3) << (v.integer_output ? " from the reference (integers)"
                                                                    : " ulps from the reference");
  if (!v.worst.empty()) s << "\n  worst elements (by error / bound):";
  for (const WorstElement& w : v.worst) {
    s << "\n  " << (w.violation ? "! " : "  ") << index_text(w.index) << " got " << number(w.got) << ", emulated " << number(w.emulated) << ", reference " << number(w.reference)
      << ", bound " << number(w.bound, 3) << ", error " << number(w.error, v.integer_output ? 17 : 3);
    if (!v.integer_output) s << ", " << number(w.ulps, 3) << " ulps";
  }
  return s.str();
}

}  // namespace numeq::cases
