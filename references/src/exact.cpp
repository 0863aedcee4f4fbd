#include "numeq/references/exact.hpp"

#include <xtensor/xadapt.hpp>
#include <xtensor/xbroadcast.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "numeq/formats/array.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/fast_round.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/shape.hpp"
#include "sliced_gemm.hpp"

namespace numeq::reference {

namespace {

using Shape = std::vector<std::size_t>;

// The error for a result that is NaN in a format without NaN (the first such element, C order).
[[noreturn]] void throw_nan_result(std::size_t i, const Cast& cast) {
  throw error("out: result element " + std::to_string(i) + " (C order) is NaN, which format " +
              std::string(cast.format.name) + " cannot hold (it has no NaN encoding)");
}

// Runs term(i, row, column, acc) for every output element i in parallel, each with a cleared
// accumulator, and stores either the rounded value (cast != nullptr) or the double-double exact
// value. Outputs form rows of `row_length` elements; term also receives the element's row and
// column (kept incrementally: a division per element costs as much as a short exact dot product).
template <class Term>
void reduce_each(std::size_t outputs, std::size_t terms_each, std::size_t row_length, const Cast* cast, double* hi,
                 double* lo, Term&& term) {
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::atomic<std::size_t> first_invalid{none};
  const std::uint64_t key = cast ? random_stream_key(cast->seed) : 0;
  const bool stochastic = cast && cast->rounding == Rounding::stochastic;
  // Threads pay off from about 2^16 terms of work in all.
  const std::size_t serial_below = std::max<std::size_t>(1, (std::size_t{1} << 16) / std::max<std::size_t>(1, terms_each));
  parallel_for(outputs, [&](std::size_t begin, std::size_t end) {
    LongAccumulator acc;
    std::size_t row = begin / row_length, column = begin % row_length;
    for (std::size_t i = begin; i < end; ++i) {
      if (i != begin) acc.clear();
      term(i, row, column, acc);
      if (++column == row_length) {
        column = 0;
        ++row;
      }
      if (cast != nullptr) {
        const std::uint64_t bits = acc.round(*cast, stochastic ? random_bits_at(key, i) : 0);
        if (bits == invalid_encoding) {
          std::size_t current = first_invalid.load();
          while (i < current && !first_invalid.compare_exchange_weak(current, i)) {
          }
          hi[i] = 0;
          continue;
        }
        hi[i] = decode_bits(cast->format, bits);
      } else {
        const DoubleDouble d = acc.to_double_double();
        hi[i] = d.hi;
        lo[i] = d.lo;
      }
    }
  }, serial_below);
  if (first_invalid.load() != none) throw_nan_result(first_invalid.load(), *cast);
}

void check_values(const Cast* cast) {
  if (cast != nullptr) validate(*cast, "out");
}

// ---- sum ----

void sum_impl(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast* cast, ExactValues& r) {
  check_values(cast);
  const auto dims = static_cast<std::ptrdiff_t>(x.dimension());
  if (dims == 0) throw error("x: a 0-d array has no axis to sum over; pass an array with at least one dimension");
  if (axis < -dims || axis >= dims)
    throw error("axis: " + std::to_string(axis) + " is out of range for x of shape " + shape_text(x.shape()) +
                " (valid: " + std::to_string(-dims) + " to " + std::to_string(dims - 1) + ")");
  const auto a = static_cast<std::size_t>(axis < 0 ? axis + dims : axis);
  std::size_t outer = 1, inner = 1;
  Shape out_shape;
  for (std::size_t d = 0; d < x.dimension(); ++d) {
    if (d < a) outer *= x.shape()[d];
    if (d > a) inner *= x.shape()[d];
    if (d != a) out_shape.push_back(x.shape()[d]);
  }
  const std::size_t length = x.shape()[a];
  r.hi = xt::xarray<double>::from_shape(out_shape);
  if (cast == nullptr) r.lo = xt::xarray<double>::from_shape(out_shape);
  const double* data = x.data();
  reduce_each(outer * inner, length, 1, cast, r.hi.data(), cast ? nullptr : r.lo.data(),
              [&](std::size_t i, std::size_t, std::size_t, LongAccumulator& acc) {
                const double* base = data + (i / inner) * length * inner + i % inner;
                for (std::size_t k = 0; k < length; ++k) acc.add(base[k * inner]);
              });
}

// ---- dot ----

void dot_impl(const xt::xarray<double>& a, const xt::xarray<double>& b, const Cast* cast, ExactValues& r) {
  check_values(cast);
  if (a.dimension() != 1 || b.dimension() != 1 || a.size() != b.size())
    throw error("a, b: dot needs two 1-D arrays of equal length, got shapes " + shape_text(a.shape()) + " and " +
                shape_text(b.shape()) + " (use matmul for matrices)");
  r.hi = xt::xarray<double>::from_shape(Shape{});
  if (cast == nullptr) r.lo = xt::xarray<double>::from_shape(Shape{});
  reduce_each(1, a.size(), 1, cast, r.hi.data(), cast ? nullptr : r.lo.data(),
              [&](std::size_t, std::size_t, std::size_t, LongAccumulator& acc) {
    for (std::size_t k = 0; k < a.size(); ++k) acc.add_product(a.data()[k], b.data()[k]);
  });
}

// ---- matmul ----

// Flat index into an operand's batch dimensions for a result batch index, numpy broadcasting.
struct BatchMap {
  Shape result;              // broadcast batch shape
  std::vector<std::size_t> a_strides, b_strides;  // per result batch dim, in matrices (0: broadcast)
};

BatchMap broadcast_batches(const Shape& a, const Shape& b) {
  BatchMap m;
  const std::size_t n = std::max(a.size(), b.size());
  m.result.assign(n, 1);
  m.a_strides.assign(n, 0);
  m.b_strides.assign(n, 0);
  std::size_t sa = 1, sb = 1;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t d = n - 1 - i;
    const std::size_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const std::size_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      throw error("a, b: batch dimensions " + shape_text(a) + " and " + shape_text(b) + " do not broadcast");
    m.result[d] = std::max(da, db);
    m.a_strides[d] = da == 1 ? 0 : sa;
    m.b_strides[d] = db == 1 ? 0 : sb;
    sa *= da;
    sb *= db;
  }
  return m;
}

// ---- matmul through error-free GEMMs ----
//
// Error-free GEMMs (sliced_gemm.hpp) compute the bulk: each result element is a few exact slice
// products (one for narrow inputs), finished here: a single product is the exact value itself, a
// few are summed exactly in a 128-bit integer when they fit, else in the long accumulator. The
// long-accumulator loop over K remains for elements the slices cannot give: rows or columns with
// Inf or NaN, exact zeros (whose sign IEEE 754 takes from the terms), and matmuls whose inputs
// span too many binades to slice.

// The product of the operands themselves is written straight into the result; the extra slice
// products of the wide vectors are held per block of rows of a, within block_budget doubles
// (4 MiB): an exact matmul's working memory beyond its result is b's wide-column slices and one
// block.
constexpr std::size_t block_budget = std::size_t{1} << 19;

// b transposed per batch to [N, K], so that the loop reads both operands contiguously.
std::vector<double> transposed(const ArrayRef& b, std::size_t K, std::size_t N) {
  const std::size_t b_batches = b.size() / std::max<std::size_t>(1, K * N);
  std::vector<double> bt(b.size());
  constexpr std::size_t tile = 32;  // transpose in tiles: both sides stay in cache
  for (std::size_t s = 0; s < b_batches; ++s)
    for (std::size_t k0 = 0; k0 < K; k0 += tile)
      for (std::size_t n0 = 0; n0 < N; n0 += tile)
        for (std::size_t k = k0; k < std::min(K, k0 + tile); ++k)
          for (std::size_t n = n0; n < std::min(N, n0 + tile); ++n)
            bt[s * N * K + n * K + k] = b.data()[s * K * N + k * N + n];
  return bt;
}

// Exponent profiles of every row of a and column of b, and the slice widths they call for (one
// choice for the whole matmul: b's slices then serve every matrix of a they meet).
struct SlicePlan {
  std::vector<sliced::Profile> a, b;
  sliced::Widths widths;
};

SlicePlan plan_slices(const double* ad, std::size_t a_batches, const double* bd, std::size_t b_batches,
                      std::size_t M, std::size_t N, std::size_t K) {
  SlicePlan plan;
  if (M * N * K == 0) return plan;
  plan.a.resize(a_batches);
  plan.b.resize(b_batches);
  sliced::SpanCounts spans_a, spans_b;
  for (std::size_t s = 0; s < b_batches; ++s) {
    plan.b[s] = sliced::profile_columns(bd + s * K * N, K, N);
    if (!plan.b[s].in_range) return plan;
    spans_b.add(plan.b[s]);
  }
  for (std::size_t s = 0; s < a_batches; ++s) {
    plan.a[s] = sliced::profile_rows(ad + s * M * K, M, K);
    if (!plan.a[s].in_range) return plan;
    spans_a.add(plan.a[s]);
  }
  plan.widths = sliced::choose_widths(K, M, N, spans_a, spans_b);
  return plan;
}

// The end of the block of rows of a starting at m0: its extra slice products (a wide row's slices
// times b and b's wide-column slices, every row times b's wide-column slices) within
// block_budget, at least one row. The products of the operands themselves go straight into the
// result.
std::size_t block_end(const sliced::Profile& pa, std::size_t m0, std::size_t M, int width, std::size_t N,
                      std::size_t b_slices) {
  std::size_t used = 0, m1 = m0;
  for (; m1 < M; ++m1) {
    const auto c = static_cast<std::size_t>((pa.span(m1) + width - 1) / width);
    const std::size_t row = b_slices + (c >= 2 ? c * (N + b_slices) : 0);
    if (m1 > m0 && used + row > block_budget) break;
    used += row;
  }
  return m1;
}

// An element's slice products: ca x cb of them, pair (s, u) at g[s stride + u]; the leading-bit
// exponents of its row and column place them.
struct ElementSlices {
  const double* g;
  std::size_t stride;
  int ca, cb;
  int top_a, top_b;
  double pair(int s, int u) const { return g[static_cast<std::size_t>(s) * stride + static_cast<std::size_t>(u)]; }
};

// Writes the results of a sliced matmul. Exact results go straight to hi and lo. Rounded ones
// mostly are exact doubles: rounded to nearest even they take the shortcut in front of the kernel
// (fast_round.hpp) one by one; in other modes they are stored as doubles and rounded together
// at the end by the array cast (round_all; the same kernel, element i's stochastic draw keyed by
// i as everywhere). The others (not a double, or decided by the long accumulator) are rounded
// one by one by the kernel, kept aside and written at the end (an override).
class Finisher {
 public:
  Finisher(const Cast* cast, double* hi, double* lo, const double* c)
      : cast_(cast), hi_(hi), lo_(lo), c_(c), key_(cast ? random_stream_key(cast->seed) : 0),
        stochastic_(cast && cast->rounding == Rounding::stochastic), nearest_(cast ? *cast : Cast{}),
        // Nearest-even results take the shortcut one by one; integer formats are not among the
        // array cast's targets.
        bulk_(cast && !nearest_.applies() && !cast->format.is_integer()) {}

