// Explicit summation trees (plan.hpp: group and term nodes): a binary group is one rounded
// addition (add_rounded, evaluate.hpp); a group of three or more children is a fused multi-term
// node, its exact sum rounded once. The exact sum is formed in a fixed-point integer wide enough
// for every binary64 value (a "long accumulator", Kulisch, "Computer Arithmetic and Validity",
// 2013, ch. 8): each value's 53-bit significand is added at its own bit position, no bit is ever
// dropped, so the rounding that follows is the rounding of the exact value.

#include "explicit_tree.hpp"
#include "round_value.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "numeq/core/evaluate.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq::core {

namespace {

// x (an exact double) rounded into cast: the evaluator's own rounding (round_value.hpp).
double round_into(double x, const Cast& cast) { return detail::round_value(x, cast); }

// DAZ: an operand below the accumulator format's normal range reads as a zero of its sign (as
// add_rounded reads its operands).
double flush_input(double x, const Cast& c) {
  if (!c.flushes_inputs() || x == 0 || !std::isfinite(x)) return x;
  return std::fabs(x) < std::ldexp(1.0, c.format.emin()) ? std::copysign(0.0, x) : x;
}

// A fixed-point magnitude with bit 0 worth 2^-1074 (binary64's smallest subnormal). The largest
// finite double's top bit sits at position 1023 + 1074 = 2097; 34 limbs (2176 bits) leave 78
// bits of headroom for carries, more than any sum of up to 2^64 terms needs.
class LongAccumulator {
 public:
  static constexpr int kLimbs = 34;
  static constexpr int kBottom = -1074;

  // Adds |x| (finite, non-zero).
  void add(double x) {
    const Unpacked u = unpack_double(x);  // |x| = significand * 2^(exponent - 63)
    // Shift so that the lowest set bit lands at or above 2^-1074: a double has no bits below.
    const int low = u.exponent - 63;
    std::uint64_t sig = u.significand;
    int position = low - kBottom;
    if (position < 0) {  // only the zero bits below 2^-1074 move out
      sig >>= -position;
      position = 0;
    }
    const int limb = position / 64, offset = position % 64;
    add_at(limb, sig << offset);
    if (offset != 0) add_at(limb + 1, sig >> (64 - offset));
  }

  // -1, 0, +1 as *this compares with other.
  int compare(const LongAccumulator& other) const {
    for (int i = kLimbs - 1; i >= 0; --i)
      if (limbs_[i] != other.limbs_[i]) return limbs_[i] < other.limbs_[i] ? -1 : 1;
    return 0;
  }

  // *this -= other (other <= *this).
  void subtract(const LongAccumulator& other) {
    std::uint64_t borrow = 0;
    for (int i = 0; i < kLimbs; ++i) {
      const std::uint64_t a = limbs_[i], b = other.limbs_[i];
      const std::uint64_t d = a - b - borrow;
      borrow = (a < b || (a == b && borrow)) ? 1 : 0;
      limbs_[i] = d;
    }
  }

  // The value (non-zero) as an Exact: the 64 leading bits and a sticky bit for the rest.
  Exact leading(bool negative) const {
    int top = kLimbs - 1;
    while (limbs_[top] == 0) --top;
    const int width = static_cast<int>(std::bit_width(limbs_[top]));  // 1 .. 64
    const int msb = top * 64 + width - 1;                     // position of the leading bit
    // The 64 bits at positions msb .. msb - 63 (zeros below position 0), then the rest.
    const std::uint64_t high = limbs_[top] << (64 - width);
    const std::uint64_t next = top > 0 ? limbs_[top - 1] : 0;
    const std::uint64_t significand = width == 64 ? high : high | (next >> width);
    bool sticky = width != 64 && (next << (64 - width)) != 0;
    if (width == 64) sticky = next != 0;
    for (int i = top - 2; i >= 0 && !sticky; --i) sticky = limbs_[i] != 0;
    return Exact{negative, msb + kBottom, significand, sticky};
  }

  bool zero() const {
    for (const std::uint64_t l : limbs_)
      if (l != 0) return false;
    return true;
  }

 private:
  void add_at(int limb, std::uint64_t value) {
    for (int i = limb; i < kLimbs && value != 0; ++i) {
      const std::uint64_t before = limbs_[i];
      limbs_[i] += value;
      value = limbs_[i] < before ? 1 : 0;  // the carry
    }
  }

