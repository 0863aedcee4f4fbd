#include "numeq/cases/verdict.hpp"

#include "verdict_text.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cmath>
#include <iomanip>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>

#include "numeq/cases/variants.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/shape.hpp"

namespace numeq::cases {

namespace {

using detail::FirstFailure;
using detail::diagnosis_line;
using detail::index_text;
using detail::number;
using detail::same_value;

using Array = xt::xarray<double>;

// Elements per thread in the verdict's passes (some nanoseconds each).
constexpr std::size_t kSliceBelow = std::size_t{1} << 15;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<std::size_t> unravel(std::size_t flat, const Array& shape_of) {
  std::vector<std::size_t> index(shape_of.dimension());
  for (std::size_t d = shape_of.dimension(); d-- > 0;) {
    index[d] = flat % shape_of.shape()[d];
    flat /= shape_of.shape()[d];
  }
  return index;
}

// Whether x is a value of the output format (numeq::ValueTest; integers: an integer in its
// range). A zero is judged by its value: -0 from a device is the zero of a format without -0 (fnuz).
struct Holds {
  ValueTest test;
  bool operator()(double x) const { return test(x == 0 ? 0.0 : x); }
};

// Where the failing elements lie, over the last two axes: rows and columns that hold any, and
// their ranges; a range that is one tile of 32, 128 or 512 (or the last, partial one) is named.
struct Spread {
  std::vector<std::size_t> rows, cols;  // failures per row / column (of the last two axes)
  std::vector<std::size_t> at;          // the failures' flat indices (the line cover reads them)
  std::size_t count = 0;
  bool one_axis = false;                // a 1-D result: its elements, not rows and columns

