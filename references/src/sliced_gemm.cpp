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

// OpenBLAS's thread count, where the BLAS is OpenBLAS (weak: absent from other BLAS libraries).
extern "C" int openblas_get_num_threads() __attribute__((weak));
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace numeq::reference::sliced {

namespace {

// Leading-bit and lowest-set-bit exponents of one entry, folded into a vector's profile. Works
// on the bit pattern: (exponent field, trailing zeros) need no unpacking. A binary64 subnormal
// lies below 2^-1022, far outside exponent_limit: it marks the vector out of range.
struct EntryScan {
  int top_field = 0;      // largest exponent field of a finite non-zero entry (0: none)
  int low_key = INT_MAX;  // smallest field + trailing zeros of the significand
  unsigned flags = 0;     // bit 0: Inf or NaN; bit 1: a binary64 subnormal

  // One entry into (top, low, flags); branch-free (entries are mostly normal numbers, and the scan
  // runs over both operands whole).
  static void fold(double x, int& top, int& low, unsigned& flags) {
    const auto bits = std::bit_cast<std::uint64_t>(x);
    const int field = static_cast<int>((bits >> 52) & 0x7FF);
    const std::uint64_t fraction = bits & ((std::uint64_t{1} << 52) - 1);
    const unsigned special = field == 0x7FF, zero_field = field == 0;
    flags |= special | ((zero_field & static_cast<unsigned>(fraction != 0)) << 1);
    // value = (2^52 + fraction) 2^(field - 1075): leading bit 2^(field - 1023), lowest set bit
    // 2^(field - 1075 + trailing zeros).
    top = std::max(top, special ? 0 : field);
    const int key = field + std::countr_zero(fraction | (std::uint64_t{1} << 52));
    low = std::min(low, (special | zero_field) ? INT_MAX : key);
  }
  void add(double x) { fold(x, top_field, low_key, flags); }
  // A contiguous run, in four interleaved lanes: independent chains of max and min (a fifth
  // faster than one chain).
  void add_run(const double* x, std::size_t n) {
    int top[4] = {top_field, 0, 0, 0}, low[4] = {low_key, INT_MAX, INT_MAX, INT_MAX};
    std::size_t k = 0;
    for (; k + 4 <= n; k += 4)
      for (int j = 0; j < 4; ++j) fold(x[k + static_cast<std::size_t>(j)], top[j], low[j], flags);
    for (; k < n; ++k) fold(x[k], top[0], low[0], flags);
    top_field = std::max(std::max(top[0], top[1]), std::max(top[2], top[3]));
    low_key = std::min(std::min(low[0], low[1]), std::min(low[2], low[3]));
  }
  bool nonfinite() const { return (flags & 1) != 0; }
  bool out_of_range() const { return (flags & 2) != 0; }
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

// Vectors per thread, for passes of a few instructions per entry: with parallel_for's threads
// kept waiting between calls, a thread pays off from about 2^16 entries (tens of microseconds of
// scanning). (When each call started its threads, 2^18 was the break-even: a 512^3 bf16 matmul
// took 6.7 ms on one thread and 12-20 ms with these passes on two under a load average of 4.)
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
      scan.add_run(data + v * length, length);
      p.top[v] = scan.top();
      p.low[v] = scan.low();
      p.nonfinite[v] = scan.nonfinite();
      out_of_range[v] = scan.out_of_range();
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
      p.nonfinite[n] = scans[n - begin].nonfinite();
      out_of_range[n] = scans[n - begin].out_of_range();
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

// The rows (or columns) that the dgemms take at width w: every vector once (the operand itself),
// plus the slices of the wide ones (Slices); 0 where no vector has anything to slice or some
// vector would need more than max_slices. `most`: the most slices any vector needs.
std::size_t slices_needed(const SpanCounts& counts, int w, int& most) {
  std::size_t total = counts.of_span.empty() ? 0 : counts.of_span[0];
  most = 0;
  for (std::size_t s = 1; s < counts.of_span.size(); ++s) {
    if (counts.of_span[s] == 0) continue;
    const int c = (static_cast<int>(s) + w - 1) / w;
    if (c > max_slices) return 0;
    most = std::max(most, c);
    total += counts.of_span[s] * static_cast<std::size_t>(c >= 2 ? c + 1 : 1);
  }
  return most == 0 ? 0 : total;
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
    const double work = static_cast<double>(rows) * static_cast<double>(columns);  // the dgemms'

    if (!best.usable || work < best_work) {
      best = Widths{true, wa, wb};
      best_work = work;
    }
  }
  return best;
}

namespace {

// count and start of every vector; start and the total count the wide vectors' slices only. A
// vector of one slice is its own slice: it spans at most `width` bits, so place(top, 0, width)
// <= low and every entry is a multiple of 2^place below 2^(place + width).
void lay_out(const Profile& p, std::size_t first, std::size_t vectors, int width, Slices& out) {
  out.count.resize(vectors);
  out.start.assign(vectors, 0);
  std::size_t next = 0;
  for (std::size_t v = 0; v < vectors; ++v) {
    const int c = (p.span(first + v) + width - 1) / width;
    out.count[v] = c;
    if (c < 2) continue;
    out.start[v] = next;
    next += static_cast<std::size_t>(c);
  }
  out.total = next;
}

}  // namespace

void slice_rows(const double* a, std::size_t rows, std::size_t K, const Profile& p, std::size_t first_row,
                int width, Slices& out) {
  const double* source = a + first_row * K;
  lay_out(p, first_row, rows, width, out);
  out.ld = K;
  out.storage.resize(out.total * K);
  if (out.total == 0) return;
  parallel_for(rows, [&](std::size_t begin, std::size_t end) {
    std::vector<double> rest(K);
    for (std::size_t v = begin; v < end; ++v) {
      if (out.count[v] < 2) continue;
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
  lay_out(p, 0, N, width, out);
  const std::size_t ld = out.total;
  out.ld = ld;
  out.storage.resize(K * ld);
  if (ld == 0) return;
  // The wide columns, and per slice column its unit and inverse.
  std::vector<std::size_t> wide;
  std::vector<double> unit(ld), inverse(ld);
  for (std::size_t n = 0; n < N; ++n) {
    if (out.count[n] < 2) continue;
    wide.push_back(n);
    for (int t = 0; t < out.count[n]; ++t) {
      const std::size_t j = out.start[n] + static_cast<std::size_t>(t);
      const int at = place(p.top[n], t, width);
      unit[j] = power_of_two(at);
      inverse[j] = power_of_two(-at);
    }
  }
  parallel_for(K, [&](std::size_t begin, std::size_t end) {
    for (std::size_t k = begin; k < end; ++k) {
      const double* row = b + k * N;
      double* sliced_row = out.storage.data() + k * ld;
      for (const std::size_t n : wide) {
        double rest = row[n];
        for (int t = 0; t < out.count[n]; ++t) {
          const std::size_t j = out.start[n] + static_cast<std::size_t>(t);
          const double q = std::trunc(rest * inverse[j]) * unit[j];  // as in slice_rows
          sliced_row[j] = q;
          rest -= q;
        }
      }
    }
  }, serial_below(ld * 2));
}

namespace {

// The BLAS on one thread while numeq's threads split a product among themselves (restored after),
// so that numeq::set_num_threads governs the exact matmul as it does every other kernel and no
// BLAS thread spins on a core the next pass needs.
class OneBlasThread {
 public:
  OneBlasThread() {
    if (openblas_get_num_threads != nullptr && openblas_set_num_threads != nullptr) {
      saved_ = openblas_get_num_threads();
      if (saved_ != 1) openblas_set_num_threads(1);
    }
  }
  ~OneBlasThread() {
    if (saved_ > 1) openblas_set_num_threads(saved_);
  }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace

void multiply(const double* a, std::size_t lda, std::size_t rows, const double* b, std::size_t ldb,
              std::size_t columns, std::size_t K, double* c, std::size_t ldc) {
  if (rows == 0 || columns == 0) return;
  const OneBlasThread one_thread;
  // Blocks of result rows, one dgemm each: element (m, n) depends on row m of a and column n of
  // b alone (exactly, whatever the BLAS's order), so the split never changes a value. A block is
  // worth a thread from about 2^22 multiply-adds (half a millisecond of dgemm).
  const std::size_t work_per_row = std::max<std::size_t>(1, columns * K);
  parallel_for(rows, [&](std::size_t begin, std::size_t end) {
    // Row-major C = A B is column-major C^T = B^T A^T: a row-major matrix read column-major is its
    // transpose, so dgemm gets B first.
    const int m = static_cast<int>(columns), n = static_cast<int>(end - begin), k = static_cast<int>(K);
    const int lb = static_cast<int>(ldb), la = static_cast<int>(lda), lc = static_cast<int>(ldc);
    const double one = 1.0, zero = 0.0;
    dgemm_("N", "N", &m, &n, &k, &one, b, &lb, a + begin * lda, &la, &zero, c + begin * ldc, &lc);
  }, std::max<std::size_t>(1, (std::size_t{1} << 22) / work_per_row));
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
