// matmul (evaluate.hpp): each result element is the plan walk's (plan_walk.hpp), computed by the
// host's vector kernels (matmul_kernels.hpp) where a plan's structure is one they compute bit
// for bit (fp32 fma chains and their K tilings; fused tensor-core chains), by the walk elsewhere;
// matmul_row_blocks runs the fp32 chain kernels on the Tensor Engine's operands in place.

#include "numeq/core/evaluate.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "numeq/formats/error.hpp"
#include "shapes.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/widen.hpp"

#include "matmul_kernels.hpp"
#include "plan_walk.hpp"

namespace numeq::core {

using namespace detail;  // shapes.hpp: layouts and broadcasting; plan_walk.hpp: the walk

namespace {

// ---- the host's fp32 fma chain ----
//
// A plan that is one sequential chain of fp32 round-to-nearest-even fmas from +0 (cuda_core.fp32)
// is exactly what the host's IEEE fmaf computes, element by element, so a matmul under it runs on
// the host's fma instructions: each output element's chain is still evaluated in k order, one
// rounding per step; only independent chains (different n) share a vector register
// (matmul_kernels.hpp: hardware fma under AVX2 / AVX-512, std::fma otherwise). So do plans that
// cut K into tiles reduced by such a chain (or by a pairwise tree of fp32 nearest-even additions
// of fma leaves) from scratch and add the tiles' results in fp32 in order, in one or two levels
// (Trainium's nc_matmul tiles into PSUM, PSUM groups into SBUF): kernels::Fp32Tiling.

// sequential fp32 fmas from +0 over the products.
bool is_fma_chain(const PlanNode& r) {
  return r.kind == NodeKind::sequential && r.start_from_zero && r.arithmetic.product == ProductMode::fma &&
         host_fp32(r.arithmetic.accumulate) && r.children.empty();
}
// tree(2) of fp32 nearest-even additions over the products (leaves a_0 b_0 rounded, then fma).
bool is_fma_pair_tree(const PlanNode& r) {
  return r.kind == NodeKind::tree && r.arity == 2 && r.arithmetic.product == ProductMode::fma &&
         host_fp32(r.arithmetic.accumulate) && r.children.empty();
}
// chunked(2, a fused step of 2 exact products rounded once into fp32 nearest even, their sums
// added in fp32 from +0): Trainium's fp8 double_row column (trainium_platforms.cpp).
bool is_pair_chain(const PlanNode& r) {
  if (r.kind != NodeKind::chunked || r.chunk != 2 || r.children.size() != 2) return false;
  const PlanNode& pair = r.children[0];
  const PlanNode& fold = r.children[1];
  return pair.kind == NodeKind::fused && pair.fused.n == 2 && pair.fused.fraction_bits == max_fraction_bits &&
         host_fp32(pair.fused.output) && pair.fused.overflow == OverflowRule::cast &&
         pair.fused.zero_sign == ZeroSign::ieee && fold.kind == NodeKind::sequential && fold.start_from_zero &&
         host_fp32(fold.arithmetic.accumulate) && fold.children.empty();
}
// Values added in fp32 to nearest even in order, starting from the first.
bool is_fp32_in_order(const PlanNode& r) {
  return r.kind == NodeKind::sequential && !r.start_from_zero && host_fp32(r.arithmetic.accumulate) &&
         r.children.empty();
}

// The tiling of fp32 fma chains the plan states, if it is one (kernels::Fp32Tiling).
std::optional<kernels::Fp32Tiling> fp32_tiling(const Plan& plan) {
  if (plan.input_a || plan.input_b || plan.initial || plan.c_placement != CPlacement::last) return std::nullopt;
  const PlanNode& r = plan.reduction;
  if (is_fma_chain(r)) return kernels::Fp32Tiling{};
  if (r.kind != NodeKind::chunked || r.chunk == 0 || r.children.size() != 2 || !is_fp32_in_order(r.children[1]))
    return std::nullopt;
  const PlanNode& inner = r.children[0];
  if (is_fma_chain(inner) || is_fma_pair_tree(inner) || is_pair_chain(inner))
    return kernels::Fp32Tiling{r.chunk, 0, is_fma_pair_tree(inner), is_pair_chain(inner)};
  // Groups of tiles: chunked(T * G, chunked(T, tile, in order), in order).
  if (inner.kind != NodeKind::chunked || inner.chunk == 0 || r.chunk % inner.chunk != 0 || inner.children.size() != 2 ||
      !is_fp32_in_order(inner.children[1]))
    return std::nullopt;
  const PlanNode& column = inner.children[0];
  if (!is_fma_chain(column) && !is_fma_pair_tree(column) && !is_pair_chain(column)) return std::nullopt;
  return kernels::Fp32Tiling{inner.chunk, r.chunk / inner.chunk, is_fma_pair_tree(column), is_pair_chain(column)};
}

// Whether every x[i] is an fp32 value or a NaN.
// On threads above 2^17 values: a memory-bound pass over both operands, which ran serially before
// every fp32 GEMM.
bool all_floats(const double* x, std::size_t n) {
  std::atomic<bool> all{true};
  parallel_for(n, [&](std::size_t begin, std::size_t end) {
    if (all.load(std::memory_order_relaxed) && !kernels::all_fp32(x + begin, end - begin)) all = false;
  }, std::size_t{1} << 17);
  return all.load();
}

// The kernels' row groups (`unit` rows each, the last one short) are parallel_for's units, so
// that every thread gets an equal share of rows; within a slice, consecutive groups of one
// matrix go to the kernel in blocks of at most `most` groups (results never depend on how
// elements are grouped). Blocks of whole tasks cut the rows unevenly: 512 rows in tasks of 60
// gave one of two threads 300 of them.
template <class Block>
void for_row_blocks(std::size_t M, std::size_t begin, std::size_t end, std::size_t unit, std::size_t most,
                    Block&& block) {
  const std::size_t units = (M + unit - 1) / unit;
  for (std::size_t u = begin; u < end;) {
    const std::size_t t = u / units, first = u % units;
    const std::size_t count = std::min({most, units - first, end - u});
    const std::size_t m0 = first * unit;
    block(t, m0, std::min(count * unit, M - m0));
    u += count;
  }
}

// Element i of a matmul's result from its fp32 chain's value v (fp32_chains, fp32_streamed).
struct Fp32ChainOutput {
  const Plan& plan;
  const xt::xarray<double>* fc;
  std::uint64_t key = random_stream_key(plan.output.seed);
  bool stochastic = plan.output.rounding == Rounding::stochastic;
  bool plain_output = host_fp32(plan.output) && host_fp32(outer_cast(plan));
  bool fc_floats = fc != nullptr && all_floats(fc->data(), fc->size());

