// One fused tensor-core step in exact integer arithmetic (see fused.hpp for the model and its
// sources). Every term is an integer significand times a power of two; aligned terms are added in
// a 768-bit two's-complement integer; the sum is handed to numeq::normalize / numeq::round_and_pack,
// the formats layer's one rounding kernel. No floating-point arithmetic touches a value.

#include "numeq/core/fused.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/exact.hpp"

#include "fused_common.hpp"
#include "fused_exact.hpp"

namespace numeq::core {
namespace fused_detail {

// ---- the wide accumulator -------------------------------------------------------------------

// 768 bits (formats' FixedPoint, exact.hpp): F <= 700 and n <= 2^20 leave more than 40 bits of
// headroom above the largest aligned sum.
using Wide = FixedPoint<12>;

// ---- operands ---------------------------------------------------------------------------------

// A finite non-zero value of some format as an integer significand on its format's grid:
// value = (-1)^negative * M * 2^lsb, with `encoded` the exponent the format encodes for it (a
// subnormal sits at emin) and `exponent` its true exponent (of the leading bit).
struct Operand {
  bool negative = false;
  int encoded = 0;
  int exponent = 0;
  int lsb = 0;
  std::uint64_t M = 0;
};

Operand decompose(double x, const Format& f) {
  const Unpacked u = unpack_double(x);
  Operand o;
  o.negative = u.negative;
  o.exponent = u.exponent;
  o.encoded = std::max(u.exponent, f.emin());
  o.lsb = o.encoded - f.mantissa_bits;
  // x is a value of f, so its bits below 2^lsb are zero: the shift loses nothing.
  o.M = u.significand >> (63 - f.mantissa_bits + (o.encoded - u.exponent));
  return o;
}

std::string describe(double x) {
  std::ostringstream s;
  s.precision(17);
  s << x;
  return s.str();
}

void check_value(double x, const Format& f, const char* name, std::size_t index, bool indexed) {
  bool ok = false;
  if (std::isnan(x)) {
    ok = f.has_nan();
  } else if (std::isinf(x)) {
    ok = f.has_inf();
  } else {
    ok = round_to_format(x, Cast{f, Rounding::nearest_even}) == x;
  }
  if (!ok) {
    std::ostringstream m;
    m << name;
    if (indexed) m << "[" << index << "]";
    m << ": " << describe(x) << " is not a value of " << f.name;
    throw error(m.str());
  }
}

void check_step(const FusedStep& step) { validate(step, "step"); }

void check_chain_length(std::span<const double> a, std::span<const double> b, std::size_t K) {
  if (K > a.size() || K > b.size())
    throw error("K: " + std::to_string(K) + " exceeds the operands (a has " +
                std::to_string(a.size()) + ", b has " + std::to_string(b.size()) + " elements)");
}

double zero_result(const FusedStep& step, bool negative) {
  return round_to_format(negative ? -0.0 : 0.0, step.output);
}

}  // namespace fused_detail

using namespace fused_detail;

void validate(const FusedStep& step, std::string_view parameter) {
  const std::string at(parameter);
  if (step.n < 1 || step.n > max_products)
    throw error(at + ".n: " + std::to_string(step.n) + " is outside 1.." + std::to_string(max_products));
  if (step.fraction_bits < 0 || step.fraction_bits > max_fraction_bits)
    throw error(at + ".fraction_bits: " + std::to_string(step.fraction_bits) + " is outside 0.." +
                std::to_string(max_fraction_bits));
  if (step.exponent_floor != no_exponent_floor &&
      (step.exponent_floor < min_exponent_floor || step.exponent_floor > max_exponent_floor))
    throw error(at + ".exponent_floor: " + std::to_string(step.exponent_floor) + " is outside " +
                std::to_string(min_exponent_floor) + ".." + std::to_string(max_exponent_floor));
  for (const Format* f : {&step.a_format, &step.b_format, &step.c_format}) {
    if (f->is_integer() || !f->has_zero)
      throw error(at + ": operand format '" + std::string(f->name) +
                  "' is not a floating format with zero (fused steps take fp64 and narrower floats)");
  }
  // Operand significands multiply in 64 bits, and products stay exact in binary64 (largest_term
  // compares c with them).
  if (step.a_format.mantissa_bits > 23 || step.b_format.mantissa_bits > 23)
    throw error(at + ": a_format and b_format may have at most 23 fraction bits (fp32 and narrower)");
  numeq::validate(step.output, at + ".output");
  if (step.output.rounding == Rounding::stochastic)
    throw error(at + ".output: stochastic rounding is not a tensor-core rounding (it needs a draw "
                "per element); choose a deterministic mode");
}

namespace detail {

double fused_step_reference(std::span<const double> a, std::span<const double> b, double c,
                            const FusedStep& step) {
  check_step(step);
  if (a.size() != b.size())
    throw error("b: has " + std::to_string(b.size()) + " elements, a has " +
                std::to_string(a.size()));
  if (a.size() > static_cast<std::size_t>(step.n))
    throw error("a: " + std::to_string(a.size()) + " products exceed the step's n = " +
                std::to_string(step.n));
  for (std::size_t i = 0; i < a.size(); ++i) {
    check_value(a[i], step.a_format, "a", i, true);
    check_value(b[i], step.b_format, "b", i, true);
  }
  check_value(c, step.c_format, "c", 0, false);

  // Step 1: NaN and Inf. [code] MMA-Sim fused_dot_add (a binary64 sum of the exact products and
  // c is NaN or Inf exactly in these cases); MATLAB GEMM.m (NaN first, then +Inf with -Inf is NaN,
  // then the Inf); FACTS.md s2 step 1.
  bool nan = std::isnan(c);
  bool plus_inf = std::isinf(c) && c > 0;
  bool minus_inf = std::isinf(c) && c < 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      nan = true;
    } else if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] == 0 || b[i] == 0) {
        nan = true;  // Inf * 0
      } else if (std::signbit(a[i]) != std::signbit(b[i])) {
        minus_inf = true;
      } else {
        plus_inf = true;
      }
    }
  }
  if (nan || (plus_inf && minus_inf))
    return round_to_format(std::numeric_limits<double>::quiet_NaN(), step.output);
  if (plus_inf || minus_inf)
    return round_to_format(plus_inf ? std::numeric_limits<double>::infinity()
                                    : -std::numeric_limits<double>::infinity(),
                           step.output);

  // Step 2: exact terms. A product is (-1)^s * Ma*Mb * 2^(lsb_a + lsb_b), its encoded exponent
  // ea + eb (significand Ma*Mb * 2^-(ma+mb) in [0, 4), not renormalised).
  struct Term {
    bool negative;
    int align_exponent;  // what enters the maximum
    int lsb;
    std::uint64_t M;
  };
  std::vector<Term> terms;
  terms.reserve(a.size() + 1);
  bool have_candidate = false;         // anything entered the maximum
  int E = std::numeric_limits<int>::min();
  const auto candidate = [&](int e) {
    E = have_candidate ? std::max(E, e) : e;
    have_candidate = true;
  };
  ZeroSigns zeros;  // the zero terms, for ZeroSign::ieee
  // For MaxExponent::largest_term (MATLAB): largest true exponent, largest encoded product
  // exponent and whether a product there has a significand >= 2.
  int largest_true = std::numeric_limits<int>::min();
  int largest_encoded_product = std::numeric_limits<int>::min();
  bool wide_at_largest_encoded = false;
  bool any_product = false;

  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool negative = std::signbit(a[i]) != std::signbit(b[i]);
    if (a[i] == 0 || b[i] == 0) {
      zeros.zero(negative);
      if (step.zeros == ZeroTerms::fp32_emin) {
        const int ea = a[i] == 0 ? zero_operand_exponent : decompose(a[i], step.a_format).encoded;
        const int eb = b[i] == 0 ? zero_operand_exponent : decompose(b[i], step.b_format).encoded;
        candidate(ea + eb);
      }
      continue;
    }
    const Operand x = decompose(a[i], step.a_format);
    const Operand y = decompose(b[i], step.b_format);
    const std::uint64_t P = x.M * y.M;  // <= 48 bits
    const int lsb = x.lsb + y.lsb;
    const int encoded = x.encoded + y.encoded;
    const int true_exponent = static_cast<int>(std::bit_width(P)) - 1 + lsb;
    int align = encoded;
    if (step.max_exponent == MaxExponent::normalized) align = true_exponent;
    terms.push_back({negative, align, lsb, P});
    any_product = true;
    largest_true = std::max(largest_true, true_exponent);
    const bool wide = P >> (step.a_format.mantissa_bits + step.b_format.mantissa_bits + 1) != 0;
    if (encoded > largest_encoded_product) {
      largest_encoded_product = encoded;
      wide_at_largest_encoded = wide;
    } else if (encoded == largest_encoded_product) {
      wide_at_largest_encoded = wide_at_largest_encoded || wide;
    }
  }
  // Every product, zeros included, for GEMM.m's "abs(c) > abs(in_block)".
  bool c_above_all_products = c != 0;
  if (c != 0) {
    for (std::size_t i = 0; i < a.size(); ++i)
      c_above_all_products = c_above_all_products && std::fabs(c) > std::fabs(a[i] * b[i]);
  }
  if (c == 0) {
    zeros.zero(std::signbit(c));
    if (step.zeros == ZeroTerms::fp32_emin) candidate(zero_operand_exponent);
  } else {
    const Operand z = decompose(c, step.c_format);
    const int align = step.max_exponent == MaxExponent::normalized ? z.exponent : z.encoded;
    terms.push_back({z.negative, align, z.lsb, z.M});
    largest_true = std::max(largest_true, z.exponent);
  }

  // Step 3: the largest exponent.
  if (step.max_exponent == MaxExponent::largest_term) {
    if (!terms.empty()) {
      // [code] MATLAB GEMM.m / Generic_BFMA_TC: one extra bit (spc) when c is not above every
      // product, c's exponent is not above every product's ea + eb, and a product at the largest
      // ea + eb has a significand >= 2; the grid is then 2^(N_L - spc - F).
      bool spc = !c_above_all_products && terms.size() > 1 && any_product;
      if (spc && c != 0 && unpack_double(c).exponent > largest_encoded_product) spc = false;
      if (spc && !wide_at_largest_encoded) spc = false;
      candidate(largest_true - (spc ? 1 : 0));
    }
  } else {
    for (const Term& t : terms) candidate(t.align_exponent);
  }
  if (!have_candidate) {
    // No term at all (zeros excluded): the sum is an exact zero.
    const bool negative = step.zero_sign == ZeroSign::ieee && zeros.negative(step.output.rounding);
    return zero_result(step, negative);
  }
  if (step.exponent_floor != no_exponent_floor) E = std::max(E, step.exponent_floor);

  // Steps 4 and 5: align to 2^(E - F), cut, add exactly.
  const int F = step.fraction_bits;
  const int unit = E - F;  // exponent of the last kept place
  Wide sum;
  for (const Term& t : terms) {
    const int shift = t.lsb - unit;  // term = M * 2^shift units
    if (shift >= 0) {
      sum.add(t.negative, t.M, shift);
      continue;
    }
    const int r = -shift;
    const uint128 M = t.M;
    uint128 kept = r >= 128 ? 0 : M >> r;
    if (step.alignment == Alignment::nearest_even && r <= 128) {
      // r > 128 leaves M < 2^64 below half a unit: nothing to round up.
      const uint128 rest = r == 128 ? M : M - (kept << r);
      const uint128 half = uint128{1} << (r - 1);
      if (rest > half || (rest == half && (kept & 1) != 0)) ++kept;
    }
    sum.add(t.negative, kept, 0);
  }

  // Step 6: normalise once and round through the formats kernel.
  if (sum.is_zero()) {
    // The cut terms cancel exactly (non-zero terms among them: a cancellation, ZeroSigns' rule).
    zeros.nonzero = !terms.empty();
    return zero_result(step, step.zero_sign == ZeroSign::ieee && zeros.negative(step.output.rounding));
  }
  const Exact exact = sum.leading(unit);
  const bool negative = exact.negative;
  if (step.overflow == OverflowRule::infinity && exact.exponent > step.output.format.emax())
    return round_to_format(negative ? -std::numeric_limits<double>::infinity()
                                    : std::numeric_limits<double>::infinity(),
                           step.output);
  const std::uint64_t bits = round_and_pack(step.output, exact, 0);
  return decode_bits(step.output.format, bits);
}