  class Chunk {
   public:
    explicit Chunk(Finisher& f) : f_(f) {}
    ~Chunk() {
      if (overrides_.empty()) return;
      const std::lock_guard<std::mutex> lock(f_.mutex_);
      f_.overrides_.insert(f_.overrides_.end(), overrides_.begin(), overrides_.end());
    }
    Chunk(const Chunk&) = delete;
    Chunk& operator=(const Chunk&) = delete;

    // Element i's exact value v, a non-zero double.
    void plain(std::size_t i, double v) {
      if (f_.cast_ == nullptr) {
        f_.hi_[i] = v;
        f_.lo_[i] = 0.0;
      } else if (f_.bulk_) {
        f_.hi_[i] = v;
      } else if (double r; f_.nearest_(v, r)) {
        f_.hi_[i] = r;  // the kernel's result where the shortcut applies (fast_round.hpp)
      } else {
        rounded(i, round_exact(sliced::exact_of(v), *f_.cast_, draw(i)));
      }
    }

    // Element i from its slice products (and c): false where the long-accumulator loop decides
    // it (an exact zero, whose sign IEEE 754 takes from the products themselves).
    bool sliced(std::size_t i, const ElementSlices& e, const sliced::Widths& w) {
      if (e.ca == 0 || e.cb == 0) return false;  // a row or column with Inf/NaN, or all zero
      const double* c = f_.c_;
      if (e.ca * e.cb == 1 && e.g[0] != 0) {
        if (c == nullptr) {
          plain(i, e.g[0]);
          return true;
        }
        if (two_terms(i, e.g[0], c[i])) return true;
      } else if (e.ca * e.cb == 2 && c == nullptr) {
        // The commonest wide case: a row of two slices against a column of one, or the reverse.
        if (two_terms(i, e.pair(0, 0), e.ca == 2 ? e.pair(1, 0) : e.pair(0, 1))) return true;
      }
      if (e.ca * e.cb > 1 && c == nullptr && sliced::window_fits(e.ca, e.cb, w)) {
        // Slice products are integers below 2^53 in units of their places, which lie whole
        // multiples of the widths above the last slices' places: summed exactly in 128 bits.
        const int base = sliced::place(e.top_a, e.ca - 1, w.a) + sliced::place(e.top_b, e.cb - 1, w.b);
        sliced::int128 total = 0;
        for (int s = 0; s < e.ca; ++s)
          for (int u = 0; u < e.cb; ++u) {
            const int at = sliced::place(e.top_a, s, w.a) + sliced::place(e.top_b, u, w.b);
            // Exact: a power-of-two scaling that leaves an integer below 2^53.
            const auto units = static_cast<std::int64_t>(e.pair(s, u) * sliced::power_of_two(-at));
            total += static_cast<sliced::int128>(units) << (at - base);
          }
        if (total == 0) return false;
        if (DoubleDouble d; sliced::double_double_of(total, base, d)) {
          if (d.lo == 0) {
            plain(i, d.hi);
            return true;
          }
          if (f_.cast_ == nullptr) {
            f_.hi_[i] = d.hi;
            f_.lo_[i] = d.lo;
            return true;
          }
          const bool negative = total < 0;
          const auto magnitude = static_cast<uint128>(negative ? -total : total);
          rounded(i, round_exact(normalize(negative, magnitude, base), *f_.cast_, draw(i)));
          return true;
        }
      }
      clear();
      for (int s = 0; s < e.ca; ++s)
        for (int u = 0; u < e.cb; ++u)
          if (const double term = e.pair(s, u); term != 0) acc_.add(term);  // exact doubles
      if (acc_.is_zero()) return false;
      if (c != nullptr) acc_.add(c[i]);
      from_accumulator(i);
      return true;
    }