  double operator()(float v, std::size_t i) const {
    // The chain's value is an fp32 value: an fp32 nearest-even output keeps it; c (an fp32 value)
    // is added with the host's float addition, exactly add_rounded's result.
    if (plain_output && (!fc || fc_floats))
      return fc ? static_cast<double>(v + static_cast<float>(fc->data()[i])) : static_cast<double>(v);
    return finish(static_cast<double>(v), fc ? std::optional<double>(fc->data()[i]) : std::nullopt, plan,
                  stochastic ? random_bits_at(key, i) : 0);
  }
};

// result (matrices x M x N) = a @ b (+ fc, null for none) by the fp32 chain kernels under
// `tiling`: a holds fp32 values as doubles (row-major, or laid out as row_step and k_step say:
// kernels::fp32_fma_rows), b its matrices packed.
void fp32_chains(const double* a, const std::vector<kernels::PackedB32>& packed, const BatchOperands& operands,
                 std::size_t M, std::size_t K, std::size_t N, const xt::xarray<double>* fc, const Plan& plan,
                 const kernels::Fp32Tiling& tiling, double* result, std::size_t row_step = 0, std::size_t k_step = 1) {
  const Fp32ChainOutput output{plan, fc};
  const std::size_t unit = kernels::fp32_row_group(), most = 8, units = (M + unit - 1) / unit;
  parallel_for(operands.a_of.size() * units, [&](std::size_t begin, std::size_t end) {
    std::vector<float> acc(most * unit * N);
    for_row_blocks(M, begin, end, unit, most, [&](std::size_t t, std::size_t m0, std::size_t rows) {
      kernels::fp32_fma_rows(a + operands.a_of[t] * M * K + m0 * (row_step == 0 ? K : row_step), rows,
                             packed[operands.b_of[t]], acc.data(), N, tiling, row_step, k_step);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t n = 0; n < N; ++n) {
          const std::size_t i = (t * M + m0 + r) * N + n;
          result[i] = output(acc[r * N + n], i);
        }
    });
  }, std::max<std::size_t>(1, (std::size_t{1} << 16) / std::max<std::size_t>(1, K * N * unit)));
}

// K from which fp32_streamed takes a product with few outputs.
constexpr std::size_t kStreamFp32K = std::size_t{1} << 16;

// Long K with few outputs, one unit of K at a time: a PSUM group of tiles (grouped tiling), or one
// tile. Each unit's sum is what the kernel gives for it (a group's tiles summed as PSUM sums them,
// a tile's reduction); the units are then added in order in fp32, as the kernel adds its groups
// (or its tiles) one after another, so the bits are fp32_chains' (tested). Only one unit of b is
// packed at a time: a dot product of K = 2^26 holds its inputs and a few kilobytes, not its b
// padded to a panel of nr columns and its a to mr rows.
void fp32_streamed(const double* a, const double* b, const BatchOperands& operands, std::size_t M, std::size_t K,
                   std::size_t N, const xt::xarray<double>* fc, const Plan& plan, const kernels::Fp32Tiling& tiling,
                   std::size_t unit, double* result) {
  const std::size_t matrices = operands.a_of.size();
  const std::size_t b_matrices = *std::max_element(operands.b_of.begin(), operands.b_of.end()) + 1;
  std::vector<float> total(matrices * M * N), part(M * N);
  std::vector<kernels::PackedB32> packed(b_matrices);
  for (std::size_t k0 = 0; k0 < K; k0 += unit) {
    const std::size_t kc = std::min(unit, K - k0);
    for (std::size_t s = 0; s < b_matrices; ++s) packed[s] = kernels::pack_b32(b + s * K * N + k0 * N, kc, N);
    for (std::size_t t = 0; t < matrices; ++t) {
      kernels::fp32_fma_rows(a + operands.a_of[t] * M * K + k0, M, packed[operands.b_of[t]], part.data(), N, tiling, K, 1);
      float* to = total.data() + t * M * N;
      for (std::size_t i = 0; i < M * N; ++i) to[i] = k0 == 0 ? part[i] : to[i] + part[i];  // binary32, nearest even
    }
  }
  const Fp32ChainOutput output{plan, fc};
  for (std::size_t i = 0; i < total.size(); ++i) result[i] = output(total[i], i);
}

}  // namespace