  explicit Spread(const Array& shape_of) {
    const std::size_t d = shape_of.dimension();
    one_axis = d <= 1;
    rows.assign(d >= 2 ? shape_of.shape()[d - 2] : 1, 0);
    cols.assign(d >= 1 ? shape_of.shape()[d - 1] : 1, 0);
  }
  void add(std::size_t flat) {
    ++count;
    at.push_back(flat);
    const std::size_t c = flat % cols.size();
    ++cols[c];
    ++rows[(flat / cols.size()) % rows.size()];
  }
  static std::string range_text(const std::vector<std::size_t>& per, const char* what) {
    std::size_t lo = per.size(), hi = 0, used = 0;
    for (std::size_t i = 0; i < per.size(); ++i)
      if (per[i] > 0) lo = std::min(lo, i), hi = i, ++used;
    if (used == 0 || (lo == 0 && hi + 1 == per.size())) return "";
    if (used != hi - lo + 1 && used <= 8) {  // a few apart: each of them ("rows 3, 7, 19")
      std::vector<bool> marked(per.size());
      for (std::size_t i = 0; i < per.size(); ++i) marked[i] = per[i] > 0;
      return detail::listed(marked, what, what);
    }
    // "rows 3..7", "column 3"
    const std::string noun = hi > lo ? std::string(what) : std::string(what).substr(0, std::string(what).size() - 1);
    std::string s = noun + " " + std::to_string(lo) + (hi > lo ? ".." + std::to_string(hi) : "");
    for (const std::size_t tile : {512u, 128u, 32u}) {
      if (per.size() <= tile) continue;
      if (lo / tile != hi / tile) continue;
      const std::size_t t = lo / tile, first = t * tile, last = std::min(per.size(), first + tile) - 1;
      if (lo != first || hi != last) continue;
      const bool partial = last + 1 - first < tile;
      s += " (" + std::string(partial ? "the last, partial " : (last + 1 == per.size() ? "the last " : "")) +
           std::to_string(tile) + "-" + std::string(what).substr(0, std::string(what).size() - 1) + " tile" +
           (partial || last + 1 == per.size() ? "" : " " + std::to_string(t)) + ")";
      break;
    }
    if (used != hi - lo + 1) s += ", " + std::to_string(used) + " of them";
    return s;
  }
  // "row 59 and columns 59, 79" where a few whole lines hold every failure: a row (column) is a
  // line when most of its elements fail (a wrong input row spoils its output row; a wrong input
  // column its output column), and a few is under half of the rows and of the columns (else the
  // failures are everywhere). Empty when no such cover exists.
  std::string line_cover() const {
    const std::size_t R = rows.size(), C = cols.size();
    if (R < 2 || C < 2) return "";
    std::vector<bool> row_line(R), col_line(C);
    std::size_t n_rows = 0, n_cols = 0;
    for (std::size_t i = 0; i < R; ++i) n_rows += row_line[i] = 2 * rows[i] > C;
    for (std::size_t j = 0; j < C; ++j) n_cols += col_line[j] = 2 * cols[j] > R;
    if (n_rows + n_cols == 0 || 2 * n_rows >= R || 2 * n_cols >= C) return "";
    for (const std::size_t flat : at)
      if (!col_line[flat % C] && !row_line[(flat / C) % R]) return "";
    const std::string r = detail::listed(row_line, "row", "rows"), c = detail::listed(col_line, "column", "columns");
    return r.empty() ? c : c.empty() ? r : r + " and " + c;
  }
  std::string text(const char* noun) const {
    if (count == 0) return "";
    const std::string n = std::to_string(count) + " " + noun;
    if (one_axis) {  // "all 16 failures lie in elements 896..999", else spread over some of them
      const std::string e = range_text(cols, "elements");
      if (!e.empty()) return (count == 1 ? "the " : "all ") + n + " lie in " + e;
      std::size_t used = 0;
      for (const std::size_t x : cols) used += x > 0;
      return n + " spread over " + std::to_string(used) + " of " + std::to_string(cols.size()) + " elements";
    }
    const std::string r = range_text(rows, "rows"), c = range_text(cols, "columns");
    if (r.empty() && c.empty()) {
      const std::string lines = line_cover();
      if (!lines.empty()) return (count == 1 ? "the " : "all ") + n + " lie in " + lines;
      std::size_t used_rows = 0, used_cols = 0;
      for (const std::size_t x : rows) used_rows += x > 0;
      for (const std::size_t x : cols) used_cols += x > 0;
      return n + " spread over " + std::to_string(used_rows) + " of " + std::to_string(rows.size()) + " rows and " +
             std::to_string(used_cols) + " of " + std::to_string(cols.size()) + " columns";
    }
    return (count == 1 ? "the " : "all ") + n + " lie in " + (r.empty() ? c : c.empty() ? r : r + " and " + c);
  }
};

}  // namespace

Tier tier_by_name(std::string_view name, std::string_view parameter) {
  // violation comes last (verdict.hpp): the tiers before it are those a check may accept.
  constexpr auto& tiers = enum_names<Tier>;
  static_assert(tiers.back().first == Tier::violation);
  const std::span<const std::pair<Tier, std::string_view>> acceptable(tiers.data(), tiers.size() - 1);
  return by_name(acceptable, name, parameter, "tier", "(the weakest tier that passes)");
}

std::shared_ptr<const Emulation> check_emulation(const Op& op, const core::Platform& platform,
                                                 const CompareOptions& options, std::size_t elements) {
  if (options.accept == Tier::deterministic) return op.emulation(platform, core::BoundOptions{});
  // A union bound over the elements gives each per_check / elements; the walker picks the lambda
  // that reaches it (BoundOptions::failure_probability). Parts of composite ops that still take
  // lambda as given state the probability they reach: their bound falls as
  // exp(-lambda^2 (1 - u)^2 / 2), with (1 - u)^2 >= 0.75 for every format a plan rounds to nearest
  // in (bound.hpp), so one more walk at the lambda that reaches the target, while it falls short.
  const double target = options.failure_probability / static_cast<double>(std::max<std::size_t>(elements, 1));
  core::BoundOptions o{core::BoundKind::probabilistic, 6.0, target};
  std::shared_ptr<const Emulation> em = op.emulation(platform, o);
  for (int tries = 0; tries < 4 && em->failure_probability > target; ++tries) {
    o.lambda = std::sqrt(o.lambda * o.lambda + 2.0 * std::log(em->failure_probability / target) / 0.75);
    o.failure_probability = 0;
    em = op.emulation(platform, o);
  }
  return em;
}

namespace {

// The probabilistic bound where the ladder needs it: at `elements` (the ones not bit-exact), from
// the op restricted to them where it can be (Op::restrict_to: rows of a matmul), else from the
// whole op. Elsewhere the bound is `det`'s. `everywhere` says whether the whole op was walked.
Emulation probabilistic_at(const Op& op, const core::Platform& platform, const CompareOptions& options,
                           std::size_t N, const std::vector<std::size_t>& elements, const Emulation& det,
                           bool& everywhere) {
  if (op.restrict_to && elements.size() < N) {
    auto [part, where] = op.restrict_to(elements);
    // The failure probability per element is that of the whole check's N elements.
    const std::shared_ptr<const Emulation> kept_sub = check_emulation(part, platform, options, N);
    const Emulation& sub = *kept_sub;
    // Every row taken: the part is the op itself, in its own order.
    if (sub.values.size() == N) {
      everywhere = true;
      return sub;
    }
    {
      Emulation em = det;
      for (std::size_t j = 0; j < elements.size(); ++j) {
        em.values.data()[elements[j]] = sub.values.data()[where[j]];
        em.bound.data()[elements[j]] = sub.bound.data()[where[j]];
      }
      em.failure_probability = sub.failure_probability;
      everywhere = false;
      return em;
    }
  }
  everywhere = true;
  return *check_emulation(op, platform, options, N);
}

}  // namespace

namespace {

// ---- the stages of compare, in the order it runs them ----------------------------------------

// Stage 1: the elements that differ from the platform's emulation, and whether any is a value
// the output format does not hold.
struct Differences {
  std::vector<std::size_t> not_exact;
  bool any_foreign = false;
};

Differences differing(const Array& actual, const Op& op, const Emulation& det, const Holds& holds) {
  // Each pass of compare runs on parallel_for's slices; their states merge in slice order
  // (counts, minima and maxima, index lists in order, a top-k under a total order): the verdict
  // is the same on any thread count.
  struct Slice {
    std::vector<std::size_t> at;
    bool foreign = false;
  };
  Differences out;
  for (Slice& d : parallel_states<Slice>(actual.size(), [&](std::size_t begin, std::size_t end, Slice& d) {
         for (std::size_t i = begin; i < end; ++i) {
           const double g = actual.data()[i], e = det.values.data()[i];
           if (!std::isnan(g) && !holds(g)) d.foreign = true;
           else if (same_value(g, e) || (op.out.format.is_integer() && g == e)) continue;
           d.at.push_back(i);
         }
       }, kSliceBelow)) {
    out.any_foreign = out.any_foreign || d.foreign;
    out.not_exact.insert(out.not_exact.end(), d.at.begin(), d.at.end());
  }
  return out;
}

// Stage 2: a variant that computes the output bit for bit, tried on a sample of the differing
// elements first. Special values are searched too (another order may overflow where the default
// does not); a value outside the output format is no variant's output.
std::optional<VariantSearch> variant_search(const Array& actual, const Op& op, const core::Platform& platform,
                                            const CompareOptions& options, const Differences& d) {
  if (d.not_exact.empty() || !options.search_variants || d.any_foreign) return std::nullopt;
  constexpr std::size_t kSample = 64;
  const std::vector<std::size_t> sample(
      d.not_exact.begin(), d.not_exact.begin() + static_cast<std::ptrdiff_t>(std::min(kSample, d.not_exact.size())));
  return search_variants(actual, op, platform, sample, options.variant_scope);
}

// How one element is judged against an emulation: its class, |got - exact|, and the comparison's
// own slack.
enum class Class : std::uint8_t { exact, probabilistic, beyond, special, foreign };
struct Judged {
  Class cls;
  double error;
  double slack;
};

struct Judge {
  const Array& actual;
  const Op& op;
  const reference::ExactValues& ex;
  double exact_error;  // the exact values' stated relative error (check_exact)
  Holds holds;
  bool any_foreign;