double fused_chain_reference(std::span<const double> a, std::span<const double> b, double c,
                             std::size_t K, const FusedStep& step) {
  check_step(step);
  check_chain_length(a, b, K);
  const auto n = static_cast<std::size_t>(step.n);
  double acc = c;
  if (K == 0) return fused_step_reference({}, {}, acc, step);
  for (std::size_t k = 0; k < K; k += n) {
    const std::size_t len = std::min(n, K - k);
    acc = fused_step_reference(a.subspan(k, len), b.subspan(k, len), acc, step);
  }
  return acc;
}

}  // namespace detail

namespace nvidia {

double tf32_truncate(float x) {
  return static_cast<double>(std::bit_cast<float>(tf32_truncate_bits(std::bit_cast<std::uint32_t>(x))));
}

double h100_mma_sync_fp8_f16(std::span<const double> a, std::span<const double> b, double c,
                             const FusedStep& half) {
  if (a.size() != b.size())
    throw error("b: has " + std::to_string(b.size()) + " elements, a has " +
                std::to_string(a.size()));
  if (a.size() % 4 != 0 || a.size() / 2 > static_cast<std::size_t>(half.n))
    throw error("a: " + std::to_string(a.size()) +
                " products; this model takes a multiple of 4, at most 2 * half.n (k = 32 measured)");
  std::vector<double> lo_a, lo_b, hi_a, hi_b;
  for (std::size_t k = 0; k < a.size(); ++k) {
    // Bytes 0-1 and 2-3 of every 32-bit register of four fp8 values (k mod 4).
    auto& xa = k % 4 < 2 ? lo_a : hi_a;
    auto& xb = k % 4 < 2 ? lo_b : hi_b;
    xa.push_back(a[k]);
    xb.push_back(b[k]);
  }
  const double d1 = fused_step(lo_a, lo_b, 0.0, half);
  const double d2 = fused_step(hi_a, hi_b, d1, half);
  const double one[1] = {1.0};
  const double d2s[1] = {d2};
  return fused_step(d2s, one, c, fp16_add);
}

}  // namespace nvidia
}  // namespace numeq::core
