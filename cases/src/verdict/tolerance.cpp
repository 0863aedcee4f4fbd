// Tolerances (op.hpp): the (rtol, atol) fit of a bound against its reference, ulps of an output
// format, the bound between two platforms.

#include "numeq/cases/op.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/shape.hpp"

namespace numeq::cases {

using Array = xt::xarray<double>;

// ---- tolerances ----

UlpOf::UlpOf(const Format& f)
    : integer_(f.is_integer()), max_(integer_ ? 0 : max_finite(f)),
      emin_(integer_ ? 0 : f.emin()), mantissa_bits_(f.mantissa_bits) {}

double ulp_of(double x, const Format& f) { return UlpOf(f)(x); }

namespace {

// A bound and its reference's magnitude: in the (r, b) plane each element is the point (r_i, b_i),
// and its allowance line atol(rtol) = b_i - rtol r_i.
struct BoundPoint {
  double r, b;
};

// How far b - K r, computed in binary64 with a rounded slope K, may lie from its exact value:
// three roundings of at most 2^-53 (|b| + |K r|) each, doubled.
double off_line(const BoundPoint& x, double K) { return 0x1p-50 * (std::abs(x.b) + std::abs(K * x.r)); }

// The slope of the upper convex hull's edge that crosses the vertical line r = m (left end at
// r <= m, right end at r > m), for points on both sides of m: Kirkpatrick and Seidel's bridge
// ("The ultimate planar convex hull algorithm?", SIAM J. Comput. 15(1), 1986, s3), by prune and
// search. Pair the points, take the median K of the pairs' slopes, find the points on the hull's
// supporting line of slope K; either they straddle m (the bridge, slope K), or the bridge lies to
// one side and one point of every pair whose slope is on the wrong side of K is no end of it.
// Each round drops a quarter of the points or more: linear time, no sort.
// The first element (lowest index) that maximises b_i - K |r_i| among those with b_i and r_i
// finite, as a serial scan with a strict comparison finds it ({-Inf, n} when none is, or when every
// such value is -Inf). A slice keeps four lanes' first maxima and their indices in one pass; the
// lanes' and then the slices' winners merge by (value, then lower index), which no slice or lane
// order changes.
struct Farthest {
  double value;
  std::size_t at;
};
NUMEQ_X86_64_V3_CLONE Farthest farthest_in(const double* bp, const double* rp, std::size_t begin, std::size_t end,
                                           double K) {
  constexpr double none = -std::numeric_limits<double>::infinity();
  // Finiteness from the exponent field; four lanes, each keeping its first maximum and where it
  // lies (one pass over the data; a lane's new maximum is rare after its first elements).
  const auto finite = [](double x) {
    return (std::bit_cast<std::uint64_t>(x) & 0x7ff0000000000000u) != 0x7ff0000000000000u;
  };
  double tops[4] = {none, none, none, none};
  std::size_t at[4] = {end, end, end, end};
  std::size_t i = begin;
  for (; i + 4 <= end; i += 4)
    for (std::size_t l = 0; l < 4; ++l) {
      const double b = bp[i + l], r = rp[i + l];
      const double v = finite(b) & finite(r) ? b - K * std::abs(r) : none;
      if (v > tops[l]) tops[l] = v, at[l] = i + l;
    }
  for (; i < end; ++i) {
    const double v = finite(bp[i]) & finite(rp[i]) ? bp[i] - K * std::abs(rp[i]) : none;
    if (v > tops[0]) tops[0] = v, at[0] = i;
  }
  // The lanes' winners: the largest value, the lowest index among equals (a serial scan's first).
  Farthest best{none, end};
  for (std::size_t l = 0; l < 4; ++l)
    if (at[l] < end && (tops[l] > best.value || (tops[l] == best.value && at[l] < best.at))) best = {tops[l], at[l]};
  if (best.at < end) best.value = bp[best.at] - K * std::abs(rp[best.at]);  // the element's own value (sign of zero)
  return best;
}

// The least atol >= 0 with atol + rt |r_i| >= b_i for every i with b_i and r_i finite, as binary64
// evaluates it, from the slice [begin, end): a_i = b_i - rt |r_i| (rounded) covers element i, or
// else its successor does (the exact b_i - rt |r_i| lies within half a spacing of a_i, below the
// successor, and rounding is monotone); coverage is monotone in atol, so the answer is the largest
// of those. Returns the largest a_i that covers its element and the largest that does not (whose
// successor the caller takes), -Inf where none; branch-free, so that the x86-64-v3 clone
// vectorises it.
struct Covering {
  double covered, short_of;
};
NUMEQ_X86_64_V3_CLONE Covering covering_atol(const double* bp, const double* rp, std::size_t begin, std::size_t end,
                                             double rt) {
  constexpr double none = -std::numeric_limits<double>::infinity();
  const auto finite = [](double x) {
    return (std::bit_cast<std::uint64_t>(x) & 0x7ff0000000000000u) != 0x7ff0000000000000u;
  };
  double covered = none, short_of = none;
  for (std::size_t i = begin; i < end; ++i) {
    const double b = bp[i], p = rt * std::abs(rp[i]);
    const double a = b - p;
    const bool used = finite(b) & finite(rp[i]);
    const bool enough = a + p >= b;
    covered = std::max(covered, used & enough ? a : none);
    short_of = std::max(short_of, used & !enough ? a : none);
  }
  return {covered, short_of};
}

std::pair<double, std::size_t> first_maximum(std::size_t n, const double* bp, const double* rp, double K) {
  std::pair<double, std::size_t> best{-std::numeric_limits<double>::infinity(), n};
  std::mutex merge;
  parallel_for(
      n,
      [&](std::size_t begin, std::size_t end) {
        const Farthest here = farthest_in(bp, rp, begin, end, K);
        if (here.at == end) return;
        const std::lock_guard<std::mutex> lock(merge);
        if (here.value > best.first || (here.value == best.first && here.at < best.second)) best = {here.value, here.at};
      },
      1 << 16);
  return best;
}

double bridge_slope(std::vector<BoundPoint> s, double m) {
  std::vector<BoundPoint> next;
  std::vector<double> slopes, median;
  while (s.size() >= 2) {
    next.clear();
    slopes.clear();
    // Pairs (s[2j], s[2j+1]) ordered by r; equal r: only the higher point can be a hull vertex.
    std::size_t pairs = 0;
    for (std::size_t j = 0; j + 1 < s.size(); j += 2) {
      BoundPoint& p = s[j];
      BoundPoint& q = s[j + 1];
      if (p.r > q.r) std::swap(p, q);
      if (p.r == q.r) {
        next.push_back(p.b >= q.b ? p : q);
        p.r = q.r = std::numeric_limits<double>::quiet_NaN();  // consumed
        continue;
      }
      slopes.push_back((q.b - p.b) / (q.r - p.r));
      s[pairs * 2] = p;  // compact the pairs with a slope to the front, in slope order
      s[pairs * 2 + 1] = q;
      ++pairs;
    }
    if (s.size() % 2) next.push_back(s.back());
    if (pairs == 0) {
      s.swap(next);
      continue;
    }
    median = slopes;
    const auto mid = median.begin() + static_cast<std::ptrdiff_t>(median.size() / 2);
    std::nth_element(median.begin(), mid, median.end());
    const double K = *mid;
    // The points on the supporting line of slope K: the largest b - K r (pairs and kept points).
    // K is a rounded slope and b - K r is rounded twice: a point within off_line (a few ulps of
    // its b and K r, and the largest's) of the largest counts as on the line. The exact largest
    // is always among them, so a side chosen below is the exact one; a point counted in by
    // rounding only lies on the line to within that rounding.
    double top = -std::numeric_limits<double>::infinity(), top_slack = 0;
    const auto climb = [&](const BoundPoint& x) {
      const double v = x.b - K * x.r;
      if (v > top) top = v, top_slack = off_line(x, K);
    };
    for (std::size_t j = 0; j < 2 * pairs; ++j) climb(s[j]);
    for (const BoundPoint& x : next) climb(x);
    double r_min = std::numeric_limits<double>::infinity(), r_max = -r_min;
    const auto visit = [&](const BoundPoint& x) {
      if (x.b - K * x.r >= top - top_slack - off_line(x, K)) r_min = std::min(r_min, x.r), r_max = std::max(r_max, x.r);
    };
    for (std::size_t j = 0; j < 2 * pairs; ++j) visit(s[j]);
    for (const BoundPoint& x : next) visit(x);
    if (r_min <= m && m < r_max) return K;
    // The bridge lies to the right (its slope is below K) or to the left (above K).
    const bool right = r_max <= m;
    for (std::size_t j = 0; j < pairs; ++j) {
      const BoundPoint &p = s[2 * j], &q = s[2 * j + 1];
      const double k = slopes[j];
      if (right ? k >= K : k <= K) next.push_back(right ? q : p);
      else next.push_back(p), next.push_back(q);
    }
    s.swap(next);
  }
  // Unreachable for points on both sides of m; no bridge found: rtol 0 (the caller compares).
  return 0;
}

}  // namespace

Tolerance tolerance(const Array& bound, const Array& reference, const Format& out) {
  if (bound.shape() != reference.shape())
    throw numeq::error("reference: shape " + shape_text(reference) + " differs from the bound's " + shape_text(bound));
  Tolerance t;
  // Elements with a finite bound and reference take part, read in place (compare calls this on
  // full results).
  const double* bp = bound.data();
  const double* rp = reference.data();
  const std::size_t n = bound.size();
  const auto used = [&](std::size_t i) { return std::isfinite(bp[i]) && std::isfinite(rp[i]); };
  const UlpOf ulp(out);
  // The first pass over blocks of a fixed size, on parallel_for's threads, merged in block order:
  // the sum of |reference| (the only order-dependent figure) is the same on any thread count.
  struct Block {
    std::size_t count = 0;
    double sum_r = 0, max_abs = 0, r_top = 0, b_zero = 0, max_ulps = 0, rtol_only = 0, r_max = 0;
    std::size_t unbounded = 0;
  };
  constexpr std::size_t kBlock = 8192;
  std::vector<Block> blocks((n + kBlock - 1) / kBlock);
  parallel_for(blocks.size(), [&](std::size_t first, std::size_t last) {
    for (std::size_t k = first; k < last; ++k) {
      Block& s = blocks[k];
      for (std::size_t i = k * kBlock; i < std::min(n, (k + 1) * kBlock); ++i) {
        if (!std::isfinite(bp[i])) ++s.unbounded;
        if (!used(i)) continue;
        const double bi = bp[i], ri = std::abs(rp[i]);
        s.r_max = std::max(s.r_max, ri);
        ++s.count;
        s.sum_r += ri;
        if (s.count == 1 || bi > s.max_abs) s.max_abs = bi, s.r_top = ri;
        else if (bi == s.max_abs) s.r_top = std::min(s.r_top, ri);
        if (ri == 0) s.b_zero = std::max(s.b_zero, bi);
        s.max_ulps = std::max(s.max_ulps, bi / ulp(rp[i]));
        s.rtol_only = std::max(s.rtol_only, bi == 0 ? 0.0 : (ri == 0 ? std::numeric_limits<double>::infinity() : bi / ri));
      }
    }
  }, 8);
  std::size_t count = 0;
  double sum_r = 0;
  double r_top = 0;   // the smallest |reference| among the largest bounds
  double b_zero = 0;  // the largest bound of a zero reference (and 0)
  for (const Block& s : blocks) {
    t.unbounded += s.unbounded;
    if (s.count == 0) continue;
    t.max_reference = std::max(t.max_reference, s.r_max);
    if (count == 0 || s.max_abs > t.max_abs) t.max_abs = s.max_abs, r_top = s.r_top;
    else if (s.max_abs == t.max_abs) r_top = std::min(r_top, s.r_top);
    count += s.count;
    sum_r += s.sum_r;
    b_zero = std::max(b_zero, s.b_zero);
    t.max_ulps = std::max(t.max_ulps, s.max_ulps);
    t.rtol_only = std::max(t.rtol_only, s.rtol_only);
  }
  if (t.max_abs <= 0) t.max_abs = 0, r_top = 0;  // the line a = 0 is the highest
  t.atol_only = t.max_abs;
  t.atol = t.max_abs;
  if (count == 0) return t;
  // The total allowance f(rtol) = N a(rtol) + rtol sum_i r_i, a(rtol) = max(0, max_i b_i - rtol r_i),
  // is convex and piecewise linear: a is the upper envelope of the lines, whose slope -r_active
  // steepens toward rtol = 0. f falls while r_active exceeds the mean m = sum r / N and rises
  // after: the least f lies where the envelope passes from a line of r > m to one of r <= m. In
  // the (r, b) plane the envelope's lines are the upper convex hull's vertices (a line maximal at
  // rtol is a point on the hull's supporting line of slope rtol), so that rtol is the slope of
  // the hull's edge over r = m. The line a = 0 is the point (0, 0).
  const double N = static_cast<double>(count);
  const double m = sum_r / N;
  if (r_top <= m) return t;  // f rises from rtol = 0 on: atol alone
  // Hull vertices on either side of m: the largest bound (right of m) and the highest point at
  // r = 0 (left). Quickhull steps narrow them down (Barber, Dobkin and Huhdanpaa, ACM TOMS 22(4),
  // 1996): the point farthest above their chord is a hull vertex and takes the place of the one
  // on its side of m; with none above it, the chord is the edge over m. Each step is one pass.
  BoundPoint left{0, b_zero}, right{r_top, t.max_abs};
  double rt = -1;
  for (int step = 0; step < 6 && rt < 0; ++step) {
    const double K = (right.b - left.b) / (right.r - left.r);
    const double chord = std::max(left.b - K * left.r, right.b - K * right.r);
    // The farthest point above the chord (the first of equals), on parallel_for's threads.
    const auto [top, at] = first_maximum(n, bp, rp, K);
    const BoundPoint far = at < n ? BoundPoint{std::abs(rp[at]), bp[at]} : BoundPoint{};
    if (top <= chord + off_line(far, K) + off_line(right, K) + off_line(left, K)) rt = K;
    else (far.r > m ? right : left) = far;
  }
  if (rt < 0) {
    // The edge over m lies between left and right: only points above their chord (to within
    // rounding) can be its ends. The bridge among them.
    const double K = (right.b - left.b) / (right.r - left.r);
    const double chord = std::min(left.b - K * left.r, right.b - K * right.r);
    std::vector<BoundPoint> points{left, right};
    // On parallel_for's slices, concatenated in slice order (the point list of a serial scan).
    for (const std::vector<BoundPoint>& some : parallel_states<std::vector<BoundPoint>>(
             n, [&](std::size_t begin, std::size_t end, std::vector<BoundPoint>& found) {
               for (std::size_t i = begin; i < end; ++i) {
                 if (!used(i)) continue;
                 const BoundPoint x{std::abs(rp[i]), bp[i]};
                 if (x.r > left.r && x.r < right.r &&
                     x.b - K * x.r >= chord - off_line(x, K) - off_line(left, K) - off_line(right, K))
                   found.push_back(x);
               }
             }))
      points.insert(points.end(), some.begin(), some.end());
    rt = bridge_slope(std::move(points), m);
  }
  // The atol that makes rt cover every bound (computed, not estimated), as atol + rtol |ref| is
  // evaluated in binary64 (covering_atol), in one pass.
  double at = 0;
  {
    std::mutex merge;
    parallel_for(n, [&](std::size_t begin, std::size_t end) {
      const Covering c = covering_atol(bp, rp, begin, end, rt);
      const double least = std::max(c.covered, c.short_of == -std::numeric_limits<double>::infinity()
                                                   ? c.short_of : next_up(c.short_of));
      const std::lock_guard<std::mutex> lock(merge);
      at = std::max(at, least);
    }, 1 << 16);
  }
  // Rounding may leave the fit a hair above atol alone: keep the simpler form then.
  if (!(rt > 0) || N * t.max_abs <= N * at + rt * sum_r) return t;
  t.rtol = rt;
  t.atol = at;
  return t;
}

Array cross_platform_bound(const Emulation& a, const Emulation& b) {
  if (a.bound.shape() != b.bound.shape())
    throw numeq::error("b: bound shape " + shape_text(b.bound) + " differs from a's " + shape_text(a.bound));
  Array r = a.bound + b.bound;
  // the sum in double rounds: one ulp of binary64 upward keeps it a bound.
  for (double& v : r) v = std::nextafter(v, std::numeric_limits<double>::infinity());
  return r;
}

}  // namespace numeq::cases