    // Element i by the long-accumulator loop over row a[0..K) and column b[0], b[stride], ...
    void loop(std::size_t i, const double* a, const double* b, std::size_t K, std::size_t stride) {
      clear();
      for (std::size_t k = 0; k < K; ++k) acc_.add_product(a[k], b[k * stride]);
      if (f_.c_ != nullptr) acc_.add(f_.c_[i]);
      from_accumulator(i);
    }

   private:
    // Element i = x + y exactly (two exact doubles), by TwoSum (Knuth, TAOCP vol. 2, 4.2.2): s is
    // the sum to nearest, d the exact remainder (its own rounding to nearest; a zero remainder is
    // made +0, as the long accumulator gives it). False where s + d is neither a double nor
    // returned as a double-double (a rounded result with a remainder), or s is zero (its sign is
    // the loop's to decide).
    bool two_terms(std::size_t i, double x, double y) {
      const double s = x + y;
      const double bv = s - x, av = s - bv, d = ((x - av) + (y - bv)) + 0.0;
      if (s == 0 || !std::isfinite(s)) return false;
      if (d == 0) {
        plain(i, s);
        return true;
      }
      if (f_.cast_ != nullptr) return false;
      f_.hi_[i] = s;
      f_.lo_[i] = d;
      return true;
    }
    std::uint64_t draw(std::size_t i) const { return f_.stochastic_ ? random_bits_at(f_.key_, i) : 0; }
    void clear() {
      if (dirty_) acc_.clear();
      dirty_ = true;
    }
    void rounded(std::size_t i, std::uint64_t bits) {
      f_.hi_[i] = 0;  // a finite placeholder for the bulk rounding
      overrides_.push_back({i, bits});
    }
    void from_accumulator(std::size_t i) {
      if (f_.cast_ != nullptr) {
        rounded(i, acc_.round(*f_.cast_, draw(i)));
        return;
      }
      const DoubleDouble d = acc_.to_double_double();
      f_.hi_[i] = d.hi;
      f_.lo_[i] = d.lo;
    }

