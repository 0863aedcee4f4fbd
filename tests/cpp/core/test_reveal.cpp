// Order discovery (reveal.hpp) and explicit trees (plan.hpp group / term nodes).
//
// Oracles, independent of the code under test: sums written here with the host's IEEE float
// arithmetic in orders known by construction (sequential, pairwise, interleaved lanes, random
// binary trees), fused multi-term nodes summed exactly by MPFR and rounded by the test oracle
// (oracle/mpfr_oracle.hpp), a truncating fused step written here, and tree shapes of the built-in
// plans written out here from the node kinds' definitions (plan.hpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <mpfr.h>
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include "numeq/core/evaluate.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/core/reveal.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "oracle/mpfr_oracle.hpp"

namespace {

using numeq::Cast;
using numeq::Rounding;
namespace core = numeq::core;
namespace formats = numeq::formats;

// ---- trees written by the tests ----

struct TNode {
  long leaf = -1;  // >= 0: a term
  std::vector<TNode> kids;
};

TNode leaf(std::size_t i) { return TNode{static_cast<long>(i), {}}; }
TNode node(std::vector<TNode> kids) { return TNode{-1, std::move(kids)}; }

long min_leaf(const TNode& t) {
  if (t.leaf >= 0) return t.leaf;
  long m = std::numeric_limits<long>::max();
  for (const TNode& k : t.kids) m = std::min(m, min_leaf(k));
  return m;
}

// "(a b ...)" with children ordered by their smallest term, as RevealResult::tree is.
std::string text(TNode t) {
  if (t.leaf >= 0) return std::to_string(t.leaf);
  std::sort(t.kids.begin(), t.kids.end(), [](const TNode& x, const TNode& y) { return min_leaf(x) < min_leaf(y); });
  std::string s = "(";
  for (std::size_t i = 0; i < t.kids.size(); ++i) s += (i ? " " : "") + text(t.kids[i]);
  return s + ")";
}

TNode chain_of(const std::vector<TNode>& items) {
  TNode t = items[0];
  for (std::size_t i = 1; i < items.size(); ++i) t = node({t, items[i]});
  return t;
}

std::vector<TNode> leaves(std::size_t begin, std::size_t end) {
  std::vector<TNode> v;
  for (std::size_t i = begin; i < end; ++i) v.push_back(leaf(i));
  return v;
}

// ---- sums in known orders, host float arithmetic ----

float host_pairwise(const std::vector<float>& x, std::size_t b, std::size_t e) {
  if (e - b == 1) return x[b];
  const std::size_t h = b + (e - b) / 2;
  return host_pairwise(x, b, h) + host_pairwise(x, h, e);
}

TNode pairwise_tree(std::size_t b, std::size_t e) {
  if (e - b == 1) return leaf(b);
  const std::size_t h = b + (e - b) / 2;
  return node({pairwise_tree(b, h), pairwise_tree(h, e)});
}

std::vector<float> floats(std::span<const double> x) { return std::vector<float>(x.begin(), x.end()); }

// L lanes: lane j sums terms j, j+L, ... (n a multiple of L), lanes combined ((0+1)+(2+3))...
float host_lanes(const std::vector<float>& x, std::size_t L) {
  std::vector<float> r(x.begin(), x.begin() + static_cast<long>(L));
  for (std::size_t i = L; i < x.size(); ++i) r[i % L] += x[i];
  while (r.size() > 1) {
    std::vector<float> next;
    for (std::size_t j = 0; j < r.size(); j += 2) next.push_back(r[j] + r[j + 1]);
    r.swap(next);
  }
  return r[0];
}

TNode lanes_tree(std::size_t n, std::size_t L) {
  std::vector<TNode> r;
  for (std::size_t j = 0; j < L; ++j) {
    std::vector<TNode> lane;
    for (std::size_t i = j; i < n; i += L) lane.push_back(leaf(i));
    r.push_back(chain_of(lane));
  }
  while (r.size() > 1) {
    std::vector<TNode> next;
    for (std::size_t j = 0; j < r.size(); j += 2) next.push_back(node({r[j], r[j + 1]}));
    r.swap(next);
  }
  return r[0];
}

// A random binary tree over a random permutation of the terms.
TNode random_tree(std::vector<std::size_t> terms, std::mt19937_64& g) {
  if (terms.size() == 1) return leaf(terms[0]);
  std::uniform_int_distribution<std::size_t> cut(1, terms.size() - 1);
  const std::size_t c = cut(g);
  return node({random_tree({terms.begin(), terms.begin() + static_cast<long>(c)}, g),
               random_tree({terms.begin() + static_cast<long>(c), terms.end()}, g)});
}

float host_tree(const TNode& t, const std::vector<float>& x) {
  if (t.leaf >= 0) return x[static_cast<std::size_t>(t.leaf)];
  return host_tree(t.kids[0], x) + host_tree(t.kids[1], x);
}

// A fused multi-term node that adds exactly and rounds once: MPFR's exact sum, the oracle's
// rounding into `cast`.
double exact_rounded(const std::vector<double>& v, const Cast& cast) {
  mpfr_t acc;
  mpfr_init2(acc, 2300);
  mpfr_set_zero(acc, 1);
  for (const double x : v) mpfr_add_d(acc, acc, x, MPFR_RNDN);  // exact at 2300 bits
  double out;
  if (mpfr_zero_p(acc)) {
    out = 0.0;  // zero signs are tested separately
  } else {
    numeq_oracle::RoundOracle oracle(cast.format);
    out = oracle.cast_value(acc, cast).value;
  }
  mpfr_clear(acc);
  return out;
}

// A tree whose nodes of 3+ children are such exact nodes (fp32), binary nodes float additions.
double host_exact_tree(const TNode& t, std::span<const double> x) {
  if (t.leaf >= 0) return x[static_cast<std::size_t>(t.leaf)];
  if (t.kids.size() == 2)
    return static_cast<double>(static_cast<float>(host_exact_tree(t.kids[0], x)) +
                               static_cast<float>(host_exact_tree(t.kids[1], x)));
  std::vector<double> v;
  for (const TNode& k : t.kids) v.push_back(host_exact_tree(k, x));
  return exact_rounded(v, Cast{formats::fp32});
}

// A truncating fused step (as tensor cores): every term aligned to the largest exponent E and cut
// toward zero to F fraction bits below 2^E, the cut terms added (exactly: they share one grid and
// fit 53 bits), the sum rounded once to fp32.
double truncating_step(const std::vector<double>& v, int F) {
  int E = std::numeric_limits<int>::min();
  for (const double x : v)
    if (x != 0) E = std::max(E, std::ilogb(x));
  if (E == std::numeric_limits<int>::min()) return 0.0;
  double s = 0;
  for (const double x : v) s += std::ldexp(std::trunc(std::ldexp(x, F - E)), E - F);
  return static_cast<double>(static_cast<float>(s));
}

// ---- helpers ----

std::vector<double> random_floats(std::size_t n, std::mt19937_64& g, int spread = 6) {
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> e(-spread, spread);
  std::vector<double> x(n);
  for (double& v : x) v = static_cast<double>(static_cast<float>(std::ldexp(normal(g), e(g))));
  return x;
}

bool same(double a, double b) { return numeq_oracle::same_value(a, b); }

double plan_sum(const core::Plan& plan, const std::vector<double>& x) {
  const xt::xarray<double> xs = xt::adapt(x, std::vector<std::size_t>{x.size()});
  return core::sum(xs, -1, plan)();
}

// Reveals fn's order (fp32), checks the tree against `want` and the plan against fn on random data.
core::RevealResult check_sum(const core::SumFunction& fn, std::size_t n, const TNode& want, bool values_too = true) {
  const core::RevealResult r = core::reveal_order(fn, n);
  EXPECT_EQ(r.tree, text(want)) << "n = " << n;
  if (values_too) {
    std::mt19937_64 g(n);
    for (int k = 0; k < 20; ++k) {
      const std::vector<double> x = random_floats(n, g);
      EXPECT_TRUE(same(plan_sum(r.plan, x), fn(x))) << "n = " << n << ", input " << k;
    }
    EXPECT_TRUE(r.reproduces) << n;
  }
  return r;
}

// ---- explicit trees as plans ----

core::Plan tree_plan(core::PlanNode reduction, const Cast& out = Cast{formats::fp32}) {
  core::Plan p;
  p.name = "t";
  p.reduction = std::move(reduction);
  p.output = out;
  return p;
}

TEST(ExplicitTree, JsonRoundTripTextAndInheritedArithmetic) {
  const core::Arithmetic fp32{Cast{formats::fp32}};
  const core::Arithmetic bf16{Cast{formats::bf16, Rounding::toward_zero}};
  core::PlanNode inner = core::group({core::term(2), core::term(0), core::term(3)}, bf16);
  const core::Plan p = tree_plan(core::group({core::group({core::term(1), core::term(4)}, fp32), std::move(inner)}, fp32));
  core::validate(p);
  const std::string json = core::to_json(p);
  EXPECT_EQ(core::plan_from_json(json), p);
  // The nested group of the same arithmetic leaves it out; the bf16 one writes it.
  std::size_t written = 0;
  for (std::size_t at = json.find("\"arithmetic\""); at != std::string::npos; at = json.find("\"arithmetic\"", at + 1))
    ++written;
  EXPECT_EQ(written, 2u) << json;
  EXPECT_NE(json.find("bf16"), std::string::npos);
  EXPECT_EQ(core::to_string(p.reduction),
            "group(fp32 nearest_even fma: (1 4) group(bf16 toward_zero fma: 2 0 3))");
  EXPECT_EQ(core::tree_text(p.reduction), "((1 4) (2 0 3))");
  EXPECT_EQ(core::explicit_term_count(p.reduction), 5u);
  // A lone term is a plan of one term, rounded into its own arithmetic.
  core::PlanNode lone = core::term(0);
  lone.arithmetic = core::Arithmetic{Cast{formats::bf16}};
  const core::Plan one = tree_plan(lone);
  EXPECT_EQ(core::plan_from_json(core::to_json(one)), one);
  EXPECT_EQ(core::evaluate(std::vector<double>{1.0 + std::ldexp(1, -12)}, {}, std::nullopt, one), 1.0);
}

void expect_error(const std::function<void()>& f, const std::string& starts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one starting with: " << starts;
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(starts, 0), 0u) << e.what();
  }
}

