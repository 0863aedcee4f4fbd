// Order discovery (reveal.hpp): FPRev's probes and its recursive tree reconstruction (Xie et al.,
// "Revealing Floating-Point Accumulation Orders in Software/Hardware Implementations", USENIX ATC
// 2025, arXiv:2411.00442, s4), extended to multi-term nodes that add exactly (plan.hpp's group).

#include "numeq/core/reveal.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <unordered_map>
#include <utility>

#include "numeq/core/evaluate.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq::core {

namespace {

const std::string kMethod = "FPRev, Xie et al., arXiv:2411.00442";

// ---- the probes ----

// Exponents of the probe values: +-M = +-2^big_a * 2^big_b (b's factor only for dot products),
// every other term unit = 2^unit_a * 2^unit_b.
struct Scale {
  int big = 0, big_a = 0, big_b = 0;
  int unit = 0, unit_a = 0, unit_b = 0;
};

int floor_half(int x) { return x >= 0 ? x / 2 : -((-x + 1) / 2); }
int smallest_exponent(const Format& f) { return std::ilogb(min_subnormal(f)); }
int ceil_log2(std::size_t n) { return n <= 1 ? 0 : static_cast<int>(std::bit_width(n - 1)); }

// The probe scales to try, best first. M is the largest power of two that is an input value (a
// product of two for a dot product) and fits fmt. The unit is as small as the formats allow,
// first among the subnormals (the widest gap between M and the counts: fused steps that keep F
// bits below M's exponent must truncate every count away), then the smallest normal (for
// functions that flush subnormals). The counts must stay exact in fmt and in the output format
// (n <= 2^p) and be absorbed by M with margin: n * unit <= M * 2^-(p + 1), a quarter of an ulp
// of M in fmt (and below 2^(E - F) for fused steps that keep F <= p + 1 fraction bits).
std::vector<Scale> probe_scales(const Format& fmt, const Format& in, const Format& out, bool dot, std::size_t n) {
  const int p = std::min(fmt.precision(), out.precision());
  const std::size_t most = std::size_t{1} << std::min(p, 62);
  if (n > most)
    throw numeq::error("n: " + std::to_string(n) + " terms are too many to count exactly in " +
                       std::string(fmt.precision() <= out.precision() ? fmt.name : out.name) + " (" + std::to_string(p) +
                       " significant bits: at most " + std::to_string(most) + " terms); use a wider format");
  Scale base;
  if (dot) {
    base.big = std::min(fmt.emax(), 2 * in.emax());
    base.big_b = floor_half(base.big);
    base.big_a = base.big - base.big_b;
  } else {
    base.big = base.big_a = std::min(fmt.emax(), in.emax());
  }
  std::vector<Scale> scales;
  auto add = [&](int unit) {
    Scale s = base;
    s.unit = unit;
    s.unit_b = dot ? floor_half(unit) : 0;
    s.unit_a = unit - s.unit_b;
    for (const Scale& o : scales)
      if (o.unit == s.unit) return;
    if (s.unit + ceil_log2(n) <= s.big - fmt.precision() - 1 && s.unit + ceil_log2(n) <= out.emax())
      scales.push_back(s);
  };
  const int inputs = dot ? 2 : 1;
  add(std::max({smallest_exponent(fmt), smallest_exponent(out), inputs * smallest_exponent(in)}));
  add(std::max({fmt.emin(), out.emin(), inputs * in.emin()}));
  if (scales.empty())
    throw numeq::error("n: " + std::to_string(n) + " terms are too many to reveal in " + std::string(fmt.name) +
                       " with " + std::string(in.name) + " inputs: M = 2^" + std::to_string(base.big) +
                       " cannot absorb " + std::to_string(n) + " units of the smallest usable size; use a wider "
                       "format or fewer terms");
  return scales;
}

bool same_result(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  return x == y && std::signbit(x) == std::signbit(y);
}

std::string number_text(double x) {
  if (x != 0 && std::isfinite(x)) {
    int e = 0;
    const double m = std::frexp(x, &e);
    if (std::fabs(m) == 0.5) return std::string(x < 0 ? "-" : "") + "2^" + std::to_string(e - 1);
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// A value of format f near x (round to nearest even).
double to_format(double x, const Format& f) {
  const std::uint64_t bits = encode_unpacked(unpack_double(x), Cast{f}, 0);
  return bits == invalid_encoding ? 0.0 : decode_bits(f, bits);
}

// Calls fn on probes and on chosen inputs, counting every call. Sums leave b empty.
class Prober {
 public:
  Prober(const SumFunction* sum, const DotFunction* dot, std::size_t n) : sum_(sum), dot_(dot), n_(n) {}

  void set_scale(const Scale& s) {
    scale_ = s;
    big_a_ = std::ldexp(1.0, s.big_a);
    big_b_ = std::ldexp(1.0, s.big_b);
    unit_a_ = std::ldexp(1.0, s.unit_a);
    unit_b_ = std::ldexp(1.0, s.unit_b);
    a_.assign(n_, unit_a_);
    b_.assign(dot_ ? n_ : 0, unit_b_);
  }
  const Scale& scale() const { return scale_; }
  double unit() const { return std::ldexp(1.0, scale_.unit); }
  double big() const { return std::ldexp(1.0, scale_.big); }

  // fn with +M at term i and -M at term j.
  double probe(std::size_t i, std::size_t j) {
    a_[i] = big_a_;
    a_[j] = -big_a_;
    if (dot_) b_[i] = b_[j] = big_b_;
    const double out = call(a_, b_);
    a_[i] = a_[j] = unit_a_;
    if (dot_) b_[i] = b_[j] = unit_b_;
    return out;
  }
  // fn with every term the unit.
  double units() { return call(a_, b_); }
  double call(std::span<const double> a, std::span<const double> b) {
    ++calls_;
    return dot_ ? (*dot_)(a, b) : (*sum_)(a);
  }
  bool dot() const { return dot_ != nullptr; }
  std::size_t calls() const { return calls_; }

 private:
  const SumFunction* sum_;
  const DotFunction* dot_;
  std::size_t n_;
  Scale scale_;
  double big_a_ = 0, big_b_ = 0, unit_a_ = 0, unit_b_ = 0;
  std::vector<double> a_, b_;
  std::size_t calls_ = 0;
};

// ---- the reconstruction ----

enum class Join : std::uint8_t { leaf, binary, absorbing, exact };

struct Tree {
  Join join = Join::leaf;
  std::size_t leaf = 0;  // Join::leaf: the term
  std::size_t size = 1;  // leaves
  std::vector<Tree> children;
};

Tree leaf_tree(std::size_t i) { return Tree{Join::leaf, i, 1, {}}; }

Tree join_trees(Tree current, std::vector<Tree> others, Join join) {
  Tree t;
  t.join = join;
  t.size = current.size;
  t.children.push_back(std::move(current));
  for (Tree& o : others) {
    t.size += o.size;
    t.children.push_back(std::move(o));
  }
  return t;
}

// Thrown while a candidate reading of the counts fails; another reading may still fit.
struct Inconsistent {
  std::string what;
};

class Reconstruction {
 public:
  Reconstruction(Prober& prober, std::size_t n) : prober_(prober), n_(n) {}

  // L(i, j): the leaves of the subtree where i and j first meet (n minus the surviving units).
  std::size_t meet(std::size_t i, std::size_t j) {
    const std::uint64_t key = static_cast<std::uint64_t>(std::min(i, j)) * n_ + std::max(i, j);
    if (const auto it = cache_.find(key); it != cache_.end()) return it->second;
    const std::size_t l = count_to_meet(i, j, prober_.probe(i, j));
    cache_.emplace(key, l);
    order_.emplace_back(i, j);
    return l;
  }

  std::size_t count_to_meet(std::size_t i, std::size_t j, double out) const {
    const double k = out / prober_.unit();
    if (!std::isfinite(out) || k != std::floor(k) || k < 0 || k > static_cast<double>(n_ - 2))
      throw numeq::error("fn: does not behave like a sum of its " + std::to_string(n_) + " terms: with +M at term " +
                         std::to_string(i) + " and -M at term " + std::to_string(j) + " (M = " +
                         number_text(prober_.big()) + ", every other term " + number_text(prober_.unit()) +
                         ") it returned " + number_text(out) +
                         ", not a count of surviving terms (a whole multiple 0 .. n-2 of the unit); " + kMethod +
                         " needs a deterministic sum whose additions round to nearest or truncate");
    return n_ - static_cast<std::size_t>(k);
  }

  const std::vector<std::pair<std::size_t, std::size_t>>& probed() const { return order_; }
  bool probed(std::size_t i, std::size_t j) const {
    return cache_.count(static_cast<std::uint64_t>(std::min(i, j)) * n_ + std::max(i, j)) != 0;
  }

  Tree whole() {
    std::vector<std::size_t> all(n_);
    for (std::size_t i = 0; i < n_; ++i) all[i] = i;
    std::vector<Tree> parts = forest(all, n_ + 1);  // no pair meets above the root
    if (parts.size() != 1) throw Inconsistent{"the terms split into separate trees"};
    return std::move(parts[0]);
  }

 private:
  struct Group {
    std::size_t meet = 0;                // L from the pivot
    std::vector<std::size_t> members;
  };
  // One node on the pivot's path: groups [first, last] join the current subtree there.
  struct Level {
    std::size_t first = 0, last = 0;
    bool exact = false;
  };
  static constexpr std::size_t kMaxReadings = 8;

  // The subtrees that make up `set`, where two terms of different subtrees meet at L == cross
  // (the node above them all) and two of one subtree at L < cross. FPRev's step: the pivot's
  // queries split off its own subtree, which is then built from those same queries.
  std::vector<Tree> forest(std::vector<std::size_t> set, std::size_t cross) {
    std::vector<Tree> out;
    while (!set.empty()) {
      const std::size_t pivot = set[0];
      std::vector<std::size_t> own{pivot}, own_meet{0}, rest;
      for (std::size_t k = 1; k < set.size(); ++k) {
        const std::size_t l = meet(pivot, set[k]);
        if (l > cross)
          throw Inconsistent{"terms " + std::to_string(pivot) + " and " + std::to_string(set[k]) + " meet in " +
                             std::to_string(l) + " leaves, more than the " + std::to_string(cross) +
                             " of the node above them"};
        if (l == cross) {
          rest.push_back(set[k]);
        } else {
          own.push_back(set[k]);
          own_meet.push_back(l);
        }
      }
      out.push_back(from_pivot(own, own_meet));
      set.swap(rest);
    }
    return out;
  }

  // The subtree whose leaves are `set` (set[0] the pivot; meets[k] = L(pivot, set[k])).
  Tree from_pivot(const std::vector<std::size_t>& set, const std::vector<std::size_t>& meets) {
    const std::size_t pivot = set[0], m = set.size();
    if (m == 1) return leaf_tree(pivot);
    std::map<std::size_t, std::vector<std::size_t>> by_meet;
    for (std::size_t k = 1; k < m; ++k) {
      if (meets[k] > m || meets[k] < 2)
        throw Inconsistent{"terms " + std::to_string(pivot) + " and " + std::to_string(set[k]) + " meet in " +
                           std::to_string(meets[k]) + " leaves inside a subtree of " + std::to_string(m)};
      by_meet[meets[k]].push_back(set[k]);
    }
    std::vector<Group> groups;
    for (auto& [l, members] : by_meet) groups.push_back({l, std::move(members)});
    std::vector<std::vector<Level>> readings;
    std::vector<Level> current;
    read_levels(groups, 0, 1, current, readings);
    if (readings.empty())
      throw Inconsistent{"the terms meeting term " + std::to_string(pivot) + " fit no chain of nodes above it"};
    Inconsistent last{};
    for (const std::vector<Level>& levels : readings) {
      try {
        return build(pivot, groups, levels);
      } catch (const Inconsistent& e) {
        last = e;
      }
    }
    throw last;
  }

  // Every way (up to kMaxReadings, preferred first) to cut the groups, in order of L, into the
  // nodes on the pivot's path. At a node above a subtree of s leaves:
  //   binary or absorbing: one group with L == s + its size (the node's size);
  //   exact (3+ children): groups whose L - s is the size of each of their subtrees (a whole
  //   divisor of the group's size), at least two subtrees in all.
  // Closing a node as early as possible comes first (a chain of fused steps).
  void read_levels(const std::vector<Group>& groups, std::size_t g, std::size_t s, std::vector<Level>& current,
                   std::vector<std::vector<Level>>& readings) const {
    if (readings.size() >= kMaxReadings) return;
    if (g == groups.size()) {
      readings.push_back(current);
      return;
    }
    if (groups[g].meet == s + groups[g].members.size()) {
      current.push_back({g, g, false});
      read_levels(groups, g + 1, groups[g].meet, current, readings);
      current.pop_back();
    }
    std::size_t total = 0, subtrees = 0;
    for (std::size_t h = g; h < groups.size(); ++h) {
      if (groups[h].meet <= s) break;
      const std::size_t b = groups[h].meet - s;
      if (groups[h].members.size() % b != 0) break;
      total += groups[h].members.size();
      subtrees += groups[h].members.size() / b;
      if (subtrees >= 2) {
        current.push_back({g, h, true});
        read_levels(groups, h + 1, s + total, current, readings);
        current.pop_back();
      }
    }
  }

  Tree build(std::size_t pivot, const std::vector<Group>& groups, const std::vector<Level>& levels) {
    Tree current = leaf_tree(pivot);
    for (const Level& level : levels) {
      const std::size_t s = current.size;
      if (!level.exact) {
        std::vector<Tree> parts = forest(groups[level.first].members, groups[level.first].meet);
        const Join join = parts.size() == 1 ? Join::binary : Join::absorbing;
        current = join_trees(std::move(current), std::move(parts), join);
        continue;
      }
      std::vector<Tree> parts;
      for (std::size_t h = level.first; h <= level.last; ++h) {
        const std::size_t b = groups[h].meet - s;
        // Two subtrees of b leaves each, both children of the exact node: L = b + b.
        for (Tree& t : forest(groups[h].members, 2 * b)) {
          if (t.size != b)
            throw Inconsistent{"a child of an exact multi-term node has " + std::to_string(t.size) + " leaves, not " +
                               std::to_string(b)};
          parts.push_back(std::move(t));
        }
      }
      current = join_trees(std::move(current), std::move(parts), Join::exact);
    }
    return current;
  }

  Prober& prober_;
  std::size_t n_;
  std::unordered_map<std::uint64_t, std::size_t> cache_;
  std::vector<std::pair<std::size_t, std::size_t>> order_;
};

// ---- trees: canonical order, checks, text, plans ----

std::size_t first_leaf(const Tree& t) { return t.join == Join::leaf ? t.leaf : first_leaf(t.children[0]); }

// Children ordered by their smallest term, recursively (the pivot's subtree already comes first).
void canonicalize(Tree& t) {
  for (Tree& c : t.children) canonicalize(c);
  std::sort(t.children.begin(), t.children.end(),
            [](const Tree& x, const Tree& y) { return first_leaf(x) < first_leaf(y); });
}

bool same_tree(const Tree& x, const Tree& y) {
  if (x.size != y.size || x.children.size() != y.children.size()) return false;
  if (x.join == Join::leaf || y.join == Join::leaf) return x.join == y.join && x.leaf == y.leaf;
  for (std::size_t i = 0; i < x.children.size(); ++i)
    if (!same_tree(x.children[i], y.children[i])) return false;
  return true;
}

void count_nodes(const Tree& t, std::size_t& multi, std::size_t& absorbing, std::size_t& exact) {
  if (t.children.size() >= 3) {
    ++multi;
    if (t.join == Join::absorbing) ++absorbing;
    if (t.join == Join::exact) ++exact;
  }
  for (const Tree& c : t.children) count_nodes(c, multi, absorbing, exact);
}

// The tree flattened, to predict L(i, j) for the final checks.
struct Flat {
  std::vector<std::size_t> parent, size, depth, leaf_node;
  std::vector<Join> join;

  explicit Flat(const Tree& root, std::size_t n) : leaf_node(n) { add(root, static_cast<std::size_t>(-1), 0); }

  std::size_t add(const Tree& t, std::size_t up, std::size_t d) {
    const std::size_t id = parent.size();
    parent.push_back(up);
    size.push_back(t.size);
    depth.push_back(d);
    join.push_back(t.join);
    if (t.join == Join::leaf) leaf_node[t.leaf] = id;
    for (const Tree& c : t.children) add(c, id, d + 1);
    return id;
  }

  // The L the tree predicts for terms i != j.
  std::size_t meet(std::size_t i, std::size_t j) const {
    std::size_t x = leaf_node[i], y = leaf_node[j];
    while (depth[x] > depth[y]) x = parent[x];
    while (depth[y] > depth[x]) y = parent[y];
    while (parent[x] != parent[y]) {
      x = parent[x];
      y = parent[y];
    }
    // x and y: the children of the meeting node that hold i and j.
    return join[parent[x]] == Join::exact ? size[x] + size[y] : size[parent[x]];
  }
};

PlanNode to_plan_node(const Tree& t, const Arithmetic& arithmetic) {
  if (t.join == Join::leaf) return term(t.leaf);
  std::vector<PlanNode> children;
  children.reserve(t.children.size());
  for (const Tree& c : t.children) children.push_back(to_plan_node(c, arithmetic));
  return group(std::move(children), arithmetic);
}

void node_text(const PlanNode& n, std::string& out) {
  if (n.kind == NodeKind::term) {
    out += std::to_string(n.index);
    return;
  }
  out.push_back('(');
  for (std::size_t i = 0; i < n.children.size(); ++i) {
    if (i) out.push_back(' ');
    node_text(n.children[i], out);
  }
  out.push_back(')');
}

// ---- compact shapes: the trees of the evaluator's order-only node kinds (evaluate.cpp) ----

Tree bin(Tree x, Tree y) { return join_trees(std::move(x), {std::move(y)}, Join::binary); }

Tree chain(std::size_t begin, std::size_t end) {
  Tree t = leaf_tree(begin);
  for (std::size_t k = begin + 1; k < end; ++k) t = bin(std::move(t), leaf_tree(k));
  return t;
}

std::optional<Tree> shape_tree(const PlanNode& node, std::size_t begin, std::size_t end) {
  const std::size_t n = end - begin;
  if (n == 0) return std::nullopt;
  switch (node.kind) {
    case NodeKind::sequential: return chain(begin, end);
    case NodeKind::lanes: {
      const std::size_t lanes = node.lanes;
      if (n < lanes) return chain(begin, end);
      const std::size_t body = n - n % lanes;
      std::vector<Tree> r;
      for (std::size_t j = 0; j < lanes; ++j) {
        Tree t = leaf_tree(begin + j);
        for (std::size_t i = lanes + j; i < body; i += lanes) t = bin(std::move(t), leaf_tree(begin + i));
        r.push_back(std::move(t));
      }
      while (r.size() > 1) {
        std::vector<Tree> next;
        for (std::size_t j = 0; j + 1 < r.size(); j += 2) next.push_back(bin(std::move(r[j]), std::move(r[j + 1])));
        if (r.size() % 2 != 0) next.push_back(std::move(r.back()));
        r.swap(next);
      }
      Tree t = std::move(r[0]);
      for (std::size_t k = begin + body; k < end; ++k) t = bin(std::move(t), leaf_tree(k));
      return t;
    }
    case NodeKind::pairwise: {
      if (n <= node.leaf) return shape_tree(node.children[0], begin, end);
      const std::size_t half = pairwise_cut(n, node.multiple);
      auto left = shape_tree(node, begin, begin + half);
      auto right = shape_tree(node, begin + half, end);
      if (!left || !right) return left ? left : right;
      return bin(std::move(*left), std::move(*right));
    }
    default: return std::nullopt;
  }
}

struct NamedShape {
  std::string name;
  PlanNode node;
};

std::vector<NamedShape> known_shapes(const Arithmetic& ar) {
  std::vector<NamedShape> s;
  s.push_back({"sequential", sequential(ar)});
  for (const std::size_t l : {2, 4, 8, 16, 32, 64})
    s.push_back({"lanes(" + std::to_string(l) + ")", lanes(l, ar)});
  s.push_back({"numpy pairwise (leaf 128, split at multiples of 8, 8 lanes)", pairwise(128, 8, lanes(8, ar), ar)});
  for (const std::size_t leaf : {1, 8, 16, 32, 64, 128})
    s.push_back({"pairwise (leaf " + std::to_string(leaf) + ", sequential leaves)", pairwise(leaf, 1, sequential(ar), ar)});
  return s;
}

// ---- the driver ----

RevealResult reveal(const SumFunction* sum, const DotFunction* dot, std::size_t n, const RevealOptions& options) {
  if (n < 1) throw numeq::error("n: expected at least 1 term, got " + std::to_string(n));
  if (n > max_reveal_terms)
    throw numeq::error("n: at most " + std::to_string(max_reveal_terms) + " terms can be revealed, got " +
                       std::to_string(n));
  const Format fmt = format_by_name(options.fmt, "fmt");
  if (fmt.is_integer())
    throw numeq::error("fmt: order discovery needs a floating-point format (M must absorb the other terms), got " +
                       std::string(fmt.name));
  const Format in = options.in_fmt.empty() ? fmt : format_by_name(options.in_fmt, "in_fmt");
  if (in.is_integer())
    throw numeq::error("in_fmt: order discovery needs floating-point inputs, got " + std::string(in.name));
  const Format out = options.out_fmt.empty() ? fmt : format_by_name(options.out_fmt, "out_fmt");
  if (out.is_integer())
    throw numeq::error("out_fmt: order discovery needs a floating-point result, got " + std::string(out.name));
  const std::vector<Scale> scales = probe_scales(fmt, in, out, dot != nullptr, n);

  Prober prober(sum, dot, n);
  std::mt19937_64 random(options.seed);
  auto random_inputs = [&](std::vector<double>& a, std::vector<double>& b) {
    std::normal_distribution<double> normal;
    std::uniform_int_distribution<int> binade(-3, 3);
    a.resize(n);
    b.resize(dot ? n : 0);
    for (double& v : a) v = to_format(std::ldexp(normal(random), binade(random)), in);
    for (double& v : b) v = to_format(std::ldexp(normal(random), binade(random)), in);
  };

  // Deterministic? Two calls on one random input must agree.
  {
    std::vector<double> a, b;
    random_inputs(a, b);
    const double first = prober.call(a, b), second = prober.call(a, b);
    if (!same_result(first, second))
      throw numeq::error("fn: is not deterministic: two calls on the same input returned " + number_text(first) +
                         " and " + number_text(second) + "; " + kMethod + " needs the same order on every call");
  }
  // A sum? Every term the unit must give n units (exactly: the counts are exact in fmt).
  std::string refused;
  bool calibrated = false;
  for (const Scale& s : scales) {
    prober.set_scale(s);
    const double got = prober.units(), want = static_cast<double>(n) * prober.unit();
    if (got == want) {
      calibrated = true;
      break;
    }
    refused += (refused.empty() ? "" : "; ") + std::string("every term ") + number_text(prober.unit()) + " gave " +
               number_text(got) + " instead of " + number_text(want);
  }
  if (!calibrated)
    throw numeq::error("fn: does not behave like a sum of its " + std::to_string(n) + " terms in " +
                       std::string(fmt.name) + ": " + refused + " (" + kMethod + ")");

  RevealResult result;
  result.big = prober.big();
  result.unit = prober.unit();
  Reconstruction reconstruction(prober, n);
  Tree root = leaf_tree(0);
  if (n >= 2) {
    try {
      root = reconstruction.whole();
    } catch (const Inconsistent& e) {
      throw numeq::error("fn: its probe results fit no summation tree (" + e.what + "); " + kMethod +
                         " needs a deterministic sum of the n terms whose additions round to nearest or truncate");
    }
  }
  canonicalize(root);

  // Checks: a few probes again (the same answer?), and random pairs the tree predicts.
  if (n >= 2) {
    const auto probed = reconstruction.probed();
    for (std::size_t k = 0; k < std::min<std::size_t>(4, probed.size()); ++k) {
      const auto [i, j] = probed[k];
      const std::size_t again = reconstruction.count_to_meet(i, j, prober.probe(i, j));
      if (again != reconstruction.meet(i, j))
        throw numeq::error("fn: is not deterministic: the probe with +M at term " + std::to_string(i) +
                           " and -M at term " + std::to_string(j) + " counted " + std::to_string(n - again) +
                           " surviving terms once and " + std::to_string(n - reconstruction.meet(i, j)) + " before");
    }
    const Flat flat(root, n);
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    std::size_t checked = 0;
    for (std::size_t attempt = 0; checked < options.check_pairs && attempt < 8 * options.check_pairs + 8; ++attempt) {
      const std::size_t i = pick(random), j = pick(random);
      if (i == j || (reconstruction.probed(i, j) && attempt < 4 * options.check_pairs)) continue;
      ++checked;
      const std::size_t got = reconstruction.meet(i, j), want = flat.meet(i, j);
      if (got != want)
        throw numeq::error("fn: its probe results fit no summation tree: terms " + std::to_string(i) + " and " +
                           std::to_string(j) + " meet in " + std::to_string(got) +
                           " leaves, where the tree built from the other probes has " + std::to_string(want) + "; " +
                           kMethod + " needs a deterministic sum whose additions round to nearest or truncate");
    }
  }

  // The plan.
  Arithmetic arithmetic;
  arithmetic.accumulate = Cast{fmt};
  arithmetic.product = dot ? options.product : ProductMode::fma;
  if (arithmetic.product == ProductMode::rounded) arithmetic.product_cast = Cast{fmt};
  Plan& plan = result.plan;
  plan.name = std::string("revealed ") + (dot ? "dot" : "sum") + " order of " + std::to_string(n) + " terms (" +
              std::string(fmt.name) + ")";
  plan.reduction = to_plan_node(root, arithmetic);
  if (plan.reduction.kind == NodeKind::term) plan.reduction.arithmetic = arithmetic;
  plan.c_placement = CPlacement::last;
  plan.output = Cast{out};
  if (in != fmt) plan.name += " from " + std::string(in.name) + " inputs";
  if (out != fmt) plan.name += " to " + std::string(out.name);
  validate(plan);
  node_text(plan.reduction, result.tree);  // the tree's text, as tree_text writes any group

  std::size_t exact = 0;
  count_nodes(root, result.multi_term_nodes, result.absorbing_nodes, exact);
  if (result.multi_term_nodes == 0) {
    for (NamedShape& s : known_shapes(arithmetic)) {
      const std::optional<Tree> t = shape_tree(s.node, 0, n);
      if (t && same_tree(*t, root)) {
        result.shape = s.name;
        Plan compact = plan;
        compact.name = "compact " + plan.name + ": " + s.name;
        compact.reduction = std::move(s.node);
        result.compact = std::move(compact);
        break;
      }
    }
  }

  // Does the plan, in fmt's round-to-nearest-even arithmetic, give fn's values?
  result.reproduces = true;
  for (std::size_t k = 0; k < options.check_inputs && result.reproduces; ++k) {
    std::vector<double> a, b;
    random_inputs(a, b);
    const double want = prober.call(a, b);
    try {
      result.reproduces = same_result(evaluate(a, b, std::nullopt, plan), want);
    } catch (const numeq::error&) {
      result.reproduces = false;  // inputs the evaluator cannot take (products wider than binary64)
    }
  }
  result.calls = prober.calls();

  if (result.absorbing_nodes > 0)
    result.notes.push_back(std::to_string(result.absorbing_nodes) +
                           " multi-term node(s) absorb every other child when +M and -M meet there (fused steps that "
                           "truncate, as tensor cores do): the order is fn's, but the plan's groups add exactly and "
                           "round once, so their values may differ from fn's");
  if (exact > 0)
    result.notes.push_back(std::to_string(exact) +
                           " exact multi-term node(s): nested ones are told apart only up to where each closes; "
                           "each was closed as early as the counts allow (a chain of fused steps)");
  if (!result.reproduces)
    result.notes.push_back("the revealed order with " + std::string(fmt.name) +
                           " round-to-nearest-even additions did not reproduce fn on random inputs: fn rounds "
                           "differently or keeps more bits (order discovery reveals the order, not the arithmetic)");
  return result;
}

}  // namespace

RevealResult reveal_order(const SumFunction& fn, std::size_t n, const RevealOptions& options) {
  if (!fn) throw numeq::error("fn: expected a function, got an empty one");
  return reveal(&fn, nullptr, n, options);
}

RevealResult reveal_dot_order(const DotFunction& fn, std::size_t n, const RevealOptions& options) {
  if (!fn) throw numeq::error("fn: expected a function, got an empty one");
  return reveal(nullptr, &fn, n, options);
}

std::string tree_text(const PlanNode& node) {
  std::string out;
  node_text(node, out);
  return out;
}

}  // namespace numeq::core
