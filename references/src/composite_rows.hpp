#pragma once
// What the certified composite operations (softmax.cpp, norms.cpp, attention.cpp) share: exact
// dyadic arithmetic in MPFR, one output row and Ziv's loop over it (see composite.hpp for the
// definitions and the argument why the loop ends), per-thread interval storage, and the driver
// that runs rows on threads. Internal to references/.

#include <algorithm>
#include <atomic>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>

#include "numeq/formats/error.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/round_and_pack.hpp"
#include "numeq/references/accumulator.hpp"
#include "numeq/references/composite.hpp"
#include "numeq/references/mpfr_value.hpp"

#include "double_interval.hpp"
#include "fast_functions.hpp"

namespace numeq::reference::rows {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// As for the elementwise functions: 2^16 bits is far beyond what any non-representable result
// needs; reaching it means an exact case the enclosure did not collapse, which is reported.
inline constexpr mpfr_prec_t kMaxPrecision = mpfr_prec_t{1} << 16;

// ---- exact dyadic arithmetic ----
//
// Every input is a double, i.e. a dyadic rational; sums, differences and products of dyadics are
// dyadic, and MPFR computes them exactly when the target precision spans the result's bits. The
// helpers below size the target so, and check MPFR's ternary value (zero iff exact, MPFR manual
// s4.5) so that a sizing mistake cannot pass silently.

// The span of the bits of finite doubles: every value lies below 2^top in magnitude and is a
// multiple of 2^low. Empty (no non-zero value) when top < low.
struct BitSpan {
  long top = LONG_MIN;
  long low = LONG_MAX;

