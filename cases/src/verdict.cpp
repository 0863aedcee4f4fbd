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

// "[3,13]": an element's index as the worst-element list and the diagnosis write it.
std::string index_text(const std::vector<std::size_t>& index) {
  std::string s = "[";
  for (std::size_t d = 0; d < index.size(); ++d) s += (d ? "," : "") + std::to_string(index[d]);
  return s + "]";
}

// Whether x is a value of the output format (numeq::ValueTest; integers: an integer in its
// range). A zero is judged by its value: -0 from a device is the zero of a format without -0 (fnuz).
struct Holds {
  ValueTest test;
  bool operator()(double x) const { return test(x == 0 ? 0.0 : x); }
};

std::string percent(std::size_t part, std::size_t whole) {
  if (whole == 0) return "0%";
  const double p = 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  std::ostringstream s;
  s << std::setprecision(p < 0.1 ? 2 : 3) << p << "%";
  return s.str();
}

// Where the failing elements lie, over the last two axes: rows and columns that hold any, and
// their ranges; a range that is one tile of 32, 128 or 512 (or the last, partial one) is named.
struct Spread {
  std::vector<std::size_t> rows, cols;  // failures per row / column (of the last two axes)
  std::vector<std::size_t> at;          // the failures' flat indices (the line cover reads them)
  std::size_t count = 0;

