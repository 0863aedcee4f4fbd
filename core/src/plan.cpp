// Plans as data: names, builders, printing and structural checks (JSON: plan_json.cpp).

#include "numeq/core/plan.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::core {

namespace {

std::string cast_text(const Cast& c) {
  std::string s(c.format.name);
  s.append(" ").append(to_string(c.rounding));
  if (c.overflow != Overflow::ieee) s.append(" ").append(to_string(c.overflow));
  if (c.subnormals != Subnormals::keep) s.append(" ").append(to_string(c.subnormals));
  return s;
}

std::string fused_text(const FusedStep& f) {
  std::string s = std::to_string(f.n) + " products, F=" + std::to_string(f.fraction_bits) + " " +
                  std::string(f.alignment == Alignment::truncate ? "truncate" : "nearest_even") + ", ";
  s.append(f.a_format.name).append(" x ").append(f.b_format.name).append(" + ").append(f.c_format.name);
  s.append(" -> ").append(cast_text(f.output));
  return s;
}

// Plans may accumulate in integer formats (int32 for int8 GEMMs): exact integer sums, checked
// for overflow by the evaluator. Other casts are checked as casts are.
void validate_cast(const Cast& c, const std::string& path) {
  if (c.format.is_integer()) return;
  numeq::validate(c, path);
}

void check_children(const PlanNode& n, std::size_t want, const std::string& path) {
  if (n.children.size() != want)
    throw numeq::error(path + ".children: a " + std::string(to_string(n.kind)) + " node needs " + std::to_string(want) +
                       " child node(s), got " + std::to_string(n.children.size()));
}

[[noreturn]] void too_deep(const std::string& path) {
  throw numeq::error(path + ": plan nodes nested deeper than " + std::to_string(max_plan_depth) +
                     " levels, numeq's limit (plan.hpp, max_plan_depth)");
}

// ---- explicit trees (group / term nodes, plan.hpp) ----
//
// Walked without recursion, and a node's path ("plan.reduction.children[0].children[1]") is
// written out only for an error: a revealed sequential chain is thousands of groups deep, and a
// path per node would cost the square of that.

std::string tree_path(const std::string& root, const std::vector<std::size_t>& route) {
  std::string out = root;
  for (const std::size_t i : route) out += ".children[" + std::to_string(i) + "]";
  return out;
}

// Visits every node of the tree depth first (children in order); visit(node, route) may throw.
template <class Visit>
void walk_tree(const PlanNode& root, Visit&& visit) {
  std::vector<std::pair<const PlanNode*, std::size_t>> stack{{&root, 0}};
  std::vector<std::size_t> route;
  visit(root, route);
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next == node->children.size() || node->kind == NodeKind::term) {
      stack.pop_back();
      if (!route.empty()) route.pop_back();
      continue;
    }
    const PlanNode& child = node->children[next];
    route.push_back(next++);
    visit(child, route);
    stack.emplace_back(&child, 0);
  }
}

