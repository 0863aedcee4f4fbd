// Plans as JSON (plan.hpp: to_json, plan_from_json), read strictly (json_read.hpp): every key
// known, every integer in its field's range, explicit trees as text so that deep trees stay small.

#include <array>
#include <limits>
#include <utility>

#include "json_read.hpp"
#include "numeq/core/plan.hpp"
#include "numeq/core/reveal.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::core {

namespace {

using detail::json;
using detail::Reader;

constexpr std::uint64_t kAnySize = std::numeric_limits<std::size_t>::max();

json cast_json(const Cast& c) {
  json j{{"format", c.format.name}, {"rounding", to_string(c.rounding)}, {"overflow", to_string(c.overflow)},
         {"subnormals", to_string(c.subnormals)}};
  if (c.rounding == Rounding::stochastic) {
    j["seed"] = c.seed;
    j["random_bits"] = c.random_bits;
  }
  return j;
}

Cast read_cast(const Reader& r) {
  r.only({"format", "rounding", "overflow", "subnormals", "seed", "random_bits"});
  Cast c;
  c.format = r.at("format").named([](const std::string& s) { return plan_format_by_name(s); });
  if (r.has("rounding")) c.rounding = r.at("rounding").named([](const std::string& s) { return rounding_by_name(s); });
  if (r.has("overflow")) c.overflow = r.at("overflow").named([](const std::string& s) { return overflow_by_name(s); });
  if (r.has("subnormals"))
    c.subnormals = r.at("subnormals").named([](const std::string& s) { return subnormals_by_name(s); });
  if (r.has("seed")) c.seed = r.at("seed").count(0, std::numeric_limits<std::uint64_t>::max());
  if (r.has("random_bits")) c.random_bits = static_cast<int>(r.at("random_bits").integer(1, 64));
  return c;
}

// ---- enums as JSON: each by its enum_names table (numeq/formats/names.hpp) ----

// The field's enumerator; an unknown name fails at the field's path with the one wording of
// numeq/formats/names.hpp, `what` naming the field's kind of value ("unknown split mode 'x'; valid: ...").
template <class Enum>
Enum enum_of(const Reader& r, std::string_view what = "value") {
  return r.named([&](const std::string& s) { return by_name(enum_names<Enum>, s, "value", what); });
}

// ---- FusedStep as JSON ----

json fused_step_json(const FusedStep& f) {
  json j{{"n", f.n},
         {"fraction_bits", f.fraction_bits},
         {"alignment", to_string(f.alignment)},
         {"max_exponent", to_string(f.max_exponent)},
         {"zeros", to_string(f.zeros)},
         {"a_format", f.a_format.name},
         {"b_format", f.b_format.name},
         {"c_format", f.c_format.name},
         {"output", cast_json(f.output)},
         {"overflow", to_string(f.overflow)},
         {"zero_sign", to_string(f.zero_sign)}};
  if (f.exponent_floor != no_exponent_floor) j["exponent_floor"] = f.exponent_floor;
  return j;
}

FusedStep read_fused(const Reader& r) {
  r.only({"n", "fraction_bits", "alignment", "max_exponent", "zeros", "exponent_floor", "a_format", "b_format",
          "c_format", "output", "overflow", "zero_sign"});
  FusedStep f;
  f.n = static_cast<int>(r.at("n").integer(1, max_products));
  f.fraction_bits = static_cast<int>(r.at("fraction_bits").integer(0, max_fraction_bits));
  if (r.has("alignment")) f.alignment = enum_of<Alignment>(r.at("alignment"));
  if (r.has("max_exponent")) f.max_exponent = enum_of<MaxExponent>(r.at("max_exponent"));
  if (r.has("zeros")) f.zeros = enum_of<ZeroTerms>(r.at("zeros"));
  if (r.has("exponent_floor"))
    f.exponent_floor = static_cast<int>(r.at("exponent_floor").integer(min_exponent_floor, max_exponent_floor));
  auto format = [&](const char* key) { return r.at(key).named([](const std::string& s) { return plan_format_by_name(s); }); };
  f.a_format = format("a_format");
  f.b_format = format("b_format");
  f.c_format = format("c_format");
  f.output = read_cast(r.at("output"));
  if (r.has("overflow")) f.overflow = enum_of<OverflowRule>(r.at("overflow"));
  if (r.has("zero_sign")) f.zero_sign = enum_of<ZeroSign>(r.at("zero_sign"));
  return f;
}

json arithmetic_json(const Arithmetic& a) {
  json j{{"accumulate", cast_json(a.accumulate)}, {"product", to_string(a.product)}};
  if (a.product == ProductMode::rounded) j["product_cast"] = cast_json(a.product_cast);
  return j;
}

Arithmetic read_arithmetic(const Reader& r) {
  r.only({"accumulate", "product", "product_cast"});
  Arithmetic a;
  a.accumulate = read_cast(r.at("accumulate"));
  if (r.has("product")) a.product = enum_of<ProductMode>(r.at("product"), "product mode");
  if (a.product == ProductMode::rounded) a.product_cast = read_cast(r.at("product_cast"));
  else if (r.has("product_cast")) r.at("product_cast").fail("only a \"rounded\" product has a product_cast");
  return a;
}

// ---- explicit trees as text: "((0 1) 2 3)" ----
//
// A group whose nested groups all share its arithmetic (and whose terms carry none of their own,
// what reveal_order returns) is written as its tree text: a revealed sequential chain of 4096
// terms is 4096 nested groups, which as nested JSON objects would be as deep and, indented,
// quadratic in size. The text is read back without recursion.

bool uniform_tree(const PlanNode& n, const Arithmetic& ar) {
  if (n.kind == NodeKind::term) return n.children.empty() && n.arithmetic == Arithmetic{};
  if (n.kind != NodeKind::group || !(n.arithmetic == ar)) return false;
  for (const PlanNode& c : n.children)
    if (!uniform_tree(c, ar)) return false;
  return true;
}

PlanNode read_tree_text(const Reader& r, const Arithmetic& ar) {
  const std::string s = r.text();
  std::vector<std::vector<PlanNode>> open;  // the children of each open group, outermost first
  std::optional<PlanNode> root;
  const auto at = [&](std::size_t i, const std::string& what) {
    r.fail("at character " + std::to_string(i) + ": " + what + " (write a tree as nested parentheses of term "
           "indices, \"((0 1) 2)\")");
  };
  for (std::size_t i = 0; i < s.size();) {
    const char ch = s[i];
    if (ch == ' ' || ch == '\t' || ch == '\n') {
      ++i;
    } else if (ch == '(') {
      if (root) at(i, "text after the tree's closing parenthesis");
      if (open.size() >= max_plan_depth)
        at(i, "groups nested deeper than " + std::to_string(max_plan_depth) + ", numeq's limit for plan trees");
      open.emplace_back();
      ++i;
    } else if (ch == ')') {
      if (open.empty()) at(i, "')' without its '('");
      PlanNode g = group(std::move(open.back()), ar);
      open.pop_back();
      if (open.empty()) root = std::move(g);
      else open.back().push_back(std::move(g));
      ++i;
    } else if (ch >= '0' && ch <= '9') {
      if (open.empty()) at(i, "a term outside the tree's parentheses");
      std::size_t v = 0;
      const std::size_t start = i;
      for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
        if (v > (kAnySize - 9) / 10) at(start, "a term index too large");
        v = v * 10 + static_cast<std::size_t>(s[i] - '0');
      }
      open.back().push_back(term(v));
    } else {
      at(i, std::string("unexpected character '") + ch + "'");
    }
  }
  if (!open.empty() || !root) at(s.size(), "the tree is not closed");
  return std::move(*root);
}