TEST(ExplicitTree, ValidationNamesTheField) {
  const core::Arithmetic a{Cast{formats::fp32}};
  auto check = [](core::PlanNode n) { core::validate(tree_plan(std::move(n))); };
  expect_error([&] { check(core::group({core::term(0)}, a)); },
               "plan.reduction.children: a group node needs at least 2 children, got 1");
  expect_error([&] { check(core::group({core::term(0), core::term(0)}, a)); },
               "plan.reduction.children[1].index: term 0 appears twice (also at plan.reduction.children[0].index)");
  expect_error([&] { check(core::group({core::term(0), core::group({core::term(1), core::term(5)}, a)}, a)); },
               "plan.reduction.children[1].children[1].index: term 5 is out of range: the tree has 3 terms");
  expect_error([&] { check(core::group({core::term(0), core::sequential(a)}, a)); },
               "plan.reduction.children[1].kind: a group's children are groups or terms, got 'sequential'");
  expect_error([&] { check(core::term(1)); }, "plan.reduction.index: term 1 is out of range: the tree has 1 terms");
  expect_error([] { core::plan_from_json(R"({"reduction": {"kind": "group", "children": []}, "output": {"format": "fp32"}})"); },
               "plan.reduction.arithmetic: missing");
  expect_error([] {
    core::plan_from_json(R"({"reduction": {"kind": "group", "arithmetic": {"accumulate": {"format": "fp32"}},
      "children": [{"kind": "term", "index": -1}, {"kind": "term", "index": 0}]}, "output": {"format": "fp32"}})");
  }, "plan.reduction.children[0].index: expected a non-negative integer");
  expect_error([] { core::plan_from_json(R"({"reduction": {"kind": "grup"}, "output": {"format": "fp32"}})"); },
               "plan.reduction.kind: unknown plan node kind 'grup'; valid: sequential, lanes, pairwise, chunked, "
               "split, tree, fused, permute, group, term");
  // The tree must cover the range exactly.
  const core::Plan three = tree_plan(core::group({core::term(0), core::term(1), core::term(2)}, a));
  expect_error([&] { core::evaluate(std::vector<double>(4, 1.0), {}, std::nullopt, three); },
               "plan: an explicit tree (group node) of 3 terms cannot reduce a range of 4 terms");
}

