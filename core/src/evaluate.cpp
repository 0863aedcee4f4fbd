// The plan evaluator (evaluate.hpp): one recursive walk of the plan per output element, and the
// one addition it rounds with (add_rounded); sum and dot run the walk per element. matmul and
// the host kernels it hands the plans they compute bit for bit are in matmul.cpp.

#include "numeq/core/evaluate.hpp"

#include <algorithm>
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

#include "explicit_tree.hpp"
#include "plan_walk.hpp"
#include "round_value.hpp"

namespace numeq::core {

using namespace detail;  // shapes.hpp: layouts and broadcasting shared with the other walker

namespace {

using detail::round_fast;
using detail::round_value;

// Whether the cast is exactly the host's IEEE binary64 round-to-nearest-even arithmetic (no
// flushing, IEEE overflow): then the host's own + gives the kernel's result (host_fp32's
// counterpart, plan_walk.hpp).
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

}  // namespace

namespace detail {

void check_products_exact(const double* a, std::size_t na, const double* b, std::size_t nb) {
  int wa = 0, wb = 0;
  for (std::size_t i = 0; i < na; ++i) wa = std::max(wa, significant_bits(a[i]));
  for (std::size_t i = 0; i < nb; ++i) wb = std::max(wb, significant_bits(b[i]));
  if (wa + wb > 53)
    throw numeq::error("a, b: inputs with " + std::to_string(wa) + " and " + std::to_string(wb) +
                       " significant bits: their products are not exact in binary64; plans take values of formats up "
                       "to fp32 (24 bits)");
}

std::vector<double> cast_inputs(const double* x, std::size_t n, const std::optional<Cast>& cast) {
  std::vector<double> out(x, x + n);
  if (cast)
    for (double& v : out) v = round_value(v, *cast);
  return out;
}

double reduce_plan(const Plan& plan, const Terms& t, std::size_t n, std::optional<double> init) {
  const double value = reduce_node(plan.reduction, t, 0, n, init);
  return plan.initial ? add_rounded(*plan.initial, value, outer_cast(plan)) : value;
}

double finish(double value, std::optional<double> c, const Plan& plan, std::uint64_t random) {
  if (c && plan.c_placement == CPlacement::last) value = add_rounded(value, *c, outer_cast(plan));
  return round_value(value, plan.output, random);
}

}  // namespace detail

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

}  // namespace numeq::core
