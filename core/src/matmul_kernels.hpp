#pragma once
// Matmul kernels for two common plans (private to numeq_core; matmul.cpp picks them). Each
// computes, per output element, exactly the chain the plan states, in the plan's order; they only
// lay out independent chains (different output columns) side by side in vector registers, so
// results are those of the element-by-element walk bit for bit, whatever the blocking or the
// thread count (tests/cpp/core/test_matmul.cpp compares them with the walk on awkward shapes).
//
//  * fp32 fma chains (cuda_core.fp32): acc = fma(a[i,k], b[k,j], acc) for k = 0 .. K-1 from +0,
//    one IEEE binary32 fused multiply-add (one rounding, nearest even) per step. A block of rows
//    times a packed panel of B columns, the accumulators held in registers (GotoBLAS layout).
//    Also cut into tiles along K whose results are added in fp32 (Trainium's nc_matmul tiles
//    into PSUM, Fp32Tiling), each tile's products added by the chain or by a pairwise tree
//    (fp32_chain_kernels.cpp).
//  * fused tensor-core chains (nvidia.*): steps of `n` products along K, each step's result the
//    next one's c (fused.hpp), for the steps fused.cpp's fast path serves, computed as that fast
//    path computes them; 16 output columns of 4 rows per pass (AVX-512), the operands checked and
//    decoded (exponent, significand) once per matrix instead of once per step. Elements it cannot
//    finish on its own (specials, results outside the output's normal range) are flagged and
//    walked by the caller.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "numeq/core/evaluate.hpp"
#include "numeq/core/fused.hpp"
#include "numeq/formats/widen.hpp"

