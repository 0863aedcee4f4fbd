#include "sliced_gemm.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>

#include "numeq/formats/parallel.hpp"

// The Fortran BLAS interface, which every BLAS (OpenBLAS, reference BLAS, MKL, BLIS) exports.
extern "C" void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
                       const double* beta, double* c, const int* ldc);

namespace numeq::reference::sliced {

namespace {

// Leading-bit and lowest-set-bit exponents of one entry, folded into a vector's profile. Works
// on the bit pattern: (exponent field, trailing zeros) need no unpacking. A binary64 subnormal
// lies below 2^-1022, far outside exponent_limit: it marks the vector out of range.
struct EntryScan {
  int top_field = 0;          // largest exponent field of a finite non-zero entry (0: none)
  int low_key = INT_MAX;      // smallest field + trailing zeros of the significand
  bool nonfinite = false;
  bool out_of_range = false;  // a binary64 subnormal

  // Branch-free: entries are mostly normal numbers, and the scan runs over both operands whole.
  void add(double x) {
    const auto bits = std::bit_cast<std::uint64_t>(x);
    const int field = static_cast<int>((bits >> 52) & 0x7FF);
    const std::uint64_t fraction = bits & ((std::uint64_t{1} << 52) - 1);
    const bool special = field == 0x7FF, zero_field = field == 0;
    nonfinite = nonfinite || special;
    out_of_range = out_of_range || (zero_field && fraction != 0);
    // value = (2^52 + fraction) 2^(field - 1075): leading bit 2^(field - 1023), lowest set bit
    // 2^(field - 1075 + trailing zeros).
    top_field = std::max(top_field, special ? 0 : field);
    const int key = field + std::countr_zero(fraction | (std::uint64_t{1} << 52));
    low_key = std::min(low_key, special || zero_field ? INT_MAX : key);
  }
  int top() const { return top_field == 0 ? no_entry : top_field - 1023; }
  int low() const { return top_field == 0 ? -no_entry : low_key - 1075; }
};

Profile empty_profile(std::size_t vectors) {
  Profile p;
  p.top.assign(vectors, no_entry);
  p.low.assign(vectors, -no_entry);
  p.nonfinite.assign(vectors, 0);
  return p;
}

// The summary fields, from the vectors' scans.
void finish(Profile& p, const std::vector<char>& out_of_range) {
  for (std::size_t v = 0; v < p.count(); ++v) {
    p.any_nonfinite = p.any_nonfinite || p.nonfinite[v];
    p.in_range = p.in_range && !out_of_range[v] &&
                 (p.top[v] == no_entry || (p.top[v] <= exponent_limit && p.low[v] >= -exponent_limit));
  }
}

// Vectors per thread, for passes of a few instructions per entry: a thread pays off from about
// 2^17 entries (starting one costs tens of microseconds, and right after a dgemm the BLAS's own
// threads still spin on the cores for a while).
std::size_t serial_below(std::size_t entries_each) {
  return std::max<std::size_t>(1, entries_per_thread / std::max<std::size_t>(1, entries_each));
}

}  // namespace

Profile profile_rows(const double* data, std::size_t rows, std::size_t length) {
  Profile p = empty_profile(rows);
  std::vector<char> out_of_range(rows, 0);
  parallel_for(rows, [&](std::size_t begin, std::size_t end) {
    for (std::size_t v = begin; v < end; ++v) {
      EntryScan scan;
      const double* row = data + v * length;
      for (std::size_t k = 0; k < length; ++k) scan.add(row[k]);
      p.top[v] = scan.top();
      p.low[v] = scan.low();
      p.nonfinite[v] = scan.nonfinite;
      out_of_range[v] = scan.out_of_range;
    }
  }, serial_below(length));
  finish(p, out_of_range);
  return p;
}

Profile profile_columns(const double* data, std::size_t length, std::size_t columns) {
  Profile p = empty_profile(columns);
  std::vector<char> out_of_range(columns, 0);
  // Threads take column ranges and walk the rows: each reads its part of every row, contiguous.
  parallel_for(columns, [&](std::size_t begin, std::size_t end) {
    std::vector<EntryScan> scans(end - begin);
    for (std::size_t k = 0; k < length; ++k) {
      const double* row = data + k * columns;
      for (std::size_t n = begin; n < end; ++n) scans[n - begin].add(row[n]);
    }
    for (std::size_t n = begin; n < end; ++n) {
      p.top[n] = scans[n - begin].top();
      p.low[n] = scans[n - begin].low();
      p.nonfinite[n] = scans[n - begin].nonfinite;
      out_of_range[n] = scans[n - begin].out_of_range;
    }
  }, serial_below(length));
  finish(p, out_of_range);
  return p;
}


void SpanCounts::add(const Profile& p) {
  for (std::size_t v = 0; v < p.count(); ++v) {
    const auto s = static_cast<std::size_t>(p.span(v));
    if (s >= of_span.size()) of_span.resize(s + 1, 0);
    ++of_span[s];
  }
}

namespace {

// Slices needed by vectors of `counts` at width w (0 where some vector would need more than
// max_slices), and the most any one needs.
std::size_t slices_needed(const SpanCounts& counts, int w, int& most) {
  std::size_t total = 0;
  most = 0;
  for (std::size_t s = 1; s < counts.of_span.size(); ++s) {
    if (counts.of_span[s] == 0) continue;
    const int c = (static_cast<int>(s) + w - 1) / w;
    if (c > max_slices) return 0;
    most = std::max(most, c);
    total += counts.of_span[s] * static_cast<std::size_t>(c);
  }
  return total;
}

}  // namespace

Widths choose_widths(std::size_t K, std::size_t M, std::size_t N, const SpanCounts& a, const SpanCounts& b) {
  Widths best;
  // K up to 2^21 leaves slices of useful width (53 - 21 = 32 bits in both together).
  if (K == 0 || K > (std::size_t{1} << 21) || M == 0 || N == 0) return best;
  // K (2^wa - 1)(2^wb - 1) < 2^ceil(log2 K) 2^(wa + wb) <= 2^53.
  const int budget = 53 - static_cast<int>(std::bit_width(K - 1));
  double best_work = 0;
  for (int wa = 1; wa < budget; ++wa) {
    const int wb = budget - wa;
    int most_a = 0, most_b = 0;
    const std::size_t rows = slices_needed(a, wa, most_a), columns = slices_needed(b, wb, most_b);
    // No vector to slice on one side (all zero, or Inf/NaN): every result takes the loop.
    if (rows == 0 || columns == 0) continue;
    if (static_cast<std::size_t>(most_a) * M > INT_MAX || static_cast<std::size_t>(most_b) * N > max_slice_columns)
      continue;
    // The dgemm's work, then the slicing's (an operand needing one slice per vector is not copied).
    const double work = static_cast<double>(rows) * static_cast<double>(columns) +
                        (most_a > 1 ? static_cast<double>(rows) : 0.0) + (most_b > 1 ? static_cast<double>(columns) : 0.0);
    if (!best.usable || work < best_work) {
      best = Widths{true, wa, wb};
      best_work = work;
    }
  }
  return best;
}

namespace {

// count and start of every vector, and the total; whether every count is at most 1. A vector of
// one slice is its own slice: it spans at most `width` bits, so place(top, 0, width) <= low and
// every entry is a multiple of 2^place below 2^(place + width).
bool lay_out(const Profile& p, std::size_t first, std::size_t vectors, int width, Slices& out) {
  out.count.resize(vectors);
  out.start.resize(vectors);
  std::size_t next = 0;
  bool single = true;
  for (std::size_t v = 0; v < vectors; ++v) {
    const int c = (p.span(first + v) + width - 1) / width;
    out.count[v] = c;
    out.start[v] = next;
    next += static_cast<std::size_t>(c);
    single = single && c <= 1 && !p.nonfinite[first + v];
  }
  out.total = next;
  if (single) {  // the operand itself: vector v at v (an all-zero vector has count 0 and is read by nobody)
    for (std::size_t v = 0; v < vectors; ++v) out.start[v] = v;
    out.total = vectors;
  }
  return single;
}

}  // namespace

void slice_rows(const double* a, std::size_t rows, std::size_t K, const Profile& p, std::size_t first_row,
                int width, Slices& out) {
  const double* source = a + first_row * K;
  out.ld = K;
  if (lay_out(p, first_row, rows, width, out)) {
    // One slice: place(top, 0, width) <= low (the row spans at most `width` bits), so the row
    // itself is its slice.
    out.storage.clear();
    out.data = source;
    return;
  }
  out.storage.resize(out.total * K);
  out.data = out.storage.data();
  parallel_for(rows, [&](std::size_t begin, std::size_t end) {
    std::vector<double> rest(K);
    for (std::size_t v = begin; v < end; ++v) {
      if (out.count[v] == 0) continue;
      if (out.count[v] == 1) {  // the row is its own slice (see lay_out)
        std::copy(source + v * K, source + (v + 1) * K, out.storage.data() + out.start[v] * K);
        continue;
      }
      const int top = p.top[first_row + v];
      std::copy(source + v * K, source + (v + 1) * K, rest.begin());
      for (int s = 0; s < out.count[v]; ++s) {
        double* slice = out.storage.data() + (out.start[v] + static_cast<std::size_t>(s)) * K;
        // |rest| < 2^(top + 1 - s w): the slice takes its bits at or above 2^place, exactly
        // (scaling by powers of two, truncation, and a difference that is the low bits of rest).
        const int at = place(top, s, width);
        const double unit = power_of_two(at), inverse = power_of_two(-at);
        for (std::size_t k = 0; k < K; ++k) {
          const double q = std::trunc(rest[k] * inverse) * unit;
          slice[k] = q;
          rest[k] -= q;
        }
      }
    }
  }, serial_below(K * 2));
}

void slice_columns(const double* b, std::size_t K, std::size_t N, const Profile& p, int width, Slices& out) {
  if (lay_out(p, 0, N, width, out)) {
    out.storage.clear();
    out.data = b;
    out.ld = N;
    return;
  }
  const std::size_t ld = out.total;
  out.storage.resize(K * ld);
  out.data = out.storage.data();
  out.ld = ld;
  // Per slice column: its source column, unit and inverse.
  std::vector<std::size_t> column(ld);
  std::vector<double> unit(ld), inverse(ld);
  for (std::size_t n = 0; n < N; ++n)
    for (int t = 0; t < out.count[n]; ++t) {
      const std::size_t j = out.start[n] + static_cast<std::size_t>(t);
      const int at = place(p.top[n], t, width);
      column[j] = n;
      unit[j] = power_of_two(at);
      inverse[j] = power_of_two(-at);
    }
  parallel_for(K, [&](std::size_t begin, std::size_t end) {
    for (std::size_t k = begin; k < end; ++k) {
      const double* row = b + k * N;
      double* sliced_row = out.storage.data() + k * ld;
      for (std::size_t n = 0; n < N; ++n) {
        double rest = row[n];
        const std::size_t j0 = out.start[n];
        if (out.count[n] == 1) {  // the column is its own slice (see lay_out)
          sliced_row[j0] = rest;
          continue;
        }
        for (int t = 0; t < out.count[n]; ++t) {
          const std::size_t j = j0 + static_cast<std::size_t>(t);
          const double q = std::trunc(rest * inverse[j]) * unit[j];  // as in slice_rows
          sliced_row[j] = q;
          rest -= q;
        }
      }
    }
  }, serial_below(ld * 2));
}

void multiply(const Slices& sa, const Slices& sb, std::size_t K, double* products) {
  // Row-major products = A B is column-major products^T = B^T A^T: a row-major matrix read
  // column-major is its transpose, so dgemm gets B first. One call for every slice pair keeps
  // BLAS's threads busy once instead of once per pair.
  const int m = static_cast<int>(sb.total), n = static_cast<int>(sa.total), k = static_cast<int>(K);
  const int ldb = static_cast<int>(sb.ld), lda = static_cast<int>(sa.ld);
  const double one = 1.0, zero = 0.0;
  dgemm_("N", "N", &m, &n, &k, &one, sb.data, &ldb, sa.data, &lda, &zero, products, &m);
}

bool window_fits(int ca, int cb, const Widths& w) {
  // Each slice product is below 2^53 units of its place; places lie at most (ca - 1) wa +
  // (cb - 1) wb bits above the last slices'; ca cb of them add bit_width(ca cb) bits of carry;
  // one bit of sign and one of margin (the total's negation stays in range).
  const int shift = (ca - 1) * w.a + (cb - 1) * w.b;
  return 53 + shift + static_cast<int>(std::bit_width(static_cast<unsigned>(ca * cb))) + 1 <= 127;
}

Exact exact_of(double x) {
  const Unpacked u = unpack_double(x);
  Exact e;
  e.negative = u.negative;
  e.exponent = u.exponent;
  e.significand = u.significand;
  return e;
}

bool double_double_of(int128 total, int base, DoubleDouble& out) {
  // Every bit of total 2^base lies at or above 2^base, and below 2^(base + 127): with base in
  // [-1022, 896] the value and its remainder, each rounded to 53 bits, are normal doubles, so
  // scaling the integer conversions (rounded to nearest even, as IEEE 754 converts) by 2^base is
  // exact and gives the value to nearest and the remainder to nearest.
  if (base < -1022 || base > 896) return false;
  const double scale = power_of_two(base);
  const auto hi = static_cast<double>(total);
  const auto remainder = total - static_cast<int128>(hi);  // |hi| <= 2^126: in range
  out.hi = hi * scale;
  out.lo = static_cast<double>(remainder) * scale;
  return true;
}

}  // namespace numeq::reference::sliced