  Judged operator()(std::size_t i, const Emulation& e_m) const {
    const double g = actual.data()[i], e = e_m.values.data()[i], B = e_m.bound.data()[i];
    const double hi = ex.hi.data()[i], lo = ex.lo.data()[i];
    // A value the output format does not hold (an fp32 result judged against a bf16 op, a code
    // outside the integer format) is no output of the operation, whatever its distance. Stage 1
    // found whether any is; only then is each element asked again.
    if (any_foreign && !std::isnan(g) && !holds(g))
      return {Class::foreign, std::isfinite(g) && std::isfinite(hi) ? std::abs((g - hi) - lo) : kInf, 0};
    // Integer outputs have one zero: -0 from a float computation is the code 0.
    // The exact value's own uncertainty (binary64 rounding of MPFR results, an enclosure's width
    // or radius: check_exact): an error within it measures nothing.
    const double own = std::isfinite(hi) ? std::abs(hi) * exact_error + (ex.radius.empty() ? 0.0 : ex.radius[i]) : 0.0;
    if (same_value(g, e) || (op.out.format.is_integer() && g == e))
      return {Class::exact, std::isfinite(g) && std::isfinite(hi) ? std::abs((g - hi) - lo) : 0, own};
    // Special values: where the emulation gives NaN or +-Inf, or its bound is infinite or NaN (an
    // overflow, a non-finite input), or where the device or the exact value is not finite, only
    // the platform's own value explains the output (NaN matches any NaN: the case above). An
    // infinite bound bounds nothing: 0.0 for an exp that overflows to Inf on the platform is a
    // wrong result, not one within an infinite tolerance.
    if (!std::isfinite(e) || !std::isfinite(B) || !std::isfinite(hi) || !std::isfinite(g)) return {Class::special, kInf, 0};
    const double d = g - hi;
    const double error = std::abs(d - lo);
    // What the comparison itself may lose: the exact value's own error (binary64 rounding of MPFR
    // results, an enclosure's width or radius: check_exact) and the two subtractions above, each at most
    // 2^-53 relative.
    const double slack = own + (std::abs(d) + error) * 0x1p-52;
    return {error > B + slack ? Class::beyond : Class::probabilistic, error, slack};
  }
};

// Stage 3: the probabilistic walk, where the ladder needs it. No copy of det where the output is
// explained (the emulation judged is det then). Only the differing elements within the worst-case
// bound need the walk: one beyond it, special or outside the format is a violation whatever the
// walk would say. Once a violation is certain the rest is left unwalked (counted, said so), and a
// failing check costs about what a passing one does.
struct Walk {
  std::optional<Emulation> walked;
  bool cut_off = false;     // a violation is certain: the elements within the worst-case bound not walked
  bool everywhere = false;  // the whole op was walked
};

Walk walk_where_needed(const Op& op, const core::Platform& platform, const CompareOptions& options,
                       const Differences& d, bool explained, const Emulation& det, const Judge& judge) {
  Walk w;
  if (explained) return w;
  CompareOptions tiers = options;
  tiers.accept = Tier::probabilistic;  // the probabilistic bound tells the tiers apart whatever is accepted
  std::vector<std::size_t> to_walk;
  for (const std::size_t i : d.not_exact) {
    if (judge(i, det).cls == Class::probabilistic) to_walk.push_back(i);
    else w.cut_off = true;
  }
  w.cut_off = w.cut_off || d.any_foreign;
  if (!to_walk.empty() && !w.cut_off)
    w.walked = probabilistic_at(op, platform, tiers, det.values.size(), to_walk, det, w.everywhere);
  return w;
}

// An element's error over the bound it is judged against (worst_error_over_bound, the ranking).
double ratio_of(const Judged& j, double B) {
  // A value outside the output format fails whatever its distance, but its distance still ranks
  // it among the failures (the worst list is in error / bound order).
  if (j.cls == Class::special || (j.cls == Class::foreign && !std::isfinite(j.error))) return kInf;
  // What lies beyond the comparison's own slack (an exact value known to a radius: a bit-exact
  // element of a bound near 0 must not rank as the worst).
  if (B > 0 && std::isfinite(B)) return std::max(0.0, j.error - j.slack) / B;
  if (j.cls == Class::exact) return 0.0;
  return j.error > j.slack ? kInf : 0.0;
}

// The worst elements: failures before the rest; among failures a special value first (no ratio
// measures it); then error / bound, descending (a value outside the output format by its
// distance too); then index order. Kept in a heap whose front ranks last (memory O(worst)).
struct Scored {
  bool failure, special;
  double ratio;
  std::size_t i;
  double error;
};

bool ranks_before(const Scored& x, const Scored& y) {
  if (x.failure != y.failure) return x.failure;
  if (x.special != y.special) return x.special;
  if (x.ratio != y.ratio) return x.ratio > y.ratio;
  return x.i < y.i;
}

struct Worst {
  std::size_t capacity = 0;
  std::vector<Scored> heap;

