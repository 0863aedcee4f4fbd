// Plans as data: names, builders, printing, JSON and structural checks.

#include "numeq/core/plan.hpp"

#include <array>
#include <utility>
#include <nlohmann/json.hpp>

#include "numeq/formats/error.hpp"
#include "numeq/core/trainium.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::core {

namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 11> kKinds{"sequential", "lanes", "pairwise", "chunked", "split",
                                                  "tree",       "fused", "permute",  "group",   "term", "decompose"};

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

std::string cast_text(const Cast& c) {
  std::string s(c.format.name);
  s.append(" ").append(to_string(c.rounding));
  if (c.overflow != Overflow::ieee) s.append(" ").append(to_string(c.overflow));
  if (c.subnormals != Subnormals::keep) s.append(" ").append(to_string(c.subnormals));
  return s;
}

json cast_json(const Cast& c) {
  json j{{"format", c.format.name}, {"rounding", to_string(c.rounding)}, {"overflow", to_string(c.overflow)},
         {"subnormals", to_string(c.subnormals)}};
  if (c.rounding == Rounding::stochastic) {
    j["seed"] = c.seed;
    j["random_bits"] = c.random_bits;
  }
  return j;
}

// Reading JSON with errors that name the field by its path.
struct Reader {
  const json& j;
  std::string path;

  [[noreturn]] void fail(const std::string& what) const { throw numeq::error(path + ": " + what); }
  Reader at(std::string_view key) const {
    if (!j.is_object()) fail("expected an object");
    const auto it = j.find(std::string(key));
    if (it == j.end()) throw numeq::error(path + "." + std::string(key) + ": missing");
    return {*it, path + "." + std::string(key)};
  }
  bool has(std::string_view key) const { return j.is_object() && j.contains(std::string(key)); }
  std::string text() const {
    if (!j.is_string()) fail("expected a string");
    return j.get<std::string>();
  }
  std::size_t count(bool allow_zero = false) const {
    if (!j.is_number_unsigned() || (!allow_zero && j.get<std::uint64_t>() == 0))
      fail(allow_zero ? "expected a non-negative integer" : "expected a positive integer");
    return static_cast<std::size_t>(j.get<std::uint64_t>());
  }
  int integer() const {
    if (!j.is_number_integer()) fail("expected an integer");
    return j.get<int>();
  }
  bool boolean() const {
    if (!j.is_boolean()) fail("expected true or false");
    return j.get<bool>();
  }
  // Names checked by the formats parsers, which list the valid choices.
  template <class F>
  auto named(F&& parse) const {
    const std::string s = text();
    try {
      return parse(s);
    } catch (const numeq::error& e) {
      std::string message = e.what();
      const auto colon = message.find(": ");
      fail(colon == std::string::npos ? message : message.substr(colon + 2));
    }
  }
};

// A format by name: numeq's formats, the tensor-core internal e8m13 (fused.hpp) and the wide
// accumulators of the Trainium assumptions (trainium.hpp).
Format any_format(const std::string& name) {
  if (name == nvidia::e8m13.name) return nvidia::e8m13;
  for (const Format* f : trainium::wide_accumulators)
    if (name == f->name) return *f;
  return format_by_name(name);
}

Cast read_cast(const Reader& r) {
  Cast c;
  c.format = r.at("format").named([](const std::string& s) { return any_format(s); });
  if (r.has("rounding")) c.rounding = r.at("rounding").named([](const std::string& s) { return rounding_by_name(s); });
  if (r.has("overflow")) c.overflow = r.at("overflow").named([](const std::string& s) { return overflow_by_name(s); });
  if (r.has("subnormals"))
    c.subnormals = r.at("subnormals").named([](const std::string& s) { return subnormals_by_name(s); });
  if (r.has("seed")) c.seed = r.at("seed").count(true);
  if (r.has("random_bits")) c.random_bits = r.at("random_bits").integer();
  return c;
}

// ---- FusedStep as JSON ----