xt::xarray<double> matmul(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                          const Plan& plan) {
  const MatmulLayout layout = matmul_layout(a, b, c);
  validate(plan);
  const std::size_t M = layout.M, K = layout.K, N = layout.N;
  const std::vector<std::size_t>& shape = layout.shape;
  const xt::xarray<double>& fc = layout.fc;
  // Which matrix of a and of b each result matrix reads (numpy broadcasting of batch axes).
  const BatchOperands& operands = layout.operands;
  const std::vector<std::size_t>& a_of = operands.a_of;
  const std::vector<std::size_t>& b_of = operands.b_of;
  const std::size_t matrices = a_of.size();
  xt::xarray<double> result = xt::xarray<double>::from_shape(shape);
  const std::uint64_t key = random_stream_key(plan.output.seed);
  const bool stochastic = plan.output.rounding == Rounding::stochastic;
  const std::size_t b_matrices = K * N == 0 ? 0 : b.size() / (K * N);
  const std::optional<kernels::Fp32Tiling> tiling = fp32_tiling(plan);
  if (kernels::enabled() && tiling && all_floats(a.data(), a.size()) && all_floats(b.data(), b.size()) && M * N * K > 0) {
    // Long K, few outputs (a dot product, a GEMV): streamed unit by unit where the tiling has units.
    const std::size_t unit = tiling->tile == 0 || tiling->tile >= K ? 0 : tiling->tile * std::max<std::size_t>(1, tiling->group);
    if (unit != 0 && K >= kStreamFp32K && matrices * M * N <= 256) {
      fp32_streamed(a.data(), b.data(), operands, M, K, N, c ? &fc : nullptr, plan, *tiling, unit, result.data());
      return result;
    }
    std::vector<kernels::PackedB32> packed(b_matrices);
    for (std::size_t s = 0; s < b_matrices; ++s) packed[s] = kernels::pack_b32(b.data() + s * K * N, K, N);
    fp32_chains(a.data(), packed, operands, M, K, N, c ? &fc : nullptr, plan, *tiling, result.data());
    return result;
  }
  // A chain of fused tensor-core steps: the column kernel computes every element it can finish
  // on its own (matmul_kernels.hpp); the others are walked as below.
  // The column kernel packs b in panels of 16 columns: below 8 columns most of a panel is padding
  // (16x b's size for a dot product) and the walk below is as fast or faster (measured here, fp32
  // on nvidia.h100: K = 2^22, N = 1: 0.73 s and 168 B per K against 0.23 s and 24 B; M = 256,
  // K = 4096: equal at N = 4, the kernel 1.5x faster at N = 8).
  constexpr std::size_t kFusedColumnsAtLeast = 8;
  if (kernels::enabled() && kernels::fused_cols_available() && plan.reduction.kind == NodeKind::fused &&
      M * N * K > 0 && N >= kFusedColumnsAtLeast) {
    const kernels::FusedCols fk = kernels::fused_cols_config(plan.reduction.fused);
    if (fk.applies) {
      // The inputs after the plan's input casts (no copy without one).
      std::vector<double> cast_a, cast_b;
      if (plan.input_a) cast_a = cast_inputs(a.data(), a.size(), plan.input_a);
      if (plan.input_b) cast_b = cast_inputs(b.data(), b.size(), plan.input_b);
      const double* ca = plan.input_a ? cast_a.data() : a.data();
      const double* cb = plan.input_b ? cast_b.data() : b.data();
      std::vector<std::int32_t> ea(a.size()), eb(b.size());
      // Values of the step's operand formats (at most 23 fraction bits each: products exact in
      // binary64, so check_products_exact would pass); anything else takes the walk below.
      const auto exponents = [&](bool is_a, const double* x, std::size_t n, std::int32_t* e) {
        std::atomic<bool> ok{true};
        parallel_for(n, [&](std::size_t begin, std::size_t end) {
          if (!kernels::fused_exponents(fk, is_a, x + begin, end - begin, e + begin)) ok = false;
        });
        return ok.load();
      };
      if (exponents(true, ca, a.size(), ea.data()) && exponents(false, cb, b.size(), eb.data())) {
        std::vector<kernels::PackedBFused> packed(b_matrices);
        for (std::size_t s = 0; s < b_matrices; ++s)
          kernels::pack_b_fused(fk, cb + s * K * N, eb.data() + s * K * N, K, N, packed[s]);
        const bool c_first = c != nullptr && plan.c_placement == CPlacement::first;
        const bool c_last = c != nullptr && plan.c_placement == CPlacement::last;
        const bool plain_output = host_fp32(plan.output) && !plan.initial && !c_last;
        const Cast outer = outer_cast(plan);
        // Row groups of 4 rows, blocks of up to 16 groups: b panels reused from L2.
        const std::size_t unit = 4, most = 16, units = (M + unit - 1) / unit;
        parallel_for(matrices * units, [&](std::size_t begin, std::size_t end) {
          std::vector<double> out(most * unit * N), column(K);
          std::vector<std::uint8_t> flags(most * unit * N);
          for_row_blocks(M, begin, end, unit, most, [&](std::size_t t, std::size_t m0, std::size_t rows) {
            const double* arows = ca + (a_of[t] * M + m0) * K;
            kernels::fused_cols_rows(fk, arows, ea.data() + (a_of[t] * M + m0) * K, rows, packed[b_of[t]],
                                     c_first ? fc.data() + (t * M + m0) * N : nullptr, N, out.data(), N, flags.data());
            for (std::size_t r = 0; r < rows; ++r)
              for (std::size_t n = 0; n < N; ++n) {
                const std::size_t i = (t * M + m0 + r) * N + n;
                const std::optional<double> cv = c ? std::optional<double>(fc.data()[i]) : std::nullopt;
                double v = out[r * N + n];
                if (flags[r * N + n] != 0) {
                  const double* bcol = cb + b_of[t] * K * N + n;
                  for (std::size_t k = 0; k < K; ++k) column[k] = bcol[k * N];
                  v = reduce_plan(plan, Terms{arows + r * K, column.data(), true}, K, c_first ? cv : std::nullopt);
                } else if (plan.initial) {
                  v = add_rounded(*plan.initial, v, outer);
                }
                // A finite fp32 value is its own fp32 nearest-even rounding (finish's cast).
                if (plain_output && static_cast<double>(static_cast<float>(v)) == v) {
                  result.data()[i] = v;
                } else {
                  result.data()[i] = finish(v, cv, plan, stochastic ? random_bits_at(key, i) : 0);
                }
              }
          });
        }, std::max<std::size_t>(1, (std::size_t{1} << 14) / std::max<std::size_t>(1, K * N * unit)));
        return result;
      }
    }
  }
  const std::vector<double> ca = cast_inputs(a.data(), a.size(), plan.input_a);
  // b transposed per matrix to [N, K]: each dot product reads two contiguous rows.
  std::vector<double> bt(b.size());
  for (std::size_t s = 0; s < b_matrices; ++s)
    for (std::size_t k = 0; k < K; ++k)
      for (std::size_t n = 0; n < N; ++n) bt[s * N * K + n * K + k] = b.data()[s * K * N + k * N + n];
  if (plan.input_b) bt = cast_inputs(bt.data(), bt.size(), plan.input_b);
  check_products_exact(ca.data(), ca.size(), bt.data(), bt.size());
  parallel_for(result.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const std::size_t t = i / (M * N), m = (i / N) % M, n = i % N;
      const std::optional<double> cv = c ? std::optional<double>(fc.data()[i]) : std::nullopt;
      const std::optional<double> init = plan.c_placement == CPlacement::first ? cv : std::nullopt;
      const Terms terms{ca.data() + (a_of[t] * M + m) * K, bt.data() + (b_of[t] * N + n) * K, true};
      const double v = reduce_plan(plan, terms, K, init);
      result.data()[i] = finish(v, cv, plan, stochastic ? random_bits_at(key, i) : 0);
    }
  }, std::max<std::size_t>(1, (std::size_t{1} << 14) / std::max<std::size_t>(1, K)));
  return result;
}

