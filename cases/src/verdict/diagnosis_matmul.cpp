// The models of a matmul kernel's mistakes (diagnosis.hpp): each recomputes the failing elements
// as the mistaken kernel would, under the platform's own plan, and counts those it reproduces
// bit for bit (or within the platform's bound, where the mistake's order is unknown). They run on
// a sample of the failing elements spread evenly over them (at most kSample), one dot product
// each, so a failing check costs a few hundred dot products per hypothesis, not a matmul.

#include "numeq/cases/diagnosis.hpp"

#include "tile_search.hpp"
#include "verdict_text.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "numeq/core/evaluate.hpp"
#include "numeq/core/plan.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::cases {

namespace {

using detail::number;
using detail::same_value;
using Array = xt::xarray<double>;

constexpr std::size_t kSample = 256;
constexpr std::size_t kGlance = 16;  // narrow_accumulator's first look

struct Matmul {
  const Array& a;
  const Array& b;
  const Array* c;
  std::size_t M, K, N;
  std::vector<double> column;  // scratch: one column of b

  std::span<const double> row(std::size_t r) const { return {a.data() + r * K, K}; }
  std::span<const double> col(std::size_t j) {
    column.resize(K);
    for (std::size_t k = 0; k < K; ++k) column[k] = b.data()[k * N + j];
    return column;
  }
  std::optional<double> c_at(std::size_t flat) const {
    if (!c) return std::nullopt;
    if (c->size() == N) return c->data()[flat % N];  // a bias
    if (c->size() == M * N) return c->data()[flat];
    return c->data()[0];
  }
};

// How many of `sample` `fits` (element i, its a row and b column) accepts, each element's row and
// column through `edit` (which may change them: a tile left out) first.
template <class Edit, class Fits>
std::size_t counted(Matmul& mm, const std::vector<std::size_t>& sample, Edit edit, Fits fits) {
  std::size_t hits = 0;
  std::vector<double> x, y;
  for (const std::size_t i : sample) {
    const std::size_t r = i / mm.N, j = i % mm.N;
    const std::span<const double> ar = mm.row(r), bc = mm.col(j);
    x.assign(ar.begin(), ar.end());
    y.assign(bc.begin(), bc.end());
    edit(x, y, r, j);
    hits += fits(i, x, y);
  }
  return hits;
}

// How many of `sample` the plan reproduces bit for bit, their operands through `edit` first.
template <class Edit>
std::size_t reproduced(Matmul& mm, const DiagnosisData& d, const std::vector<std::size_t>& sample,
                       const core::Plan& plan, Edit edit) {
  return counted(mm, sample, edit, [&](std::size_t i, const std::vector<double>& x, const std::vector<double>& y) {
    return same_value(d.actual.data()[i], core::evaluate(x, y, mm.c_at(i), plan));
  });
}

void unchanged(std::vector<double>&, std::vector<double>&, std::size_t, std::size_t) {}

// The op computed with its running sum in a narrow format, in the orders kernels use: one product
// at a time (a textbook loop; products exact, or rounded to the format as ml_dtypes' operators
// round them), or each run of T terms reduced by the platform's own plan (a K tile in the PE array
// or a CUDA main-loop tile; a PSUM group of several tiles) and added into the narrow sum (NKI's
// acc = acc + part into a bf16 SBUF tile). The narrow sum starts from +0.
std::optional<Diagnosis> narrow_accumulator(Matmul& mm, const DiagnosisData& d, const core::Plan& own,
                                            const std::vector<std::size_t>& sample) {
  struct Hypothesis {
    core::Plan plan;
    std::string words;
  };
  std::vector<Hypothesis> tries;
  const auto narrow_sum = [](const Format& f) { return core::Arithmetic{Cast{f}, core::ProductMode::fma, Cast{f}}; };
  for (const Format* f : {&formats::bf16, &formats::fp16}) {
    const std::string name(f->name);
    core::Plan p = own;
    p.reduction = core::sequential(narrow_sum(*f), true);
    tries.push_back({p, "a " + name + " running sum, one exact product at a time (a textbook loop)"});
    core::Arithmetic rounded = narrow_sum(*f);
    rounded.product = core::ProductMode::rounded;
    p.reduction = core::sequential(rounded, true);
    tries.push_back({p, "a " + name + " running sum of products rounded to " + name +
                            " (a textbook loop in " + name + " arithmetic)"});
    for (const std::size_t T : {32u, 64u, 128u, 256u, 512u, 1024u, 2048u}) {
      if (T >= mm.K) break;
      p.reduction = core::chunked(T, own.reduction, core::sequential(narrow_sum(*f), true));
      tries.push_back({p, "each run of " + std::to_string(T) + " K terms reduced as the platform does (a K tile, or a "
                              "PSUM group of tiles), then added into a " + name + " sum (acc = acc + part into a " +
                              name + " tile)"});
    }
  }
  for (const Format* f : {&formats::e4m3fn, &formats::e5m2}) {
    core::Plan p = own;
    p.reduction = core::sequential(narrow_sum(*f), true);
    tries.push_back({p, "an " + std::string(f->name) + " running sum, one exact product at a time"});
  }
  // A glance at a few of the sample first: a model that reproduces none of them is not tried on
  // the rest (one that explains half the failures misses all 16 evenly spread ones rarely).
  const std::vector<std::size_t> glance = detail::spread_evenly(sample, kGlance);
  std::optional<Diagnosis> best;
  for (const Hypothesis& h : tries) {
    if (glance.size() < sample.size() && reproduced(mm, d, glance, h.plan, unchanged) == 0) continue;
    const std::size_t hits = reproduced(mm, d, sample, h.plan, unchanged);
    const double share = static_cast<double>(hits) / static_cast<double>(sample.size());
    if (hits && (!best || share > best->explains))
      best = Diagnosis{"narrow_accumulator", share,
                       "the op computed with a narrow accumulator reproduces " + number(100 * share, 3) +
                           "% of the failing elements: " + h.words,
                       "bit for bit: the platform's plan with its sum kept so, on " +
                           detail::sample_words(sample.size(), d.failing.size()) +
                           " (the narrow sum's rounding decides the bits: any fp32 order inside a run gives them)"};
  }
  return best;
}

// One K tile never accumulated (missing) or accumulated twice (extra). The tile is found by the
// exact sums: the failing elements' errors against the exact result set beside each tile's exact
// partial sum; the best tile is then recomputed under the platform's plan without it (or with it
// again at the end), bit for bit, and failing that, checked within the platform's bound.
std::vector<Diagnosis> k_tiles(Matmul& mm, const DiagnosisData& d, const core::Plan& own,
                               const std::vector<std::size_t>& sample) {
  std::vector<Diagnosis> out;
  if (mm.K < 2) return out;
  const std::size_t ranked = std::min<std::size_t>(sample.size(), 32);
  // Per ranked element: its error and the prefix sums of its products (exact enough to rank).
  std::vector<double> error(ranked);
  std::vector<std::vector<double>> prefix(ranked);
  for (std::size_t s = 0; s < ranked; ++s) {
    const std::size_t i = sample[s], r = i / mm.N, j = i % mm.N;
    error[s] = d.actual.data()[i] - (d.exact.hi.data()[i] + d.exact.lo.data()[i]);
    prefix[s].assign(mm.K + 1, 0.0);
    for (std::size_t k = 0; k < mm.K; ++k) prefix[s][k + 1] = prefix[s][k] + mm.a.data()[r * mm.K + k] * mm.b.data()[k * mm.N + j];
  }
  for (const int sign : {-1, +1}) {  // -1: the tile is missing (the output lacks its sum); +1: extra
    const detail::TileGuess guess = detail::likeliest_tile(error, prefix, mm.K, sign);
    const std::size_t best_T = guess.size, best_t = guess.index;
    if (!best_T) continue;
    const std::size_t lo = best_t * best_T, hi = std::min(mm.K, lo + best_T);
    const auto edit = [&](std::vector<double>& x, std::vector<double>& y, std::size_t, std::size_t) {
      if (sign < 0) {
        std::fill(x.begin() + static_cast<std::ptrdiff_t>(lo), x.begin() + static_cast<std::ptrdiff_t>(hi), 0.0);
      } else {  // the tile once more, after the last
        x.insert(x.end(), x.begin() + static_cast<std::ptrdiff_t>(lo), x.begin() + static_cast<std::ptrdiff_t>(hi));
        y.insert(y.end(), y.begin() + static_cast<std::ptrdiff_t>(lo), y.begin() + static_cast<std::ptrdiff_t>(hi));
      }
    };
    std::size_t hits = reproduced(mm, d, sample, own, edit);
    std::string how = "bit for bit: the platform's plan " + std::string(sign < 0 ? "without the tile" : "with the tile "
                                                                                   "added again after the last");
    if (static_cast<double>(hits) < kDiagnosisThreshold * static_cast<double>(sample.size())) {
      hits = 0;  // the order the mistaken kernel adds in is unknown: its exact value, within the bound
      for (const std::size_t i : sample) {
        const std::size_t r = i / mm.N, j = i % mm.N;
        double part = 0;
        for (std::size_t k = lo; k < hi; ++k) part += mm.a.data()[r * mm.K + k] * mm.b.data()[k * mm.N + j];
        const double want = d.exact.hi.data()[i] + d.exact.lo.data()[i] + sign * part;
        const double g = d.actual.data()[i];
        hits += std::abs(g - want) <= d.bound.data()[i] + std::ldexp(std::abs(g) + std::abs(part), -50);
      }
      how = "within the platform's bound: the exact result " + std::string(sign < 0 ? "less" : "plus") +
            " the tile's exact sum";
    }
    if (!hits) continue;
    const double share = static_cast<double>(hits) / static_cast<double>(sample.size());
    const bool last = hi == mm.K;
    const std::string which = (last ? "the last K tile" : "K tile " + std::to_string(best_t)) + " (rows " +
                              std::to_string(lo) + ".." + std::to_string(hi - 1) + " of K, tiles of " +
                              std::to_string(best_T) + ")";
    out.push_back(Diagnosis{sign < 0 ? "missing_k_tile" : "extra_k_tile", share,
                            which + (sign < 0 ? " never accumulated" : " accumulated twice") + " reproduces " +
                                number(100 * share, 3) + "% of the failing elements",
                            how + ", on " + detail::sample_words(sample.size(), d.failing.size())});
  }
  return out;
}

// An operand read transposed: a square one whole (b [K, K] read as b^T, or a [M, M] as a^T), or
// each of its T x T tiles in place (a kernel that transposes, or forgets to transpose, the tile it
// hands the PE array: T from 8 up, dividing both of the operand's dimensions). Bit for bit under
// the platform's plan; a tiling whose order the plan does not follow, within the platform's bound.
std::optional<Diagnosis> transposed_operand(Matmul& mm, const DiagnosisData& d, const core::Plan& own,
                                            const std::vector<std::size_t>& sample) {
  std::optional<Diagnosis> best;
  for (const bool of_b : {true, false}) {
    const std::size_t rows = of_b ? mm.K : mm.M, cols = of_b ? mm.N : mm.K;
    const double* m = of_b ? mm.b.data() : mm.a.data();
    std::vector<std::size_t> tiles;
    for (std::size_t T = std::min(rows, cols); T >= 8; T /= 2)
      if (rows % T == 0 && cols % T == 0 && (T < std::max(rows, cols) || rows == cols)) tiles.push_back(T);
    for (const std::size_t T : tiles) {
      // element (r, c) of the operand as read: its T x T tile transposed in place
      const auto at = [&](std::size_t r, std::size_t c) {
        return m[(r / T * T + c % T) * cols + (c / T * T + r % T)];
      };
      const auto edit = [&](std::vector<double>& x, std::vector<double>& y, std::size_t r, std::size_t j) {
        if (of_b)
          for (std::size_t k = 0; k < mm.K; ++k) y[k] = at(k, j);
        else
          for (std::size_t k = 0; k < mm.K; ++k) x[k] = at(r, k);
      };
      std::size_t hits = reproduced(mm, d, sample, own, edit);
      bool exact = true;
      if (static_cast<double>(hits) < kDiagnosisThreshold * static_cast<double>(sample.size())) {
        // the kernel's order is not the plan's: within the bound of the edited dot product
        exact = false;
        hits = counted(mm, sample, edit, [&](std::size_t i, const std::vector<double>& x, const std::vector<double>& y) {
          double dot = mm.c_at(i).value_or(0.0), magnitude = std::abs(dot);
          for (std::size_t k = 0; k < mm.K; ++k) {
            dot += x[k] * y[k];
            magnitude += std::abs(x[k] * y[k]);
          }
          const double slack = std::ldexp(static_cast<double>(mm.K + 2) * magnitude, -52);
          return std::abs(d.actual.data()[i] - dot) <= d.bound.data()[i] + slack;
        });
      }
      const double share = static_cast<double>(hits) / static_cast<double>(sample.size());
      if (!hits || (best && share <= best->explains)) continue;
      const std::string name = of_b ? "b" : "a";
      const std::string which = T == rows && T == cols ? name + " read transposed"
                                                       : "each " + std::to_string(T) + " x " + std::to_string(T) +
                                                             " tile of " + name + " read transposed (in place)";
      best = Diagnosis{"transposed_tile", share,
                       which + " reproduces " + number(100 * share, 3) + "% of the failing elements",
                       (exact ? "bit for bit: the platform's plan on " : "within the platform's bound: the exact product with ") +
                           name + " so read, on " + detail::sample_words(sample.size(), d.failing.size())};
    }
  }
  return best;
}

// Failures exactly in the rows of a and columns of b that hold inputs at the input format's
// largest magnitude (or infinite): inputs beyond its range there, which the kernel quantised in a
// format of another range or without saturation.
std::optional<Diagnosis> input_range(Matmul& mm, const DiagnosisData& d, const Format& in) {
  const double top = max_finite(in);
  std::vector<bool> row(mm.M, false), col(mm.N, false);
  std::size_t rows = 0, cols = 0;
  for (std::size_t r = 0; r < mm.M; ++r)
    for (std::size_t k = 0; k < mm.K && !row[r]; ++k) row[r] = std::abs(mm.a.data()[r * mm.K + k]) >= top;
  for (std::size_t j = 0; j < mm.N; ++j)
    for (std::size_t k = 0; k < mm.K && !col[j]; ++k) col[j] = std::abs(mm.b.data()[k * mm.N + j]) >= top;
  for (const bool x : row) rows += x;
  for (const bool x : col) cols += x;
  // Lines covering half the output or more say nothing about where the failures are.
  if (rows + cols == 0 || 2 * rows >= mm.M || 2 * cols >= mm.N) return std::nullopt;
  std::size_t hits = 0;
  for (const std::size_t i : d.failing) hits += row[i / mm.N] || col[i % mm.N];
  const double share = static_cast<double>(hits) / static_cast<double>(d.failing.size());
  if (share < 0.9) return std::nullopt;  // a pattern: it must hold for (almost) every failure
  std::string wider;
  for (const Format* f : {&formats::e4m3, &formats::e4m3fn, &formats::e5m2, &formats::fp16, &formats::bf16}) {
    if (f->storage_bits == in.storage_bits && max_finite(*f) > top)
      wider += (wider.empty() ? "" : ", ") + std::string(f->name) + " (max " + number(max_finite(*f), 6) + ")";
  }
  const std::string where = detail::listed(row, "rows of a", "rows of a") + (rows && cols ? " and " : "") +
                            detail::listed(col, "columns of b", "columns of b");
  return Diagnosis{"input_range", share,
                   std::to_string(hits) + " of the " + std::to_string(d.failing.size()) +
                       " failing elements lie in the output rows and columns of the inputs at " +
                       std::string(in.name) + "'s largest magnitude " + number(top, 6) + " (" + where +
                       "): inputs beyond " + std::string(in.name) + "'s range there, quantised by the kernel " +
                       (wider.empty() ? std::string("otherwise") : "in a format of wider range (" + wider + ")") +
                       " or without saturation",
                   "pattern: every failing element's row of a and column of b"};
}

}  // namespace

std::vector<Diagnosis> diagnose_matmul(const Array& a, const Array& b, const Array* c, const std::string& in_fmt,
                                       const DiagnosisData& d) {
  std::vector<Diagnosis> out;
  if (a.dimension() != 2 || b.dimension() != 2 || d.failing.empty()) return out;
  Matmul mm{a, b, c, a.shape()[0], a.shape()[1], b.shape()[1], {}};
  const core::Plan own = core::plan_for(d.platform, core::Operation::matmul, in_fmt, d.out.format.name);
  const std::vector<std::size_t> sample = detail::spread_evenly(d.failing, kSample);
  if (std::optional<Diagnosis> x = narrow_accumulator(mm, d, own, sample)) out.push_back(std::move(*x));
  for (Diagnosis& x : k_tiles(mm, d, own, sample)) out.push_back(std::move(x));
  if (std::optional<Diagnosis> x = transposed_operand(mm, d, own, sample)) out.push_back(std::move(*x));
  if (std::optional<Diagnosis> x = input_range(mm, d, format_by_name(in_fmt, "in_fmt"))) out.push_back(std::move(*x));
  return out;
}

}  // namespace numeq::cases