  void add(double x) {
    if (x == 0 || !std::isfinite(x)) return;
    int e = 0;
    const double m = std::frexp(std::fabs(x), &e);  // x = m 2^e, m in [1/2, 1)
    // m 2^53 is an integer (subnormals included); its trailing zeros raise the lowest bit.
    const auto integer = static_cast<std::uint64_t>(std::ldexp(m, 53));
    top = std::max(top, static_cast<long>(e));
    low = std::min(low, static_cast<long>(e) - 53 + std::countr_zero(integer));
  }
  bool empty() const { return top < low; }
  // Bits enough for a sum of `terms` such values, exactly.
  mpfr_prec_t sum_precision(std::size_t terms) const {
    if (empty()) return MPFR_PREC_MIN;
    return static_cast<mpfr_prec_t>(top - low + std::bit_width(terms) + 1);
  }
};

inline BitSpan product_span(const BitSpan& a, const BitSpan& b) {
  if (a.empty() || b.empty()) return {};
  return {a.top + b.top, a.low + b.low};
}

inline void require_exact(int ternary) {
  if (ternary != 0) throw numeq::error("reference: internal error: an exact step was rounded");
}

// The exponent range an MPFR number's bits span: [lsb, top) with value < 2^top.
inline mpfr_prec_t exact_sum_precision(mpfr_srcptr a, mpfr_srcptr b) {
  if (mpfr_zero_p(a)) return mpfr_get_prec(b);
  if (mpfr_zero_p(b)) return mpfr_get_prec(a);
  const long top = std::max(mpfr_get_exp(a), mpfr_get_exp(b)) + 1;
  const long low = std::min(mpfr_get_exp(a) - mpfr_get_prec(a), mpfr_get_exp(b) - mpfr_get_prec(b));
  return static_cast<mpfr_prec_t>(top - low);
}

// r = a + b and r = a - b exactly (r must be neither operand).
inline void exact_add(Mpfr& r, mpfr_srcptr a, mpfr_srcptr b) {
  r.set_precision(std::max<mpfr_prec_t>(MPFR_PREC_MIN, exact_sum_precision(a, b)));
  require_exact(mpfr_add(r, a, b, MPFR_RNDN));
}
inline void exact_sub(Mpfr& r, mpfr_srcptr a, mpfr_srcptr b) {
  r.set_precision(std::max<mpfr_prec_t>(MPFR_PREC_MIN, exact_sum_precision(a, b)));
  require_exact(mpfr_sub(r, a, b, MPFR_RNDN));
}
inline void exact_mul(Mpfr& r, mpfr_srcptr a, mpfr_srcptr b) {
  r.set_precision(mpfr_get_prec(a) + mpfr_get_prec(b));
  require_exact(mpfr_mul(r, a, b, MPFR_RNDN));
}
inline void exact_set(Mpfr& r, double x) {
  r.set_precision(53);
  require_exact(mpfr_set_d(r, x, MPFR_RNDN));
}
inline void exact_mul_ui(Mpfr& r, mpfr_srcptr a, unsigned long k) {
  r.set_precision(mpfr_get_prec(a) + 64);
  require_exact(mpfr_mul_ui(r, a, k, MPFR_RNDN));
}

// sum_i x[i * stride] exactly, into r.
inline void exact_sum(Mpfr& r, const double* x, std::size_t n, std::size_t stride) {
  BitSpan span;
  for (std::size_t i = 0; i < n; ++i) span.add(x[i * stride]);
  r.set_precision(span.sum_precision(n));
  mpfr_set_zero(r, 1);
  for (std::size_t i = 0; i < n; ++i) require_exact(mpfr_add_d(r, r, x[i * stride], MPFR_RNDN));
}

// sum_i a[i] * b[i] exactly, into r (a, b contiguous, finite). Each product splits exactly into
// p + e (p = fl(a b), e by an fma: exact while p is finite and at least 2^-960, Boldo and Muller,
// IEEE TC 60(2), 2011), two doubles the long accumulator (numeq::LongAccumulator, the one exact
// accumulator) adds exactly; MPFR gets its sum, cut to the bits it has (mpfr_min_prec: exact) so
// that later exact steps work on a short number. Products outside that range go through MPFR.
inline void exact_dot(Mpfr& r, const double* a, const double* b, std::size_t n) {
  thread_local LongAccumulator sum;
  sum.clear();
  bool split = true;
  for (std::size_t i = 0; i < n; ++i) {
    const double p = a[i] * b[i];
    if (!std::isfinite(p) || (p == 0 ? a[i] != 0 && b[i] != 0 : std::fabs(p) < 0x1p-960)) {
      split = false;
      break;
    }
    sum.add(p);
    sum.add(std::fma(a[i], b[i], -p));
  }
  if (split) {
    to_mpfr(sum, r);
    if (!mpfr_zero_p(r)) require_exact(mpfr_prec_round(r, std::max<mpfr_prec_t>(MPFR_PREC_MIN, mpfr_min_prec(r)), MPFR_RNDN));
    return;
  }
  BitSpan sa;
  BitSpan sb;
  for (std::size_t i = 0; i < n; ++i) {
    sa.add(a[i]);
    sb.add(b[i]);
  }
  r.set_precision(product_span(sa, sb).sum_precision(n));
  mpfr_set_zero(r, 1);
  thread_local Mpfr product(106);  // a double times a double: 106 bits hold it exactly
  for (std::size_t i = 0; i < n; ++i) {
    require_exact(mpfr_set_d(product, a[i], MPFR_RNDN));
    require_exact(mpfr_mul_d(product, product, b[i], MPFR_RNDN));
    require_exact(mpfr_add(r, r, product, MPFR_RNDN));
  }
}

// The interval [x, x] for an exact MPFR value x at the interval's precision (outward rounded when
// the precision is smaller than x's).
inline void set_point(Interval& r, mpfr_srcptr x) {
  r.lo.open = mpfr_set(r.lo.value, x, MPFR_RNDD) != 0;
  r.hi.open = mpfr_set(r.hi.value, x, MPFR_RNDU) != 0;
}

// An exact zero result comes out of MPFR with the sign its rounding direction gives a zero sum
// (IEEE 754 s6.3: -0 when rounding downward), so the two ends of a point zero can differ in sign.
// The sign is the operation's to decide (composite.hpp); set it on both ends.
inline void settle_zero_sign(Interval& r, bool negative) {
  if (!r.is_point() || !mpfr_zero_p(r.lo.value)) return;
  mpfr_set_zero(r.lo.value, negative ? -1 : 1);
  mpfr_set_zero(r.hi.value, negative ? -1 : 1);
}

// ---- Ziv's loop over one row ----

inline mpfr_prec_t start_precision(const Cast& out) {
  const int extra = 32 + (out.rounding == Rounding::stochastic ? out.random_bits : 0);
  return std::max<mpfr_prec_t>(64, out.format.precision() + extra);
}

// The pattern of an exact double value (NaN, an infinity, a signed zero, or a representable
// value) in out, through the kernel as a cast would give it.
inline std::uint64_t exact_pattern(double v, const Cast& out, std::uint64_t random) {
  return encode_unpacked(unpack_double(v), out, random);
}

// One output row: where its elements go and their stochastic draws. `within` > 0: the row is
// of an enclosed result (composite.hpp, Enclosed): out is binary64, and an element may also be
// decided by a narrow enough fast enclosure (decide below).
struct RowOutput {
  const Cast& out;
  std::uint64_t key;          // random_stream_key(out.seed)
  bool stochastic;
  std::uint64_t* bits;        // the result patterns, indexed by output element (C order)
  double within = 0;          // the enclosed result's relative error; 0: a rounded result
  // Enclosed results with a radius per element (composite.hpp, Enclosure): where not null, any
  // finite enclosure decides its element, as its midpoint and radius (out is binary64).
  double* radius = nullptr;
  std::uint64_t random(std::size_t index) const { return stochastic ? random_bits_at(key, index) : 0; }
};

// Decides output element i from a double enclosure [e.lo, e.hi] of its exact value (the fast
// paths), or returns false (the MPFR loop decides it). For an enclosed result (within > 0) first
// the width test: lo and hi of one sign, normal, and hi - lo (rounded up: the nextafter of the
// nearest difference) <= within * min(|lo|, |hi|); the midpoint m = lo/2 + hi/2 rounded lies in
// [lo, hi] (rounding is monotone), so |m - exact| <= hi - lo <= within * |exact|. within is a
// power of two and min(|lo|, |hi|) is normal, so their product is exact. Then Ziv's test: both
// ends round to the same pattern of row.out, which is then the correctly rounded result (every
// rounding mode is monotone); it settles exact points and zeros the width test leaves.
inline bool decide(const RowOutput& row, std::size_t i, const fast::Enclosure& e) {
  if (row.radius != nullptr && std::isfinite(e.lo) && std::isfinite(e.hi) && e.lo <= e.hi) {
    const double mid = 0.5 * e.lo + 0.5 * e.hi;
    // The larger distance to an end, rounded up (the midpoint's own rounding is inside it).
    row.radius[i] = std::max(next_up(e.hi - mid), next_up(mid - e.lo));
    row.bits[i] = std::bit_cast<std::uint64_t>(mid);
    return true;
  }
  if (row.within > 0 && std::isfinite(e.lo) && std::isfinite(e.hi) && e.lo <= e.hi &&
      std::signbit(e.lo) == std::signbit(e.hi)) {
    const double smaller = std::min(std::fabs(e.lo), std::fabs(e.hi));
    if (smaller >= std::numeric_limits<double>::min() && next_up(e.hi - e.lo) <= row.within * smaller) {
      row.bits[i] = std::bit_cast<std::uint64_t>(0.5 * e.lo + 0.5 * e.hi);  // out is binary64: its own pattern
      return true;
    }
  }
  if (const std::optional<std::uint64_t> bits = fast::round_enclosure(e, row.out, row.random(i))) {
    row.bits[i] = *bits;
    return true;
  }
  return false;
}


// Decides every element of `pending` (output indices): at precision p, prepare(p) computes the
// row's shared enclosures, then enclose(e, r, p) encloses element e in r. An element is decided
// when both ends round alike (Nudge for open ends, mpfr_value.hpp); the rest go round again at
// twice the precision. `what` names the operation for the error message.
template <class Prepare, class Enclose>
inline void certify_row(std::vector<std::size_t>& pending, const RowOutput& row, Prepare&& prepare,
                 Enclose&& enclose, const char* what) {
  thread_local Interval r;
  mpfr_prec_t p = start_precision(row.out);
  while (!pending.empty()) {
    prepare(p);
    r.set_precision(p);
    std::size_t kept = 0;
    for (const std::size_t e : pending) {
      enclose(e, r, p);
      const std::uint64_t random = row.random(e);
      const std::uint64_t lo = round_mpfr(r.lo.value, row.out, random, r.lo.open ? Nudge::above : Nudge::none);
      const std::uint64_t hi = round_mpfr(r.hi.value, row.out, random, r.hi.open ? Nudge::below : Nudge::none);
      if (lo == hi) {
        row.bits[e] = lo;
        // An enclosed result's MPFR element is the correctly rounded double: within half an ulp
        // (2^-53 relative, or 2^-1075 below the normal range).
        if (row.radius != nullptr) {
          const double value = std::bit_cast<double>(lo);
          row.radius[e] = std::isfinite(value) ? std::fabs(value) * 0x1p-52 + 0x1p-1074 : 0.0;
        }
      } else
        pending[kept++] = e;
    }
    pending.resize(kept);
    if (pending.empty()) return;
    if (p >= kMaxPrecision)
      throw numeq::error(std::string("reference ") + what + ": could not certify the rounding of element " +
                         std::to_string(pending.front()) + " (C order) into " + std::string(row.out.format.name) +
                         " within " + std::to_string(kMaxPrecision) + " bits");
    p = std::min(2 * p, kMaxPrecision);
  }
}

// Per-thread interval storage, grown as rows need it.
struct Scratch {
  std::vector<Interval> a;
  std::vector<Interval> b;
  std::vector<Mpfr> exact;   // exact per-element values of the row
  std::vector<Mpfr> exact2;
  Interval t0, t1, t2, t3;