  void keep(const Scored& here) {
    if (heap.size() < capacity) {
      heap.push_back(here);
      std::push_heap(heap.begin(), heap.end(), ranks_before);
    } else if (!heap.empty() && ranks_before(here, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), ranks_before);
      heap.back() = here;
      std::push_heap(heap.begin(), heap.end(), ranks_before);
    }
  }
  // Best first; the heap is spent.
  std::vector<Scored> sorted() {
    std::sort_heap(heap.begin(), heap.end(), ranks_before);
    return std::move(heap);
  }
};

// Stage 4 (pass 1), against the emulation judged (em): the counts, the elements beyond its bound
// (for the deterministic bound), and, where em's bound is the accepted one, the ranking a passing
// check needs (no element failing).
struct Counts {
  std::size_t bit_exact = 0, within_bound = 0, special = 0, nan = 0, inf = 0, foreign = 0;
  std::size_t first_special = SIZE_MAX, first_foreign = SIZE_MAX;
  std::vector<std::size_t> beyond;
  double max_ulps = 0;
  double worst_ratio = 0;  // ranked: the largest error / bound
  Worst worst;             // ranked: the worst elements as a passing check ranks them
};

Counts count_against(const Array& actual, const Op& op, const Emulation& em, const Array& ref, const Judge& judge,
                     std::size_t worst, bool rank) {
  const UlpOf ulp_out(op.out.format);
  Counts total;
  total.worst.capacity = worst;
  for (Counts& c : parallel_states<Counts>(actual.size(), [&](std::size_t begin, std::size_t end, Counts& c) {
         c.worst.capacity = rank ? worst : 0;
         for (std::size_t i = begin; i < end; ++i) {
           const Judged j = judge(i, em);
           if (rank) {
             const double ratio = ratio_of(j, em.bound.data()[i]);
             c.worst_ratio = std::max(c.worst_ratio, ratio);
             c.worst.keep(Scored{false, j.cls == Class::special, ratio, i, j.error});
           }
           switch (j.cls) {
             case Class::exact: ++c.bit_exact; break;
             case Class::probabilistic: ++c.within_bound; break;
             case Class::beyond: c.beyond.push_back(i); break;
             case Class::special: {
               ++c.special;
               const double g = actual.data()[i], e = em.values.data()[i];
               if (std::isnan(g) || std::isnan(e)) ++c.nan;
               else if (std::isinf(g) || std::isinf(e)) ++c.inf;
               c.first_special = std::min(c.first_special, i);
               break;
             }
             case Class::foreign:
               ++c.foreign;
               c.first_foreign = std::min(c.first_foreign, i);
               break;
           }
           const double g = actual.data()[i], r = ref.data()[i];
           if (std::isfinite(g) && std::isfinite(r)) c.max_ulps = std::max(c.max_ulps, std::abs(g - r) / ulp_out(r));
         }
       }, kSliceBelow)) {
    total.bit_exact += c.bit_exact;
    total.within_bound += c.within_bound;
    total.special += c.special;
    total.nan += c.nan;
    total.inf += c.inf;
    total.foreign += c.foreign;
    total.max_ulps = std::max(total.max_ulps, c.max_ulps);
    total.first_special = std::min(total.first_special, c.first_special);
    total.first_foreign = std::min(total.first_foreign, c.first_foreign);
    total.beyond.insert(total.beyond.end(), c.beyond.begin(), c.beyond.end());
    total.worst_ratio = std::max(total.worst_ratio, c.worst_ratio);
    for (const Scored& k : c.worst.heap) total.worst.keep(k);
  }
  return total;
}

// Stage 5: the ladder, from the counts and the variant search.
void climb_ladder(Verdict& v, const core::Platform& platform, const std::optional<VariantSearch>& search,
                  std::size_t differing, std::size_t det_only, Tier accept) {
  const std::size_t N = v.elements;
  if (v.bit_exact == N) {
    v.tier = Tier::bit_exact;
    v.explained_by = platform.name;
  } else if (search) {
    const VariantSearch& s = *search;
    v.variants_searched = s.searched;
    if (!s.exact.empty()) {
      v.tier = Tier::variant;
      v.explained_by = s.exact;
      v.also_explained_by = s.also;
    } else if (s.nearest_matches > N - differing) {
      // Only a variant that equals the output on more elements than the platform itself does says
      // something (an integer op's variants all equal the exact result where the output does).
      v.nearest_variant = s.nearest;
      v.nearest_variant_matches = s.nearest_matches;
    }
  }
  if (v.explained_by.empty()) {
    if (v.violations > 0) v.tier = Tier::violation;
    else if (det_only > 0) v.tier = Tier::deterministic;
    else v.tier = Tier::probabilistic;
  }
  v.passed = v.tier <= accept;
}

// Stage 6 (pass 3, for a check that fails or accepts another bound than em's): the failures at the
// accepted tier, where they lie, and the worst elements against the accepted tier's bound.
struct Ranking {
  std::size_t failures = 0;
  Spread spread;
  double worst_ratio = 0;
  Worst worst;
};

Ranking rank_against(const Array& actual, const Emulation& bounds, const Judge& judge, const Verdict& v,
                     Tier accept, std::size_t worst) {
  struct Slice {
    std::size_t failures = 0;
    std::vector<std::size_t> failing;  // in index order
    double worst_ratio = 0;
    Worst worst;
  };
  const std::vector<Slice> slices = parallel_states<Slice>(actual.size(), [&](std::size_t begin, std::size_t end, Slice& r) {
    r.worst.capacity = worst;
    for (std::size_t i = begin; i < end; ++i) {
      const Judged j = judge(i, bounds);
      const bool special = j.cls == Class::special;
      const double ratio = ratio_of(j, bounds.bound.data()[i]);
      // Failing: beyond the accepted bound, special or foreign; or, when only bit-exact (or a
      // variant) is accepted and the verdict is weaker, any element that differs from the emulation.
      bool failure = special || j.cls == Class::foreign || j.cls == Class::beyond;
      if (!v.passed && accept <= Tier::variant && j.cls != Class::exact) failure = true;
      if (v.passed) failure = false;
      if (failure) {
        ++r.failures;
        r.failing.push_back(i);
      }
      r.worst_ratio = std::max(r.worst_ratio, ratio);
      r.worst.keep(Scored{failure, special, ratio, i, j.error});
    }
  }, kSliceBelow);
  Ranking out{0, Spread(actual), 0, Worst{worst, {}}};
  for (const Slice& r : slices) {
    out.failures += r.failures;
    for (const std::size_t i : r.failing) out.spread.add(i);
    out.worst_ratio = std::max(out.worst_ratio, r.worst_ratio);
    for (const Scored& k : r.worst.heap) out.worst.keep(k);
  }
  return out;
}

// Stage 7: the worst elements as the verdict lists them.
std::vector<WorstElement> worst_elements(const std::vector<Scored>& kept, const Array& actual, const Op& op,
                                         const Emulation& em, const Emulation& bounds, const Array& ref,
                                         const reference::ExactValues& ex) {
  std::vector<WorstElement> out;
  for (const Scored& k : kept) {
    const std::size_t i = k.i;
    WorstElement w;
    w.index = unravel(i, actual);
    w.got = actual.data()[i];
    w.emulated = em.values.data()[i];
    w.reference = ref.data()[i];
    w.exact = ex.hi.data()[i] + ex.lo.data()[i];
    w.bound = bounds.bound.data()[i];
    w.error = k.error;
    w.ulps = std::isfinite(w.got) && std::isfinite(w.reference) ? (w.got - w.reference) / ulp_of(w.reference, op.out.format)
                                                                 : std::numeric_limits<double>::quiet_NaN();
    w.violation = k.failure;
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

Verdict compare(const Array& actual, const Op& op, const core::Platform& platform, const CompareOptions& options) {
  if (options.accept == Tier::violation) throw numeq::error("accept: violation is no tier a check can accept; valid: "
                                                            "bit_exact, variant, probabilistic, deterministic");
  if (!(options.failure_probability > 0 && options.failure_probability < 1))
    throw numeq::error("failure_probability: " + number(options.failure_probability) +
                       " is not a probability in (0, 1); the probabilistic tier's bound fails with at most this per check");
  // The exact value and the reference: computed once per op and kept (Op::exact_values).
  double exact_error = 0;
  const reference::ExactValues& ex = op.check_exact(exact_error);
  if (actual.shape() != ex.hi.shape())
    throw numeq::error("actual: shape " + shape_text(actual) + " differs from the result of " + op.signature + ", " +
                       shape_text(ex.hi));
  const Array& ref = op.reference_values();
  const std::size_t N = actual.size();
  // The emulation with its deterministic bound (one pass; cheap), then the tiers in order of cost:
  // bit-exact elements need no bound; a variant that computes the output bit for bit needs none
  // either; only the elements left are judged against the probabilistic bound (the data-driven
  // walk, the costly part), and those beyond it against the deterministic one.
  const std::shared_ptr<const Emulation> kept_det = op.emulation(platform, core::BoundOptions{});
  const Emulation& det = *kept_det;  // the op's own, not a copy
  const Holds holds{ValueTest(op.out.format)};
  const Differences diff = differing(actual, op, det, holds);
  const std::optional<VariantSearch> search = variant_search(actual, op, platform, options, diff);
  const bool explained = diff.not_exact.empty() || (search && !search->exact.empty());
  const Judge judge{actual, op, ex, exact_error, holds, diff.any_foreign};
  const Walk walk = walk_where_needed(op, platform, options, diff, explained, det, judge);
  const Emulation& em = walk.walked ? *walk.walked : det;

  Verdict v;
  v.accept = options.accept;
  v.platform = platform.name;
  v.signature = op.signature;
  v.elements = N;
  v.failure_probability = explained ? 0.0 : std::min(1.0, em.failure_probability * static_cast<double>(N));

  // The accepted tier's bound (the probabilistic one for the tiers above it). Where that is em,
  // pass 1 also ranks the elements as a passing check would; a check that passes then needs no
  // third pass.
  const Emulation& bounds = options.accept == Tier::deterministic ? det : em;
  const bool rank_in_pass_1 = &bounds == &em;
  Counts counts = count_against(actual, op, em, ref, judge, options.worst, rank_in_pass_1);
  v.bit_exact = counts.bit_exact;
  v.within_bound = counts.within_bound;
  v.special_mismatches = counts.special;
  v.nan_mismatches = counts.nan;
  v.inf_mismatches = counts.inf;
  v.not_in_format = counts.foreign;
  v.max_ulps = counts.max_ulps;
  // Pass 2: the deterministic bound of the elements beyond the probabilistic one.
  std::size_t det_only = 0;
  for (const std::size_t i : counts.beyond) det_only += judge(i, det).cls == Class::probabilistic;
  v.deterministic_only = det_only;
  v.violations = counts.beyond.size() - det_only + v.special_mismatches + v.not_in_format;
  if (walk.cut_off) {  // judged against the worst-case bound only: within it, not walked
    v.unwalked = v.within_bound;
    v.within_bound = 0;
  }
  climb_ladder(v, platform, search, diff.not_exact.size(), det_only, options.accept);

  std::vector<Scored> kept;
  Spread spread(actual);
  if (rank_in_pass_1 && v.passed) {
    v.worst_error_over_bound = counts.worst_ratio;
    kept = counts.worst.sorted();
  } else {
    Ranking r = rank_against(actual, bounds, judge, v, options.accept, options.worst);
    v.failures = r.failures;
    v.worst_error_over_bound = r.worst_ratio;
    spread = std::move(r.spread);
    kept = r.worst.sorted();
  }
  v.concentration = spread.text(v.failures == 1 ? "failure" : "failures");
  v.integer_output = op.out.format.is_integer();
  if (!v.passed && !spread.at.empty())
    v.diagnoses = diagnose(op, DiagnosisData{actual, em.values, bounds.bound, ex, spread.at, platform, op.out});
  v.worst = worst_elements(kept, actual, op, em, bounds, ref, ex);
  // The tolerance that the bound amounts to, over every element: the probabilistic bound's where
  // it was walked everywhere, else the worst-case bound's (an output explained bit for bit, or a
  // probabilistic walk of the differing rows only, does not walk the rest). An op whose model
  // bounds the worst case only (failure probability 0) has no probabilistic bound to speak of.
  const bool tolerance_probabilistic =
      options.accept != Tier::deterministic && walk.everywhere && em.failure_probability > 0;
  v.tolerance = tolerance(tolerance_probabilistic ? em.bound : det.bound, ref, op.out.format);
  v.tolerance_bound = tolerance_probabilistic ? Tier::probabilistic : Tier::deterministic;
  if (!v.worst.empty() && v.tier != Tier::bit_exact && v.tier != Tier::variant) {
    const WorstElement& w = v.worst.front();
    const std::size_t i = kept.front().i;  // w's flat index
    const std::vector<BoundShare> shares = op.bound_sources ? op.bound_sources(platform, i, w.emulated)
                                                            : output_rounding_shares(op.out, w.emulated, w.bound);
    const std::string text = describe(shares);
    if (!text.empty()) v.bound_source = "at " + index_text(w.index) + ": " + text;
  }
  const auto first = [&](std::size_t i) {
    return i >= N ? FirstFailure{} : FirstFailure{index_text(unravel(i, actual)), actual.data()[i], em.values.data()[i],
                                                  em.bound.data()[i]};
  };
  v.diagnosis = diagnosis_line(v, platform.name, op.out.format.name, det_only, first(counts.first_foreign),
                               first(counts.first_special));
  return v;
}

}  // namespace numeq::cases