// Every group has at least 2 children, all groups or terms; the terms are 0 .. count-1, each
// exactly once; `depth` is the tree root's depth in the plan.
void validate_tree(const PlanNode& root, const std::string& path, std::size_t depth) {
  std::vector<std::size_t> indices;  // the term indices in visit order
  const Arithmetic* checked = nullptr;
  walk_tree(root, [&](const PlanNode& n, const std::vector<std::size_t>& route) {
    if (depth + route.size() > max_plan_depth) too_deep(tree_path(path, route));
    if (n.kind != NodeKind::group && n.kind != NodeKind::term)
      throw numeq::error(tree_path(path, route) + ".kind: a group's children are groups or terms, got '" +
                         std::string(to_string(n.kind)) + "'");
    if (n.kind == NodeKind::term) {
      if (!n.children.empty())
        throw numeq::error(tree_path(path, route) + ".children: a term node has no children, got " +
                           std::to_string(n.children.size()));
      indices.push_back(n.index);
      return;
    }
    if (n.children.size() < 2)
      throw numeq::error(tree_path(path, route) + ".children: a group node needs at least 2 children, got " +
                         std::to_string(n.children.size()));
    if (checked == nullptr || !(*checked == n.arithmetic)) {  // nested groups mostly share one arithmetic
      validate_cast(n.arithmetic.accumulate, tree_path(path, route) + ".arithmetic.accumulate");
      if (n.arithmetic.product == ProductMode::rounded)
        validate_cast(n.arithmetic.product_cast, tree_path(path, route) + ".arithmetic.product_cast");
      checked = &n.arithmetic;
    }
  });
  // The path of the k-th term visited, for an error.
  const auto term_path = [&](std::size_t k) {
    std::string out;
    std::size_t seen = 0;
    walk_tree(root, [&](const PlanNode& n, const std::vector<std::size_t>& route) {
      if (n.kind == NodeKind::term && seen++ == k) out = tree_path(path, route) + ".index";
    });
    return out;
  };
  const std::size_t count = indices.size();
  std::vector<std::size_t> first(count, count);  // where each index was seen first
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t index = indices[k];
    if (index >= count)
      throw numeq::error(term_path(k) + ": term " + std::to_string(index) + " is out of range: the tree has " +
                         std::to_string(count) + " terms, numbered 0 .. " + std::to_string(count - 1));
    if (first[index] != count)
      throw numeq::error(term_path(k) + ": term " + std::to_string(index) + " appears twice (also at " +
                         term_path(first[index]) + "); the terms of a tree are 0 .. " + std::to_string(count - 1) +
                         ", each once");
    first[index] = k;
  }
}

void validate_node(const PlanNode& n, const std::string& path, std::size_t depth) {
  if (depth > max_plan_depth) too_deep(path);
  if (n.kind == NodeKind::group || n.kind == NodeKind::term) {
    validate_tree(n, path, depth);
    if (n.kind == NodeKind::term) validate_cast(n.arithmetic.accumulate, path + ".arithmetic.accumulate");
    return;
  }
  auto positive = [&](std::size_t v, const char* field) {
    if (v == 0) throw numeq::error(path + "." + field + ": expected a positive integer");
  };
  if (const std::size_t* size = size_field(n)) positive(*size, "size");
  switch (n.kind) {
    case NodeKind::sequential: check_children(n, 0, path); break;
    case NodeKind::lanes:
      check_children(n, 0, path);
      break;
    case NodeKind::tree:
      check_children(n, 0, path);
      if (n.arity < 2) throw numeq::error(path + ".size: a tree needs arity >= 2");
      break;
    case NodeKind::pairwise:
      positive(n.multiple, "multiple");
      // A range longer than the leaf is cut at a multiple of `multiple` below its half, or at
      // `multiple` itself: a cut strictly inside the range (so the recursion ends) needs
      // multiple <= leaf < the range's length.
      if (n.multiple > n.leaf)
        throw numeq::error(path + ".multiple: " + std::to_string(n.multiple) + " exceeds the leaf size " +
                           std::to_string(n.leaf) + "; expected 1 .. " + std::to_string(n.leaf) +
                           " (the pairwise split points are multiples of it)");
      check_children(n, 1, path);
      break;
    case NodeKind::chunked:
      check_children(n, 2, path);
      break;
    case NodeKind::split:
      check_children(n, n.split_mode == SplitMode::parallel ? 2 : 1, path);
      validate_cast(n.through, path + ".through");
      break;
    case NodeKind::fused:
      check_children(n, 0, path);
      validate(n.fused, path + ".fused");
      break;
    case NodeKind::permute: {
      check_children(n, 1, path);
      bool ok = n.order.size() == n.block;  // first: `block` may be any number, the order is as long as it is
      std::vector<char> seen(ok ? n.block : 0, 0);
      for (std::size_t k = 0; ok && k < n.order.size(); ++k) {
        const std::size_t i = n.order[k];
        ok = i < n.block && !seen[i];
        if (ok) seen[i] = 1;
      }
      if (!ok)
        throw numeq::error(path + ".order: expected a permutation of 0 .. " + std::to_string(n.block - 1) + " (" +
                           std::to_string(n.block) + " distinct indices), got " + std::to_string(n.order.size()) +
                           " indices");
      break;
    }
    case NodeKind::decompose: {
      check_children(n, 2, path);
      if (n.pieces < 1 || n.pieces > 4)
        throw numeq::error(path + ".pieces: expected 1 to 4 pieces per operand, got " + std::to_string(n.pieces));
      validate_cast(n.piece, path + ".piece");
      if (n.piece.format.is_integer() || n.piece.rounding == Rounding::stochastic)
        throw numeq::error(path + ".piece: expected a floating format with a deterministic rounding");
      if (n.passes.empty())
        throw numeq::error(path + ".passes: expected at least one [piece of a, piece of b] pair");
      for (const auto& [i, j] : n.passes)
        for (const std::size_t p : {i, j})
          if (p >= n.pieces)
            throw numeq::error(path + ".passes: piece " + std::to_string(p) + " does not exist (pieces 0 .. " +
                               std::to_string(n.pieces - 1) + ")");
      break;
    }
    case NodeKind::group:
    case NodeKind::term: break;  // validate_tree, above
  }
  validate_cast(n.arithmetic.accumulate, path + ".arithmetic.accumulate");
  if (n.arithmetic.product == ProductMode::rounded)
    validate_cast(n.arithmetic.product_cast, path + ".arithmetic.product_cast");
  for (std::size_t i = 0; i < n.children.size(); ++i)
    validate_node(n.children[i], path + ".children[" + std::to_string(i) + "]", depth + 1);
}

}  // namespace