// A fused multi-term group: the exact sum rounded once, against MPFR, in several formats and
// every deterministic rounding mode, with wide binade spreads and cancellations.
TEST(ExplicitTree, MultiTermGroupIsTheExactSumRoundedOnce) {
  std::mt19937_64 g(5);
  std::size_t checked = 0;
  for (const numeq::Format* f : {&formats::fp32, &formats::bf16, &formats::fp16, &formats::fp64, &formats::e4m3fn}) {
    for (int r = 0; r < 6; ++r) {
      const Cast cast{*f, static_cast<Rounding>(r)};
      for (int trial = 0; trial < 150; ++trial) {
        const std::size_t k = 3 + trial % 14;
        std::vector<double> v = random_floats(k, g, trial % 3 == 0 ? 120 : 20);
        if (trial % 4 == 1) v[1] = -v[0] * (1 + std::ldexp(1.0, -22));  // near cancellation
        if (trial % 5 == 2) v[2] = std::ldexp(v[2], -100);              // far below: sticky only
        std::vector<core::PlanNode> kids;
        for (std::size_t i = 0; i < k; ++i) kids.push_back(core::term(i));
        const core::Plan p = tree_plan(core::group(std::move(kids), core::Arithmetic{cast}), cast);
        mpfr_t exact;
        mpfr_init2(exact, 2300);
        mpfr_set_zero(exact, 1);
        for (const double x : v) mpfr_add_d(exact, exact, x, MPFR_RNDN);
        if (!mpfr_zero_p(exact)) {
          numeq_oracle::RoundOracle oracle(*f);
          const double want = oracle.cast_value(exact, cast).value;
          const double got = core::evaluate(v, {}, std::nullopt, p);
          ASSERT_TRUE(same(got, want)) << f->name << " " << numeq::to_string(cast.rounding) << " trial " << trial
                                       << ": got " << numeq_oracle::describe(got) << ", want "
                                       << numeq_oracle::describe(want);
          ++checked;
        }
        mpfr_clear(exact);
      }
    }
  }
  EXPECT_GT(checked, 4000u);
  // Zero signs (IEEE 754 s6.3): -0 only from -0s, exact cancellation +0 (-0 rounding downward).
  auto three = [](double x, double y, double z, Rounding mode) {
    const Cast c{formats::fp32, mode};
    return core::evaluate(std::vector<double>{x, y, z}, {}, std::nullopt,
                          tree_plan(core::group({core::term(0), core::term(1), core::term(2)}, core::Arithmetic{c}), c));
  };
  EXPECT_TRUE(std::signbit(three(-0.0, -0.0, -0.0, Rounding::nearest_even)));
  EXPECT_FALSE(std::signbit(three(-0.0, 0.0, -0.0, Rounding::nearest_even)));
  EXPECT_TRUE(std::signbit(three(-0.0, 0.0, -0.0, Rounding::downward)));
  EXPECT_FALSE(std::signbit(three(1.0, -1.0, 0.0, Rounding::nearest_even)));
  EXPECT_TRUE(std::signbit(three(1.0, -1.0, 0.0, Rounding::downward)));
  EXPECT_TRUE(std::isnan(three(INFINITY, -INFINITY, 1.0, Rounding::nearest_even)));
  EXPECT_EQ(three(INFINITY, 5.0, 1.0, Rounding::nearest_even), INFINITY);
}

