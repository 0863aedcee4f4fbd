#pragma once
// The bound tests' shared checking (tests/cpp/core/test_bound.cpp, test_bound_probabilistic.cpp):
// the tally of |emulated - exact| against the bound, inputs and exact values from
// numeq::reference, the hand-built plans of every node kind and the Trainium variants.

#include <gtest/gtest.h>
#include <mpfr.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xview.hpp>

#include "numeq/cases/generators.hpp"
#include "numeq/core/bound.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/core/fused.hpp"
#include "numeq/core/plan.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/references/exact.hpp"

namespace numeq_test_bound {


using namespace numeq;
using namespace numeq::core;
using numeq::cases::Distribution;

// ---- checking ----

struct Tally {
  std::size_t checked = 0;     // elements with a finite bound, compared
  std::size_t violations = 0;  // |emulated - exact| > bound
  std::size_t infinite = 0;    // +Inf bound (overflow): nothing to check
  std::size_t nan = 0;         // NaN bound (non-finite inputs)
  double worst_ratio = 0;      // max |emulated - exact| / bound
  std::string first_violation;
  void merge(const Tally& t) {
    checked += t.checked;
    violations += t.violations;
    infinite += t.infinite;
    nan += t.nan;
    worst_ratio = std::max(worst_ratio, t.worst_ratio);
    if (first_violation.empty()) first_violation = t.first_violation;
  }
};

// |e - (hi + lo)| with TwoSum for e - hi (exact), then one rounding: within 2^-53 relative.
inline double error_of(double e, double hi, double lo) {
  const double s = e - hi;
  const double bb = s - e;
  const double t = (e - (s - bb)) + (-hi - bb);
  return std::fabs(s + (t - lo));
}

inline Tally compare(const xt::xarray<double>& emulated, const reference::ExactValues& exact, const xt::xarray<double>& bound,
              const std::string& label) {
  Tally t;
  for (std::size_t i = 0; i < emulated.size(); ++i) {
    const double b = bound.data()[i];
    if (std::isnan(b)) {
      ++t.nan;
      continue;
    }
    if (std::isinf(b)) {
      ++t.infinite;
      continue;
    }
    ++t.checked;
    const double err = error_of(emulated.data()[i], exact.hi.data()[i], exact.lo.data()[i]);
    if (err > b) {
      ++t.violations;
      if (t.first_violation.empty()) {
        char buf[400];
        std::snprintf(buf, sizeof buf, "%s: element %zu emulated %.17g exact %.17g%+.3g bound %.6g error %.6g",
                      label.c_str(), i, emulated.data()[i], exact.hi.data()[i], exact.lo.data()[i], b, err);
        t.first_violation = buf;
      }
    }
    if (b > 0) t.worst_ratio = std::max(t.worst_ratio, err / b);
    else if (err > 0) t.worst_ratio = std::numeric_limits<double>::infinity();
  }
  return t;
}

inline void report(const std::string& family, const Tally& t) {
  std::printf("[bound] %-28s checked %10zu  violations %zu  inf %zu  nan %zu  worst error/bound %.3g\n",
              family.c_str(), t.checked, t.violations, t.infinite, t.nan, t.worst_ratio);
  if (!t.first_violation.empty()) std::printf("        first violation: %s\n", t.first_violation.c_str());
}

// ---- inputs and exact values ----

inline xt::xarray<double> gen(Distribution d, std::uint64_t seed, const Format& f, const std::vector<std::size_t>& shape,
                       double scale = 1.0) {
  return cases::generate(cases::Generator{d, seed, scale}, f, shape);
}

// dot of rows of a [R, K] and b [R, K] as a batched matmul [R, 1, K] @ [R, K, 1].
inline reference::ExactValues dot_exact_rows(const xt::xarray<double>& a, const xt::xarray<double>& b,
                                      const xt::xarray<double>* c) {
  const std::size_t R = a.shape()[0], K = a.shape()[1];
  xt::xarray<double> a3 = a;
  a3.reshape({R, 1, K});
  xt::xarray<double> b3 = b;
  b3.reshape({R, K, 1});
  xt::xarray<double> c3;
  if (c) {
    c3 = *c;
    c3.reshape({R, 1, 1});
  }
  reference::ExactValues e = reference::matmul_exact(a3, b3, c ? &c3 : nullptr);
  e.hi.reshape({R});
  e.lo.reshape({R});
  return e;
}

inline const Format& fmt(const std::string& name) { return format_by_name(name); }

inline xt::xarray<double> round_all(xt::xarray<double> x, const Cast& c) {
  for (double& v : x) v = round_to_format(v, c);
  return x;
}

// One check of a matmul plan on generated inputs.
inline Tally check_matmul(const Plan& plan, const Format& in, Distribution d, std::uint64_t seed, std::size_t M,
                   std::size_t K, std::size_t N, bool with_c, const BoundOptions& options = {},
                   const Plan* emulate_with = nullptr) {
  const xt::xarray<double> a = gen(d, seed, in, {M, K});
  const xt::xarray<double> b = gen(d == Distribution::outlier_channels ? Distribution::normal : d, seed + 1, in, {K, N});
  xt::xarray<double> c;
  if (with_c) c = gen(Distribution::normal, seed + 2, formats::fp32, {M, N});
  const Plan& ep = emulate_with ? *emulate_with : plan;
  // c must be a value of a fused chain's c format.
  if (with_c && plan.reduction.kind == NodeKind::fused)
    c = round_all(c, Cast{plan.reduction.fused.c_format});
  const xt::xarray<double> em = core::matmul(a, b, with_c ? &c : nullptr, ep);
  const xt::xarray<double> bd = matmul_bound(a, b, with_c ? &c : nullptr, plan, em, options);
  const reference::ExactValues ex = reference::matmul_exact(a, b, with_c ? &c : nullptr);
  return compare(em, ex, bd, plan.name);
}

inline Tally check_dot(const Plan& plan, const Format& in, Distribution d, std::uint64_t seed, std::size_t R, std::size_t K,
                bool with_c, const BoundOptions& options = {}) {
  const xt::xarray<double> a = gen(d, seed, in, {R, K});
  const xt::xarray<double> b = gen(d, seed + 7, in, {R, K});
  xt::xarray<double> c;
  if (with_c) c = gen(Distribution::normal, seed + 3, formats::fp32, {R});
  if (with_c && plan.reduction.kind == NodeKind::fused) c = round_all(c, Cast{plan.reduction.fused.c_format});
  const xt::xarray<double> em = core::dot(a, b, with_c ? &c : nullptr, plan);
  const xt::xarray<double> bd = dot_bound(a, b, with_c ? &c : nullptr, plan, em, options);
  return compare(em, dot_exact_rows(a, b, with_c ? &c : nullptr), bd, plan.name);
}

inline Tally check_sum(const Plan& plan, const Format& in, Distribution d, std::uint64_t seed, std::size_t R, std::size_t K,
                const BoundOptions& options = {}, const Plan* emulate_with = nullptr) {
  const xt::xarray<double> x = gen(d, seed, in, {R, K});
  const xt::xarray<double> em = core::sum(x, -1, emulate_with ? *emulate_with : plan);
  const xt::xarray<double> bd = sum_bound(x, -1, plan, em, options);
  reference::ExactValues ex = reference::sum_exact(x, -1);
  if (plan.initial) ex.hi += *plan.initial;  // exact for the 0.0 the built-in plans use
  return compare(em, ex, bd, plan.name);
}

inline const std::vector<Distribution>& dists() {
  static const std::vector<Distribution> d = cases::all_distributions();
  return d;
}

// Every plan entry of a platform, every distribution, lengths that exercise partial steps,
// tails and tiles.
inline Tally check_platform(const Platform& p, double scale, const BoundOptions& options = {}) {
  Tally t;
  const std::size_t Ks[] = {1, 7, 40, 160, 300};
  std::uint64_t seed = 1000;
  for (const PlanEntry& e : p.plans) {
    const Format& in = fmt(e.in_fmt);
    for (std::size_t di = 0; di < dists().size(); ++di) {
      const Distribution d = dists()[di];
      const std::size_t K = Ks[(di + seed) % 5];
      const std::size_t rows = std::max<std::size_t>(2, static_cast<std::size_t>(8 * scale));
      ++seed;
      switch (e.op) {
        case Operation::matmul: t.merge(check_matmul(e.plan, in, d, seed, rows, K, 5, di % 2 == 0, options)); break;
        case Operation::dot: t.merge(check_dot(e.plan, in, d, seed, rows * 2, K, di % 2 == 1, options)); break;
        case Operation::sum: t.merge(check_sum(e.plan, in, d, seed, rows * 2, K * 3 + 1, options)); break;
      }
    }
  }
  return t;
}

// ---- hand-built plans ----

inline Arithmetic ar(const Format& f, Rounding r = Rounding::nearest_even, Subnormals s = Subnormals::keep) {
  return Arithmetic{Cast{f, r, Overflow::ieee, s}};
}

inline Plan plan_of(PlanNode node, const Cast& output = Cast{formats::fp32}, CPlacement cp = CPlacement::first) {
  Plan p;
  p.name = to_string(node);
  p.reduction = std::move(node);
  p.output = output;
  p.c_placement = cp;
  return p;
}

// An explicit tree over n terms: a mix of binary and ternary groups, built from a seed.
inline PlanNode explicit_tree_of(std::size_t n, const Arithmetic& arith, std::uint64_t seed) {
  std::vector<PlanNode> level;
  for (std::size_t i = 0; i < n; ++i) level.push_back(term(i));
  std::uint64_t s = seed;
  while (level.size() > 1) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t take = std::min<std::size_t>(level.size(), 2 + (s >> 60) % 2);
    const std::size_t at = (s >> 20) % (level.size() - take + 1);
    std::vector<PlanNode> kids(level.begin() + static_cast<std::ptrdiff_t>(at),
                               level.begin() + static_cast<std::ptrdiff_t>(at + take));
    level.erase(level.begin() + static_cast<std::ptrdiff_t>(at), level.begin() + static_cast<std::ptrdiff_t>(at + take));
    level.insert(level.begin() + static_cast<std::ptrdiff_t>(at), group(std::move(kids), arith));
  }
  return level[0];
}

