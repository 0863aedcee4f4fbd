// The diagnoses any output shows (patterns measured on every failing element) and the driver that
// adds the op's own models (Op::diagnose) and ranks them. See diagnosis.hpp.

#include "numeq/cases/diagnosis.hpp"

#include "verdict_text.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "numeq/cases/op.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::cases {

namespace {

using detail::number;
using detail::same_value;
using Array = xt::xarray<double>;

// A bit-for-bit pattern is first tried on a sample of the failing elements spread evenly over
// them; only one that explains enough of the sample is counted on every failing element (a
// failing check on a large output stays near the cost of a passing one).
constexpr std::size_t kPatternSample = 2048;

// How many of `elements` satisfy `hit`; on the sample first, on all only where the sample reaches
// the threshold (0 otherwise: the pattern is not reported).
template <class Hit>
std::size_t counted(const std::vector<std::size_t>& failing, const Hit& hit) {
  const std::vector<std::size_t> sample = detail::spread_evenly(failing, kPatternSample);
  std::size_t on_sample = 0;
  for (const std::size_t i : sample) on_sample += hit(i);
  if (sample.size() == failing.size()) return on_sample;
  if (static_cast<double>(on_sample) < 0.9 * kDiagnosisThreshold * static_cast<double>(sample.size())) return 0;
  std::size_t all = 0;
  for (const std::size_t i : failing) all += hit(i);
  return all;
}

std::string count_of(std::size_t n, const std::vector<std::size_t>& failing) {
  return std::to_string(n) + " of the " + std::to_string(failing.size()) + " failing elements";
}

double exact_at(const DiagnosisData& d, std::size_t i) { return d.exact.hi.data()[i] + d.exact.lo.data()[i]; }

// Rows and columns of the output's last two axes (a 1-D output is one row).
struct Grid {
  std::size_t rows = 1, cols = 1;
  explicit Grid(const Array& x) {
    const std::size_t n = x.dimension();
    cols = n >= 1 ? x.shape()[n - 1] : 1;
    rows = cols ? x.size() / cols : 0;  // leading axes fold into rows
  }
};

// NaN / Inf that are not the platform's: from the inputs (the exact result is not finite there),
// or made on the way (the exact result is finite: an intermediate value left a narrower format's
// range, or a division by zero).
std::optional<Diagnosis> special_values(const DiagnosisData& d) {
  std::size_t specials = 0, from_inputs = 0, nan = 0, beside = 0;
  double largest = 0;
  const Grid grid(d.actual);
  std::vector<bool> row_has(grid.rows, false);  // rows along the last axis (leading axes folded in)
  const auto special = [&](std::size_t i) {
    return !std::isfinite(d.actual.data()[i]) || !std::isfinite(d.emulated.data()[i]);
  };
  for (const std::size_t i : d.failing)
    if (special(i)) row_has[i / grid.cols] = true;
  for (const std::size_t i : d.failing) {
    const double g = d.actual.data()[i];
    if (!special(i)) {
      beside += row_has[i / grid.cols];  // a finite failure in a row a special value spoilt (x / Inf = 0)
      continue;
    }
    ++specials;
    nan += std::isnan(g);
    const double x = exact_at(d, i);
    if (!std::isfinite(x)) ++from_inputs;
    else largest = std::max(largest, std::abs(x));
  }
  if (specials == 0) return std::nullopt;
  Diagnosis r{"special_values", static_cast<double>(specials + beside) / static_cast<double>(d.failing.size()), "", ""};
  r.detail = count_of(specials, d.failing) + " are NaN or Inf where the platform gives another value (" +
             std::to_string(nan) + " NaN)" +
             (beside ? ", and " + std::to_string(beside) + " more lie in the rows that hold them" : std::string());
  if (from_inputs == specials) {
    r.detail += ": the exact result is itself NaN or Inf there, so the inputs hold NaN or Inf; the platform "
                "propagates them otherwise";
  } else {
    r.detail += ": the exact result is finite there (largest |exact| " + number(largest, 4) + ")";
    std::string beyond;
    for (const Format* f : {&formats::fp16, &formats::e5m2, &formats::e4m3fn, &formats::e4m3}) {
      if (largest > max_finite(*f)) beyond += (beyond.empty() ? "" : ", ") + std::string(f->name) + " (max " +
                                              number(max_finite(*f), 6) + ")";
    }
    r.detail += beyond.empty() ? ": the kernel made them (a division by zero, or an overflow of a value the exact "
                                 "computation never reaches)"
                               : ": an intermediate value overflowed a narrower format whose range the exact values "
                                 "leave: " + beyond;
  }
  r.evidence = "measured: every failing element's output, emulation and exact value, and the rows they lie in";
  return r;
}

// The output rounded into a narrower format than the op writes: each failing element is the
// platform's value rounded so (a missing or wrong output cast).
std::optional<Diagnosis> wrong_output_format(const DiagnosisData& d) {
  if (d.out.format.is_integer()) return std::nullopt;
  std::optional<Diagnosis> best;
  for (const Format* f : {&formats::bf16, &formats::fp16, &formats::tf32, &formats::e4m3fn, &formats::e4m3,
                          &formats::e5m2}) {
    if (f->mantissa_bits >= d.out.format.mantissa_bits) continue;
    for (const Rounding r : {Rounding::nearest_even, Rounding::toward_zero}) {
      const Cast cast{*f, r};
      const std::size_t hits = counted(d.failing, [&](std::size_t i) {
        const double e = d.emulated.data()[i], g = d.actual.data()[i];
        const double narrowed = round_to_format(e, cast);
        // A value that underflows to zero proves nothing (any tiny value does it).
        return !same_value(g, e) && same_value(g, narrowed) && (narrowed != 0 || e == 0);
      });
      const double share = static_cast<double>(hits) / static_cast<double>(d.failing.size());
      if (hits && (!best || share > best->explains))
        best = Diagnosis{"wrong_output_format", share,
                         count_of(hits, d.failing) + " are the platform's values rounded into " + std::string(f->name) +
                             " (" + std::string(to_string(r)) + ") where the op writes " +
                             std::string(d.out.format.name) + ": a missing or wrong output cast",
                         "bit for bit: the platform's emulation, each failing element rounded into " +
                             std::string(f->name)};
    }
  }
  return best;
}

// An off-by-one index: element [.., i, j] holds the platform's [.., i +- 1, j] or [.., i, j +- 1]
// (a match counts only where the two neighbours differ: equal values prove nothing).
std::optional<Diagnosis> shifted_tile(const DiagnosisData& d) {
  const Grid g(d.actual);
  std::optional<Diagnosis> best;
  struct Shift {
    bool along_rows;
    int step;
  };
  for (const Shift s : {Shift{true, 1}, Shift{true, -1}, Shift{false, 1}, Shift{false, -1}}) {
    const std::size_t hits = counted(d.failing, [&](std::size_t i) {
      const std::size_t r = (i / g.cols) % g.rows, c = i % g.cols;
      const std::ptrdiff_t to = static_cast<std::ptrdiff_t>(s.along_rows ? r : c) + s.step;
      if (to < 0 || to >= static_cast<std::ptrdiff_t>(s.along_rows ? g.rows : g.cols)) return false;
      const std::size_t j = s.along_rows ? i - r * g.cols + static_cast<std::size_t>(to) * g.cols
                                         : i - c + static_cast<std::size_t>(to);
      const double e = d.emulated.data()[j];
      return !same_value(e, d.emulated.data()[i]) && same_value(d.actual.data()[i], e);
    });
    const double share = static_cast<double>(hits) / static_cast<double>(d.failing.size());
    if (hits && (!best || share > best->explains)) {
      const std::string sign = s.step > 0 ? "+ 1" : "- 1";
      best = Diagnosis{"shifted_tile", share,
                       count_of(hits, d.failing) + " hold the platform's value one " +
                           (s.along_rows ? "row" : "column") + " over (element [i, j] is the platform's " +
                           (s.along_rows ? "[i " + sign + ", j]" : "[i, j " + sign + "]") + "): an off-by-one index in " +
                           (s.along_rows ? "the rows (M)" : "the columns (N)"),
                       "bit for bit: the platform's emulation, shifted"};
    }
  }
  return best;
}

// Output tiles of T x T written transposed (element [i, j] of a tile holds the platform's [j, i]).
std::optional<Diagnosis> transposed_output_tiles(const DiagnosisData& d) {
  const Grid g(d.actual);
  std::optional<Diagnosis> best;
  for (const std::size_t T : {std::max(g.rows, g.cols), std::size_t{128}, std::size_t{64}, std::size_t{32},
                              std::size_t{16}}) {
    if (T > g.rows || T > g.cols || T < 2) continue;
    const std::size_t hits = counted(d.failing, [&](std::size_t i) {
      const std::size_t r = (i / g.cols) % g.rows, c = i % g.cols;
      const std::size_t tr = r / T * T + c % T, tc = c / T * T + r % T;
      if (tr >= g.rows || tc >= g.cols || (tr == r && tc == c)) return false;
      const std::size_t j = i - r * g.cols - c + tr * g.cols + tc;
      const double e = d.emulated.data()[j];
      return !same_value(e, d.emulated.data()[i]) && same_value(d.actual.data()[i], e);
    });
    const double share = static_cast<double>(hits) / static_cast<double>(d.failing.size());
    if (hits && (!best || share > best->explains))
      best = Diagnosis{"transposed_tile", share,
                       count_of(hits, d.failing) + " hold the platform's value at the transposed place " +
                           (T == std::max(g.rows, g.cols) ? std::string("of the whole output")
                                                          : "within their " + std::to_string(T) + " x " +
                                                                std::to_string(T) + " output tile") +
                           ": a tile written (or an operand read) transposed",
                       "bit for bit: the platform's emulation, transposed"};
  }
  return best;
}

// Every failing element the exact result times one factor: a scale applied twice, missing or
// inverted (a dequantisation scale, a softmax or attention scale, 1/n of a mean). Fitted as the
// median ratio over the failing elements, then each checked against the exact result times it,
// within the platform's bound (scaled by the factor) and two ulps of the output format. Said as a
// scale mistake with the factor, where row_scale / column_scale would only say "each row".
std::optional<Diagnosis> global_scale(const DiagnosisData& d) {
  std::vector<double> ratio;
  for (const std::size_t i : d.failing) {
    const double x = exact_at(d, i), y = d.actual.data()[i];
    if (std::isfinite(x) && std::isfinite(y) && x != 0) ratio.push_back(y / x);
  }
  if (ratio.size() < 2) return std::nullopt;
  std::nth_element(ratio.begin(), ratio.begin() + static_cast<std::ptrdiff_t>(ratio.size() / 2), ratio.end());
  const double c = ratio[ratio.size() / 2];
  const double two_ulps = std::ldexp(2.0, -d.out.format.mantissa_bits);
  // A factor 0 is zeroed output (a missing write), and one within rounding of 1 is no scale.
  if (!std::isfinite(c) || c == 0 || std::abs(c - 1) <= 4 * two_ulps) return std::nullopt;
  std::size_t hits = 0;
  for (const std::size_t i : d.failing) {
    const double x = exact_at(d, i), y = d.actual.data()[i], B = d.bound.data()[i];
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    hits += std::abs(y - c * x) <= std::abs(c) * B + two_ulps * std::abs(y);
  }
  const double share = static_cast<double>(hits) / static_cast<double>(d.failing.size());
  if (share < kDiagnosisThreshold) return std::nullopt;
  return Diagnosis{"wrong_scale", share,
                   count_of(hits, d.failing) + " are the exact result times one factor " + number(c, 6) +
                       " (or divided by " + number(1 / c, 6) +
                       "): a scale applied twice, missing or inverted (a dequantisation, softmax or mean scale)",
                   "within the platform's bound: every failing element against the exact result times that factor"};
}

// Each failing row (or column) off by one factor, or one offset: fitted on every element of the
// line with a nonzero exact value (the median), then every element of the line checked against the
// fit within the platform's bound (scaled by the factor) and two ulps of the output format.
std::optional<Diagnosis> line_scale(const DiagnosisData& d, bool rows) {
  const Grid g(d.actual);
  if (g.rows < 2 || g.cols < 2) return std::nullopt;
  const std::size_t lines = rows ? g.rows : g.cols, along = rows ? g.cols : g.rows;
  const std::size_t batches = d.actual.size() / (g.rows * g.cols);
  std::vector<std::size_t> failures(lines, 0);
  for (const std::size_t i : d.failing) ++failures[rows ? (i / g.cols) % g.rows : i % g.cols];
  const double two_ulps = std::ldexp(2.0, -d.out.format.mantissa_bits);
  std::size_t scaled = 0, offset = 0;
  std::vector<double> factors, offsets;
  std::vector<double> ratio, diff;
  for (std::size_t l = 0; l < lines; ++l) {
    if (!failures[l]) continue;
    bool scale_fits = true, offset_fits = true;
    // Every batch's line fitted on its own (a batched output: each matrix's line).
    for (std::size_t b = 0; b < batches && (scale_fits || offset_fits); ++b) {
      ratio.clear();
      diff.clear();
      const auto at = [&](std::size_t k) {
        return b * g.rows * g.cols + (rows ? l * g.cols + k : k * g.cols + l);
      };
      for (std::size_t k = 0; k < along; ++k) {
        const std::size_t i = at(k);
        const double x = exact_at(d, i), y = d.actual.data()[i];
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        diff.push_back(y - x);
        if (x != 0) ratio.push_back(y / x);
      }
      if (ratio.size() < 2) scale_fits = false;
      if (diff.size() < 2) offset_fits = false;
      double c = 1, o = 0;
      if (scale_fits) {
        std::nth_element(ratio.begin(), ratio.begin() + static_cast<std::ptrdiff_t>(ratio.size() / 2), ratio.end());
        c = ratio[ratio.size() / 2];
        // A factor 0 is a zeroed line (a division by Inf, a missing write), not a scale mistake.
        scale_fits = std::isfinite(c) && c != 0 && std::abs(c - 1) > 4 * two_ulps;
      }
      if (offset_fits) {
        std::nth_element(diff.begin(), diff.begin() + static_cast<std::ptrdiff_t>(diff.size() / 2), diff.end());
        o = diff[diff.size() / 2];
        offset_fits = o != 0;
      }
      bool needed = false;  // some element lies beyond the bound of the exact value itself
      for (std::size_t k = 0; k < along && (scale_fits || offset_fits); ++k) {
        const std::size_t i = at(k);
        const double x = exact_at(d, i), y = d.actual.data()[i], B = d.bound.data()[i];
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        const double slack = two_ulps * std::abs(y);
        needed = needed || !(std::abs(y - x) <= B + slack);
        if (scale_fits && !(std::abs(y - c * x) <= std::abs(c) * B + slack)) scale_fits = false;
        if (offset_fits && !(std::abs(y - x - o) <= B + slack + two_ulps * std::abs(o))) offset_fits = false;
      }
      // A line the platform's bound already covers needs no factor: nothing to diagnose there.
      scale_fits = scale_fits && needed;
      offset_fits = offset_fits && needed;
      if (scale_fits) factors.push_back(c);
      if (offset_fits) offsets.push_back(o);
    }
    if (scale_fits) scaled += failures[l];
    else if (offset_fits) offset += failures[l];
  }
  const bool by_factor = scaled >= offset;
  const std::size_t hits = by_factor ? scaled : offset;
  if (!hits) return std::nullopt;
  std::vector<double>& values = by_factor ? factors : offsets;
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  const std::string noun = rows ? "row" : "column";
  const std::string range = *lo == *hi ? "one " + std::string(by_factor ? "factor " : "offset ") + number(*lo, 6) +
                                             " for all of them"
                                       : std::string(by_factor ? "factors " : "offsets ") + number(*lo, 6) + " .. " +
                                             number(*hi, 6);
  return Diagnosis{rows ? "row_scale" : "column_scale",
                   static_cast<double>(hits) / static_cast<double>(d.failing.size()),
                   count_of(hits, d.failing) + " lie in " + noun + "s each off by one " +
                       (by_factor ? "constant factor" : "constant offset") + " (" + std::to_string(values.size()) + " " +
                       noun + "s; " + range + "): a normalisation, scale or eps mistake",
                   "pattern: each " + noun + "'s " + (by_factor ? "median ratio to" : "median difference from") +
                       " the exact result, every element of the " + noun + " within the platform's bound of it"};
}

// Errors that are multiples of 2^8, 2^16 or 2^32: an integer of that width wrapped around.
std::optional<Diagnosis> integer_wrap(const DiagnosisData& d) {
  std::vector<double> errors;
  for (const std::size_t i : d.failing) {
    const double g = d.actual.data()[i], x = exact_at(d, i);
    if (!std::isfinite(g) || !std::isfinite(x) || g != std::nearbyint(g) || x != std::nearbyint(x)) continue;
    errors.push_back(g - x);
  }
  if (errors.empty() || (!d.out.format.is_integer() && errors.size() < d.failing.size())) return std::nullopt;
  for (const int w : {32, 16, 8}) {
    const double m = std::ldexp(1.0, w);
    std::size_t hits = 0;
    double lo = 0, hi = 0;
    for (const double e : errors) {
      if (e == 0 || std::fmod(std::abs(e), m) != 0) continue;
      lo = hits ? std::min(lo, e) : e;
      hi = hits ? std::max(hi, e) : e;
      ++hits;
    }
    const double share = static_cast<double>(hits) / static_cast<double>(d.failing.size());
    if (share < kDiagnosisThreshold) continue;
    return Diagnosis{"integer_wrap", share,
                     count_of(hits, d.failing) + " are off by multiples of 2^" + std::to_string(w) + " = " +
                         number(m, 12) + " (errors " + number(lo, 12) + " .. " + number(hi, 12) + "): an int" +
                         std::to_string(w) + " accumulator or intermediate wraps around",
                     "pattern: every failing element's integer error against the exact result"};
  }
  return std::nullopt;
}

}  // namespace