// A binary group is one rounded addition; products under fma enter exactly, and a group of two
// terms starts as an fma chain from +0 does (std::fma here).
TEST(ExplicitTree, BinaryGroupsAreFloatAdditionsAndFmaChains) {
  std::mt19937_64 g(9);
  const core::Arithmetic fma32{Cast{formats::fp32}, core::ProductMode::fma};
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 2 + trial % 9;
    const std::vector<double> a = random_floats(n, g), b = random_floats(n, g);
    core::PlanNode chain = core::term(0);
    for (std::size_t i = 1; i < n; ++i) chain = core::group({std::move(chain), core::term(i)}, fma32);
    const core::Plan p = tree_plan(chain);
    float acc = 0.0f;
    for (std::size_t i = 0; i < n; ++i) acc = std::fma(static_cast<float>(a[i]), static_cast<float>(b[i]), acc);
    ASSERT_TRUE(same(core::evaluate(a, b, std::nullopt, p), acc)) << trial;
    float s = 0.0f;
    for (std::size_t i = 0; i < n; ++i) s += static_cast<float>(a[i]);
    ASSERT_TRUE(same(core::evaluate(a, {}, std::nullopt, p), s)) << trial;
  }
}

// ---- reveal_order on orders known by construction ----

TEST(Reveal, SequentialLoop) {
  for (const std::size_t n : {1u, 2u, 3u, 17u, 200u}) {
    auto fn = [](std::span<const double> x) {
      float acc = 0.0f;
      for (const double v : x) acc += static_cast<float>(v);
      return static_cast<double>(acc);
    };
    const core::RevealResult r = check_sum(fn, n, n == 1 ? leaf(0) : chain_of(leaves(0, n)));
    if (n > 1) {
      EXPECT_EQ(r.shape, "sequential");
      ASSERT_TRUE(r.compact.has_value());
      EXPECT_EQ(r.compact->reduction.kind, core::NodeKind::sequential);
    }
    if (n == 200) {
      EXPECT_LE(r.calls, 199u + 32u + 4u + 10u) << "a sequential loop needs n - 1 probes";
    }
  }
}