// `inherited`: the arithmetic of the enclosing group, which a nested group's JSON leaves out when
// it is the same.
json node_json(const PlanNode& n, const Arithmetic* inherited = nullptr) {
  json j{{"kind", to_string(n.kind)}};
  if (const std::size_t* size = size_field(n)) j["size"] = *size;
  switch (n.kind) {
    case NodeKind::sequential:
      j["arithmetic"] = arithmetic_json(n.arithmetic);
      if (n.start_from_zero) j["start_from_zero"] = true;
      break;
    case NodeKind::lanes:
    case NodeKind::tree:
      j["arithmetic"] = arithmetic_json(n.arithmetic);
      break;
    case NodeKind::pairwise:
      j["multiple"] = n.multiple;
      j["arithmetic"] = arithmetic_json(n.arithmetic);
      break;
    case NodeKind::chunked: break;
    case NodeKind::split:
      j["split_mode"] = to_string(n.split_mode);
      j["through"] = cast_json(n.through);
      break;
    case NodeKind::fused: j["fused"] = fused_step_json(n.fused); break;
    case NodeKind::permute:
      j["order"] = n.order;
      break;
    case NodeKind::group:
      if (inherited == nullptr || !(*inherited == n.arithmetic)) j["arithmetic"] = arithmetic_json(n.arithmetic);
      if (inherited == nullptr && uniform_tree(n, n.arithmetic)) {
        j["tree"] = tree_text(n);  // reveal.hpp: the one writer of the tree text
        return j;
      }
      break;
    case NodeKind::decompose: {
      j["pieces"] = n.pieces;
      j["piece"] = cast_json(n.piece);
      json passes = json::array();
      for (const auto& [a, b] : n.passes) passes.push_back(json::array({a, b}));
      j["passes"] = passes;
      break;
    }
    case NodeKind::term:
      j["index"] = n.index;
      if (!(n.arithmetic == Arithmetic{})) j["arithmetic"] = arithmetic_json(n.arithmetic);
      break;
  }
  if (!n.children.empty()) {
    json children = json::array();
    const Arithmetic* passed = n.kind == NodeKind::group ? &n.arithmetic : nullptr;
    for (const PlanNode& c : n.children) children.push_back(node_json(c, passed));
    j["children"] = children;
  }
  return j;
}