  explicit Spread(const Array& shape_of) {
    const std::size_t d = shape_of.dimension();
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
    const std::string r = range_text(rows, "rows"), c = range_text(cols, "columns");
    const std::string n = std::to_string(count) + " " + noun;
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

Emulation check_emulation(const Op& op, const core::Platform& platform, const CompareOptions& options,
                          std::size_t elements) {
  if (options.accept == Tier::deterministic) return op.emulate(platform, core::BoundOptions{});
  // A union bound over the elements gives each per_check / elements; the walker picks the lambda
  // that reaches it (BoundOptions::failure_probability). Parts of composite ops that still take
  // lambda as given state the probability they reach: their bound falls as
  // exp(-lambda^2 (1 - u)^2 / 2), with (1 - u)^2 >= 0.75 for every format a plan rounds to nearest
  // in (bound.hpp), so one more walk at the lambda that reaches the target, while it falls short.
  const double target = options.failure_probability / static_cast<double>(std::max<std::size_t>(elements, 1));
  core::BoundOptions o{core::BoundKind::probabilistic, 6.0, target};
  Emulation em = op.emulate(platform, o);
  for (int tries = 0; tries < 4 && em.failure_probability > target; ++tries) {
    o.lambda = std::sqrt(o.lambda * o.lambda + 2.0 * std::log(em.failure_probability / target) / 0.75);
    o.failure_probability = 0;
    em = op.emulate(platform, o);
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
    Emulation sub = check_emulation(part, platform, options, N);
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
  return check_emulation(op, platform, options, N);
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
  const Emulation det = op.emulate(platform, core::BoundOptions{});
  const Holds holds{ValueTest(op.out.format)};
  // Each pass below runs on parallel_for's slices; their states merge in slice order (counts,
  // minima and maxima, index lists in order, a top-k under a total order): the verdict is the same
  // on any thread count.
  struct Differing {
    std::vector<std::size_t> at;
    bool foreign = false;
  };
  std::vector<std::size_t> not_exact;
  bool any_foreign = false;
  for (Differing& d : parallel_states<Differing>(N, [&](std::size_t begin, std::size_t end, Differing& d) {
         for (std::size_t i = begin; i < end; ++i) {
           const double g = actual.data()[i], e = det.values.data()[i];
           if (!std::isnan(g) && !holds(g)) d.foreign = true;
           else if (same_value(g, e) || (op.out.format.is_integer() && g == e)) continue;
           d.at.push_back(i);
         }
       }, kSliceBelow)) {
    any_foreign = any_foreign || d.foreign;
    not_exact.insert(not_exact.end(), d.at.begin(), d.at.end());
  }
  std::optional<VariantSearch> search;
  if (!not_exact.empty() && options.search_variants && !any_foreign) {
    // Special values are searched too (another order may overflow where the default does not);
    // a value outside the output format is no variant's output. The search tries a sample of the
    // differing elements first.
    constexpr std::size_t kSample = 64;
    const std::vector<std::size_t> sample(not_exact.begin(),
                                          not_exact.begin() + static_cast<std::ptrdiff_t>(std::min(kSample, not_exact.size())));
    search = search_variants(actual, op, platform, sample);
  }
  const bool explained = not_exact.empty() || (search && !search->exact.empty());
  // Per element: its class, and |got - exact| with the comparison's own slack.
  enum class Class : std::uint8_t { exact, probabilistic, beyond, special, foreign };
  struct Judged {
    Class cls;
    double error;
    double slack;
  };
  const auto judge = [&](std::size_t i, const Emulation& e_m) -> Judged {
    const double g = actual.data()[i], e = e_m.values.data()[i], B = e_m.bound.data()[i];
    const double hi = ex.hi.data()[i], lo = ex.lo.data()[i];
    // A value the output format does not hold (an fp32 result judged against a bf16 op, a code
    // outside the integer format) is no output of the operation, whatever its distance. The scan
    // above found whether any is; only then is each element asked again.
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
  };

  CompareOptions tiers = options;
  tiers.accept = Tier::probabilistic;  // the probabilistic bound tells the tiers apart whatever is accepted
  bool probabilistic_everywhere = false;
  // No copy of det where the output is explained (em is det then). Only the differing elements
  // within the worst-case bound need the probabilistic walk: one beyond it, special or outside
  // the format is a violation whatever the walk would say (a failing check stops paying there).
  std::optional<Emulation> walked;
  // Once a violation is certain (an element beyond the worst-case bound, special or outside the
  // format), the check fails whatever the walk says of the rest: those are left unwalked (counted,
  // said so) and the failing check costs about what a passing one does.
  bool cut_off = false;
  if (!explained) {
    std::vector<std::size_t> to_walk;
    for (const std::size_t i : not_exact) {
      if (judge(i, det).cls == Class::probabilistic) to_walk.push_back(i);
      else cut_off = true;
    }
    cut_off = cut_off || any_foreign;
    if (!to_walk.empty() && !cut_off)
      walked = probabilistic_at(op, platform, tiers, N, to_walk, det, probabilistic_everywhere);
  }
  const Emulation& em = walked ? *walked : det;
  const auto ref_at = [&](std::size_t i) { return ref.data()[i]; };
  Verdict v;
  v.accept = options.accept;
  v.platform = platform.name;
  v.signature = op.signature;
  v.elements = N;
  v.failure_probability = explained ? 0.0 : std::min(1.0, em.failure_probability * static_cast<double>(N));


  // How an element ranks among the worst: failures before the rest; among failures a special
  // value first (no ratio measures it); then error / bound, descending (a value outside the
  // output format by its distance too); then index order. Kept in a heap whose front ranks last (memory O(worst)).
  struct Scored {
    bool failure, special;
    double ratio;
    std::size_t i;
    double error;
  };
  const auto ranks_before = [](const Scored& x, const Scored& y) {
    if (x.failure != y.failure) return x.failure;
    if (x.special != y.special) return x.special;
    if (x.ratio != y.ratio) return x.ratio > y.ratio;
    return x.i < y.i;
  };
  std::vector<Scored> kept;
  kept.reserve(options.worst);
  const auto keep = [&](std::vector<Scored>& heap, const Scored& here) {
    if (heap.size() < options.worst) {
      heap.push_back(here);
      std::push_heap(heap.begin(), heap.end(), ranks_before);
    } else if (!heap.empty() && ranks_before(here, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), ranks_before);
      heap.back() = here;
      std::push_heap(heap.begin(), heap.end(), ranks_before);
    }
  };

  // An element's error over the bound it is judged against (worst_error_over_bound, the ranking).
  const auto ratio_of = [](const Judged& j, double B) {
    // A value outside the output format fails whatever its distance, but its distance still
    // ranks it among the failures (the worst list is in error / bound order).
    if (j.cls == Class::special || (j.cls == Class::foreign && !std::isfinite(j.error))) return kInf;
    // What lies beyond the comparison's own slack (an exact value known to a radius: a
    // bit-exact element of a bound near 0 must not rank as the worst).
    if (B > 0 && std::isfinite(B)) return std::max(0.0, j.error - j.slack) / B;
    if (j.cls == Class::exact) return 0.0;
    return j.error > j.slack ? kInf : 0.0;
  };
  // The accepted tier's bound (the probabilistic one for the tiers above it). Where that is em,
  // pass 1 also ranks the elements as a passing check would (no element failing); a check that
  // passes then needs no third pass.
  const Emulation& bounds = options.accept == Tier::deterministic ? det : em;
  const bool rank_in_pass_1 = &bounds == &em;

  const UlpOf ulp_out(op.out.format);
  // Pass 1, against the probabilistic bound: counts, and the elements beyond it (for the
  // deterministic bound).
  struct Counted {
    std::size_t bit_exact = 0, within_bound = 0, special = 0, nan = 0, inf = 0, foreign = 0;
    std::size_t first_special = SIZE_MAX, first_foreign = SIZE_MAX;
    std::vector<std::size_t> beyond;
    double max_ulps = 0;
    double worst_ratio = 0;
    std::vector<Scored> kept;  // this slice's worst as a passing check ranks them, as a heap
  };
  std::vector<std::size_t> beyond;
  std::size_t first_special = N, first_foreign = N;
  std::vector<Scored> kept_if_passed;
  double worst_ratio_if_passed = 0;
  for (Counted& c : parallel_states<Counted>(N, [&](std::size_t begin, std::size_t end, Counted& c) {
         if (rank_in_pass_1) c.kept.reserve(options.worst);
         for (std::size_t i = begin; i < end; ++i) {
           const Judged j = judge(i, em);
           if (rank_in_pass_1) {
             const double ratio = ratio_of(j, em.bound.data()[i]);
             c.worst_ratio = std::max(c.worst_ratio, ratio);
             keep(c.kept, Scored{false, j.cls == Class::special, ratio, i, j.error});
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
           const double g = actual.data()[i], r = ref_at(i);
           if (std::isfinite(g) && std::isfinite(r)) c.max_ulps = std::max(c.max_ulps, std::abs(g - r) / ulp_out(r));
         }
       }, kSliceBelow)) {
    v.bit_exact += c.bit_exact;
    v.within_bound += c.within_bound;
    v.special_mismatches += c.special;
    v.nan_mismatches += c.nan;
    v.inf_mismatches += c.inf;
    v.not_in_format += c.foreign;
    v.max_ulps = std::max(v.max_ulps, c.max_ulps);
    first_special = std::min(first_special, c.first_special);
    first_foreign = std::min(first_foreign, c.first_foreign);
    beyond.insert(beyond.end(), c.beyond.begin(), c.beyond.end());
    worst_ratio_if_passed = std::max(worst_ratio_if_passed, c.worst_ratio);
    for (const Scored& k : c.kept) keep(kept_if_passed, k);
  }
  // Pass 2: the deterministic bound of the elements beyond the probabilistic one.
  std::size_t det_only = 0;
  for (const std::size_t i : beyond) {
    const Judged j = judge(i, det);
    if (j.cls == Class::probabilistic) ++det_only;  // within the deterministic bound
  }
  v.deterministic_only = det_only;
  v.violations = beyond.size() - det_only + v.special_mismatches + v.not_in_format;
  if (cut_off) {  // judged against the worst-case bound only: within it, not walked
    v.unwalked = v.within_bound;
    v.within_bound = 0;
  }

  // The ladder.
  const bool all_exact = v.bit_exact == N;
  if (all_exact) {
    v.tier = Tier::bit_exact;
    v.explained_by = platform.name;
  } else if (search) {
    const VariantSearch& s = *search;
    v.variants_searched = s.searched;
    if (!s.exact.empty()) {
      v.tier = Tier::variant;
      v.explained_by = s.exact;
      v.also_explained_by = s.also;
    } else if (s.nearest_matches > N - not_exact.size()) {
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
  v.passed = v.tier <= options.accept;

  // The failures at the accepted tier, their spread and the worst elements, against the
  // accepted tier's bound: ranked in pass 1 where the check passed against em, else a pass here.
  Spread spread(actual);
  if (rank_in_pass_1 && v.passed) {
    v.worst_error_over_bound = worst_ratio_if_passed;
    kept = std::move(kept_if_passed);
  } else {
    struct Ranked {
      std::size_t failures = 0;
      std::vector<std::size_t> failing;  // in index order
      double worst_ratio = 0;
      std::vector<Scored> kept;  // this slice's worst, as a heap
    };
    const std::vector<Ranked> ranked = parallel_states<Ranked>(N, [&](std::size_t begin, std::size_t end, Ranked& r) {
      r.kept.reserve(options.worst);
      for (std::size_t i = begin; i < end; ++i) {
        const Judged j = judge(i, bounds);
        const bool special = j.cls == Class::special;
        const double ratio = ratio_of(j, bounds.bound.data()[i]);
        // Failing: beyond the accepted bound, special or foreign; or, when only bit-exact (or a
        // variant) is accepted and the verdict is weaker, any element that differs from the emulation.
        bool failure = special || j.cls == Class::foreign || j.cls == Class::beyond;
        if (!v.passed && options.accept <= Tier::variant && j.cls != Class::exact) failure = true;
        if (v.passed) failure = false;
        if (failure) {
          ++r.failures;
          r.failing.push_back(i);
        }
        r.worst_ratio = std::max(r.worst_ratio, ratio);
        keep(r.kept, Scored{failure, special, ratio, i, j.error});
      }
    }, kSliceBelow);
    for (const Ranked& r : ranked) {
      v.failures += r.failures;
      for (const std::size_t i : r.failing) spread.add(i);
      v.worst_error_over_bound = std::max(v.worst_error_over_bound, r.worst_ratio);
      for (const Scored& k : r.kept) keep(kept, k);
    }
  }
  v.concentration = spread.text(v.failures == 1 ? "failure" : "failures");
  v.integer_output = op.out.format.is_integer();
  if (!v.passed && !spread.at.empty())
    v.diagnoses = diagnose(op, DiagnosisData{actual, em.values, bounds.bound, ex, spread.at, platform, op.out});
  std::sort_heap(kept.begin(), kept.end(), ranks_before);
  for (const Scored& k : kept) {
    const std::size_t i = k.i;
    WorstElement w;
    w.index = unravel(i, actual);
    w.got = actual.data()[i];
    w.emulated = em.values.data()[i];
    w.reference = ref_at(i);
    w.exact = ex.hi.data()[i] + ex.lo.data()[i];
    w.bound = bounds.bound.data()[i];
    w.error = k.error;
    w.ulps = std::isfinite(w.got) && std::isfinite(w.reference) ? (w.got - w.reference) / ulp_of(w.reference, op.out.format)
                                                                 : std::numeric_limits<double>::quiet_NaN();
    w.violation = k.failure;
    v.worst.push_back(std::move(w));
  }
  // The tolerance that the bound amounts to, over every element: the probabilistic bound's where
  // it was walked everywhere, else the worst-case bound's (an output explained bit for bit, or a
  // probabilistic walk of the differing rows only, does not walk the rest).
  // (An op whose model bounds the worst case only, failure probability 0, has no probabilistic
  // bound to speak of: its tolerance is the worst-case one.)
  const bool tolerance_probabilistic =
      options.accept != Tier::deterministic && probabilistic_everywhere && em.failure_probability > 0;
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

  // The diagnosis: one line.
  const std::string n_text = std::to_string(N);
  switch (v.tier) {
    case Tier::bit_exact:
      v.diagnosis = "bit-exact with " + platform.name + "'s emulation on all " + n_text + " elements";
      break;
    case Tier::variant:
      v.diagnosis = "bit-exact with the variant " + v.explained_by + " on all " + n_text + " elements (" +
                    std::to_string(N - v.bit_exact) + " differ from " + platform.name +
                    "'s default): the hardware computes as this variant does";
      if (!v.also_explained_by.empty()) {
        v.diagnosis += "; so do";
        for (std::size_t j = 0; j < v.also_explained_by.size(); ++j) v.diagnosis += (j ? ", " : " ") + v.also_explained_by[j];
        v.diagnosis += " (the same bits on this data)";
      }
      break;
    case Tier::probabilistic:
    case Tier::deterministic: {
      const bool prob = v.tier == Tier::probabilistic;
      v.diagnosis = std::to_string(N - v.bit_exact) + " of " + n_text + " elements differ from " + platform.name +
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
        const std::size_t i = first_foreign;
        parts.push_back(std::to_string(v.not_in_format) + " of " + n_text +
                        " elements of actual are not values of the output format " + std::string(op.out.format.name) +
                        " (first: element " + index_text(unravel(i, actual)) + " = " + number(actual.data()[i]) +
                        "): the device output is in another format than the op's out; round it into " +
                        std::string(op.out.format.name) + " or build the op with the format the device writes");
      }
      if (v.special_mismatches > 0) {
        const std::size_t i = first_special;
        parts.push_back(std::to_string(v.special_mismatches) + " of " + n_text +
                        " elements: special value differs from " + platform.name + "'s (first: element " +
                        index_text(unravel(i, actual)) + ": got " + number(actual.data()[i]) + ", the platform gives " +
                        number(em.values.data()[i]) + " with bound " + number(em.bound.data()[i]) +
                        "; NaN and +-Inf, and any value where the bound is infinite, must equal the platform's own)");
      }
      const std::size_t out_of_bound = v.violations - v.not_in_format - v.special_mismatches;
      if (out_of_bound > 0) {
        parts.push_back(std::to_string(out_of_bound) + " of " + n_text + " elements lie beyond " + platform.name +
                        "'s worst-case bound: not explained by the platform's arithmetic nor by any of its " +
                        std::to_string(v.variants_searched) + " variants searched");
      }
      for (std::size_t j = 0; j < parts.size(); ++j) v.diagnosis += (j ? "; " : "") + parts[j];
      break;
    }
  }
  if (!v.passed && v.tier != Tier::violation)
    v.diagnosis += "; the check accepts only " + std::string(to_string(options.accept)) + " or stronger";
  return v;
}

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