TEST(Reveal, PairwiseLanesAndRandomTrees) {
  for (const std::size_t n : {2u, 5u, 64u, 100u, 333u}) {
    auto fn = [](std::span<const double> x) {
      const std::vector<float> f = floats(x);
      return static_cast<double>(host_pairwise(f, 0, f.size()));
    };
    const core::RevealResult r = check_sum(fn, n, pairwise_tree(0, n));
    EXPECT_LT(r.calls, n * (n - 1) / 2 + 64) << n;
  }
  for (const std::size_t L : {4u, 8u}) {
    for (const std::size_t n : {L, 4 * L, 40 * L}) {
      auto fn = [L](std::span<const double> x) { return static_cast<double>(host_lanes(floats(x), L)); };
      const core::RevealResult r = check_sum(fn, n, lanes_tree(n, L));
      if (n > L) {
        EXPECT_EQ(r.shape, "lanes(" + std::to_string(L) + ")");
      }
    }
  }
  std::mt19937_64 g(77);
  for (int t = 0; t < 12; ++t) {
    const std::size_t n = 2 + static_cast<std::size_t>(g() % 150);
    std::vector<std::size_t> perm(n);
    for (std::size_t i = 0; i < n; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), g);
    const TNode tree = random_tree(perm, g);
    auto fn = [&tree](std::span<const double> x) { return static_cast<double>(host_tree(tree, floats(x))); };
    check_sum(fn, n, tree);
  }
}

// Fused multi-term nodes that add exactly and round once (as plan.hpp's group of 3+).
TEST(Reveal, ExactFusedNodes) {
  std::vector<std::pair<std::size_t, TNode>> cases;
  cases.push_back({4, node(leaves(0, 4))});
  cases.push_back({16, node(leaves(0, 16))});
  // A chain of 16-term fused steps, each the c of the next (the last one short).
  {
    TNode step = node(leaves(0, 16));
    std::vector<TNode> next{step};
    for (TNode& l : leaves(16, 32)) next.push_back(l);
    TNode second = node(next);
    std::vector<TNode> last{second};
    for (TNode& l : leaves(32, 40)) last.push_back(l);
    cases.push_back({40, node(last)});
  }
  // A 4-way node and a 3-way node inside binary ones.
  cases.push_back({8, node({node(leaves(0, 4)), node({leaf(4), node(leaves(5, 8))})})});
  for (const auto& [n, tree] : cases) {
    auto fn = [&tree = tree](std::span<const double> x) { return host_exact_tree(tree, x); };
    const core::RevealResult r = check_sum(fn, n, tree);
    EXPECT_EQ(r.absorbing_nodes, 0u);
    EXPECT_GT(r.multi_term_nodes, 0u);
  }
}