struct HandPlan {
  Plan plan;
  std::string in;      // input format
  bool products = true;
  std::size_t K = 0;   // 0: the default lengths
};

inline std::vector<HandPlan> hand_plans() {
  const Arithmetic f32 = ar(formats::fp32), b16 = ar(formats::bf16), h16 = ar(formats::fp16);
  Arithmetic b16_products = f32;
  b16_products.product = ProductMode::rounded;
  b16_products.product_cast = Cast{formats::bf16};
  std::vector<HandPlan> v;
  v.push_back({plan_of(sequential(f32)), "bf16"});
  v.push_back({plan_of(sequential(f32, true), Cast{formats::fp32}, CPlacement::last), "fp16"});
  v.push_back({plan_of(sequential(b16), Cast{formats::bf16}), "bf16"});
  v.push_back({plan_of(sequential(b16_products)), "fp32"});
  v.push_back({plan_of(sequential(ar(formats::fp16, Rounding::toward_zero))), "e4m3fn"});
  v.push_back({plan_of(sequential(ar(formats::fp32, Rounding::upward))), "bf16"});
  v.push_back({plan_of(sequential(ar(formats::fp32, Rounding::downward))), "bf16"});
  v.push_back({plan_of(sequential(ar(formats::bf16, Rounding::odd))), "fp16"});
  v.push_back({plan_of(sequential(ar(formats::fp16, Rounding::nearest_away, Subnormals::flush_both))), "fp16"});
  v.push_back({plan_of(sequential(ar(formats::fp16, Rounding::nearest_even, Subnormals::flush_outputs))), "fp16"});
  v.push_back({plan_of(sequential(ar(formats::bf16, Rounding::toward_zero, Subnormals::flush_inputs))), "bf16"});
  v.push_back({plan_of(lanes(8, f32)), "bf16"});
  v.push_back({plan_of(lanes(6, b16), Cast{formats::fp32}, CPlacement::last), "bf16"});
  v.push_back({plan_of(pairwise(16, 4, lanes(4, h16), h16), Cast{formats::fp16}), "fp16"});
  v.push_back({plan_of(pairwise(5, 1, sequential(b16), b16)), "bf16"});
  v.push_back({plan_of(chunked(32, sequential(b16, true), sequential(f32))), "bf16"});
  v.push_back({plan_of(chunked(10, tree(3, h16), pairwise(3, 1, sequential(f32), f32))), "fp16"});
  v.push_back({plan_of(split(3, SplitMode::parallel, Cast{formats::bf16}, sequential(f32, true), sequential(f32))), "bf16"});
  v.push_back({plan_of(split(4, SplitMode::serial, Cast{formats::fp16}, sequential(f32))), "fp16"});
  v.push_back({plan_of(tree(3, f32)), "fp16"});
  v.push_back({plan_of(tree(2, ar(formats::bf16, Rounding::toward_zero)), Cast{formats::bf16}), "bf16"});
  {
    std::vector<std::size_t> order{3, 1, 0, 2};
    v.push_back({plan_of(permute(4, order, sequential(b16))), "bf16"});
  }
  // Fused steps: the NVIDIA sets and parameter variants of fused.hpp.
  v.push_back({plan_of(fused(nvidia::h100_bf16)), "bf16"});
  v.push_back({plan_of(fused(nvidia::h100_e4m3)), "e4m3fn"});
  v.push_back({plan_of(fused(nvidia::v100_fp16_f16), Cast{formats::fp16}), "fp16"});
  {
    FusedStep s = nvidia::a100_bf16;
    s.alignment = Alignment::nearest_even;
    s.fraction_bits = 10;
    v.push_back({plan_of(fused(s)), "bf16"});
    s = nvidia::h100_fp16;
    s.max_exponent = MaxExponent::normalized;
    s.fraction_bits = 12;
    v.push_back({plan_of(fused(s)), "fp16"});
    s.max_exponent = MaxExponent::largest_term;
    s.zeros = ZeroTerms::excluded;
    v.push_back({plan_of(fused(s)), "fp16"});
    s = nvidia::h100_bf16;
    s.exponent_floor = -126;
    s.fraction_bits = 8;
    s.overflow = OverflowRule::cast;
    v.push_back({plan_of(fused(s)), "bf16"});
    s = nvidia::h100_fp16;
    s.output = Cast{formats::fp32, Rounding::toward_zero, Overflow::ieee, Subnormals::flush_outputs};
    v.push_back({plan_of(fused(s)), "fp16"});
  }
  v.push_back({plan_of(permute(8, {0, 4, 1, 5, 2, 6, 3, 7}, fused(nvidia::a100_fp16))), "fp16"});
  // Explicit trees (a different tree for each length is built in check_hand).
  v.push_back({plan_of(explicit_tree_of(23, f32, 1)), "bf16", true, 23});
  v.push_back({plan_of(explicit_tree_of(17, b16, 2)), "bf16", true, 17});
  {
    PlanNode t = explicit_tree_of(12, b16_products, 3);
    v.push_back({plan_of(t), "fp32", true, 12});
  }
  // decompose: Trainium-like and with 3 pieces and passes left out.
  v.push_back({plan_of(decompose(16, 2, Cast{formats::bf16}, {{0, 0}, {0, 1}, {1, 0}, {1, 1}}, sequential(f32, true),
                                 sequential(f32))),
               "fp32"});
  v.push_back({plan_of(decompose(8, 3, Cast{formats::bf16}, {{0, 0}, {1, 0}, {0, 1}}, sequential(f32, true),
                                 sequential(f32))),
               "fp32"});
  v.push_back({plan_of(decompose(8, 2, Cast{formats::tf32, Rounding::toward_zero}, {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {1, 1}},
                                 fused(nvidia::h100_tf32), sequential(f32))),
               "fp32"});
  // Input casts (tf32 truncation), outputs rounded stochastically / directed / flushed.
  {
    Plan p = plan_of(fused(nvidia::h100_tf32));
    p.input_a = p.input_b = Cast{formats::tf32, Rounding::toward_zero};
    v.push_back({p, "fp32"});
    p = plan_of(sequential(f32), Cast{formats::bf16, Rounding::stochastic});
    p.output.seed = 7;
    v.push_back({p, "bf16"});
    p = plan_of(sequential(f32), Cast{formats::e4m3fn, Rounding::stochastic, Overflow::saturate});
    v.push_back({p, "bf16"});
    p = plan_of(pairwise(8, 2, sequential(f32), f32), Cast{formats::fp16, Rounding::toward_zero, Overflow::ieee,
                                                                  Subnormals::flush_outputs});
    v.push_back({p, "fp16"});
    p = plan_of(sequential(f32), Cast{formats::bf16, Rounding::upward});
    p.initial = 0.0;
    v.push_back({p, "bf16"});
    p = plan_of(sequential(ar(formats::int32)), Cast{formats::fp32});
    v.push_back({p, "int8", true});
  }
  return v;
}

