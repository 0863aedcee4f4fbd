#pragma once
// Order discovery: the summation tree of a black-box sum (or dot product) as a numeq plan, by
// FPRev's method (Xie, Gao, Wang, Xue, "Revealing Floating-Point Accumulation Orders in
// Software/Hardware Implementations", USENIX ATC 2025, arXiv:2411.00442; FACTS.md s2).
//
// The probe: every term is a small unit u except +M at term i and -M at term j, with M so large
// that M + (any count of units) rounds back to M in fmt. Inside the subtree where i and j first
// meet every unit is absorbed by +-M, and +M - M = 0 there; every other unit survives, so
// n - fn(probe) / u = L(i, j), the number of leaves of that subtree. From the L values the tree is
// rebuilt (FPRev's recursive algorithm: fix a pivot i, query all j of a subtree, group them by L,
// and build each group the same way), which needs about (n/2) log2 n calls for a balanced tree and
// n - 1 for a sequential loop, instead of BasicFPRev's n(n-1)/2.
//
// Nodes found:
//   binary        two children, L = the node's size;
//   absorbing     a multi-term node at which +-M absorb every other child (a fused tensor-core step
//                 truncating the units away, FPRev's "multi-term fused" node): a group of equal L;
//   exact         a multi-term node that adds its children exactly and rounds once (plan.hpp's
//                 group of 3+): units in the other children survive, L = the sizes of the two
//                 children holding i and j. The probe cannot always tell nested exact nodes apart
//                 (E(E(a, b, c), d, e) and E(a, b, E(c, d, e)) give the same L); the reconstruction
//                 closes each exact node as early as the counts allow (a chain of fused steps, each
//                 the c of the next), which is how hardware chains them.
// Both multi-term kinds become a `group` of 3+ children in the plan (whose arithmetic is the exact
// one); RevealResult::notes says when absorbing nodes were found.
//
// Refused with numeq::error (never a wrong tree): n < 1 or too many terms for fmt (counts must
// stay exact, n <= 2^precision, and be absorbed by M), an unknown fmt (the error lists the
// valid names), a function whose two calls on one input differ (not deterministic), one that does
// not sum (all units must give n * u; every probe must give a count of units), and L values that
// no tree explains (checked again on extra random pairs at the end). FPRev assumes additions that
// round to nearest or truncate: directed rounding away from zero does not absorb the units.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "numeq/core/plan.hpp"

namespace numeq::core {

using SumFunction = std::function<double(std::span<const double> x)>;
using DotFunction = std::function<double(std::span<const double> a, std::span<const double> b)>;

// The most terms reveal_order takes: deeper trees than this become plans too deeply nested to
// write and read back safely.
inline constexpr std::size_t max_reveal_terms = 4096;

struct RevealOptions {
  std::string fmt = "fp32";    // the format fn accumulates in: the probe's M and unit, the plan's arithmetic
  std::string in_fmt;          // the format of the inputs, x or a and b (empty: fmt)
  std::string out_fmt;         // the format of fn's result, rounded from fmt (empty: fmt)
  ProductMode product = ProductMode::fma;  // dot: how the revealed plan forms products
  std::size_t check_pairs = 32;  // random pairs probed at the end and checked against the tree
  std::size_t check_inputs = 3;  // random inputs on which the plan is compared with fn (RevealResult::reproduces)
  std::uint64_t seed = 0x46505265;  // of those random pairs and inputs
};

struct RevealResult {
  Plan plan;                  // reduction: the tree as group / term nodes (a lone term when n = 1)
  std::size_t calls = 0;      // calls of fn, every check included
  std::string tree;           // the tree as nested parentheses of term indices, "((0 1) (2 3))"
  std::string shape;          // a compact plan with the same tree ("sequential", "numpy pairwise ..."), or ""
  std::optional<Plan> compact;  // that compact plan, in the same arithmetic
  double big = 0;             // M of the probes
  double unit = 0;            // every other term of the probes
  std::size_t multi_term_nodes = 0;  // nodes of 3+ children (fused)
  std::size_t absorbing_nodes = 0;   // of those, the ones at which +-M absorbed the other children
  bool reproduces = false;    // the plan gave fn's value on every checked random input
  std::vector<std::string> notes;
};

// fn sums x[0 .. n); fmt names the format it accumulates in (FPRev: M = 2^127 for fp32).
RevealResult reveal_order(const SumFunction& fn, std::size_t n, const RevealOptions& options = {});
// fn(a, b) is a dot product of length n: the probe puts +-M into a (and b) and units elsewhere.
RevealResult reveal_dot_order(const DotFunction& fn, std::size_t n, const RevealOptions& options = {});

// The tree text of an explicit plan node (group / term), as RevealResult::tree.
std::string tree_text(const PlanNode& node);

}  // namespace numeq::core