// Fused steps that truncate the other terms away (tensor cores, FPRev's multi-term nodes): the
// structure is revealed; the plan's exact groups need not reproduce the truncation.
TEST(Reveal, TruncatingFusedChain) {
  for (const std::size_t step : {4u, 8u, 16u}) {
    const std::size_t n = 2 * step + step / 2;
    auto fn = [step](std::span<const double> x) {
      double c = 0;
      for (std::size_t k = 0; k < x.size(); k += step) {
        std::vector<double> v{c};
        for (std::size_t i = k; i < std::min(x.size(), k + step); ++i) v.push_back(x[i]);
        c = truncating_step(v, 24);
      }
      return c;
    };
    std::vector<TNode> first = leaves(0, step), second{node(first)}, third;
    for (TNode& l : leaves(step, 2 * step)) second.push_back(l);
    third.push_back(node(second));
    for (TNode& l : leaves(2 * step, n)) third.push_back(l);
    const core::RevealResult r = check_sum(fn, n, node(third), false);
    EXPECT_EQ(r.absorbing_nodes, 3u);
    EXPECT_FALSE(r.notes.empty());
  }
}

// ---- the built-in platforms, revealed from their own emulation ----

// The tree of a plan, written out from plan.hpp's definitions of the order-only kinds and of the
// fused chain; nullopt for kinds this model does not cover.
std::optional<TNode> plan_shape(const core::PlanNode& p, const std::vector<TNode>& items) {
  using K = core::NodeKind;
  if (items.size() == 1) return items[0];
  switch (p.kind) {
    case K::sequential: return chain_of(items);
    case K::fused: {
      const std::size_t step = static_cast<std::size_t>(p.fused.n);
      std::optional<TNode> c;
      for (std::size_t k = 0; k < items.size(); k += step) {
        std::vector<TNode> v;
        if (c) v.push_back(*c);
        for (std::size_t i = k; i < std::min(items.size(), k + step); ++i) v.push_back(items[i]);
        c = v.size() == 1 ? v[0] : node(v);
      }
      return c;
    }
    case K::chunked: {
      std::vector<TNode> partials;
      for (std::size_t k = 0; k < items.size(); k += p.chunk) {
        const auto part = plan_shape(p.children[0], {items.begin() + static_cast<long>(k),
                                                     items.begin() + static_cast<long>(std::min(items.size(), k + p.chunk))});
        if (!part) return std::nullopt;
        partials.push_back(*part);
      }
      return plan_shape(p.children[1], partials);
    }
    case K::permute: {
      std::vector<TNode> reordered;
      for (std::size_t b = 0; b < items.size(); b += p.block)
        for (const std::size_t i : p.order)
          if (b + i < items.size()) reordered.push_back(items[b + i]);
      return plan_shape(p.children[0], reordered);
    }
    default: return std::nullopt;
  }
}

// The arithmetic of a plan's first adder (the format fn accumulates in: reveal_order's fmt).
std::optional<core::Arithmetic> adder_arithmetic(const core::PlanNode& p) {
  using K = core::NodeKind;
  switch (p.kind) {
    case K::sequential:
    case K::lanes:
    case K::tree:
    case K::pairwise: return p.arithmetic;
    case K::chunked:
    case K::permute:
    case K::split: return adder_arithmetic(p.children[0]);
    default: return std::nullopt;
  }
}

// Whether a plan's first adder starts its accumulator from +0 (sequential's start_from_zero):
// the sign of an all-zero sum, which order discovery cannot see, as it cannot see an initial value.
bool starts_from_zero(const core::PlanNode& p) {
  if (p.kind == core::NodeKind::sequential) return p.start_from_zero;
  return !p.children.empty() && starts_from_zero(p.children[0]);
}

bool has_fused(const core::PlanNode& p) {
  if (p.kind == core::NodeKind::fused) return true;
  for (const core::PlanNode& c : p.children)
    if (has_fused(c)) return true;
  return false;
}

