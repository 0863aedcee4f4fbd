#pragma once
// Accumulation plans: how a platform reduces K terms (products a_k * b_k, or values x_k) to one
// number, as a tree of named nodes, each stating the arithmetic of its additions. A plan is plain
// data: printable (to_string), comparable (==), and serialisable to JSON (to_json / plan_from_json),
// so that built-in profiles and users' own plans are the same kind of object.
//
// Node kinds and their meaning on a contiguous range of n terms (an optional initial value `init`
// is the c of d = a.b + c, or the running value handed in by an enclosing node):
//   sequential  acc = init (or +0 when start_from_zero, or else the first term); then
//               acc = add(acc, term) for each remaining term, in index order.
//   lanes(L)    numpy's unrolled loop (numpy/_core/src/umath/loops_utils.h.src, pairwise_sum):
//               n < L: one accumulator from +0; else lane j starts with term j, term i goes to lane
//               i mod L for i < n - n mod L, the lanes are combined by a balanced pairwise tree
//               ((0+1)+(2+3))+((4+5)+(6+7)), and the last n mod L terms are added in order.
//   pairwise(leaf, multiple)  n <= leaf: the child node; else n2 = n/2 rounded down to a
//               multiple of `multiple`, and add(pairwise(first n2), pairwise(rest)).
//   chunked(chunk)  children {inner, outer}: inner reduces each run of `chunk` consecutive terms,
//               outer reduces the partial results (as value terms) in order, init going to outer.
//   split(parts)   K cut into `parts` contiguous parts (sizes differing by at most one, larger first).
//               parallel: children {inner, combine}: each part reduced by inner from +0, rounded
//               through `through`, the partials reduced by combine (init going to combine);
//               serial: acc = init; acc = through(inner(part, init = acc)) per part, in order
//               (CUTLASS serial split-K passes the partial through the output type).
//   tree(arity)    terms summed in consecutive groups of `arity` (each group in order), then the
//               group sums likewise, level by level, until one value remains; init added last.
//   fused         a chain of tensor-core fused steps of `fused.n` products along K, each step's
//               result the c of the next (FusedStep, fused.hpp), init the c of the first.
//   permute(block, order)  the range cut into blocks of `block` terms, each block's terms taken in
//               `order` (a permutation of 0 .. block-1; a short last block skips the missing
//               indices); the child reduces the reordered sequence (init passed on). Hopper's
//               mma.sync with fp8 operands feeds products k mod 4 in {0, 1} to one step and
//               {2, 3} to the next (nvidia.h100.mma_sync).
//   group         an explicit summation tree (what numeq::core::reveal_order returns, reveal.hpp):
//               `children` are groups or terms, its leaves are the terms. A group of 2 children
//               adds them with one rounding into arithmetic.accumulate; a group of 3 or more (a
//               fused multi-term node) adds all of them exactly and rounds once. A term child's
//               value is formed by its group's arithmetic: a product rounded into product_cast
//               under ProductMode::rounded, else exact (fused multiply-add). A group of two terms
//               starts as sequential and tree start an accumulator: its first term is rounded
//               into arithmetic.accumulate, then the second added (an fma chain's first two
//               steps). init, when given, is added to the group's value last.
//   term(index)   a leaf of a group tree: term `index` of the range (0-based). The terms of one
//               tree are 0 .. n-1, each exactly once, and n must be the range length. A term
//               that is a whole plan's reduction (n = 1) rounds into its own arithmetic.
//   decompose(block, pieces, piece, passes)  a matmul computed as several reduced-precision passes:
//               each operand x is split into `pieces` values of the cast `piece` (x0 = piece(x),
//               x1 = piece(x - x0), ...; what the last piece cannot hold is dropped); the range is
//               cut into blocks of `block` terms and, block by block, each pass (i, j) of `passes`
//               (a_k piece i times b_k piece j) is reduced by children[0] from nothing; the
//               partials, in that order (block-major), are reduced by children[1] (init going
//               to it). Trainium's fp32 matmul alternatives (trainium.hpp, fp32_matmul).
// Leaves (sequential, lanes, tree) form product terms per their Arithmetic: `fma` adds the exact
// product and rounds once (fused multiply-add), `rounded` rounds the product into product_cast
// first. Every rounding goes through numeq's one kernel (or, where the arithmetic is exactly the
// host's IEEE fp32/fp64 round-to-nearest-even, the host's own instruction: the same result).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "numeq/core/fused.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::core {

