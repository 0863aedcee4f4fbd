// Fused steps that keep every bit (fused_exact.hpp).
//
// When F reaches from the largest alignment exponent any term can have down to the lowest bit
// any term can have, the general path (detail::fused_step_reference) cuts nothing: its wide
// integer holds c + sum_i a_i b_i exactly, and the result is that sum normalised and rounded
// once by round_and_pack (or +-Inf under OverflowRule::infinity beyond the output's range, or a
// zero whose sign follows the terms). Here the sum is formed in binary64, each addition checked
// exact by TwoSum (Knuth, TAOCP vol. 2, 4.2.2: s + e == x + y, e == 0 exactly when s is the exact
// sum); the products are exact in binary64 (fused.hpp: operands of at most 24 significant bits).
// Where every addition is exact, the sum is finite and non-zero, every operand is a value of its
// format and the sum is within the output's range, the result is round_to_format(sum, output):
// the same round_and_pack of the same exact value. Anything else (an inexact double sum, a zero
// sum, NaN, Inf, an invalid operand) goes to the general path, which also throws the errors.

#include "fused_exact.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/round_and_pack.hpp"

namespace numeq::core::detail {

namespace {

// Whether F covers every term: every alignment exponent E is at most
// max(emax_a + emax_b + 2, emax_c + 1, the floor) (a product's encoded exponent ea + eb, its true
// one at most one above; c's), and every term's lowest bit at least the lowest bit of a product
// of two subnormals or of a subnormal c; the unit 2^(E - F) then lies at or below every bit.
// Formats with a zero and a sign only (every step's operands: validate() checks the rest).
bool keeps_every_bit(const FusedStep& s) {
  for (const Format* f : {&s.a_format, &s.b_format, &s.c_format})
    if (f->kind != FormatKind::floating || !f->has_zero || !f->is_signed) return false;
  int top = std::max(s.a_format.emax() + s.b_format.emax() + 2, s.c_format.emax() + 1);
  if (s.exponent_floor != no_exponent_floor) top = std::max(top, s.exponent_floor);
  const int lowest = std::min(s.a_format.emin() - s.a_format.mantissa_bits + s.b_format.emin() - s.b_format.mantissa_bits,
                              s.c_format.emin() - s.c_format.mantissa_bits);
  return top - s.fraction_bits <= lowest;
}

// keeps_every_bit per step, kept per thread for the last step seen (a matmul walks one step per
// output element's tiles); a step is recognised by its bytes (fused.cpp's fast_config does the
// same): a miss only costs a recomputation.
struct Reading {
  bool applies = false;
  double out_limit = 0;  // 2^(emax + 1) of the output format: at or beyond it, the general path
};
const Reading& reading(const FusedStep& step) {
  struct Entry {
    alignas(FusedStep) unsigned char key[sizeof(FusedStep)];
    Reading r;
    bool filled = false;
  };
  thread_local Entry e;
  if (e.filled && std::memcmp(e.key, &step, sizeof(FusedStep)) == 0) return e.r;
  e.filled = false;
  e.r = Reading{};
  validate(step, "step");  // the general path reports an invalid step
  e.r.applies = keeps_every_bit(step);
  e.r.out_limit = std::ldexp(1.0, step.output.format.emax() + 1);
  std::memcpy(e.key, &step, sizeof(FusedStep));
  e.filled = true;
  return e.r;
}

}  // namespace

std::optional<double> exact_step(const double* a, const double* b, std::size_t n, double c, const FusedStep& step) {
  if (n > static_cast<std::size_t>(step.n)) return std::nullopt;
  try {
    if (!reading(step).applies) return std::nullopt;
  } catch (...) {
    return std::nullopt;  // an invalid step: the general path reports it
  }
  double s = c;
  bool exact = true;  // no early exit: one pass, few branches
  for (std::size_t i = 0; i < n; ++i) {
    const double p = a[i] * b[i];
    const double t = s + p;
    const double bv = t - s, av = t - bv;
    exact &= (s - av) + (p - bv) == 0;  // TwoSum's error; NaN (an Inf on the way) fails too
    s = t;
  }
  if (!exact || s == 0 || !(std::fabs(s) < reading(step).out_limit)) return std::nullopt;
  if (first_not_value(a, n, step.a_format) != n || first_not_value(b, n, step.b_format) != n ||
      first_not_value(&c, 1, step.c_format) != 1)
    return std::nullopt;
  return round_to_format(s, step.output);
}

}  // namespace numeq::core::detail