TEST(Reveal, BuiltInPlatformsFromTheirOwnEmulation) {
  std::size_t revealed = 0, by_value = 0, by_structure = 0, skipped = 0;
  std::mt19937_64 g(2026);
  for (const std::string& name : core::platform_names()) {
    const core::Platform platform = core::platform_by_name(name);
    for (const core::PlanEntry& e : platform.plans) {
      if (e.op == core::Operation::matmul) continue;
      const core::Plan& plan = e.plan;
      const bool fused = has_fused(plan.reduction);
      const std::vector<std::size_t> lengths =
          e.op == core::Operation::sum ? std::vector<std::size_t>{1, 7, 129, 250}
          : fused ? std::vector<std::size_t>{plan.reduction.kind == core::NodeKind::chunked ? 168u : 40u}
                  : std::vector<std::size_t>{1, 5, 70};
      for (const std::size_t n : lengths) {
        core::RevealOptions options;
        options.fmt = e.out_fmt;
        options.in_fmt = e.in_fmt;
        options.out_fmt = e.out_fmt;
        const std::optional<core::Arithmetic> adder = adder_arithmetic(plan.reduction);
        if (!fused && adder) {
          // Told the format fn accumulates in, the revealed plan can compute what fn computes.
          options.fmt = std::string(adder->accumulate.format.name);
          options.product = adder->product;
        }
        core::RevealResult r;
        const std::string where = name + " " + std::string(core::to_string(e.op)) + " " + e.in_fmt + " -> " + e.out_fmt +
                                  ", n = " + std::to_string(n);
        try {
          if (e.op == core::Operation::sum) {
            r = core::reveal_order([&](std::span<const double> x) { return core::evaluate(x, {}, std::nullopt, plan); }, n,
                                   options);
          } else {
            r = core::reveal_dot_order(
                [&](std::span<const double> a, std::span<const double> b) { return core::evaluate(a, b, std::nullopt, plan); },
                n, options);
          }
        } catch (const numeq::error& err) {
          ADD_FAILURE() << where << ": " << err.what();
          continue;
        }
        ++revealed;
        const bool comparable = adder && (adder->product == core::ProductMode::fma ||
                                          adder->product_cast.format == adder->accumulate.format);
        if (!fused && comparable) {
          // The revealed tree computes what the platform's plan computes (given the plan's input
          // casts, its final output cast and its initial value, or its accumulator's +0 start,
          // which order discovery cannot see).
          core::Plan tree_plan = r.plan;
          tree_plan.input_a = plan.input_a;
          tree_plan.input_b = plan.input_b;
          tree_plan.initial = plan.initial;
          if (!tree_plan.initial && starts_from_zero(plan.reduction)) tree_plan.initial = 0.0;
          tree_plan.output = plan.output;
          const numeq::Format& in = numeq::format_by_name(e.in_fmt);
          for (int k = 0; k < 10; ++k) {
            std::vector<double> a = random_floats(n, g), b = random_floats(e.op == core::Operation::dot ? n : 0, g);
            for (double& v : a) v = numeq_oracle::round_oracle(v, Cast{in}).value;
            for (double& v : b) v = numeq_oracle::round_oracle(v, Cast{in}).value;
            ASSERT_TRUE(same(core::evaluate(a, b, std::nullopt, tree_plan), core::evaluate(a, b, std::nullopt, plan)))
                << where << ", input " << k << ", tree " << r.tree;
          }
          if (plan.output.format == adder->accumulate.format) {
            EXPECT_TRUE(r.reproduces) << where;
          }
          ++by_value;
        } else if (fused) {
          std::optional<TNode> want = plan_shape(plan.reduction, leaves(0, n));
          if (!want) continue;  // a fused plan of a shape this test does not write out
          EXPECT_EQ(r.tree, text(*want)) << where;
          EXPECT_GT(r.multi_term_nodes, 0u) << where;
          ++by_structure;
        } else {
          ++skipped;  // products rounded into another format than the accumulator's
        }
      }
    }
  }
  EXPECT_GT(by_value, 10u);
  EXPECT_GT(by_structure, 20u);
  EXPECT_EQ(revealed, by_value + by_structure + skipped);
}

// ---- refusals ----

