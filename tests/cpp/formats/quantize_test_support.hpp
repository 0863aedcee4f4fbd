#pragma once
// Shared by test_quantize.cpp and test_quant_params.cpp: the MPFR number, the fixture, the MPFR
// rounding of an exact value to an integer and into a binary format (the oracle's last step), and
// the parameter layouts (per tensor, channel, block) with their element-to-parameter mapping
// recomputed from multi-indices, not with numeq's helper.

#include <gtest/gtest.h>
#include <mpfr.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "numeq/numeq.hpp"

namespace numeq_test::quant {

using numeq::Format;
using numeq::Quantization;
using numeq::Rounding;

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr mpfr_prec_t kPrec = 256;

struct Mp {
  mpfr_t v;
  explicit Mp(mpfr_prec_t p = kPrec) { mpfr_init2(v, p); }
  ~Mp() { mpfr_clear(v); }
  Mp(const Mp&) = delete;
  Mp& operator=(const Mp&) = delete;
};

class QuantizeTest : public ::testing::Test {
 protected:
  void TearDown() override { numeq::set_num_threads(0); }
};

// Rounds v to an integer in place, in one of the six deterministic modes.
inline void round_to_integer(mpfr_t v, Rounding mode) {
  switch (mode) {
    case Rounding::nearest_even: mpfr_rint(v, v, MPFR_RNDN); return;
    case Rounding::nearest_away: mpfr_round(v, v); return;
    case Rounding::toward_zero: mpfr_trunc(v, v); return;
    case Rounding::upward: mpfr_ceil(v, v); return;
    case Rounding::downward: mpfr_floor(v, v); return;
    case Rounding::odd: {
      Mp t(mpfr_get_prec(v));
      mpfr_trunc(t.v, v);
      if (mpfr_equal_p(t.v, v)) return;
      // Inexact: the truncation, made odd by stepping away from zero if it is even.
      Mp half(mpfr_get_prec(v));
      mpfr_div_2ui(half.v, t.v, 1, MPFR_RNDN);
      const bool even = mpfr_integer_p(half.v) != 0;
      if (even) mpfr_add_si(t.v, t.v, mpfr_signbit(v) ? -1 : 1, MPFR_RNDN);
      mpfr_set(v, t.v, MPFR_RNDN);
      return;
    }
    case Rounding::stochastic: break;
  }
  ADD_FAILURE() << "no deterministic oracle for stochastic rounding";
}

// Rounds the exact value v into a binary format of precision p whose smallest normal is 2^emin
// and whose largest finite value is max_finite, in a deterministic mode, returning a double.
// Overflow (a rounded result beyond max_finite) follows IEEE 754 s7.4: Inf in the nearest modes,
// the largest finite value where the mode rounds toward zero (toward_zero, odd, upward for
// negatives, downward for positives).
inline double oracle_round_to_format(const mpfr_t v, int p, int emin, Rounding mode,
                              double max_finite = std::numeric_limits<double>::max()) {
  if (mpfr_zero_p(v)) return mpfr_signbit(v) ? -0.0 : 0.0;
  const long e = static_cast<long>(mpfr_get_exp(v)) - 1;  // exponent of the leading bit
  const long quantum = std::max(e, static_cast<long>(emin)) - (p - 1);
  Mp y(mpfr_get_prec(v) + 8);
  mpfr_mul_2si(y.v, v, -quantum, MPFR_RNDN);  // exact
  round_to_integer(y.v, mode);
  mpfr_mul_2si(y.v, y.v, quantum, MPFR_RNDN);
  const double r = mpfr_get_d(y.v, MPFR_RNDN);
  if (r == 0) return mpfr_signbit(v) ? -0.0 : 0.0;
  if (std::fabs(r) > max_finite) {
    const bool negative = r < 0;
    const bool to_max = mode == Rounding::toward_zero || mode == Rounding::odd ||
                        (mode == Rounding::upward && negative) || (mode == Rounding::downward && !negative);
    const double m = to_max ? max_finite : kInf;
    return negative ? -m : m;
  }
  return r;
}

inline double fp32_nearest(const mpfr_t v) { return oracle_round_to_format(v, 24, -126, Rounding::nearest_even); }

inline std::size_t product(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t s : shape) n *= s;
  return n;
}

// The parameter index of C-order element i, by multi-index arithmetic.
inline std::size_t param_index(std::size_t i, const std::vector<std::size_t>& shape,
                        const std::vector<std::size_t>& param_shape, int axis, std::size_t block) {
  std::vector<std::size_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  std::size_t k = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    std::size_t p = 0;
    if (param_shape[d] != 1) p = static_cast<int>(d) == axis ? index[d] / block : index[d];
    k = k * param_shape[d] + p;
  }
  return k;
}

struct Layout {
  std::string name;
  std::vector<std::size_t> shape;
  std::vector<std::size_t> param_shape;
  int axis;
  std::size_t block;
};

inline std::vector<Layout> layouts() {
  return {
      {"per tensor 2-D", {6, 64}, {1, 1}, 0, 1},
      {"per channel axis 0 2-D", {6, 64}, {6, 1}, 0, 1},
      {"per channel axis 1 2-D", {6, 64}, {1, 64}, 1, 1},
      {"per channel axis -1 2-D", {6, 64}, {1, 64}, -1, 1},
      {"per block 16 axis 1 2-D", {6, 64}, {6, 4}, 1, 16},
      {"per block 3 axis 0 2-D (broadcast over axis 1)", {6, 64}, {2, 1}, 0, 3},
      {"per tensor 3-D", {4, 6, 32}, {1, 1, 1}, 2, 1},
      {"per channel axis 0 3-D", {4, 6, 32}, {4, 1, 1}, 0, 1},
      {"per channel axis 1 3-D", {4, 6, 32}, {1, 6, 1}, 1, 1},
      {"per block 8 axis 2 3-D", {4, 6, 32}, {4, 6, 4}, 2, 8},
      {"per block 2 axis 1 3-D", {4, 6, 32}, {1, 3, 32}, 1, 2},
  };
}

inline std::vector<const Format*> int_formats() {
  return {&numeq::formats::int8, &numeq::formats::uint8, &numeq::formats::int32};
}

inline std::string describe(const Quantization& q) {
  return std::string(q.format.name) + "/" + std::string(numeq::to_string(q.rounding)) + "/" +
         std::string(numeq::to_string(q.range));
}

}  // namespace numeq_test::quant