std::optional<xt::xarray<double>> matmul_row_blocks(std::span<const RowBlock> stationary,
                                                    std::span<const RowBlock> moving, std::size_t M, std::size_t N,
                                                    const Plan& plan) {
  validate(plan);
  const std::optional<kernels::Fp32Tiling> tiling = fp32_tiling(plan);
  const auto fp32_blocks = [](std::span<const RowBlock> blocks) {
    return std::all_of(blocks.begin(), blocks.end(), [](const RowBlock& b) { return holds_fp32_values(b.type); });
  };
  const auto rows = [](std::span<const RowBlock> blocks) {
    std::size_t n = 0;
    for (const RowBlock& b : blocks) n += b.rows;
    return n;
  };
  const std::size_t K = rows(stationary);
  if (rows(moving) != K)
    throw numeq::error("moving: " + std::to_string(rows(moving)) + " rows of K, but stationary has " +
                       std::to_string(K));
  if (!kernels::enabled() || !tiling || !fp32_blocks(stationary) || !fp32_blocks(moving) || M * N * K == 0)
    return std::nullopt;
  const auto refuse = [](const char* name, std::size_t at, const RowBlock& block) {
    throw numeq::error(std::string(name) + ": element " + std::to_string(at) + " (C order) is not a bit pattern of " +
                       std::string(block.type.format->name));
  };
  // stationary widened as it lies, [K, M]; the kernels read it transposed (row_step 1, k_step M).
  std::vector<double> at(K * M);
  for (std::size_t i = 0, k0 = 0; i < stationary.size(); k0 += stationary[i].rows, ++i) {
    const WidenReport r = widen(stationary[i].data, stationary[i].rows * M, stationary[i].type, at.data() + k0 * M);
    if (r.first() < stationary[i].rows * M) refuse("stationary", k0 * M + r.first(), stationary[i]);
  }
  std::size_t bad = 0;
  std::vector<kernels::PackedB32> packed(1);
  packed[0] = kernels::pack_b32(moving, N, bad);
  if (bad < K * N) {
    std::size_t i = 0, k0 = 0;  // the block holding row bad / N
    while (k0 + moving[i].rows <= bad / N) k0 += moving[i++].rows;
    refuse("moving", bad, moving[i]);
  }
  xt::xarray<double> result = xt::xarray<double>::from_shape({M, N});
  fp32_chains(at.data(), packed, BatchOperands{{0}, {0}}, M, K, N, nullptr, plan, *tiling, result.data(), 1, M);
  return result;
}

bool holds_fp32_values(const ElementType& type) {
  if (type.format == nullptr) return type.bytes <= 2;  // |v| < 2^16: exact in fp32
  return !type.format->is_integer() && values_within(*type.format, formats::fp32);  // fp32 itself included
}

}  // namespace numeq::core