TEST(Reveal, RefusesWhatIsNotADeterministicSum) {
  auto sum32 = [](std::span<const double> x) {
    float acc = 0.0f;
    for (const double v : x) acc += static_cast<float>(v);
    return static_cast<double>(acc);
  };
  // Not deterministic: the order changes from call to call.
  std::mt19937_64 g(3);
  auto shuffled = [&](std::span<const double> x) {
    std::vector<double> v(x.begin(), x.end());
    std::shuffle(v.begin(), v.end(), g);
    return sum32(v);
  };
  expect_error([&] { core::reveal_order(shuffled, 64); }, "fn: is not deterministic: two calls on the same input");
  // Deterministic on repeated inputs, but the probes' order drifts: caught by the repeated probes
  // or the final checks, never returned as a tree.
  std::size_t calls = 0;
  auto drifting = [&](std::span<const double> x) {
    ++calls;
    std::vector<double> v(x.begin(), x.end());
    if (calls > 40) std::reverse(v.begin(), v.end());
    return sum32(v);
  };
  expect_error([&] { core::reveal_order(drifting, 30); }, "fn: ");
  // Not a sum.
  auto max_of = [](std::span<const double> x) { return *std::max_element(x.begin(), x.end()); };
  expect_error([&] { core::reveal_order(max_of, 8); }, "fn: does not behave like a sum of its 8 terms in fp32");
  auto product = [](std::span<const double> x) {
    double p = 1;
    for (const double v : x) p *= v;
    return p;
  };
  expect_error([&] { core::reveal_order(product, 8); }, "fn: does not behave like a sum");
  // A sum of units, but probes that no tree explains: L(i, j) = |i - j| + 1.
  auto intervals = [](std::span<const double> x) {
    std::vector<std::size_t> big;
    double unit = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      if (std::fabs(x[k]) > 1e30) big.push_back(k);
      else unit = x[k];
    }
    if (big.size() != 2) return static_cast<double>(x.size()) * unit;
    return static_cast<double>(x.size() - (big[1] - big[0] + 1)) * unit;
  };
  expect_error([&] { core::reveal_order(intervals, 20); }, "fn: its probe results fit no summation tree");
  // Rounding away from the probe's M: the units are not absorbed.
  auto upward = [](std::span<const double> x) {
    double acc = 0;
    for (const double v : x) acc = std::nextafter(acc + v, INFINITY);
    return acc;
  };
  expect_error([&] { core::reveal_order(upward, 8); }, "fn: does not behave like a sum");
}

TEST(Reveal, ArgumentErrorsNameTheArgument) {
  auto sum = [](std::span<const double> x) {
    double acc = 0;
    for (const double v : x) acc += v;
    return acc;
  };
  expect_error([&] { core::reveal_order(sum, 0); }, "n: expected at least 1 term, got 0");
  expect_error([&] { core::reveal_order(sum, core::max_reveal_terms + 1); }, "n: at most 4096 terms");
  core::RevealOptions bad;
  bad.fmt = "fp33";
  expect_error([&] { core::reveal_order(sum, 4, bad); }, "fmt: unknown format 'fp33'");
  bad.fmt = "int8";
  expect_error([&] { core::reveal_order(sum, 4, bad); }, "fmt: order discovery needs a floating-point format");
  core::RevealOptions dot;
  dot.in_fmt = "bf17";
  expect_error([&] { core::reveal_dot_order([](auto, auto) { return 0.0; }, 4, dot); }, "in_fmt: unknown format 'bf17'");
  core::RevealOptions e4m3;
  e4m3.fmt = "e4m3fn";
  expect_error([&] { core::reveal_order(sum, 40, e4m3); }, "n: 40 terms are too many to count exactly in e4m3fn");
  expect_error([&] { core::reveal_order(core::SumFunction{}, 4); }, "fn: expected a function");
}

// The largest reveal, a plain loop of max_reveal_terms terms, is a chain of 4095 nested groups.
// It once took seconds (every validation wrote a path per node, quadratic in the depth) and its
// JSON was 302 MB (nested objects, indented); now the plan is written as tree text and reads
// back equal. Oracle: the host's float loop, which the plan must reproduce.
TEST(Reveal, TheLongestChainStaysProportionate) {
  const std::size_t n = core::max_reveal_terms;
  const core::SumFunction loop = [](std::span<const double> x) {
    float acc = static_cast<float>(x[0]);
    for (std::size_t k = 1; k < x.size(); ++k) acc += static_cast<float>(x[k]);
    return static_cast<double>(acc);
  };
  const core::RevealResult r = core::reveal_order(loop, n);
  EXPECT_EQ(r.shape, "sequential");
  EXPECT_TRUE(r.reproduces);
  const std::string json = core::to_json(r.plan);
  EXPECT_LT(json.size(), 8 * n + 2000) << "the tree text: about 7 characters per term";
  EXPECT_EQ(core::plan_from_json(json), r.plan);
}

}  // namespace