    Finisher& f_;
    LongAccumulator acc_;
    bool dirty_ = false;
    std::vector<std::pair<std::size_t, std::uint64_t>> overrides_;
  };

  // The rounded result: the stored exact doubles rounded in bulk, then the overrides written.
  void round_all(std::size_t size) {
    if (cast_ == nullptr) return;
    if (bulk_) {
      BitsView all;  // the result in C order, as fp64 patterns
      all.data = hi_;
      all.shape = {size};
      all.strides = {1};
      cast_into(all, *cast_, hi_, nullptr, "out");  // in place: each element is read, then written
    }
    std::size_t first_invalid = static_cast<std::size_t>(-1);
    for (const auto& [i, bits] : overrides_) {
      if (bits == invalid_encoding) {
        first_invalid = std::min(first_invalid, i);
        continue;
      }
      hi_[i] = decode_bits(cast_->format, bits);
    }
    if (first_invalid != static_cast<std::size_t>(-1)) throw_nan_result(first_invalid, *cast_);
  }

 private:
  const Cast* cast_;
  double* hi_;
  double* lo_;
  const double* c_;
  std::uint64_t key_;
  bool stochastic_;
  FastRound nearest_;
  bool bulk_;
  std::mutex mutex_;
  std::vector<std::pair<std::size_t, std::uint64_t>> overrides_;
};

void matmul_impl(const ArrayRef& a, const ArrayRef& b, const ArrayRef* c, const Cast* cast, ExactValues& r) {
  check_values(cast);
  if (a.dimension() < 2 || b.dimension() < 2)
    throw error("a, b: matmul needs arrays of at least 2 dimensions ([..., M, K] and [..., K, N]), got shapes " +
                shape_text(a.shape()) + " and " + shape_text(b.shape()) + " (use dot for vectors)");
  const std::size_t M = a.shape()[a.dimension() - 2], K = a.shape()[a.dimension() - 1];
  const std::size_t Kb = b.shape()[b.dimension() - 2], N = b.shape()[b.dimension() - 1];
  if (K != Kb)
    throw error("a, b: inner dimensions differ: a has shape " + shape_text(a.shape()) + " (K=" + std::to_string(K) +
                "), b has shape " + shape_text(b.shape()) + " (K=" + std::to_string(Kb) + ")");
  const BatchMap batches = broadcast_batches(Shape(a.shape().begin(), a.shape().end() - 2),
                                             Shape(b.shape().begin(), b.shape().end() - 2));
  Shape out_shape = batches.result;
  out_shape.push_back(M);
  out_shape.push_back(N);
  xt::xarray<double> c_full;
  if (c != nullptr) {
    bool ok = c->dimension() <= out_shape.size();
    for (std::size_t i = 0; ok && i < c->dimension(); ++i) {
      const std::size_t dc = c->shape()[c->dimension() - 1 - i];
      ok = dc == 1 || dc == out_shape[out_shape.size() - 1 - i];
    }
    if (!ok)
      throw error("c: shape " + shape_text(c->shape()) + " does not broadcast to the result shape " +
                  shape_text(out_shape));
    c_full = xt::broadcast(xt::adapt(c->data(), c->size(), xt::no_ownership(), c->shape()), out_shape);
  }
  r.hi = xt::xarray<double>::from_shape(out_shape);
  if (cast == nullptr) r.lo = xt::xarray<double>::from_shape(out_shape);
  const std::size_t matrices = r.hi.size() / std::max<std::size_t>(1, M * N);
  // Per result matrix, the matrix of a and of b it reads.
  std::vector<std::size_t> a_of(matrices), b_of(matrices);
  for (std::size_t t = 0; t < matrices; ++t) {
    std::size_t rest = t, ia = 0, ib = 0;
    for (std::size_t d = batches.result.size(); d-- > 0;) {
      const std::size_t idx = rest % batches.result[d];
      rest /= batches.result[d];
      ia += idx * batches.a_strides[d];
      ib += idx * batches.b_strides[d];
    }
    a_of[t] = ia;
    b_of[t] = ib;
  }
  const double* ad = a.data();
  const double* bd = b.data();
  const double* cd = c ? c_full.data() : nullptr;
  const std::size_t a_batches = M * K > 0 ? a.size() / (M * K) : 0;
  const std::size_t b_batches = K * N > 0 ? b.size() / (K * N) : 0;
  const SlicePlan plan = plan_slices(ad, a_batches, bd, b_batches, M, N, K);
  if (!plan.widths.usable) {
    // No slices: every element is the long-accumulator loop, over a and b transposed.
    const std::vector<double> bt = transposed(b, K, N);
    reduce_each(r.hi.size(), K + 1, std::max<std::size_t>(N, 1), cast, r.hi.data(), cast ? nullptr : r.lo.data(),
                [&](std::size_t i, std::size_t result_row, std::size_t n, LongAccumulator& acc) {
      const std::size_t t = result_row / std::max<std::size_t>(M, 1), m = result_row % std::max<std::size_t>(M, 1);
      const double* arow = ad + a_of[t] * M * K + m * K;
      const double* col = bt.data() + b_of[t] * N * K + n * K;
      for (std::size_t k = 0; k < K; ++k) acc.add_product(arow[k], col[k]);
      if (cd != nullptr) acc.add(cd[i]);
    });
    return;
  }
  const sliced::Widths& widths = plan.widths;
  std::vector<sliced::Slices> b_slices(b_batches);
  for (std::size_t s = 0; s < b_batches; ++s)
    sliced::slice_columns(bd + s * K * N, K, N, plan.b[s], widths.b, b_slices[s]);
  Finisher finish{cast, r.hi.data(), cast ? nullptr : r.lo.data(), cd};
  sliced::Slices a_slices;
  std::vector<double> a_by_wide, wide_by_b, wide_by_wide;
  for (std::size_t t = 0; t < matrices; ++t) {
    const sliced::Profile& pa = plan.a[a_of[t]];
    const sliced::Profile& pb = plan.b[b_of[t]];
    const sliced::Slices& sb = b_slices[b_of[t]];
    const double* bm = bd + b_of[t] * K * N;
    const std::size_t Rb = sb.total;  // b's wide-column slices
    for (std::size_t m0 = 0, m1 = 0; m0 < M; m0 = m1) {
      m1 = block_end(pa, m0, M, widths.a, N, Rb);
      const std::size_t Mb = m1 - m0, first = t * M * N + m0 * N;
      const double* am = ad + a_of[t] * M * K + m0 * K;
      sliced::slice_rows(ad + a_of[t] * M * K, Mb, K, pa, m0, widths.a, a_slices);
      const std::size_t Ra = a_slices.total;  // the block's wide-row slices
      // a times b, straight into the result: the exact values of the elements whose row and
      // column are their own slices (each read, then overwritten, by its finishing below). Then
      // the wide vectors' slices against the other operand and against each other.
      sliced::multiply(am, K, Mb, bm, N, N, K, r.hi.data() + first, N);
      a_by_wide.resize(Mb * Rb);
      wide_by_b.resize(Ra * N);
      wide_by_wide.resize(Ra * Rb);
      sliced::multiply(am, K, Mb, sb.storage.data(), Rb, Rb, K, a_by_wide.data(), Rb);
      sliced::multiply(a_slices.storage.data(), K, Ra, bm, N, N, K, wide_by_b.data(), N);
      sliced::multiply(a_slices.storage.data(), K, Ra, sb.storage.data(), Rb, Rb, K, wide_by_wide.data(), Rb);
      parallel_for(Mb, [&](std::size_t begin, std::size_t end) {
        Finisher::Chunk chunk(finish);
        for (std::size_t ml = begin; ml < end; ++ml) {
          const int ca = a_slices.count[ml];
          const std::size_t row_first = first + ml * N;
          for (std::size_t n = 0; n < N; ++n) {
            const std::size_t i = row_first + n;
            const int cb = sb.count[n];
            // The common case first: one slice each, no c, a non-zero exact double.
            if (ca == 1 && cb == 1 && cd == nullptr && r.hi.data()[i] != 0) {
              chunk.plain(i, r.hi.data()[i]);
              continue;
            }
            // Where the element's slice products are: pair (s, u) at g[s stride + u].
            ElementSlices e{r.hi.data() + i, 0, ca, cb, pa.top[m0 + ml], pb.top[n]};
            if (ca >= 2 && cb >= 2) {
              e.g = wide_by_wide.data() + a_slices.start[ml] * Rb + sb.start[n];
              e.stride = Rb;
            } else if (ca >= 2) {
              e.g = wide_by_b.data() + a_slices.start[ml] * N + n;
              e.stride = N;
            } else if (cb >= 2) {
              e.g = a_by_wide.data() + ml * Rb + sb.start[n];
            }
            if (chunk.sliced(i, e, widths)) continue;
            chunk.loop(i, am + ml * K, bm + n, K, N);
          }
        }
      }, std::max<std::size_t>(1, sliced::entries_per_thread / std::max<std::size_t>(N, 1)));
    }
  }
  finish.round_all(r.hi.size());
}

}  // namespace