// The keys each node kind takes (besides "kind").
std::vector<std::string_view> node_keys(NodeKind k) {
  switch (k) {
    case NodeKind::sequential: return {"kind", "arithmetic", "start_from_zero", "children"};
    case NodeKind::lanes:
    case NodeKind::tree: return {"kind", "size", "arithmetic", "children"};
    case NodeKind::pairwise: return {"kind", "size", "multiple", "arithmetic", "children"};
    case NodeKind::chunked: return {"kind", "size", "children"};
    case NodeKind::split: return {"kind", "size", "split_mode", "through", "children"};
    case NodeKind::fused: return {"kind", "fused", "children"};
    case NodeKind::permute: return {"kind", "size", "order", "children"};
    case NodeKind::group: return {"kind", "arithmetic", "tree", "children"};
    case NodeKind::term: return {"kind", "index", "arithmetic", "children"};
    case NodeKind::decompose: return {"kind", "size", "pieces", "piece", "passes", "children"};
  }
  return {};
}

PlanNode read_node(const Reader& r, const Arithmetic* inherited = nullptr) {
  PlanNode n;
  n.kind = r.at("kind").named([](const std::string& s) { return node_kind_by_name(s); });
  r.only(node_keys(n.kind));
  if (std::size_t* size = size_field(n)) *size = r.at("size").count(1, kAnySize);
  switch (n.kind) {
    case NodeKind::sequential:
      n.arithmetic = read_arithmetic(r.at("arithmetic"));
      if (r.has("start_from_zero")) n.start_from_zero = r.at("start_from_zero").boolean();
      break;
    case NodeKind::lanes:
    case NodeKind::tree:
      n.arithmetic = read_arithmetic(r.at("arithmetic"));
      break;
    case NodeKind::pairwise:
      n.multiple = r.at("multiple").count(1, kAnySize);
      n.arithmetic = read_arithmetic(r.at("arithmetic"));
      break;
    case NodeKind::chunked: break;
    case NodeKind::split: {
      n.split_mode = enum_of<SplitMode>(r.at("split_mode"), "split mode");
      n.through = read_cast(r.at("through"));
      break;
    }
    case NodeKind::fused: n.fused = read_fused(r.at("fused")); break;
    case NodeKind::permute: {
      const Reader order = r.at("order");
      if (!order.j.is_array()) order.fail("expected an array of term indices");
      for (std::size_t i = 0; i < order.j.size(); ++i) n.order.push_back(order.item(i).count(0, kAnySize));
      break;
    }
    case NodeKind::group:
      // A nested group without "arithmetic" has its enclosing group's.
      if (inherited != nullptr && !r.has("arithmetic")) n.arithmetic = *inherited;
      else n.arithmetic = read_arithmetic(r.at("arithmetic"));
      if (r.has("tree")) {
        if (r.has("children")) r.at("tree").fail("a group gives either \"tree\" or \"children\", not both");
        return read_tree_text(r.at("tree"), n.arithmetic);
      }
      break;
    case NodeKind::term:
      n.index = r.at("index").count(0, kAnySize);
      if (r.has("arithmetic")) n.arithmetic = read_arithmetic(r.at("arithmetic"));
      break;
    case NodeKind::decompose: {
      n.pieces = r.at("pieces").count(1, 4);
      n.piece = read_cast(r.at("piece"));
      const Reader passes = r.at("passes");
      if (!passes.j.is_array()) passes.fail("expected an array of [piece of a, piece of b] pairs");
      for (std::size_t i = 0; i < passes.j.size(); ++i) {
        const Reader pass = passes.item(i);
        if (!pass.j.is_array() || pass.j.size() != 2) pass.fail("expected [piece of a, piece of b]");
        n.passes.emplace_back(pass.item(0).count(0, 3), pass.item(1).count(0, 3));
      }
      break;
    }
  }
  if (r.has("children")) {
    const Reader children = r.at("children");
    if (!children.j.is_array()) children.fail("expected an array of nodes");
    const Arithmetic* passed = n.kind == NodeKind::group ? &n.arithmetic : nullptr;
    for (std::size_t i = 0; i < children.j.size(); ++i) n.children.push_back(read_node(children.item(i), passed));
  }
  return n;
}

}  // namespace

