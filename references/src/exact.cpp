#include "numeq/references/exact.hpp"

#include <xtensor/xbroadcast.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <atomic>
#include <string>
#include <vector>

#include "numeq/formats/error.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"

// The Fortran BLAS interface, which every BLAS (OpenBLAS, reference BLAS, MKL, BLIS) exports.
extern "C" void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
                       const double* beta, double* c, const int* ldc);

namespace numeq::reference {

namespace {

using Shape = std::vector<std::size_t>;

std::string shape_text(const auto& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// A result computed without the long accumulator (a narrow exact sum): rounded directly.
struct Direct {
  bool used = false;
  Exact value;
};

// Runs term(i, acc, direct) for every output element i in parallel, each with a cleared
// accumulator (a term that sets direct.used must not have touched acc), and stores either the
// rounded value (cast != nullptr) or the double-double exact value.
// Outputs form rows of `row_length` elements; term also receives the element's row and column
// (kept incrementally: a division per element costs as much as a short exact dot product).
template <class Term>
void reduce_range(std::size_t first, std::size_t outputs, std::size_t terms_each, std::size_t row_length,
                  const Cast* cast, double* hi, double* lo, Term&& term);

template <class Term>
void reduce_each(std::size_t outputs, std::size_t terms_each, std::size_t row_length, const Cast* cast, double* hi,
                 double* lo, Term&& term) {
  reduce_range(0, outputs, terms_each, row_length, cast, hi, lo, std::forward<Term>(term));
}

// reduce_each over the outputs first .. first + outputs - 1 only (first a multiple of row_length).
template <class Term>
void reduce_range(std::size_t first, std::size_t outputs, std::size_t terms_each, std::size_t row_length,
                  const Cast* cast, double* hi, double* lo, Term&& term) {
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::atomic<std::size_t> first_invalid{none};
  const std::uint64_t key = cast ? random_stream_key(cast->seed) : 0;
  const bool stochastic = cast && cast->rounding == Rounding::stochastic;
  // Threads pay off from about 2^16 terms of work in all.
  const std::size_t serial_below = std::max<std::size_t>(1, (std::size_t{1} << 16) / std::max<std::size_t>(1, terms_each));
  parallel_for(outputs, [&](std::size_t begin, std::size_t end) {
    begin += first;
    end += first;
    LongAccumulator acc;
    // Clearing costs as much as a short dot product, so it is skipped after a term that answered
    // through `direct` (such a term leaves acc untouched).
    bool dirty = false;
    std::size_t row = begin / row_length, column = begin % row_length;
    for (std::size_t i = begin; i < end; ++i) {
      if (dirty) acc.clear();
      Direct direct;
      term(i, row, column, acc, direct);
      dirty = !direct.used;
      if (++column == row_length) {
        column = 0;
        ++row;
      }
      if (cast != nullptr) {
        const std::uint64_t random = stochastic ? random_bits_at(key, i) : 0;
        const std::uint64_t bits = direct.used ? round_exact(direct.value, *cast, random) : acc.round(*cast, random);
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
  if (first_invalid.load() != none)
    throw error("out: result element " + std::to_string(first_invalid.load()) + " (C order) is NaN, which format " +
                std::string(cast->format.name) + " cannot hold (it has no NaN encoding)");
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
              [&](std::size_t i, std::size_t, std::size_t, LongAccumulator& acc, Direct&) {
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
              [&](std::size_t, std::size_t, std::size_t, LongAccumulator& acc, Direct&) {
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

// ---- exact matmul through error-free floating-point GEMMs ----
//
// Ozaki, Ogita, Oishi and Rump, "Error-free transformations of matrix multiplication by using
// fast routines of matrix multiplication and its applications", Numer. Algorithms 59 (2012):
// split each row of A (and each column of B) into slices of w bits, all integer multiples of one
// power of two per row (column) slice and below 2^w in those units. A product of slices then sums
// K integers below 2^(2w) each; with K * 2^(2w) <= 2^53 every partial sum, in any order, with or
// without fma, is an integer below 2^53 and therefore exact in binary64. So an ordinary dgemm
// computes the slice products without error, and the exact result is the sum over slice pairs of
// (slice product) * (row scale) * (column scale): a few exact doubles per element, added in the
// long accumulator and rounded once. Inputs up to fp32 need 1 slice (fp8) to a few slices (bf16,
// fp16, fp32 over wide ranges); values spread over huge ranges need more, and beyond a cap the
// plain long-accumulator loop is used instead.

__extension__ using int128 = __int128;

constexpr int max_slices = 12;
constexpr std::size_t max_buffer_doubles = std::size_t{1} << 25;  // 256 MiB of slice products
constexpr int exponent_limit = 400;  // scaled slice products stay normal binary64 numbers

struct Slices {
  int count = 0;
  std::vector<double> values;  // count slices, each in the layout of the input matrix
  std::vector<int> scale;      // count x vectors: exponent of slice s of vector v
};

// Slices of the `vectors` rows of a row-major matrix (vectors x length). Non-finite entries count
// as zero (their rows are marked in nonfinite). False when the values span too many slices or too
// wide a range. Rows are independent: they are sliced on parallel_for threads.
bool slice_matrix(const double* data, std::size_t vectors, std::size_t length, int w, Slices& out,
                  std::vector<char>& nonfinite) {
  constexpr int none = -100000;
  std::vector<int> top(vectors, none), low(vectors, -none);
  nonfinite.assign(vectors, 0);
  const std::size_t serial_below = std::max<std::size_t>(1, (std::size_t{1} << 15) / std::max<std::size_t>(1, length));
  parallel_for(vectors, [&](std::size_t begin, std::size_t end) {
    for (std::size_t v = begin; v < end; ++v) {
      const double* row = data + v * length;
      for (std::size_t k = 0; k < length; ++k) {
        const double x = row[k];
        if (!std::isfinite(x)) {
          nonfinite[v] = 1;
          continue;
        }
        if (x == 0) continue;
        const Unpacked u = unpack_double(x);
        top[v] = std::max(top[v], u.exponent);
        low[v] = std::min(low[v], u.exponent - 63 + std::countr_zero(u.significand));
      }
    }
  }, serial_below);
  int needed = 0;
  for (std::size_t v = 0; v < vectors; ++v) {
    if (top[v] == none) continue;
    if (top[v] > exponent_limit || low[v] < -exponent_limit) return false;
    needed = std::max(needed, (top[v] - low[v] + w) / w);  // ceil((top - low + 1) / w)
  }
  if (needed > max_slices) return false;
  out.count = needed;
  const std::size_t size = vectors * length;
  out.values.resize(static_cast<std::size_t>(needed) * size);
  out.scale.assign(static_cast<std::size_t>(needed) * vectors, 0);
  parallel_for(vectors, [&](std::size_t begin, std::size_t end) {
    std::vector<double> rest(length);
    for (std::size_t v = begin; v < end; ++v) {
      const double* row = data + v * length;
      for (std::size_t k = 0; k < length; ++k) rest[k] = std::isfinite(row[k]) ? row[k] : 0.0;
      for (int s = 0; s < needed; ++s) {
        double* slice = out.values.data() + static_cast<std::size_t>(s) * size + v * length;
        if (top[v] == none) {
          std::fill(slice, slice + length, 0.0);
          continue;
        }
        // |rest| < 2^(top + 1 - s w): the slice holds its bits at or above 2^(top + 1 - (s + 1) w).
        const int place = top[v] + 1 - (s + 1) * w;
        out.scale[static_cast<std::size_t>(s) * vectors + v] = place;
        const double unit = std::ldexp(1.0, place);
        const double inverse = std::ldexp(1.0, -place);
        for (std::size_t k = 0; k < length; ++k) {
          const double q = std::trunc(rest[k] * inverse);  // exact scaling, exact truncation
          slice[k] = q;                                     // an integer, |q| < 2^w
          rest[k] -= q * unit;                              // exact: the bits below the slice
        }
      }
    }
  }, serial_below);
  return true;
}

// C = A * B^T for row-major A (M x K), Bt (N x K), C (M x N), through the Fortran dgemm on the
// transposed problem: row-major C is column-major C^T = Bt A^T, and row-major Bt (A) read
// column-major is Bt^T (A^T).
void gemm(const double* a, const double* bt, double* c, std::size_t M, std::size_t N, std::size_t K) {
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const double one = 1.0, zero = 0.0;
  dgemm_("T", "N", &m, &n, &k, &one, bt, &k, a, &k, &zero, c, &m);
}

// The exact products of a block of rows of a with one matrix b, as slice products and scales.
struct SlicedProduct {
  bool usable = false;
  bool window = false;  // the terms of one element sum exactly in a 128-bit integer
  Slices a, b;
  std::vector<char> a_nonfinite, b_nonfinite;
  std::vector<double> products;  // (a.count M) x (b.count N): slice pair (s, t) in block (s, t)
};

// The slice width for K terms: the largest w with K * (2^w - 1)^2 < 2^53; 0 where slicing does
// not apply.
int slice_width(std::size_t K, std::size_t M, std::size_t N) {
  if (K == 0 || K > (std::size_t{1} << 21) || M > (1u << 30) || N > (1u << 30)) return 0;
  return (53 - static_cast<int>(std::bit_width(K - 1))) / 2;
}

// b's slices (bt row-major N x K, b transposed) into p; false where b cannot be sliced.
bool slice_b(const double* bt, std::size_t N, std::size_t K, int w, SlicedProduct& p) {
  return w > 0 && slice_matrix(bt, N, K, w, p.b, p.b_nonfinite);
}

// The slice products of rows a (row-major M x K) with p's b slices: p.usable when done.
void slice_a_and_multiply(const double* a, std::size_t M, std::size_t N, std::size_t K, int w, SlicedProduct& p) {
  p.usable = false;
  p.products.clear();
  if (!slice_matrix(a, M, K, w, p.a, p.a_nonfinite)) return;
  const std::size_t pairs = static_cast<std::size_t>(p.a.count) * static_cast<std::size_t>(p.b.count);
  // pairs == 0: a zero operand, whose result signs the long-accumulator loop works out.
  if (pairs == 0 || pairs * M * N > max_buffer_doubles) return;
  // One dgemm for every slice pair: a's slices stacked are an (Sa M) x K matrix, b's an (Sb N) x K
  // one, and their product holds the product of slices s and t at rows s M.., columns t N... One
  // call keeps BLAS's threads busy once instead of Sa Sb times (small sizes spent most of their
  // time handing work to and from them).
  p.products.resize(pairs * M * N);  // every element is written by the gemm
  gemm(p.a.values.data(), p.b.values.data(), p.products.data(), static_cast<std::size_t>(p.a.count) * M,
       static_cast<std::size_t>(p.b.count) * N, K);
  p.usable = true;
  // 53 bits per term, shifted by up to (slices_a - 1 + slices_b - 1) * w, plus carries and sign.
  p.window = 53 + (p.a.count + p.b.count - 2) * w + static_cast<int>(std::bit_width(pairs)) + 1 <= 127;
}

// Rows of a per block: the slice products of one block stay near block_budget doubles (4 MiB),
// so that an exact matmul's working memory beyond its result is b's slices and one block, not the
// slice products of the whole result (Sa Sb M N doubles: 4x the result for bf16 at K = 2048).
constexpr std::size_t block_budget = std::size_t{1} << 19;

std::size_t block_rows(std::size_t M, std::size_t N, const SlicedProduct& p) {
  const std::size_t count = static_cast<std::size_t>(std::max(1, p.b.count));
  return std::clamp<std::size_t>(block_budget / std::max<std::size_t>(1, count * count * N), 1, std::max<std::size_t>(M, 1));
}

void matmul_impl(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                 const Cast* cast, ExactValues& r) {
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
    c_full = xt::broadcast(*c, out_shape);
  }
  // b transposed per batch to [N, K], so that both operands of a dot product are contiguous.
  const std::size_t b_batches = b.size() / std::max<std::size_t>(1, K * N);
  std::vector<double> bt(b.size());
  constexpr std::size_t tile = 32;  // transpose in tiles: both sides stay in cache
  for (std::size_t s = 0; s < b_batches; ++s)
    for (std::size_t k0 = 0; k0 < K; k0 += tile)
      for (std::size_t n0 = 0; n0 < N; n0 += tile)
        for (std::size_t k = k0; k < std::min(K, k0 + tile); ++k)
          for (std::size_t n = n0; n < std::min(N, n0 + tile); ++n)
            bt[s * N * K + n * K + k] = b.data()[s * K * N + k * N + n];
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
  const double* cd = c ? c_full.data() : nullptr;
  // Error-free GEMMs where the inputs allow (see slice_a_and_multiply): b's slices per b matrix,
  // then a's rows block by block. Once every b is sliced, b^T is read only by elements that fall
  // back to the plain loop, which may read b itself (strided): b^T is dropped.
  const int w = M * N > 0 ? slice_width(K, M, N) : 0;
  std::vector<SlicedProduct> b_sliced(b_batches);
  bool all_sliced = w > 0;
  for (std::size_t s = 0; s < b_batches && w > 0; ++s) {
    b_sliced[s].usable = slice_b(bt.data() + s * N * K, N, K, w, b_sliced[s]);
    all_sliced = all_sliced && b_sliced[s].usable;
  }
  if (all_sliced) std::vector<double>().swap(bt);
  const double* bd = b.data();
  SlicedProduct unsliced;  // K == 0 or N == 0: no b matrix to slice
  for (std::size_t t = 0; t < matrices; ++t) {
    SlicedProduct& p = b_of[t] < b_sliced.size() ? b_sliced[b_of[t]] : unsliced;
    const bool b_ok = w > 0 && p.usable;
    const std::size_t rows = b_ok ? block_rows(M, N, p) : std::max<std::size_t>(M, 1);
    for (std::size_t m0 = 0; m0 < M; m0 += rows) {
      const std::size_t m1 = std::min(M, m0 + rows);
      if (b_ok) slice_a_and_multiply(ad + a_of[t] * M * K + m0 * K, m1 - m0, N, K, w, p);
      const bool sliced = b_ok && p.usable;
      p.usable = b_ok;  // b's slices stay usable for the next block
      const std::size_t first = t * M * N + m0 * N;
      reduce_range(first, (m1 - m0) * N, K + 1, std::max<std::size_t>(N, 1), cast, r.hi.data(),
                   cast ? nullptr : r.lo.data(),
                   [&](std::size_t i, std::size_t result_row, std::size_t n, LongAccumulator& acc, Direct& direct) {
        const std::size_t m = result_row - t * M;  // the row within matrix t
        const std::size_t ml = m - m0;             // ... and within the block
        if (sliced && !p.a_nonfinite[ml] && !p.b_nonfinite[n]) {
          const std::size_t a_count = static_cast<std::size_t>(p.a.count), b_count = static_cast<std::size_t>(p.b.count);
          const std::size_t Mb = m1 - m0;
          // Slice pair (s, u) of element (m, n): row s Mb + ml, column u N + n of the products.
          const std::size_t row = static_cast<std::size_t>(p.b.count) * N;
          const double* g = p.products.data() + ml * row + n;
          auto pair = [&](std::size_t s, std::size_t u) { return g[s * Mb * row + u * N]; };
          if (p.window && cd == nullptr && cast != nullptr) {
            // The terms g * 2^(scale_a + scale_b) are integers below 2^53 whose scales differ by
            // multiples of w: summed exactly in a 128-bit integer (p.window says they fit).
            const int base = p.a.scale[(a_count - 1) * Mb + ml] + p.b.scale[(b_count - 1) * N + n];
            int128 total = 0;
            for (std::size_t s = 0; s < a_count; ++s)
              for (std::size_t u = 0; u < b_count; ++u) {
                const int shift = p.a.scale[s * Mb + ml] + p.b.scale[u * N + n] - base;
                total += static_cast<int128>(static_cast<std::int64_t>(pair(s, u))) << shift;
              }
            if (total != 0) {  // an exact zero takes the accumulator path below for its sign
              const bool negative = total < 0;
              direct.value = normalize(negative, static_cast<uint128>(negative ? -total : total), base);
              direct.used = true;
              return;
            }
          }
          for (std::size_t s = 0; s < a_count; ++s) {
            const int scale_a = p.a.scale[s * Mb + ml];
            for (std::size_t u = 0; u < b_count; ++u) {
              const double term = pair(s, u);
              // An integer below 2^53 whose scales keep it a normal double: exact.
              if (term != 0) acc.add(std::ldexp(term, scale_a + p.b.scale[u * N + n]));
            }
          }
          if (!acc.is_zero()) {
            if (cd != nullptr) acc.add(cd[i]);
            return;
          }
          acc.clear();  // an exact zero: the signs of the zero products decide, as below
        }
        const double* row = ad + a_of[t] * M * K + m * K;
        if (!bt.empty()) {
          const double* col = bt.data() + b_of[t] * N * K + n * K;
          for (std::size_t k = 0; k < K; ++k) acc.add_product(row[k], col[k]);
        } else {
          const double* col = bd + b_of[t] * K * N + n;  // b itself, column n (stride N)
          for (std::size_t k = 0; k < K; ++k) acc.add_product(row[k], col[k * N]);
        }
        if (cd != nullptr) acc.add(cd[i]);
      });
    }
  }
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
xt::xarray<double> matmul(const xt::xarray<double>& a, const xt::xarray<double>& b, const Cast& out,
                          const xt::xarray<double>* c) {
  ExactValues r;
  matmul_impl(a, b, c, &out, r);
  return std::move(r.hi);
}
ExactValues matmul_exact(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c) {
  ExactValues r;
  matmul_impl(a, b, c, nullptr, r);
  return r;
}

}  // namespace numeq::reference