namespace numeq::core::kernels {

// Whether evaluate's matmul uses these kernels at all (detail::set_matmul_kernel).
bool enabled();

// The code the kernels run (detail::set_matmul_kernel): none walks the plan instead.
enum Level : int { none = 0, portable = 1, avx2 = 2, avx512 = 3 };
int current_level();

// ---- fp32 fma chains ----

// Whether every x[i] is an fp32 value (Inf included) or a NaN: the host's double -> float -> double
// round trip (nearest even) gives x back.
bool all_fp32(const double* x, std::size_t n);

// b (K x N, row-major) packed into panels of columns for fp32_fma_rows.
struct PackedB32 {
  std::unique_ptr<float[]> data;  // panels * K * nr floats, written whole by pack_b32 (no zeroing first)
  std::size_t K = 0, N = 0, nr = 0;  // nr: columns per panel (the kernel's vector width x 2)
  int level = 0;                      // the kernel they were cut for
};
// b holds fp32 values (or NaN) as doubles.
PackedB32 pack_b32(const double* b, std::size_t K, std::size_t N);
// b given as consecutive blocks of rows (core::RowBlock) of element types whose every value is an
// fp32 value (the caller's to know): read in place, no float64 copy of the whole. `bad`: the
// first element (C order in b) widen refuses (a bit pattern outside the format), or K * N.
PackedB32 pack_b32(std::span<const RowBlock> b, std::size_t N, std::size_t& bad);

// The kernel's register block of rows: row blocks of a multiple of it waste no work.
std::size_t fp32_row_group();

// How the chains are cut along K. tile = 0: one chain over all of K. tile = T: every T rows of K
// (the last tile the rest) make a tile reduced on its own from scratch, and the tiles' results
// are added in fp32 to nearest even in order: p = t_0, p = p + t_1, ... (Trainium: nc_matmul
// tiles accumulated into PSUM). group = G (with a tile): the tiles in groups of G, each group's
// sum as above, and the groups' sums added the same way (a PSUM group copied into an SBUF
// accumulator). pairwise: a tile's products are added by a pairwise tree instead of the chain:
// leaves fma(a_1, b_1, a_0 * b_0) of neighbouring pairs (a lone last product: a_k * b_k rounded
// to fp32), then neighbours added level by level, an odd last one going up unchanged (the plan
// node tree(2, fp32 nearest even)). pair_chain: the same leaves added in order from +0 instead
// (acc = acc + leaf: Trainium's fp8 double_row, each PE adding its two products exactly and
// rounding once, the column adding the pair sums; the plan's chunked(2, fused pair, sequential)).
struct Fp32Tiling {
  std::size_t tile = 0, group = 0;
  bool pairwise = false;
  bool pair_chain = false;
};

// out[r * ldo + n] (r < rows, n < N; ldo >= N) = the fp32 fma chain of row r of a (rows x K,
// row-major, fp32 values or NaN as doubles) with column n of b: acc = +0; acc = fma(a[r,k],
// b[k,n], acc) for k = 0 .. K-1; or, under a tiling, the tiles' reductions added as it says.
// a[r * row_step + k * k_step] is row r's k-th value (row_step 0: K, row-major a; a transposed,
// as the Tensor Engine's stationary operand [K, M] holds it: row_step 1, k_step M).
void fp32_fma_rows(const double* a, std::size_t rows, const PackedB32& b, float* out, std::size_t ldo,
                   const Fp32Tiling& tiling = {}, std::size_t row_step = 0, std::size_t k_step = 1);

// ---- fused tensor-core chains ----

// The step as the kernel reads it; `applies` false when the kernel does not serve the step.
struct FusedCols {
  bool applies = false;
  FusedStep step{};
  int n = 0, F = 0;
  int a_emin = 0, b_emin = 0, c_emin = 0;
  double a_grid = 0, b_grid = 0, c_grid = 0;  // 2^(52 - m) of each format
  double a_max = 0, b_max = 0, c_max = 0;     // max_finite of each format
  std::int32_t zero_operand = 0;  // the exponent a zero operand enters the maximum with
  std::int32_t zero_c = 0;        // the exponent a zero c enters it with
  std::int32_t floor = 0;         // E starts here (exponent_floor, or fused.cpp's 2^-900)
  bool nearest = false;           // output rounding: nearest_even (else toward_zero)
  int out_m = 0, out_emin = 0, out_emax = 0;
  bool zero_positive = true;
  double zero_result = 0;
  // Operand significands of at most 12 bits each (fp16, bf16, tf32, fp8): products of two
  // significands are exact in binary32, and the kernel computes the aligned terms in float lanes
  // (16 per vector), summing chunks of `chunk` terms in int32.
  bool narrow = false;
  int chunk = 0;
  // Also the running values in float lanes (outputs rounded toward zero within binary32).
  bool compact = false;
};
FusedCols fused_cols_config(const FusedStep& step);

// The exponent each operand of x (n values of `format` in a's or b's role) enters the maximum
// with; false when some operand is not a finite value of its format (the caller then takes the
// element-by-element path, which reports it).
bool fused_exponents(const FusedCols& k, bool is_a, const double* x, std::size_t n, std::int32_t* e);

// b (K x N row-major) and its exponents packed in panels of 16 columns: the values and integer
// exponents, or (k.narrow) each value's significand x * 2^-e and exponent e as floats.
struct PackedBFused {
  std::vector<double> value;
  std::vector<std::int32_t> exponent;
  std::vector<float> significand, exponent_f;
  std::size_t K = 0, N = 0;
};
void pack_b_fused(const FusedCols& k, const double* b, const std::int32_t* eb, std::size_t K, std::size_t N,
                  PackedBFused& out);

// Whether this CPU runs the fused-chain kernel (AVX-512); otherwise matmul.cpp walks the plan.
bool fused_cols_available();

// The chains of rows x N elements: a (rows x K), ea its exponents, c0 (rows x N, row stride ldc)
// each chain's initial c or nullptr for +0; results into out (row stride ldo). Elements the
// kernel does not finish itself (a NaN or Inf on the way, a result outside the output format's
// normal range, a zero sum under ZeroSign::ieee, an initial c that is not a finite value of
// c_format) get flag 1 in flags (rows x N): the caller recomputes them with fused_chain.
void fused_cols_rows(const FusedCols& k, const double* a, const std::int32_t* ea, std::size_t rows,
                     const PackedBFused& b, const double* c0, std::size_t ldc, double* out, std::size_t ldo,
                     std::uint8_t* flags);

}  // namespace numeq::core::kernels