void rank(std::vector<Diagnosis>& found) {
  std::erase_if(found, [](const Diagnosis& d) { return !(d.explains >= kDiagnosisThreshold); });
  // Ranked by evidence first: a model that reproduces failing elements bit for bit (or a
  // measurement of every one) outranks one that only fits within a bound or shows a pattern,
  // whatever their shares (both already pass the threshold); then by the share explained.
  std::stable_sort(found.begin(), found.end(), [](const Diagnosis& x, const Diagnosis& y) {
    const bool bx = exact_evidence(x), by = exact_evidence(y);
    return bx != by ? bx : x.explains > y.explains;
  });
}

std::vector<Diagnosis> diagnose(const Op& op, const DiagnosisData& data) {
  std::vector<Diagnosis> found;
  if (data.failing.empty()) return found;
  if (op.diagnose) found = op.diagnose(data);  // the op's models first: at equal strength they lead
  for (const auto& pattern : {special_values, wrong_output_format, shifted_tile, transposed_output_tiles,
                              integer_wrap}) {
    if (std::optional<Diagnosis> d = pattern(data)) found.push_back(std::move(*d));
  }
  if (std::optional<Diagnosis> d = global_scale(data)) {
    found.push_back(std::move(*d));  // one factor for every element: row_scale / column_scale say less
  } else {
    for (const bool rows : {true, false})
      if (std::optional<Diagnosis> d = line_scale(data, rows)) found.push_back(std::move(*d));
  }
  rank(found);
  return found;
}

}  // namespace numeq::cases