xt::xarray<double> sum(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast& out) {
  ExactValues r;
  sum_impl(x, axis, &out, r);
  return std::move(r.hi);
}
ExactValues sum_exact(const xt::xarray<double>& x, std::ptrdiff_t axis) {
  ExactValues r;
  sum_impl(x, axis, nullptr, r);
  return r;
}
xt::xarray<double> dot(const xt::xarray<double>& a, const xt::xarray<double>& b, const Cast& out) {
  ExactValues r;
  dot_impl(a, b, &out, r);
  return std::move(r.hi);
}
ExactValues dot_exact(const xt::xarray<double>& a, const xt::xarray<double>& b) {
  ExactValues r;
  dot_impl(a, b, nullptr, r);
  return r;
}
std::size_t ArrayRef::size() const {
  std::size_t n = 1;
  for (std::size_t e : extents) n *= e;
  return n;
}

xt::xarray<double> matmul(const ArrayRef& a, const ArrayRef& b, const Cast& out, const ArrayRef* c) {
  ExactValues r;
  matmul_impl(a, b, c, &out, r);
  return std::move(r.hi);
}
ExactValues matmul_exact(const ArrayRef& a, const ArrayRef& b, const ArrayRef* c) {
  ExactValues r;
  matmul_impl(a, b, c, nullptr, r);
  return r;
}
xt::xarray<double> matmul(const xt::xarray<double>& a, const xt::xarray<double>& b, const Cast& out,
                          const xt::xarray<double>* c) {
  const std::optional<ArrayRef> cr = c ? std::optional<ArrayRef>(ArrayRef(*c)) : std::nullopt;
  return matmul(ArrayRef(a), ArrayRef(b), out, cr ? &*cr : nullptr);
}
ExactValues matmul_exact(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c) {
  const std::optional<ArrayRef> cr = c ? std::optional<ArrayRef>(ArrayRef(*c)) : std::nullopt;
  return matmul_exact(ArrayRef(a), ArrayRef(b), cr ? &*cr : nullptr);
}

}  // namespace numeq::reference