enum class NodeKind : std::uint8_t { sequential, lanes, pairwise, chunked, split, tree, fused, permute, group, term, decompose };
enum class ProductMode : std::uint8_t { fma, rounded };
enum class SplitMode : std::uint8_t { parallel, serial };
// Where c of d = a.b + c enters: as the initial accumulator value (first) or added to the reduced
// sum at the end, in the plan's outermost arithmetic (last).
enum class CPlacement : std::uint8_t { first, last };

using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)
NodeKind node_kind_by_name(std::string_view name, std::string_view parameter = "kind");
ProductMode product_mode_by_name(std::string_view name, std::string_view parameter = "product");
SplitMode split_mode_by_name(std::string_view name, std::string_view parameter = "split_mode");

// How additions (and, at leaves, products) round.
struct Arithmetic {
  Cast accumulate{};                  // every addition: exact sum rounded once into this cast
  ProductMode product = ProductMode::fma;
  Cast product_cast{};                // ProductMode::rounded: the product's rounding
  bool operator==(const Arithmetic&) const = default;
};

// Each field after `arithmetic` belongs to the kinds named beside it (and is written to JSON under
// the key given, "size" where none is); the other kinds leave it at its default.
struct PlanNode {
  NodeKind kind = NodeKind::sequential;
  Arithmetic arithmetic{};
  bool start_from_zero = false;  // sequential ("start_from_zero"): from +0 (CUDA's float acc = 0) without init
  std::size_t lanes = 0;         // lanes: L, the number of lanes
  std::size_t leaf = 0;          // pairwise: ranges of at most this many terms go to the child
  std::size_t multiple = 1;      // pairwise ("multiple"): split points rounded down to a multiple of this
  std::size_t chunk = 0;         // chunked: the terms each inner reduction takes
  std::size_t parts = 0;         // split: the number of parts K is cut into
  SplitMode split_mode = SplitMode::parallel;  // split ("split_mode")
  Cast through{};                // split ("through"): the cast each partial passes through
  std::size_t arity = 0;         // tree: the terms (then partial sums) per group
  FusedStep fused{};             // fused ("fused"): the step
  std::size_t block = 0;         // permute, decompose: the terms per block
  std::vector<std::size_t> order;  // permute ("order"): the order of the terms within a block
  std::size_t index = 0;         // term ("index"): the term's index within the range
  std::size_t pieces = 0;        // decompose ("pieces"): the pieces each operand is split into
  Cast piece{};                  // decompose ("piece"): the cast of every piece
  std::vector<std::pair<std::size_t, std::size_t>> passes;  // decompose ("passes"): (piece of a, piece of b)
  std::vector<PlanNode> children;
  bool operator==(const PlanNode&) const = default;
};

struct Plan {
  std::string name;                 // e.g. "nvidia.h100 matmul bf16 -> fp32"
  std::optional<Cast> input_a;      // applied to a (and b) before anything: tf32 truncation
  std::optional<Cast> input_b;
  PlanNode reduction;
  CPlacement c_placement = CPlacement::first;
  // A value the reduced sum is added to, in the outermost arithmetic: numpy's add.reduce starts
  // its output at the identity +0 and adds the pairwise sum to it (so a sum of -0s is +0).
  std::optional<double> initial;
  Cast output{};                    // the final cast of the reduced value
  bool operator==(const Plan&) const = default;
};

// Builders for the common shapes (plain aggregates work too).
PlanNode sequential(const Arithmetic& arithmetic, bool start_from_zero = false);
PlanNode lanes(std::size_t count, const Arithmetic& arithmetic);
PlanNode pairwise(std::size_t leaf, std::size_t multiple, PlanNode leaf_node, const Arithmetic& arithmetic);
PlanNode chunked(std::size_t size, PlanNode inner, PlanNode outer);
PlanNode split(std::size_t parts, SplitMode mode, const Cast& through, PlanNode inner,
               std::optional<PlanNode> combine = std::nullopt);