std::size_t pairwise_cut(std::size_t n, std::size_t multiple) {
  const std::size_t half = n / 2 - (n / 2) % multiple;
  return half != 0 ? half : std::min(n, multiple);
}

const std::size_t* size_field(const PlanNode& node) {
  switch (node.kind) {
    case NodeKind::lanes: return &node.lanes;
    case NodeKind::tree: return &node.arity;
    case NodeKind::pairwise: return &node.leaf;
    case NodeKind::chunked: return &node.chunk;
    case NodeKind::split: return &node.parts;
    case NodeKind::permute:
    case NodeKind::decompose: return &node.block;
    case NodeKind::sequential:
    case NodeKind::fused:
    case NodeKind::group:
    case NodeKind::term: return nullptr;
  }
  return nullptr;
}

std::size_t* size_field(PlanNode& node) { return const_cast<std::size_t*>(size_field(std::as_const(node))); }

NodeKind node_kind_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<NodeKind>, name, parameter, "plan node kind");
}
ProductMode product_mode_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<ProductMode>, name, parameter, "product mode");
}
SplitMode split_mode_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<SplitMode>, name, parameter, "split mode");
}

// Each builder sets its kind's fields (plan.hpp, PlanNode) and leaves the others at their defaults,
// as plan_from_json does, so that a built plan and its JSON read back compare equal. GCC before 14
// warns (-Wmissing-field-initializers) about the members a designated initializer leaves out; they
// take their default member initializers, which is what the builders mean.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
template <class... Children>
PlanNode with_children(PlanNode n, Children&&... children) {
  (n.children.push_back(std::forward<Children>(children)), ...);
  return n;
}

PlanNode sequential(const Arithmetic& arithmetic, bool start_from_zero) {
  return {.kind = NodeKind::sequential, .arithmetic = arithmetic, .start_from_zero = start_from_zero};
}

PlanNode lanes(std::size_t count, const Arithmetic& arithmetic) {
  return {.kind = NodeKind::lanes, .arithmetic = arithmetic, .lanes = count};
}