constexpr std::array<std::string_view, 2> kAlignment{"truncate", "nearest_even"};
constexpr std::array<std::string_view, 3> kMaxExponent{"encoded", "normalized", "largest_term"};
constexpr std::array<std::string_view, 2> kZeroTerms{"fp32_emin", "excluded"};
constexpr std::array<std::string_view, 2> kOverflowRule{"infinity", "cast"};
constexpr std::array<std::string_view, 2> kZeroSign{"positive", "ieee"};

template <class E, std::size_t N>
std::string_view name_of(E value, const std::array<std::string_view, N>& names) {
  return names[static_cast<std::size_t>(value)];
}

template <class E, std::size_t N>
E enum_of(const Reader& r, const std::array<std::string_view, N>& names) {
  const std::string s = r.text();
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  r.fail("unknown value '" + s + "'; valid: " + join(names));
}

json fused_step_json(const FusedStep& f) {
  json j{{"n", f.n},
         {"fraction_bits", f.fraction_bits},
         {"alignment", name_of(f.alignment, kAlignment)},
         {"max_exponent", name_of(f.max_exponent, kMaxExponent)},
         {"zeros", name_of(f.zeros, kZeroTerms)},
         {"a_format", f.a_format.name},
         {"b_format", f.b_format.name},
         {"c_format", f.c_format.name},
         {"output", cast_json(f.output)},
         {"overflow", name_of(f.overflow, kOverflowRule)},
         {"zero_sign", name_of(f.zero_sign, kZeroSign)}};
  if (f.exponent_floor != no_exponent_floor) j["exponent_floor"] = f.exponent_floor;
  return j;
}

FusedStep read_fused(const Reader& r) {
  FusedStep f;
  f.n = static_cast<int>(r.at("n").count());
  if (f.n > max_products) r.at("n").fail("at most " + std::to_string(max_products) + " products per step");
  f.fraction_bits = r.at("fraction_bits").integer();
  if (f.fraction_bits < 0 || f.fraction_bits > max_fraction_bits)
    r.at("fraction_bits").fail("expected 0 .. " + std::to_string(max_fraction_bits));
  if (r.has("alignment")) f.alignment = enum_of<Alignment>(r.at("alignment"), kAlignment);
  if (r.has("max_exponent")) f.max_exponent = enum_of<MaxExponent>(r.at("max_exponent"), kMaxExponent);
  if (r.has("zeros")) f.zeros = enum_of<ZeroTerms>(r.at("zeros"), kZeroTerms);
  if (r.has("exponent_floor")) f.exponent_floor = r.at("exponent_floor").integer();
  auto format = [&](const char* key) { return r.at(key).named([](const std::string& s) { return any_format(s); }); };
  f.a_format = format("a_format");
  f.b_format = format("b_format");
  f.c_format = format("c_format");
  f.output = read_cast(r.at("output"));
  if (r.has("overflow")) f.overflow = enum_of<OverflowRule>(r.at("overflow"), kOverflowRule);
  if (r.has("zero_sign")) f.zero_sign = enum_of<ZeroSign>(r.at("zero_sign"), kZeroSign);
  return f;
}

std::string fused_text(const FusedStep& f) {
  std::string s = std::to_string(f.n) + " products, F=" + std::to_string(f.fraction_bits) + " " +
                  std::string(name_of(f.alignment, kAlignment)) + ", ";
  s.append(f.a_format.name).append(" x ").append(f.b_format.name).append(" + ").append(f.c_format.name);
  s.append(" -> ").append(cast_text(f.output));
  return s;
}

json arithmetic_json(const Arithmetic& a) {
  json j{{"accumulate", cast_json(a.accumulate)}, {"product", to_string(a.product)}};
  if (a.product == ProductMode::rounded) j["product_cast"] = cast_json(a.product_cast);
  return j;
}