PlanNode tree(std::size_t arity, const Arithmetic& arithmetic);
PlanNode fused(const FusedStep& step);
PlanNode permute(std::size_t block, std::vector<std::size_t> order, PlanNode child);
PlanNode group(std::vector<PlanNode> children, const Arithmetic& arithmetic);
PlanNode term(std::size_t index);
// passes: (piece of a, piece of b) in the order the passes run.
PlanNode decompose(std::size_t block, std::size_t pieces, const Cast& piece,
                   const std::vector<std::pair<std::size_t, std::size_t>>& passes, PlanNode inner, PlanNode outer);

// Where split(parts)'s parts of n terms start, relative to the first term: min(parts, max(n, 1))
// contiguous parts with sizes differing by at most one, the larger first; the last entry is n.
// The evaluator and both bound walkers cut K by this one rule.
std::vector<std::size_t> split_starts(std::size_t n, std::size_t parts);

// Where pairwise(leaf, multiple) cuts a range of n > leaf terms: n / 2 rounded down to a multiple
// of `multiple`, or `multiple` itself (at most n) when that leaves 0, so that tiny multiples of odd
// sizes still make progress (numpy's pairwise_sum cuts at n / 2 rounded down to a multiple of its
// 8 lanes). Validation keeps multiple <= leaf < n, so the cut lies strictly inside the range. The
// evaluator, the bound walker and reveal's shapes cut by this one rule.
std::size_t pairwise_cut(std::size_t n, std::size_t multiple);

// The field a node's kind keeps its JSON "size" in (lanes, arity, leaf, chunk, parts or block);
// nullptr for the kinds without a size (sequential, fused, group, term). The JSON reader and
// writer and the validator all ask this one place.
const std::size_t* size_field(const PlanNode& node);
std::size_t* size_field(PlanNode& node);

// The number of terms an explicit tree (a group or a term) covers; 0 for the other kinds, whose
// length follows the range they are given.
std::size_t explicit_term_count(const PlanNode& node);

// The arithmetic of the additions after the reduction (plan.initial, then c when it is added
// last): that of the reduction's outermost addition. It follows the plan's structure, so it is
// the same for a plan and for its JSON: through chunked and decompose to their outer node, through
// a parallel split to its combine, through a serial split (whose running partial goes on into the
// next part) and a permute to their child; a fused step adds in its own wide arithmetic and the
// result leaves it through plan.output, so that is the arithmetic after it.
Cast outer_cast(const Plan& plan);

// One line, e.g. "chunked(128, inner=sequential(fp32 nearest_even fma), outer=...)".
std::string to_string(const PlanNode& node);
std::string to_string(const Plan& plan);

// Limits that keep every walk of a plan (evaluator, bound walker, printing) within a thread's
// stack and its cost proportionate to the plan: plan nodes nest at most max_plan_depth levels
// (a revealed sequential chain of max_reveal_terms terms, reveal.hpp, is that deep), and plan or
// profile JSON at most max_json_depth levels of objects and arrays (explicit trees are written as
// a group's "tree" text, below, so they never nest deeply in JSON).
inline constexpr std::size_t max_plan_depth = 4096;
inline constexpr std::size_t max_json_depth = 256;

// JSON text; plan_from_json throws numeq::error naming the offending field by its path
// (e.g. "plan.reduction.children[1].size: expected an integer in 1 .. ..."). Reading is strict:
// an unknown key (a typo such as "roundng"), a key given twice, an integer outside its field's
// range (never cut to fit), or nesting past the limits above is an error naming the field and
// what is valid. A group whose nested groups share its arithmetic (and whose terms have none of
// their own) is written as {"kind": "group", "arithmetic": ..., "tree": "((0 1) 2)"}: nested
// parentheses of term indices; "children" (nested node objects) is read as well.
std::string to_json(const Plan& plan, int indent = 2);
Plan plan_from_json(std::string_view text, std::string_view parameter = "plan");

// Checks the structure (child counts, sizes, casts, the fused steps' fields, the depth limit,
// pairwise multiple <= leaf); throws numeq::error naming the field. The evaluator and the bound
// walker run only plans that pass it.
void validate(const Plan& plan, std::string_view parameter = "plan");

}  // namespace numeq::core