inline Tally check_hand(const HandPlan& h, double scale, bool sums_too) {
  Tally t;
  std::uint64_t seed = 77;
  const bool integer_in = fmt(h.in).is_integer();
  const bool products_only = [&] {
    bool yes = false;
    std::function<void(const PlanNode&)> scan = [&](const PlanNode& n) {
      if (n.kind == NodeKind::fused || n.kind == NodeKind::decompose) yes = true;
      for (const PlanNode& c : n.children) scan(c);
    };
    scan(h.plan.reduction);
    return yes;
  }();
  for (std::size_t di = 0; di < dists().size(); ++di) {
    Distribution d = dists()[di];
    if (integer_in) d = Distribution::small_integers;
    const std::size_t K = h.K ? h.K : std::vector<std::size_t>{1, 5, 24, 100, 257}[di % 5];
    const std::size_t rows = std::max<std::size_t>(2, static_cast<std::size_t>(6 * scale));
    ++seed;
    const Format& in = integer_in ? formats::int8 : fmt(h.in);
    if (integer_in) {
      const xt::xarray<double> a = xt::round(gen(Distribution::small_integers, seed, formats::fp16, {rows, K}));
      const xt::xarray<double> b = xt::round(gen(Distribution::small_integers, seed + 1, formats::fp16, {K, rows}));
      const xt::xarray<double> em = core::matmul(a, b, nullptr, h.plan);
      t.merge(compare(em, reference::matmul_exact(a, b), matmul_bound(a, b, nullptr, h.plan, em), h.plan.name));
      continue;
    }
    t.merge(check_matmul(h.plan, in, d, seed, rows, K, 4, di % 3 == 0));
    t.merge(check_dot(h.plan, in, d, seed + 11, rows, K, di % 3 == 1));
    if (sums_too && !products_only && h.plan.reduction.kind != NodeKind::group &&
        !(h.plan.reduction.arithmetic.product == ProductMode::rounded))
      t.merge(check_sum(h.plan, in, d, seed + 5, rows, K));
  }
  return t;
}

inline std::vector<std::string> trainium_variants() {
  return {"trainium.trn1[pe_order=pairwise,products=bf16]",
          "trainium.trn1[pe_order=fused]",
          "trainium.trn1[fp32_matmul=bf16x4]",
          "trainium.trn1[fp32_matmul=tf32x4]",
          "trainium.trn2[fp8_double_row=on]",
          "trainium.trn2[fp8_double_row=on,pe_order=pairwise]",
          "trainium.trn1[accumulator_bits=25,pe_rounding=toward_zero,psum_rounding=toward_zero]",
          "trainium.trn1[output_rounding=stochastic,vector_reduce_order=pairwise]"};
}
}  // namespace numeq_test_bound