  void reserve(std::size_t n) {
    while (a.size() < n) a.emplace_back(64);
    while (b.size() < n) b.emplace_back(64);
    while (exact.size() < n) exact.emplace_back(64);
    while (exact2.size() < n) exact2.emplace_back(64);
  }
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }
};

inline Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Sets every interval of v[0, n) to precision p.
inline void set_precision(std::vector<Interval>& v, std::size_t n, mpfr_prec_t p) {
  for (std::size_t i = 0; i < n; ++i) v[i].set_precision(p);
}

// r = sum of v[0, n) (n >= 1), using t as the running partial.
inline void interval_sum(Interval& r, std::vector<Interval>& v, const std::vector<std::size_t>& which, Interval& t) {
  // Alternate between r and t so that no operation writes one of its operands.
  Interval* acc = &r;
  Interval* other = &t;
  mpfr_set(acc->lo.value, v[which[0]].lo.value, MPFR_RNDD);
  mpfr_set(acc->hi.value, v[which[0]].hi.value, MPFR_RNDU);
  acc->lo.open = v[which[0]].lo.open;
  acc->hi.open = v[which[0]].hi.open;
  for (std::size_t i = 1; i < which.size(); ++i) {
    ia::add(*other, *acc, v[which[i]]);
    std::swap(acc, other);
  }
  if (acc != &r) {
    mpfr_set(r.lo.value, acc->lo.value, MPFR_RNDD);
    mpfr_set(r.hi.value, acc->hi.value, MPFR_RNDU);
    r.lo.open = acc->lo.open;
    r.hi.open = acc->hi.open;
  }
}

// Runs row_fn(row, begin) over every row on parallel_for threads, gathers patterns into values
// and reports the first NaN-into-no-NaN element.
// radius: null, or (enclosed results with radii) room for one radius per element, zeroed.
xt::xarray<double> run_rows(const std::vector<std::size_t>& shape, std::size_t rows, const Cast& out,
                            const char* what, double within,
                            const std::function<void(std::size_t, const RowOutput&)>& row_fn,
                            double* radius = nullptr);

// The binary64 cast of enclosed results (Within): its rounded values are within 2^-53.
inline const Cast kBinary64{formats::fp64};

// within.relative_error, checked: a power of two in [2^-53, 2^-20].
inline double checked(Within within) {
  const double e = within.relative_error;
  int exponent = 0;
  if (!(e >= 0x1p-53 && e <= 0x1p-20) || std::frexp(e, &exponent) != 0.5)
    throw numeq::error("within: relative_error " + std::to_string(e) +
                       " is not a power of two in [2^-53, 2^-20] (the fast enclosures reach about 2^-42; the "
                       "MPFR loop's binary64 values are within 2^-53)");
  return e;
}

}  // namespace numeq::reference::rows
