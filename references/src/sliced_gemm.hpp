#pragma once
// Error-free GEMMs for the exact matmul (exact.cpp): operands split into slices whose products
// BLAS dgemm computes without any rounding, whatever its summation order.
//
// Ozaki, Ogita, Oishi and Rump, "Error-free transformations of matrix multiplication by using
// fast routines of matrix multiplication and its applications", Numer. Algorithms 59 (2012).
//
// The argument, as used here. Let every entry of a slice of row m of a be an integer multiple of
// 2^pa with magnitude below 2^(pa + wa), and every entry of a slice of column n of b an integer
// multiple of 2^pb below 2^(pb + wb). Each product is then an integer multiple of u = 2^(pa + pb)
// of magnitude at most (2^wa - 1)(2^wb - 1) u, and any partial sum of K of them, added in any
// order, with or without fma, is an integer multiple of u of magnitude at most
// K (2^wa - 1)(2^wb - 1) u < 2^53 u when wa + wb <= 53 - ceil(log2 K). Such a number is a binary64
// value (53 significant bits, lowest bit u far above 2^-1074, far below overflow: see
// exponent_limit), so every operation is exact and the dgemm's element is exactly the dot
// product of the two slices. The slices keep their own scale (they are not scaled to integers):
// a slice product is then directly a term of the exact result, and a vector that needs one slice
// is its own slice, neither split nor copied.
//
// A vector (row of a, column of b) spanning s bits, from the leading bit of its largest entry to
// the lowest set bit of any entry, needs ceil(s / w) slices of width w; each vector gets its own
// count. One dgemm multiplies the operands themselves (every row and column of one slice gets
// its exact products there); the slices of the few wide vectors take small extra dgemms against
// the other operand and against each other. The widths are chosen from the spans of all vectors
// to need the least dgemm work. Narrow inputs need one slice: every e4m3fn vector spans at most
// 18 bits (2^-9 .. 448), so two e4m3fn operands take a single dgemm up to K = 2^17; the rows of
// bf16 standard normal draws span about 20 bits (a few up to 30), so a bf16 matmul of them is one
// dgemm plus some percent of extra slice rows and columns.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "numeq/formats/exact.hpp"
#include "numeq/references/accumulator.hpp"

namespace numeq::reference::sliced {

// Finite non-zero entries must lie within [2^-exponent_limit, 2^(exponent_limit + 1)) to be
// sliced: slice places then lie within [-exponent_limit - 52, exponent_limit], slice products
// and their sums within [2^-904, 2^824), normal binary64 numbers, as are the powers of two that
// scale them (2^-(pa + pb): within [2^-800, 2^904]).
constexpr int exponent_limit = 400;
constexpr int max_slices = 12;  // per vector; matmuls needing more take the long-accumulator loop
constexpr int no_entry = -100000;
// Slice columns of one b matrix at most: a row of slice products (2^25 doubles: 256 MiB) is the
// least an exact matmul must hold at once.
constexpr std::size_t max_slice_columns = std::size_t{1} << 25;

// Entries (or result elements) per thread in the passes around the dgemm (sliced_gemm.cpp).
constexpr std::size_t entries_per_thread = std::size_t{1} << 16;

__extension__ using int128 = __int128;

// 2^e for a normal binary64 power (|e| <= 1022), built from its bits.
inline double power_of_two(int e) { return std::bit_cast<double>(static_cast<std::uint64_t>(1023 + e) << 52); }

// Exponent profile of the vectors of one operand (rows of a, or columns of b).
struct Profile {
  std::vector<int> top;         // exponent of the leading bit of the largest |entry|; no_entry: all zero
  std::vector<int> low;         // exponent of the lowest set bit of any entry
  std::vector<char> nonfinite;  // the vector holds Inf or NaN (left out of top and low)
  bool in_range = true;         // every finite non-zero entry within exponent_limit
  bool any_nonfinite = false;
  std::size_t count() const { return top.size(); }
  // Bits from the leading to the lowest set bit; 0 for a vector with nothing to slice (all
  // zero, or holding Inf or NaN: its results take the long-accumulator loop).
  int span(std::size_t v) const { return top[v] == no_entry || nonfinite[v] ? 0 : top[v] - low[v] + 1; }
};

// Rows of a row-major rows x length matrix, and columns of a row-major length x columns matrix.
Profile profile_rows(const double* data, std::size_t rows, std::size_t length);
Profile profile_columns(const double* data, std::size_t length, std::size_t columns);

// How many vectors span each number of bits, over every profile of an operand.
struct SpanCounts {
  std::vector<std::size_t> of_span;
  void add(const Profile& p);
};

// Slice widths of both operands; usable false where the matmul cannot be sliced.
struct Widths {
  bool usable = false;
  int a = 0, b = 0;
};
// The widths with wa + wb <= 53 - ceil(log2 K) that need the least dgemm work ((rows + the wide
// rows' slices) times (columns + the wide columns' slices)), with no vector needing more than
// max_slices and no b matrix (N columns) more than max_slice_columns slices.
Widths choose_widths(std::size_t K, std::size_t M, std::size_t N, const SpanCounts& a, const SpanCounts& b);

// The slices of the wide vectors of an operand (two slices or more). Every other vector is its
// own single slice (count 1) and is read from the operand itself, or has nothing to slice
// (count 0: all zero, or holding Inf or NaN). A wide vector v's count[v] slices are consecutive in
// storage (rows of a below each other, columns of b side by side), slice s at start[v] + s, with
// leading dimension ld; `total` slices in all.
struct Slices {
  std::vector<int> count;
  std::vector<std::size_t> start;
  std::size_t total = 0;
  std::size_t ld = 0;
  std::vector<double> storage;
};
// Slice place (the unit of slice s) of a vector whose leading bit is at `top`.
inline int place(int top, int s, int width) { return top + 1 - (s + 1) * width; }

// Rows first_row .. first_row + rows - 1 of the matrix a (row-major, K columns) profiled in p.
void slice_rows(const double* a, std::size_t rows, std::size_t K, const Profile& p, std::size_t first_row,
                int width, Slices& out);
// The columns of a row-major K x N matrix b profiled in p.
void slice_columns(const double* b, std::size_t K, std::size_t N, const Profile& p, int width, Slices& out);

// Row-major c (rows x columns, leading dimension ldc) = a (rows x K) b (K x columns), one dgemm.
// Element (m, n) of a GEMM is computed from row m of a and column n of b alone, so the products
// of two slices are exact even where other rows or columns are not slices (the operand's own
// wide vectors, or vectors with Inf or NaN, whose elements are taken from elsewhere).
void multiply(const double* a, std::size_t lda, std::size_t rows, const double* b, std::size_t ldb,
              std::size_t columns, std::size_t K, double* c, std::size_t ldc);

// Whether the ca cb slice products of an element, in units of its last slices' places, sum
// exactly in a 128-bit integer.
bool window_fits(int ca, int cb, const Widths& w);

// An exact non-zero binary64 value in the rounding kernel's form.
Exact exact_of(double x);
// total 2^base (non-zero total) as a double-double: hi the value to nearest, lo the remainder to
// nearest (LongAccumulator::to_double_double's result). False where they might not be normal.
bool double_double_of(int128 total, int base, DoubleDouble& out);

}  // namespace numeq::reference::sliced