std::string to_json(const Plan& p, int indent) {
  json j{{"name", p.name}, {"reduction", node_json(p.reduction)}, {"c_placement", to_string(p.c_placement)},
         {"output", cast_json(p.output)}};
  if (p.initial) j["initial"] = *p.initial;
  if (p.input_a) j["input_a"] = cast_json(*p.input_a);
  if (p.input_b) j["input_b"] = cast_json(*p.input_b);
  return j.dump(indent);
}

Plan plan_from_json(std::string_view text, std::string_view parameter) {
  const json j = detail::parse_json(text, std::string(parameter));
  const Reader r{j, std::string(parameter)};
  if (!j.is_object()) r.fail("expected a JSON object");
  r.only({"name", "input_a", "input_b", "reduction", "c_placement", "initial", "output"});
  Plan p;
  if (r.has("name")) p.name = r.at("name").text();
  if (r.has("input_a")) p.input_a = read_cast(r.at("input_a"));
  if (r.has("input_b")) p.input_b = read_cast(r.at("input_b"));
  p.reduction = read_node(r.at("reduction"));
  if (r.has("c_placement")) p.c_placement = enum_of<CPlacement>(r.at("c_placement"), "placement");
  if (r.has("initial")) p.initial = r.at("initial").number();
  p.output = read_cast(r.at("output"));
  validate(p, parameter);
  return p;
}

}  // namespace numeq::core
