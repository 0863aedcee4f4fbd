// The plan evaluator (evaluate.hpp): one recursive walk of the plan per output element.

#include "numeq/core/evaluate.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include <xtensor/xbroadcast.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xstrided_view.hpp>

#include "numeq/formats/error.hpp"
#include "shapes.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/widen.hpp"
#include "numeq/formats/exact.hpp"

#include "matmul_kernels.hpp"

#include "explicit_tree.hpp"
#include "round_value.hpp"

namespace numeq::core {

using namespace detail;  // shapes.hpp: layouts and broadcasting shared with the other walker

namespace {

using detail::round_fast;
using detail::round_value;

// Whether the cast is exactly the host's IEEE binary32 / binary64 round-to-nearest-even
// arithmetic (no flushing, IEEE overflow): then the host's own + gives the kernel's result.
bool host_fp32(const Cast& c) {
  return c.format == formats::fp32 && c.rounding == Rounding::nearest_even && c.overflow == Overflow::ieee &&
         c.subnormals == Subnormals::keep;
}
bool host_fp64(const Cast& c) {
  return c.format == formats::fp64 && c.rounding == Rounding::nearest_even && c.overflow == Overflow::ieee &&
         c.subnormals == Subnormals::keep;
}

// The exact s + e of a TwoSum pair (|e| <= ulp(s) / 2, s finite non-zero, e non-zero), as the
// kernel's Exact: s's significand is placed 64 bits up in a 128-bit integer, e's bits are added
// or subtracted below it; bits of e that fall off the bottom make the sticky bit, and a
// subtraction of such bits borrows one unit (the true value lies strictly below the integer).
Exact exact_two(double s, double e) {
  const Unpacked us = unpack_double(s);
  const Unpacked ue = unpack_double(e);
  // us: value = sig * 2^(exponent - 63); units of the 128-bit integer: 2^(us.exponent - 63 - 64).
  const uint128 big = static_cast<uint128>(us.significand) << 64;
  const int shift = ue.exponent - us.exponent + 64;  // e's significand position in those units
  uint128 part = 0;
  bool lost = false;
  if (shift >= 0) {
    part = static_cast<uint128>(ue.significand) << shift;  // shift <= 64 - 53 + ... stays in range
  } else if (shift > -64) {
    part = ue.significand >> -shift;
    lost = (ue.significand << (64 + shift)) != 0;
  } else {
    lost = true;
  }
  const bool subtract = us.negative != ue.negative;
  uint128 magnitude = subtract ? big - part - (lost ? 1 : 0) : big + part;
  Exact x = normalize(us.negative, magnitude, us.exponent - 127);
  x.sticky = x.sticky || lost;
  return x;
}

// An input or partial value, or a product a_k b_k: what the leaves reduce.
// Whether the terms are products is stated, never inferred from b: a dot product or matmul with
// K = 0 has empty operands (null data) and is still a reduction of products.
struct Terms {
  const double* a = nullptr;
  const double* b = nullptr;  // products: the second factors
  bool products = false;      // false: the terms are the values a[k]
  double term(std::size_t k) const { return products ? a[k] * b[k] : a[k]; }  // exact (see evaluate.hpp)
};

// The term alone, as the accumulator's first value.
double first_value(const Terms& t, std::size_t k, const Arithmetic& ar) {
  double v = t.term(k);
  if (t.products && ar.product == ProductMode::rounded) v = round_value(v, ar.product_cast);
  return round_value(v, ar.accumulate);
}

double accumulate(double acc, const Terms& t, std::size_t k, const Arithmetic& ar) {
  double v = t.term(k);
  if (t.products && ar.product == ProductMode::rounded) v = round_value(v, ar.product_cast);
  return add_rounded(acc, v, ar.accumulate);
}

double reduce_node(const PlanNode& node, const Terms& t, std::size_t begin, std::size_t end,
                   std::optional<double> init);

// Whether a sequential node's steps may take sequential_fast: nearest-even or toward-zero casts
// without flushing (their only special cases, subnormal and overflowing results, leave the fast
// loop).
bool fast_sequential(const Arithmetic& ar) {
  const auto plain = [](const Cast& c) {
    return (c.rounding == Rounding::nearest_even || c.rounding == Rounding::toward_zero) &&
           c.subnormals == Subnormals::keep && !c.format.is_integer();
  };
  return plain(ar.accumulate) && (ar.product != ProductMode::rounded || plain(ar.product_cast));
}

// The steps k = begin, begin + 1, ... of a sequential reduction while each is an exact double
// sum whose rounding the integer shortcut takes (round_fast: nearest even or toward zero): the
// common case of a narrow or truncating accumulator, without add_rounded's general path per
// term. Returns the first step it did not take (acc holds the sum before it); accumulate goes on
// from there, so the result is the same bit for bit. Zeros: a double sum of zeros or an exact
// cancellation is signed as IEEE 754 signs it to nearest even, which is also its sign toward zero
// (only rounding downward differs, s6.3), as add_rounded does.
std::size_t sequential_fast(double& acc, const Terms& t, std::size_t begin, std::size_t end, const Arithmetic& ar) {
  const bool rounded = t.products && ar.product == ProductMode::rounded;
  const detail::FastRound to_product(ar.product_cast), to_accumulator(ar.accumulate);
  for (std::size_t k = begin; k < end; ++k) {
    double v = t.term(k);
    if (rounded && v != 0 && !to_product(v, v)) return k;
    const double s = acc + v;
    if (s == 0) {  // exact: a sum of zeros or a cancellation, signed as IEEE 754 does (nearest, toward zero)
      acc = s;
      continue;
    }
    const double bv = s - acc, av = s - bv;
    const double e = (acc - av) + (v - bv);  // TwoSum: s + e == acc + v
    double r;
    if (e != 0 || !to_accumulator(s, r)) return k;
    acc = r;
  }
  return end;
}

double reduce_values(const PlanNode& node, const std::vector<double>& values, std::optional<double> init) {
  return reduce_node(node, Terms{values.data(), nullptr, false}, 0, values.size(), init);
}

double with_init(double value, std::optional<double> init, const Cast& cast) {
  return init ? add_rounded(*init, value, cast) : value;
}

double reduce_node(const PlanNode& node, const Terms& t, std::size_t begin, std::size_t end,
                   std::optional<double> init) {
  const std::size_t n = end - begin;
  const Arithmetic& ar = node.arithmetic;
  switch (node.kind) {
    case NodeKind::sequential: {
      std::size_t k = begin;
      double acc = 0.0;
      if (init) acc = *init;
      else if (node.start_from_zero || n == 0) acc = 0.0;
      else acc = first_value(t, k++, ar);
      if (fast_sequential(ar)) k = sequential_fast(acc, t, k, end, ar);
      for (; k < end; ++k) acc = accumulate(acc, t, k, ar);
      return acc;
    }
    case NodeKind::lanes: {
      const std::size_t lanes = node.lanes;
      double result = 0.0;
      if (n < lanes) {  // numpy: res = 0., then every term in order
        for (std::size_t k = begin; k < end; ++k) result = accumulate(result, t, k, ar);
        return with_init(result, init, ar.accumulate);
      }
      std::vector<double> r(lanes);
      for (std::size_t j = 0; j < lanes; ++j) r[j] = first_value(t, begin + j, ar);
      const std::size_t body = n - n % lanes;
      for (std::size_t i = lanes; i < body; i += lanes)
        for (std::size_t j = 0; j < lanes; ++j) r[j] = accumulate(r[j], t, begin + i + j, ar);
      // ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)): neighbours first, level by level.
      while (r.size() > 1) {
        std::vector<double> next;
        for (std::size_t j = 0; j + 1 < r.size(); j += 2) next.push_back(add_rounded(r[j], r[j + 1], ar.accumulate));
        if (r.size() % 2 != 0) next.push_back(r.back());
        r.swap(next);
      }
      result = r[0];
      for (std::size_t k = begin + body; k < end; ++k) result = accumulate(result, t, k, ar);
      return with_init(result, init, ar.accumulate);
    }
    case NodeKind::pairwise: {
      if (n <= node.leaf) return reduce_node(node.children[0], t, begin, end, init);
      const std::size_t half = pairwise_cut(n, node.multiple);
      const double left = reduce_node(node, t, begin, begin + half, std::nullopt);
      const double right = reduce_node(node, t, begin + half, end, std::nullopt);
      return with_init(add_rounded(left, right, ar.accumulate), init, ar.accumulate);
    }
    case NodeKind::chunked: {
      std::vector<double> partials;
      for (std::size_t k = begin; k < end; k += node.chunk)
        partials.push_back(reduce_node(node.children[0], t, k, std::min(end, k + node.chunk), std::nullopt));
      return reduce_values(node.children[1], partials, init);
    }
    case NodeKind::split: {
      const std::vector<std::size_t> start = split_starts(n, node.parts);
      std::vector<double> partials;
      std::optional<double> acc = init;
      for (std::size_t p = 0; p + 1 < start.size(); ++p) {
        const std::size_t k0 = begin + start[p], k1 = begin + start[p + 1];
        if (node.split_mode == SplitMode::serial) {
          acc = round_value(reduce_node(node.children[0], t, k0, k1, acc), node.through);
        } else {
          partials.push_back(round_value(reduce_node(node.children[0], t, k0, k1, std::nullopt), node.through));
        }
      }
      if (node.split_mode == SplitMode::serial) return acc ? *acc : 0.0;
      return reduce_values(node.children[1], partials, init);
    }
    case NodeKind::tree: {
      std::vector<double> level;
      for (std::size_t k = begin; k < end; k += node.arity) {
        double acc = first_value(t, k, ar);
        for (std::size_t i = k + 1; i < std::min(end, k + node.arity); ++i) acc = accumulate(acc, t, i, ar);
        level.push_back(acc);
      }
      while (level.size() > 1) {
        std::vector<double> next;
        for (std::size_t k = 0; k < level.size(); k += node.arity) {
          double acc = level[k];
          for (std::size_t i = k + 1; i < std::min(level.size(), k + node.arity); ++i)
            acc = add_rounded(acc, level[i], ar.accumulate);
          next.push_back(acc);
        }
        level.swap(next);
      }
      return with_init(level.empty() ? 0.0 : level[0], init, ar.accumulate);
    }
    case NodeKind::permute: {
      std::vector<double> a, b;
      a.reserve(n);
      b.reserve(t.products ? n : 0);
      for (std::size_t block = begin; block < end; block += node.block) {
        const std::size_t len = std::min(node.block, end - block);
        for (const std::size_t i : node.order) {
          if (i >= len) continue;
          a.push_back(t.a[block + i]);
          if (t.products) b.push_back(t.b[block + i]);
        }
      }
      return reduce_node(node.children[0], Terms{a.data(), b.data(), t.products}, 0, n, init);
    }
    case NodeKind::fused: {
      if (!t.products) throw numeq::error("plan: a fused node reduces products; use it for dot and matmul");
      if (n == 0) return init ? *init : 0.0;  // no step runs: c passes on unchanged (K = 0)
      return fused_chain(std::span<const double>(t.a + begin, n), std::span<const double>(t.b + begin, n),
                         init ? *init : 0.0, node.fused);
    }
    case NodeKind::group:
    case NodeKind::term: return reduce_explicit_tree(node, t.a + begin, t.products ? t.b + begin : nullptr, n, init);
    case NodeKind::decompose: {
      if (!t.products) throw numeq::error("plan: a decompose node splits the operands of products; use it for dot and matmul");
      // Piece p of x: the piece cast of what the earlier pieces left (x - x0 - ... is exact in
      // binary64 for operands of at most 24 significant bits); an Inf or NaN stays in piece 0.
      const std::size_t pieces = node.pieces;
      const auto split_operand = [&](const double* x) {
        std::vector<double> out(pieces * n, 0.0);
        for (std::size_t k = 0; k < n; ++k) {
          double rest = x[begin + k];
          for (std::size_t p = 0; p < pieces; ++p) {
            const double piece = round_value(rest, node.piece);
            out[p * n + k] = piece;
            rest = std::isfinite(piece) ? rest - piece : 0.0;
          }
        }
        return out;
      };
      const std::vector<double> pa = split_operand(t.a), pb = split_operand(t.b);
      std::vector<double> partials;
      for (std::size_t block = 0; block < n; block += node.block) {
        const std::size_t len = std::min(node.block, n - block);
        for (const auto& [i, j] : node.passes)
          partials.push_back(reduce_node(node.children[0], Terms{pa.data() + i * n + block, pb.data() + j * n + block, true},
                                         0, len, std::nullopt));
      }
      return reduce_values(node.children[1], partials, init);
    }
  }
  return 0.0;
}

int significant_bits(double x) {
  if (x == 0 || !std::isfinite(x)) return 0;
  const Unpacked u = unpack_double(x);
  return 64 - std::countr_zero(u.significand);
}

void check_products_exact(const double* a, std::size_t na, const double* b, std::size_t nb) {
  int wa = 0, wb = 0;
  for (std::size_t i = 0; i < na; ++i) wa = std::max(wa, significant_bits(a[i]));
  for (std::size_t i = 0; i < nb; ++i) wb = std::max(wb, significant_bits(b[i]));
  if (wa + wb > 53)
    throw numeq::error("a, b: inputs with " + std::to_string(wa) + " and " + std::to_string(wb) +
                       " significant bits: their products are not exact in binary64; plans take values of formats up "
                       "to fp32 (24 bits)");
}

// Input casts (tf32 truncation and the like) applied to a copy.
std::vector<double> cast_inputs(const double* x, std::size_t n, const std::optional<Cast>& cast) {
  std::vector<double> out(x, x + n);
  if (cast)
    for (double& v : out) v = round_value(v, *cast);
  return out;
}

// The plan's reduction of terms [0, n), added to plan.initial when it has one.
double reduce_plan(const Plan& plan, const Terms& t, std::size_t n, std::optional<double> init) {
  const double value = reduce_node(plan.reduction, t, 0, n, init);
  return plan.initial ? add_rounded(*plan.initial, value, outer_cast(plan)) : value;
}

double finish(double value, std::optional<double> c, const Plan& plan, std::uint64_t random) {
  if (c && plan.c_placement == CPlacement::last) value = add_rounded(value, *c, outer_cast(plan));
  return round_value(value, plan.output, random);
}


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

double add_rounded(double x, double y, const Cast& cast) {
  if (cast.format.is_integer()) {
    // An integer accumulator (int32 for int8 GEMMs): sums of integers are exact; one that leaves
    // the format's range is an error, never a wrapped or saturated value.
    if (!std::isfinite(x) || !std::isfinite(y) || x != std::floor(x) || y != std::floor(y))
      throw numeq::error("plan: an integer accumulator (" + std::string(cast.format.name) +
                         ") can only add integers; got a non-integer or non-finite term (inputs must be integer values)");
    const double s = x + y;  // exact: both are integers far below 2^53 in magnitude
    if (s < static_cast<double>(cast.format.int_min()) || s > static_cast<double>(cast.format.int_max()))
      throw numeq::error("plan: the " + std::string(cast.format.name) + " accumulator overflows (a partial sum of " +
                         std::to_string(s) + " is outside [" + std::to_string(cast.format.int_min()) + ", " +
                         std::to_string(cast.format.int_max()) + "]); K is too large for these values");
    return s;
  }
  if (host_fp32(cast)) {
    const auto fx = static_cast<float>(x), fy = static_cast<float>(y);
    if (static_cast<double>(fx) == x && static_cast<double>(fy) == y) return static_cast<double>(fx + fy);
  }
  if (host_fp64(cast)) return x + y;
  x = flush_input(x, cast);
  y = flush_input(y, cast);
  if (!std::isfinite(x) || !std::isfinite(y)) return round_value(x + y, cast);  // IEEE: Inf - Inf = NaN
  double s = x + y;
  if (x == 0 || y == 0 || s == 0) {
    // Exact: a zero operand, or an exact cancellation, signed by the one IEEE 754 rule.
    if (s == 0) {
      ZeroSigns zeros;
      for (const double v : {x, y}) {
        if (v == 0) zeros.zero(std::signbit(v));
        else zeros.nonzero = true;
      }
      return round_value(zeros.negative(cast.rounding) ? -0.0 : 0.0, cast);
    }
    return round_value(s, cast);
  }
  // A binary64 overflow of the exact sum: halve both (exact for such large values), add, and
  // put the factor back into the exponent.
  int scale = 0;
  if (!std::isfinite(s)) {
    x *= 0.5;
    y *= 0.5;
    s = x + y;
    scale = 1;
  }
  // TwoSum (Knuth, TAOCP vol. 2, 4.2.2): s + e == x + y exactly.
  const double bv = s - x;
  const double av = s - bv;
  const double e = (x - av) + (y - bv);
  // An exact double sum (the common case: terms within 53 - p binades of each other) rounds as
  // any double does.
  if (double r; e == 0 && scale == 0 && round_fast(s, cast, r)) return r;
  Exact exact;
  if (e == 0) {
    const Unpacked u = unpack_double(s);
    exact = Exact{u.negative, u.exponent, u.significand, false};
  } else {
    exact = exact_two(s, e);
  }
  exact.exponent += scale;
  // A format without a sign bit (E8M0) holds no negative value: NaN, as a cast gives.
  if (!cast.format.is_signed && exact.negative) return std::numeric_limits<double>::quiet_NaN();
  return decode_bits(cast.format, round_and_pack(cast, exact, 0));
}

double evaluate(std::span<const double> a, std::span<const double> b, std::optional<double> c, const Plan& plan) {
  validate(plan);
  if (!b.empty() && b.size() != a.size())
    throw numeq::error("b: length " + std::to_string(b.size()) + " differs from a's " + std::to_string(a.size()));
  const std::vector<double> ca = cast_inputs(a.data(), a.size(), plan.input_a);
  const std::vector<double> cb = cast_inputs(b.data(), b.size(), plan.input_b);
  if (!b.empty()) check_products_exact(ca.data(), ca.size(), cb.data(), cb.size());
  const Terms terms{ca.data(), cb.data(), !b.empty()};
  const std::optional<double> init = plan.c_placement == CPlacement::first ? c : std::nullopt;
  const double value = reduce_plan(plan, terms, ca.size(), init);
  const std::uint64_t random = plan.output.rounding == Rounding::stochastic
                                   ? random_bits_at(random_stream_key(plan.output.seed), 0)
                                   : 0;
  return finish(value, c, plan, random);
}

xt::xarray<double> sum(const xt::xarray<double>& x, std::ptrdiff_t axis, const Plan& plan) {
  validate(plan);
  const AxisLayout layout = axis_layout(x, axis);
  const std::size_t outer = layout.outer, inner = layout.inner;
  const std::vector<std::size_t>& out_shape = layout.out_shape;
  const std::size_t length = layout.length;
  const std::vector<double> values = cast_inputs(x.data(), x.size(), plan.input_a);
  xt::xarray<double> result = xt::xarray<double>::from_shape(out_shape);
  const std::uint64_t key = random_stream_key(plan.output.seed);
  const bool stochastic = plan.output.rounding == Rounding::stochastic;
  parallel_for(outer * inner, [&](std::size_t begin, std::size_t end) {
    std::vector<double> row(length);
    for (std::size_t i = begin; i < end; ++i) {
      const double* base = values.data() + (i / inner) * length * inner + i % inner;
      for (std::size_t k = 0; k < length; ++k) row[k] = base[k * inner];
      const double v = reduce_plan(plan, Terms{row.data(), nullptr, false}, length, std::nullopt);
      result.data()[i] = finish(v, std::nullopt, plan, stochastic ? random_bits_at(key, i) : 0);
    }
  }, std::max<std::size_t>(1, (std::size_t{1} << 14) / std::max<std::size_t>(1, length)));
  return result;
}

xt::xarray<double> dot(const xt::xarray<double>& a, const xt::xarray<double>& b, const xt::xarray<double>* c,
                       const Plan& plan) {
  validate(plan);
  const DotLayout layout = dot_layout(a, b, c);
  const std::size_t K = layout.K;
  const std::vector<std::size_t>& shape = layout.shape;
  const xt::xarray<double>&fa = layout.fa, &fb = layout.fb, &fc = layout.fc;
  const std::vector<double> ca = cast_inputs(fa.data(), fa.size(), plan.input_a);
  const std::vector<double> cb = cast_inputs(fb.data(), fb.size(), plan.input_b);
  check_products_exact(ca.data(), ca.size(), cb.data(), cb.size());
  xt::xarray<double> result = xt::xarray<double>::from_shape(shape);
  const std::uint64_t key = random_stream_key(plan.output.seed);
  const bool stochastic = plan.output.rounding == Rounding::stochastic;
  parallel_for(result.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const std::optional<double> cv = c ? std::optional<double>(fc.data()[i]) : std::nullopt;
      const std::optional<double> init = plan.c_placement == CPlacement::first ? cv : std::nullopt;
      const double v = reduce_plan(plan, Terms{ca.data() + i * K, cb.data() + i * K, true}, K, init);
      result.data()[i] = finish(v, cv, plan, stochastic ? random_bits_at(key, i) : 0);
    }
  }, std::max<std::size_t>(1, (std::size_t{1} << 14) / std::max<std::size_t>(1, K)));
  return result;
}

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