PlanNode pairwise(std::size_t leaf, std::size_t multiple, PlanNode leaf_node, const Arithmetic& arithmetic) {
  return with_children({.kind = NodeKind::pairwise, .arithmetic = arithmetic, .leaf = leaf, .multiple = multiple},
                       std::move(leaf_node));
}

PlanNode chunked(std::size_t size, PlanNode inner, PlanNode outer) {
  return with_children({.kind = NodeKind::chunked, .chunk = size}, std::move(inner), std::move(outer));
}

PlanNode split(std::size_t parts, SplitMode mode, const Cast& through, PlanNode inner, std::optional<PlanNode> combine) {
  PlanNode n = with_children({.kind = NodeKind::split, .parts = parts, .split_mode = mode, .through = through},
                             std::move(inner));
  if (combine) n.children.push_back(std::move(*combine));
  return n;
}

PlanNode tree(std::size_t arity, const Arithmetic& arithmetic) {
  return {.kind = NodeKind::tree, .arithmetic = arithmetic, .arity = arity};
}

PlanNode fused(const FusedStep& step) { return {.kind = NodeKind::fused, .fused = step}; }

PlanNode permute(std::size_t block, std::vector<std::size_t> order, PlanNode child) {
  return with_children({.kind = NodeKind::permute, .block = block, .order = std::move(order)}, std::move(child));
}

PlanNode decompose(std::size_t block, std::size_t pieces, const Cast& piece,
                   const std::vector<std::pair<std::size_t, std::size_t>>& passes, PlanNode inner, PlanNode outer) {
  return with_children({.kind = NodeKind::decompose, .block = block, .pieces = pieces, .piece = piece, .passes = passes},
                       std::move(inner), std::move(outer));
}

PlanNode group(std::vector<PlanNode> children, const Arithmetic& arithmetic) {
  return {.kind = NodeKind::group, .arithmetic = arithmetic, .children = std::move(children)};
}

PlanNode term(std::size_t index) { return {.kind = NodeKind::term, .index = index}; }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

std::size_t explicit_term_count(const PlanNode& node) {
  if (node.kind == NodeKind::term) return 1;
  if (node.kind != NodeKind::group) return 0;
  std::size_t count = 0;
  for (const PlanNode& c : node.children) count += explicit_term_count(c);
  return count;
}

std::vector<std::size_t> split_starts(std::size_t n, std::size_t parts) {
  const std::size_t count = std::min(parts, std::max<std::size_t>(n, 1));
  std::vector<std::size_t> start(count + 1, 0);
  if (count == 0) return start;
  const std::size_t base = n / count, extra = n % count;
  for (std::size_t p = 0; p < count; ++p) start[p + 1] = start[p] + base + (p < extra ? 1 : 0);
  return start;
}

Cast outer_cast(const Plan& plan) {
  const PlanNode* n = &plan.reduction;
  while (true) {
    switch (n->kind) {
      case NodeKind::fused: return plan.output;
      case NodeKind::chunked:
      case NodeKind::decompose:
        if (n->children.size() < 2) return n->arithmetic.accumulate;
        n = &n->children[1];
        break;
      case NodeKind::split:
        if (n->children.empty()) return n->arithmetic.accumulate;
        n = &n->children[n->split_mode == SplitMode::parallel && n->children.size() > 1 ? 1 : 0];
        break;
      case NodeKind::permute:
        if (n->children.empty()) return n->arithmetic.accumulate;
        n = &n->children[0];
        break;
      default: return n->arithmetic.accumulate;
    }
  }
}

namespace {

std::string arithmetic_text(const Arithmetic& a) {
  return cast_text(a.accumulate) + " " + (a.product == ProductMode::fma ? "fma" : "product " + cast_text(a.product_cast));
}

// An explicit tree as nested parentheses of term indices, "((0 1) 2 3)"; a nested group whose
// arithmetic differs from its parent's is written out as group(...).
std::string nested_text(const PlanNode& n, const Arithmetic& parent) {
  if (n.kind == NodeKind::term) return std::to_string(n.index);
  if (n.kind != NodeKind::group) return to_string(n);
  std::string s = n.arithmetic == parent ? "(" : "group(" + arithmetic_text(n.arithmetic) + ": ";
  for (std::size_t i = 0; i < n.children.size(); ++i) {
    if (i) s.push_back(' ');
    s += nested_text(n.children[i], n.arithmetic);
  }
  return s + ")";
}

}  // namespace