Arithmetic read_arithmetic(const Reader& r) {
  Arithmetic a;
  a.accumulate = read_cast(r.at("accumulate"));
  if (r.has("product")) {
    const std::string p = r.at("product").text();
    if (p == "fma") a.product = ProductMode::fma;
    else if (p == "rounded") a.product = ProductMode::rounded;
    else r.at("product").fail("unknown product mode '" + p + "'; valid: fma, rounded");
  }
  if (a.product == ProductMode::rounded) a.product_cast = read_cast(r.at("product_cast"));
  return a;
}

// `inherited`: the arithmetic of the enclosing group, which a nested group's JSON leaves out when
// it is the same (a revealed tree of 1000 terms would otherwise repeat it 999 times).
json node_json(const PlanNode& n, const Arithmetic* inherited = nullptr) {
  json j{{"kind", to_string(n.kind)}};
  switch (n.kind) {
    case NodeKind::sequential:
      j["arithmetic"] = arithmetic_json(n.arithmetic);
      if (n.start_from_zero) j["start_from_zero"] = true;
      break;
    case NodeKind::lanes:
    case NodeKind::tree:
      j["size"] = n.size;
      j["arithmetic"] = arithmetic_json(n.arithmetic);
      break;
    case NodeKind::pairwise:
      j["size"] = n.size;
      j["multiple"] = n.multiple;
      j["arithmetic"] = arithmetic_json(n.arithmetic);
      break;
    case NodeKind::chunked: j["size"] = n.size; break;
    case NodeKind::split:
      j["size"] = n.size;
      j["split_mode"] = to_string(n.split_mode);
      j["through"] = cast_json(n.through);
      break;
    case NodeKind::fused: j["fused"] = fused_step_json(n.fused); break;
    case NodeKind::permute:
      j["size"] = n.size;
      j["order"] = n.order;
      break;
    case NodeKind::group:
      if (inherited == nullptr || !(*inherited == n.arithmetic)) j["arithmetic"] = arithmetic_json(n.arithmetic);
      break;
    case NodeKind::decompose: {
      j["size"] = n.size;
      j["pieces"] = n.multiple;
      j["piece"] = cast_json(n.through);
      json passes = json::array();
      for (std::size_t i = 0; i + 1 < n.order.size(); i += 2) passes.push_back(json::array({n.order[i], n.order[i + 1]}));
      j["passes"] = passes;
      break;
    }
    case NodeKind::term:
      j["index"] = n.size;
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

PlanNode read_node(const Reader& r, const Arithmetic* inherited = nullptr) {
  PlanNode n;
  n.kind = r.at("kind").named([](const std::string& s) { return node_kind_by_name(s); });
  switch (n.kind) {
    case NodeKind::sequential:
      n.arithmetic = read_arithmetic(r.at("arithmetic"));
      if (r.has("start_from_zero")) n.start_from_zero = r.at("start_from_zero").boolean();
      break;
    case NodeKind::lanes:
    case NodeKind::tree:
      n.size = r.at("size").count();
      n.arithmetic = read_arithmetic(r.at("arithmetic"));
      break;
    case NodeKind::pairwise:
      n.size = r.at("size").count();
      n.multiple = r.at("multiple").count();
      n.arithmetic = read_arithmetic(r.at("arithmetic"));
      break;
    case NodeKind::chunked: n.size = r.at("size").count(); break;
    case NodeKind::split: {
      n.size = r.at("size").count();
      const std::string mode = r.at("split_mode").text();
      if (mode == "parallel") n.split_mode = SplitMode::parallel;
      else if (mode == "serial") n.split_mode = SplitMode::serial;
      else r.at("split_mode").fail("unknown split mode '" + mode + "'; valid: parallel, serial");
      n.through = read_cast(r.at("through"));
      break;
    }
    case NodeKind::fused: n.fused = read_fused(r.at("fused")); break;
    case NodeKind::permute: {
      n.size = r.at("size").count();
      const Reader order = r.at("order");
      if (!order.j.is_array()) order.fail("expected an array of term indices");
      for (std::size_t i = 0; i < order.j.size(); ++i)
        n.order.push_back(Reader{order.j[i], order.path + "[" + std::to_string(i) + "]"}.count(true));
      break;
    }
    case NodeKind::group:
      // A nested group without "arithmetic" has its enclosing group's.
      if (inherited != nullptr && !r.has("arithmetic")) n.arithmetic = *inherited;
      else n.arithmetic = read_arithmetic(r.at("arithmetic"));
      break;
    case NodeKind::term:
      n.size = r.at("index").count(true);
      if (r.has("arithmetic")) n.arithmetic = read_arithmetic(r.at("arithmetic"));
      break;
    case NodeKind::decompose: {
      n.size = r.at("size").count();
      n.multiple = r.at("pieces").count();
      n.through = read_cast(r.at("piece"));
      const Reader passes = r.at("passes");
      if (!passes.j.is_array()) passes.fail("expected an array of [piece of a, piece of b] pairs");
      for (std::size_t i = 0; i < passes.j.size(); ++i) {
        const Reader pass{passes.j[i], passes.path + "[" + std::to_string(i) + "]"};
        if (!pass.j.is_array() || pass.j.size() != 2) pass.fail("expected [piece of a, piece of b]");
        n.order.push_back(Reader{pass.j[0], pass.path + "[0]"}.count(true));
        n.order.push_back(Reader{pass.j[1], pass.path + "[1]"}.count(true));
      }
      break;
    }
  }
  if (r.has("children")) {
    const Reader children = r.at("children");
    if (!children.j.is_array()) children.fail("expected an array of nodes");
    const Arithmetic* passed = n.kind == NodeKind::group ? &n.arithmetic : nullptr;
    for (std::size_t i = 0; i < children.j.size(); ++i)
      n.children.push_back(read_node({children.j[i], children.path + "[" + std::to_string(i) + "]"}, passed));
  }
  return n;
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

// An explicit tree (group / term nodes, plan.hpp): every group has at least 2 children, all
// groups or terms; `terms` collects the term indices with the path of the term that holds each.
void collect_tree(const PlanNode& n, const std::string& path, std::vector<std::pair<std::size_t, std::string>>& terms) {
  if (n.kind == NodeKind::term) {
    if (!n.children.empty())
      throw numeq::error(path + ".children: a term node has no children, got " + std::to_string(n.children.size()));
    terms.emplace_back(n.size, path + ".index");
    return;
  }
  if (n.children.size() < 2)
    throw numeq::error(path + ".children: a group node needs at least 2 children, got " +
                       std::to_string(n.children.size()));
  validate_cast(n.arithmetic.accumulate, path + ".arithmetic.accumulate");
  if (n.arithmetic.product == ProductMode::rounded) validate_cast(n.arithmetic.product_cast, path + ".arithmetic.product_cast");
  for (std::size_t i = 0; i < n.children.size(); ++i) {
    const PlanNode& c = n.children[i];
    const std::string child_path = path + ".children[" + std::to_string(i) + "]";
    if (c.kind != NodeKind::group && c.kind != NodeKind::term)
      throw numeq::error(child_path + ".kind: a group's children are groups or terms, got '" +
                         std::string(to_string(c.kind)) + "'");
    collect_tree(c, child_path, terms);
  }
}

// The terms of one tree are 0 .. count-1, each exactly once.
void validate_tree(const PlanNode& n, const std::string& path) {
  std::vector<std::pair<std::size_t, std::string>> terms;
  collect_tree(n, path, terms);
  const std::size_t count = terms.size();
  std::vector<const std::string*> first(count, nullptr);
  for (const auto& [index, at] : terms) {
    if (index >= count)
      throw numeq::error(at + ": term " + std::to_string(index) + " is out of range: the tree has " +
                         std::to_string(count) + " terms, numbered 0 .. " + std::to_string(count - 1));
    if (first[index] != nullptr)
      throw numeq::error(at + ": term " + std::to_string(index) + " appears twice (also at " + *first[index] +
                         "); the terms of a tree are 0 .. " + std::to_string(count - 1) + ", each once");
    first[index] = &at;
  }
}

void validate_node(const PlanNode& n, const std::string& path) {
  if (n.kind == NodeKind::group || n.kind == NodeKind::term) {
    validate_tree(n, path);
    if (n.kind == NodeKind::term) validate_cast(n.arithmetic.accumulate, path + ".arithmetic.accumulate");
    return;
  }
  auto positive = [&](std::size_t v, const char* field) {
    if (v == 0) throw numeq::error(path + "." + field + ": expected a positive integer");
  };
  switch (n.kind) {
    case NodeKind::sequential: check_children(n, 0, path); break;
    case NodeKind::lanes:
    case NodeKind::tree:
      positive(n.size, "size");
      check_children(n, 0, path);
      if (n.kind == NodeKind::tree && n.size < 2) throw numeq::error(path + ".size: a tree needs arity >= 2");
      break;
    case NodeKind::pairwise:
      positive(n.size, "size");
      positive(n.multiple, "multiple");
      check_children(n, 1, path);
      break;
    case NodeKind::chunked:
      positive(n.size, "size");
      check_children(n, 2, path);
      break;
    case NodeKind::split:
      positive(n.size, "size");
      check_children(n, n.split_mode == SplitMode::parallel ? 2 : 1, path);
      validate_cast(n.through, path + ".through");
      break;
    case NodeKind::fused: check_children(n, 0, path); break;
    case NodeKind::permute: {
      positive(n.size, "size");
      check_children(n, 1, path);
      std::vector<char> seen(n.size, 0);
      bool ok = n.order.size() == n.size;
      for (const std::size_t i : n.order) {
        ok = ok && i < n.size && !seen[i];
        if (i < n.size) seen[i] = 1;
      }
      if (!ok)
        throw numeq::error(path + ".order: expected a permutation of 0 .. " + std::to_string(n.size - 1) + " (" +
                           std::to_string(n.size) + " distinct indices)");
      break;
    }
    case NodeKind::decompose: {
      positive(n.size, "size");
      check_children(n, 2, path);
      if (n.multiple < 1 || n.multiple > 4)
        throw numeq::error(path + ".pieces: expected 1 to 4 pieces per operand, got " + std::to_string(n.multiple));
      validate_cast(n.through, path + ".piece");
      if (n.through.format.is_integer() || n.through.rounding == Rounding::stochastic)
        throw numeq::error(path + ".piece: expected a floating format with a deterministic rounding");
      if (n.order.empty() || n.order.size() % 2 != 0)
        throw numeq::error(path + ".passes: expected at least one [piece of a, piece of b] pair");
      for (const std::size_t i : n.order)
        if (i >= n.multiple)
          throw numeq::error(path + ".passes: piece " + std::to_string(i) + " does not exist (pieces 0 .. " +
                             std::to_string(n.multiple - 1) + ")");
      break;
    }
    case NodeKind::group:
    case NodeKind::term: break;  // validate_tree, above
  }
  validate_cast(n.arithmetic.accumulate, path + ".arithmetic.accumulate");
  for (std::size_t i = 0; i < n.children.size(); ++i)
    validate_node(n.children[i], path + ".children[" + std::to_string(i) + "]");
}

}  // namespace

std::string_view to_string(NodeKind k) { return kKinds[static_cast<std::size_t>(k)]; }
std::string_view to_string(ProductMode m) { return m == ProductMode::fma ? "fma" : "rounded"; }
std::string_view to_string(SplitMode m) { return m == SplitMode::parallel ? "parallel" : "serial"; }
std::string_view to_string(CPlacement c) { return c == CPlacement::first ? "first" : "last"; }

NodeKind node_kind_by_name(std::string_view name, std::string_view parameter) {
  for (std::size_t i = 0; i < kKinds.size(); ++i)
    if (kKinds[i] == name) return static_cast<NodeKind>(i);
  throw numeq::error(std::string(parameter) + ": unknown plan node kind '" + std::string(name) +
                     "'; valid kinds: " + join(kKinds));
}

PlanNode sequential(const Arithmetic& arithmetic, bool start_from_zero) {
  PlanNode n;
  n.kind = NodeKind::sequential;
  n.arithmetic = arithmetic;
  n.start_from_zero = start_from_zero;
  return n;
}

PlanNode lanes(std::size_t count, const Arithmetic& arithmetic) {
  PlanNode n;
  n.kind = NodeKind::lanes;
  n.size = count;
  n.arithmetic = arithmetic;
  return n;
}

PlanNode pairwise(std::size_t leaf, std::size_t multiple, PlanNode leaf_node, const Arithmetic& arithmetic) {
  PlanNode n;
  n.kind = NodeKind::pairwise;
  n.size = leaf;
  n.multiple = multiple;
  n.arithmetic = arithmetic;
  n.children.push_back(std::move(leaf_node));
  return n;
}

PlanNode chunked(std::size_t size, PlanNode inner, PlanNode outer) {
  PlanNode n;
  n.kind = NodeKind::chunked;
  n.size = size;
  n.children.push_back(std::move(inner));
  n.children.push_back(std::move(outer));
  return n;
}

PlanNode split(std::size_t parts, SplitMode mode, const Cast& through, PlanNode inner, std::optional<PlanNode> combine) {
  PlanNode n;
  n.kind = NodeKind::split;
  n.size = parts;
  n.split_mode = mode;
  n.through = through;
  n.children.push_back(std::move(inner));
  if (combine) n.children.push_back(std::move(*combine));
  return n;
}

PlanNode tree(std::size_t arity, const Arithmetic& arithmetic) {
  PlanNode n;
  n.kind = NodeKind::tree;
  n.size = arity;
  n.arithmetic = arithmetic;
  return n;
}

PlanNode permute(std::size_t block, std::vector<std::size_t> order, PlanNode child) {
  PlanNode n;
  n.kind = NodeKind::permute;
  n.size = block;
  n.order = std::move(order);
  n.children.push_back(std::move(child));
  return n;
}

PlanNode decompose(std::size_t block, std::size_t pieces, const Cast& piece,
                   const std::vector<std::pair<std::size_t, std::size_t>>& passes, PlanNode inner, PlanNode outer) {
  PlanNode n;
  n.kind = NodeKind::decompose;
  n.size = block;
  n.multiple = pieces;
  n.through = piece;
  for (const auto& [i, j] : passes) {
    n.order.push_back(i);
    n.order.push_back(j);
  }
  n.children.push_back(std::move(inner));
  n.children.push_back(std::move(outer));
  return n;
}

PlanNode group(std::vector<PlanNode> children, const Arithmetic& arithmetic) {
  PlanNode n;
  n.kind = NodeKind::group;
  n.arithmetic = arithmetic;
  n.children = std::move(children);
  return n;
}

PlanNode term(std::size_t index) {
  PlanNode n;
  n.kind = NodeKind::term;
  n.size = index;
  return n;
}

std::size_t explicit_term_count(const PlanNode& node) {
  if (node.kind == NodeKind::term) return 1;
  if (node.kind != NodeKind::group) return 0;
  std::size_t count = 0;
  for (const PlanNode& c : node.children) count += explicit_term_count(c);
  return count;
}

PlanNode fused(const FusedStep& step) {
  PlanNode n;
  n.kind = NodeKind::fused;
  n.fused = step;
  return n;
}

namespace {

std::string arithmetic_text(const Arithmetic& a) {
  return cast_text(a.accumulate) + " " + (a.product == ProductMode::fma ? "fma" : "product " + cast_text(a.product_cast));
}

// An explicit tree as nested parentheses of term indices, "((0 1) 2 3)"; a nested group whose
// arithmetic differs from its parent's is written out as group(...).
std::string nested_text(const PlanNode& n, const Arithmetic& parent) {
  if (n.kind == NodeKind::term) return std::to_string(n.size);
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
    case NodeKind::lanes: return "lanes(" + std::to_string(n.size) + ", " + arith + ")";
    case NodeKind::tree: return "tree(" + std::to_string(n.size) + ", " + arith + ")";
    case NodeKind::pairwise:
      return "pairwise(leaf " + std::to_string(n.size) + ", multiple " + std::to_string(n.multiple) + ", " + arith +
             ", leaf=" + (n.children.empty() ? "?" : child(0)) + ")";
    case NodeKind::chunked:
      return "chunked(" + std::to_string(n.size) + ", inner=" + (n.children.size() > 0 ? child(0) : "?") +
             ", outer=" + (n.children.size() > 1 ? child(1) : "?") + ")";
    case NodeKind::split:
      return "split(" + std::to_string(n.size) + " " + std::string(to_string(n.split_mode)) + ", through " +
             cast_text(n.through) + ", inner=" + (n.children.size() > 0 ? child(0) : "?") +
             (n.children.size() > 1 ? ", combine=" + child(1) : "") + ")";
    case NodeKind::fused: return "fused(" + fused_text(n.fused) + ")";
    case NodeKind::permute: {
      std::string order;
      for (const std::size_t i : n.order) {
        if (!order.empty()) order.push_back(' ');
        order.append(std::to_string(i));
      }
      return "permute(" + std::to_string(n.size) + ", order " + order + ", " + (n.children.empty() ? "?" : child(0)) + ")";
    }
    case NodeKind::group: {
      std::string s = "group(" + arith + ":";
      for (const PlanNode& c : n.children) s += " " + nested_text(c, n.arithmetic);
      return s + ")";
    }
    case NodeKind::term: return "term(" + std::to_string(n.size) + ", " + arith + ")";
    case NodeKind::decompose: {
      std::string passes;
      for (std::size_t i = 0; i + 1 < n.order.size(); i += 2)
        passes += (passes.empty() ? "" : " ") + std::to_string(n.order[i]) + "x" + std::to_string(n.order[i + 1]);
      return "decompose(" + std::to_string(n.size) + ", " + std::to_string(n.multiple) + " x " + cast_text(n.through) +
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

std::string to_json(const Plan& p, int indent) {
  json j{{"name", p.name}, {"reduction", node_json(p.reduction)}, {"c_placement", to_string(p.c_placement)},
         {"output", cast_json(p.output)}};
  if (p.initial) j["initial"] = *p.initial;
  if (p.input_a) j["input_a"] = cast_json(*p.input_a);
  if (p.input_b) j["input_b"] = cast_json(*p.input_b);
  return j.dump(indent);
}

Plan plan_from_json(std::string_view text, std::string_view parameter) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw numeq::error(std::string(parameter) + ": not valid JSON: " + e.what());
  }
  const Reader r{j, std::string(parameter)};
  if (!j.is_object()) r.fail("expected a JSON object");
  Plan p;
  if (r.has("name")) p.name = r.at("name").text();
  if (r.has("input_a")) p.input_a = read_cast(r.at("input_a"));
  if (r.has("input_b")) p.input_b = read_cast(r.at("input_b"));
  p.reduction = read_node(r.at("reduction"));
  if (r.has("c_placement")) {
    const std::string c = r.at("c_placement").text();
    if (c == "first") p.c_placement = CPlacement::first;
    else if (c == "last") p.c_placement = CPlacement::last;
    else r.at("c_placement").fail("unknown placement '" + c + "'; valid: first, last");
  }
  if (r.has("initial")) {
    const Reader initial = r.at("initial");
    if (!initial.j.is_number()) initial.fail("expected a number");
    p.initial = initial.j.get<double>();
  }
  p.output = read_cast(r.at("output"));
  validate(p, parameter);
  return p;
}

void validate(const Plan& p, std::string_view parameter) {
  const std::string path(parameter);
  if (p.input_a) validate_cast(*p.input_a, path + ".input_a");
  if (p.input_b) validate_cast(*p.input_b, path + ".input_b");
  validate_cast(p.output, path + ".output");
  validate_node(p.reduction, path + ".reduction");
}

}  // namespace numeq::core