  std::array<std::uint64_t, kLimbs> limbs_{};
};

// A term's value in a group of arithmetic `ar`: the input, or the product (exact, or rounded
// into product_cast under ProductMode::rounded).
double term_value(const double* a, const double* b, std::size_t k, const Arithmetic& ar) {
  if (b == nullptr) return a[k];
  const double p = a[k] * b[k];  // exact: the evaluator checked the inputs' widths
  return ar.product == ProductMode::rounded ? round_into(p, ar.product_cast) : p;
}

double group_value(const PlanNode& g, const double* a, const double* b) {
  const Arithmetic& ar = g.arithmetic;
  auto child_value = [&](const PlanNode& c) {
    return c.kind == NodeKind::term ? term_value(a, b, c.index, ar) : group_value(c, a, b);
  };
  if (g.children.size() == 2) {
    double x = child_value(g.children[0]);
    const double y = child_value(g.children[1]);
    // Two terms start an accumulator: the first is rounded into it (sequential's first value,
    // an fma chain's fma(a0, b0, +0)), the second added with one rounding.
    if (g.children[0].kind == NodeKind::term && g.children[1].kind == NodeKind::term) x = round_into(x, ar.accumulate);
    return add_rounded(x, y, ar.accumulate);
  }
  std::vector<double> values;
  values.reserve(g.children.size());
  for (const PlanNode& c : g.children) values.push_back(child_value(c));
  return exact_sum_rounded(values, ar.accumulate);
}

}  // namespace

double exact_sum_rounded(std::span<const double> values, const Cast& cast) {
  if (values.empty()) return round_into(0.0, cast);
  if (cast.format.is_integer()) {
    // Integer accumulators: sums of integers are exact; add_rounded refuses non-integers and
    // partial sums outside the format.
    double acc = values[0];
    round_into(acc, cast);
    for (std::size_t i = 1; i < values.size(); ++i) acc = add_rounded(acc, values[i], cast);
    return acc;
  }
  bool any_nonfinite = false, all_zero = true, all_negative_zero = true, any_negative_zero = false;
  std::vector<double> v(values.begin(), values.end());
  for (double& x : v) {
    x = flush_input(x, cast);
    any_nonfinite = any_nonfinite || !std::isfinite(x);
    if (x == 0) {
      all_negative_zero = all_negative_zero && std::signbit(x);
      any_negative_zero = any_negative_zero || std::signbit(x);
    } else {
      all_zero = false;
    }
  }
  if (any_nonfinite) {
    // NaN in, or +Inf with -Inf: NaN; otherwise the Inf. Plain binary64 addition gives exactly that.
    double s = 0;
    for (const double x : v) s += x;
    return round_into(s, cast);
  }
  const bool downward = cast.rounding == Rounding::downward;
  if (all_zero) return round_into((all_negative_zero || (downward && any_negative_zero)) ? -0.0 : 0.0, cast);
  LongAccumulator positive, negative;
  for (const double x : v) {
    if (x > 0) positive.add(x);
    else if (x < 0) negative.add(-x);
  }
  const int order = positive.compare(negative);
  // Non-zero terms that cancel exactly: +0, or -0 rounding downward (IEEE 754 s6.3).
  if (order == 0) return round_into(downward ? -0.0 : 0.0, cast);
  LongAccumulator& larger = order > 0 ? positive : negative;
  larger.subtract(order > 0 ? negative : positive);
  const Exact exact = larger.leading(order < 0);
  // A format without a sign bit (E8M0) holds no negative value: NaN, as a cast gives.
  if (!cast.format.is_signed && exact.negative) return std::numeric_limits<double>::quiet_NaN();
  return decode_bits(cast.format, round_and_pack(cast, exact, 0));
}

double reduce_explicit_tree(const PlanNode& node, const double* a, const double* b, std::size_t n,
                            std::optional<double> init) {
  const std::size_t terms = explicit_term_count(node);
  if (terms != n)
    throw numeq::error("plan: an explicit tree (" + std::string(to_string(node.kind)) + " node) of " +
                       std::to_string(terms) + " terms cannot reduce a range of " + std::to_string(n) +
                       " terms; its terms must number exactly the range's length");
  const Arithmetic& ar = node.arithmetic;
  const double value = node.kind == NodeKind::term ? round_into(term_value(a, b, node.index, ar), ar.accumulate)
                                                   : group_value(node, a, b);
  return init ? add_rounded(*init, value, ar.accumulate) : value;
}

}  // namespace numeq::core