std::string to_string(const PlanNode& n) {
  const std::string arith = arithmetic_text(n.arithmetic);
  auto child = [&](std::size_t i) { return to_string(n.children[i]); };
  switch (n.kind) {
    case NodeKind::sequential: return "sequential(" + arith + (n.start_from_zero ? ", from +0" : "") + ")";
    case NodeKind::lanes: return "lanes(" + std::to_string(n.lanes) + ", " + arith + ")";
    case NodeKind::tree: return "tree(" + std::to_string(n.arity) + ", " + arith + ")";
    case NodeKind::pairwise:
      return "pairwise(leaf " + std::to_string(n.leaf) + ", multiple " + std::to_string(n.multiple) + ", " + arith +
             ", leaf=" + (n.children.empty() ? "?" : child(0)) + ")";
    case NodeKind::chunked:
      return "chunked(" + std::to_string(n.chunk) + ", inner=" + (n.children.size() > 0 ? child(0) : "?") +
             ", outer=" + (n.children.size() > 1 ? child(1) : "?") + ")";
    case NodeKind::split:
      return "split(" + std::to_string(n.parts) + " " + std::string(to_string(n.split_mode)) + ", through " +
             cast_text(n.through) + ", inner=" + (n.children.size() > 0 ? child(0) : "?") +
             (n.children.size() > 1 ? ", combine=" + child(1) : "") + ")";
    case NodeKind::fused: return "fused(" + fused_text(n.fused) + ")";
    case NodeKind::permute: {
      std::string order;
      for (const std::size_t i : n.order) {
        if (!order.empty()) order.push_back(' ');
        order.append(std::to_string(i));
      }
      return "permute(" + std::to_string(n.block) + ", order " + order + ", " + (n.children.empty() ? "?" : child(0)) + ")";
    }
    case NodeKind::group: {
      std::string s = "group(" + arith + ":";
      for (const PlanNode& c : n.children) s += " " + nested_text(c, n.arithmetic);
      return s + ")";
    }
    case NodeKind::term: return "term(" + std::to_string(n.index) + ", " + arith + ")";
    case NodeKind::decompose: {
      std::string passes;
      for (const auto& [i, j] : n.passes) passes += (passes.empty() ? "" : " ") + std::to_string(i) + "x" + std::to_string(j);
      return "decompose(" + std::to_string(n.block) + ", " + std::to_string(n.pieces) + " x " + cast_text(n.piece) +
             ", passes " + passes + ", inner=" + (n.children.size() > 0 ? child(0) : "?") +
             ", outer=" + (n.children.size() > 1 ? child(1) : "?") + ")";
    }
  }
  return "?";
}

std::string to_string(const Plan& p) {
  std::string s = p.name.empty() ? "plan" : p.name;
  s += ": ";
  if (p.input_a) s += "a -> " + cast_text(*p.input_a) + ", ";
  if (p.input_b) s += "b -> " + cast_text(*p.input_b) + ", ";
  if (p.initial) s += "added to " + std::to_string(*p.initial) + ", ";
  s += to_string(p.reduction) + ", c " + std::string(to_string(p.c_placement)) + ", out " + cast_text(p.output);
  return s;
}

void validate(const Plan& p, std::string_view parameter) {
  const std::string path(parameter);
  if (p.input_a) validate_cast(*p.input_a, path + ".input_a");
  if (p.input_b) validate_cast(*p.input_b, path + ".input_b");
  validate_cast(p.output, path + ".output");
  validate_node(p.reduction, path + ".reduction", 1);
}

}  // namespace numeq::core
