// Block-scaled floats (block_scale.hpp) against MPFR: OCP MX (E8M0 scales, blocks of 32 along the
// last axis) and DeepSeek-V3 style (fp32 scales, 1x128 and 128x128 blocks).
//
//   scale   = round(amax / max_element) into the scale format, in the scale rounding mode: amax
//             found by a plain loop here, the quotient exact in MPFR, rounded on the scale
//             format's grid (E8M0: precision 1, 2^-127 .. 2^127, no zero; fp32: precision 24).
//   element = round(x / scale) into the element format, nearest even, saturating: the quotient
//             exact in MPFR (256 bits, checked to decide every rounding), rounded on the element
//             format's grid with its precision, subnormal range and largest finite value.
//   dequantize: element * scale, exact in MPFR, rounded into the output format.
//
// The element formats' parameters are written out here from the OCP specifications, not read
// from numeq's format table.

#include <gtest/gtest.h>
#include <mpfr.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numeq/numeq.hpp"

#include "oracle/test_support.hpp"

namespace {

using numeq::BitsView;
using numeq::BlockScaling;
using numeq::Cast;
using numeq::Format;
using numeq::Rounding;
using numeq::ScaleRule;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr mpfr_prec_t kPrec = 256;

struct Mp {
  mpfr_t v;
  explicit Mp(mpfr_prec_t p = kPrec) { mpfr_init2(v, p); }
  ~Mp() { mpfr_clear(v); }
  Mp(const Mp&) = delete;
  Mp& operator=(const Mp&) = delete;
};

// A binary format as the oracle sees it: precision (implicit bit included), exponent of the
// smallest normal, largest finite value, whether it has a zero.
struct Grid {
  const char* name;
  int p;
  int emin;
  double max_finite;
  bool has_zero = true;
};

// OCP OFP8 rev 1.0 and OCP MX v1.0 s5.3 / s5.4.
const Grid kE4M3{"e4m3fn", 4, -6, 448.0};
const Grid kE5M2{"e5m2", 3, -14, 57344.0};
const Grid kE2M1{"e2m1fn", 2, 0, 6.0};
const Grid kE3M2{"e3m2fn", 3, -2, 28.0};
const Grid kE2M3{"e2m3fn", 4, 0, 7.5};
const Grid kE8M0{"e8m0fnu", 1, -127, 0x1p127, false};
const Grid kFp32{"fp32", 24, -126, static_cast<double>(std::numeric_limits<float>::max())};
const Grid kBf16{"bf16", 8, -126, 0x1.fep127};
const Grid kFp64{"fp64", 53, -1022, std::numeric_limits<double>::max()};

void round_to_integer(mpfr_t v, Rounding mode) {
  switch (mode) {
    case Rounding::nearest_even: mpfr_rint(v, v, MPFR_RNDN); return;
    case Rounding::nearest_away: mpfr_round(v, v); return;
    case Rounding::toward_zero: mpfr_trunc(v, v); return;
    case Rounding::upward: mpfr_ceil(v, v); return;
    case Rounding::downward: mpfr_floor(v, v); return;
    case Rounding::odd: {
      Mp t(mpfr_get_prec(v)), half(mpfr_get_prec(v));
      mpfr_trunc(t.v, v);
      if (mpfr_equal_p(t.v, v)) return;
      mpfr_div_2ui(half.v, t.v, 1, MPFR_RNDN);
      if (mpfr_integer_p(half.v)) mpfr_add_si(t.v, t.v, mpfr_signbit(v) ? -1 : 1, MPFR_RNDN);
      mpfr_set(v, t.v, MPFR_RNDN);
      return;
    }
    case Rounding::stochastic: break;
  }
  ADD_FAILURE() << "no deterministic oracle for stochastic rounding";
}

// v (held exactly, or rounded at 256 bits with `ternary` != 0) rounded onto grid g in `mode`.
// Overflow saturates when `saturate`, else follows IEEE 754 s7.4. A format without zero (E8M0)
// gives its smallest value where the grid rounding gives zero.
double oracle_round(const mpfr_t v, int ternary, const Grid& g, Rounding mode, bool saturate) {
  if (mpfr_zero_p(v)) return mpfr_signbit(v) ? -0.0 : 0.0;
  const long e = static_cast<long>(mpfr_get_exp(v)) - 1;
  const long quantum = std::max(e, static_cast<long>(g.emin)) - (g.p - 1);
  Mp y(mpfr_get_prec(v) + 8);
  mpfr_mul_2si(y.v, v, -quantum, MPFR_RNDN);
  if (ternary != 0) {
    Mp twice(mpfr_get_prec(v) + 8);
    mpfr_mul_2si(twice.v, y.v, 1, MPFR_RNDN);
    if (mpfr_integer_p(twice.v)) ADD_FAILURE() << "256 bits do not decide a rounding";
  }
  round_to_integer(y.v, mode);
  mpfr_mul_2si(y.v, y.v, quantum, MPFR_RNDN);
  double r = mpfr_get_d(y.v, MPFR_RNDN);
  const bool negative = mpfr_signbit(v) != 0;
  if (r == 0) return g.has_zero ? (negative ? -0.0 : 0.0) : std::ldexp(1.0, g.emin);
  if (std::fabs(r) > g.max_finite) {
    const bool to_max = saturate || mode == Rounding::toward_zero || mode == Rounding::odd ||
                        (mode == Rounding::upward && negative) || (mode == Rounding::downward && !negative);
    r = to_max ? g.max_finite : kInf;
    if (negative) r = -r;
  }
  return r;
}

double oracle_scale(double amax, const Grid& element, const Grid& scale_grid, Rounding mode) {
  if (amax == 0) return 1.0;
  Mp q;
  mpfr_set_d(q.v, amax, MPFR_RNDN);
  const int t = mpfr_div_d(q.v, q.v, element.max_finite, MPFR_RNDN);
  const double s = oracle_round(q.v, t, scale_grid, mode, true);
  return s == 0 ? std::ldexp(1.0, scale_grid.emin - (scale_grid.p - 1)) : s;  // never zero
}

double oracle_element(double x, double scale, const Grid& element) {
  Mp q;
  mpfr_set_d(q.v, x, MPFR_RNDN);
  const int t = mpfr_div_d(q.v, q.v, scale, MPFR_RNDN);
  return oracle_round(q.v, t, element, Rounding::nearest_even, true);
}

// |x / scale| > max_element, exactly.
bool exceeds(double x, double scale, const Grid& element) {
  Mp q;
  mpfr_set_d(q.v, std::fabs(x), MPFR_RNDN);
  mpfr_div_d(q.v, q.v, scale, MPFR_RNDU);  // rounding up errs toward "exceeds"
  return mpfr_cmp_d(q.v, element.max_finite) > 0;
}

std::uint64_t bits_of(double x) { return std::bit_cast<std::uint64_t>(x); }

std::size_t product(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t s : shape) n *= s;
  return n;
}

using numeq_test::c_strides;

using numeq_test::view_of;

// Block of C-order element i (C-order index into the scale array), by multi-indices.
std::size_t block_index(std::size_t i, const std::vector<std::size_t>& shape,
                        const std::vector<std::size_t>& block) {
  const std::size_t rank = shape.size();
  std::vector<std::size_t> index(rank);
  for (std::size_t d = rank; d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  const std::size_t first = rank - block.size();
  std::size_t k = 0;
  for (std::size_t d = 0; d < rank; ++d) {
    const std::size_t b = d >= first ? block[d - first] : 1;
    k = k * (shape[d] / b) + index[d] / b;
  }
  return k;
}

// Data: each block gets its own binade (2^-30 .. 2^30), some exact zeros, one block all zeros.
template <class T>
std::vector<T> block_data(const std::vector<std::size_t>& shape, const std::vector<std::size_t>& block,
                          std::uint64_t seed) {
  std::mt19937_64 g(seed);
  const std::size_t n = product(shape);
  std::size_t blocks = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::size_t first = shape.size() - block.size();
    blocks *= d >= first ? shape[d] / block[d - first] : shape[d];
  }
  std::vector<int> binade(blocks);
  for (auto& e : binade) e = static_cast<int>(g() % 61) - 30;
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t k = block_index(i, shape, block);
    const std::uint64_t r = g();
    if (k == 1 || r % 17 == 0) {
      x[i] = (r >> 8) & 1 ? T(0) : -T(0);
      continue;
    }
    double u = static_cast<double>(g() >> 11) * 0x1p-53 * 2 - 1;  // (-1, 1)
    if (r % 3 == 0) u = std::round(u * 64) / 64;  // 6 significant bits: ties of the narrow formats
    x[i] = static_cast<T>(std::ldexp(u, binade[k]));
  }
  return x;
}

struct Result {
  std::vector<double> scales;
  std::vector<double> elements;
  std::vector<std::uint8_t> bits;
};

template <class T>
Result run(const std::vector<T>& x, const std::vector<std::size_t>& shape, const BlockScaling& s) {
  Result r;
  r.scales.assign(product(numeq::block_scale_shape(shape, s)), -1.0);
  r.elements.assign(x.size(), -1.0);
  r.bits.assign(x.size(), 0xEE);
  numeq::block_quantize_into(view_of(x, shape), s, r.scales.data(), r.elements.data(), r.bits.data());
  return r;
}

// Checks scales and elements of one quantisation against the oracle. Returns how many elements
// had |x / scale| > max_element (saturated).
template <class T>
std::size_t check(const std::vector<T>& x, const std::vector<std::size_t>& shape, const BlockScaling& s,
                  const Grid& element, const Grid& scale_grid) {
  const Result r = run(x, shape, s);
  const auto scale_shape = numeq::block_scale_shape(shape, s);
  std::vector<double> amax(product(scale_shape), 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t k = block_index(i, shape, s.block_shape);
    amax[k] = std::max(amax[k], std::fabs(static_cast<double>(x[i])));
  }
  std::size_t bad = 0;
  for (std::size_t k = 0; k < amax.size(); ++k) {
    const double want = oracle_scale(amax[k], element, scale_grid, s.scale_rounding);
    if (r.scales[k] != want && ++bad <= 5)
      ADD_FAILURE() << "scale " << k << " amax " << amax[k] << ": got " << r.scales[k] << " want " << want;
  }
  std::size_t saturated = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t k = block_index(i, shape, s.block_shape);
    const double xi = static_cast<double>(x[i]);
    const double want = oracle_element(xi, r.scales[k], element);
    if (bits_of(r.elements[i]) != bits_of(want) && ++bad <= 10)
      ADD_FAILURE() << "element " << i << " x " << xi << " scale " << r.scales[k] << ": got " << r.elements[i]
                    << " want " << want;
    // The bit pattern output holds the same value.
    if (bits_of(numeq::decode(r.bits[i], s.element.format)) != bits_of(r.elements[i]) && ++bad <= 10)
      ADD_FAILURE() << "element " << i << ": pattern and value differ";
    if (exceeds(xi, r.scales[k], element)) ++saturated;
  }
  EXPECT_EQ(bad, 0u);
  return saturated;
}

struct MxCase {
  const Format* format;
  const Grid* grid;
};

const MxCase kMx[] = {{&numeq::formats::e4m3fn, &kE4M3},
                      {&numeq::formats::e5m2, &kE5M2},
                      {&numeq::formats::e2m1fn, &kE2M1},
                      {&numeq::formats::e3m2fn, &kE3M2},
                      {&numeq::formats::e2m3fn, &kE2M3}};

TEST(BlockScale, MxMatchesMpfr) {
  std::uint64_t seed = 100;
  for (const MxCase& c : kMx) {
    for (const std::vector<std::size_t>& shape :
         {std::vector<std::size_t>{4, 96}, std::vector<std::size_t>{2, 3, 64}, std::vector<std::size_t>{64}}) {
      std::size_t saturated_nearest = 0;
      for (Rounding mode : {Rounding::nearest_even, Rounding::upward}) {
        const BlockScaling s = numeq::mx_scaling(*c.format, ScaleRule::quotient, mode);
        SCOPED_TRACE(std::string(c.grid->name) + " scale " + std::string(numeq::to_string(mode)) + " rank " +
                     std::to_string(shape.size()));
        EXPECT_EQ(s.block_shape, (std::vector<std::size_t>{32}));
        EXPECT_EQ(s.scale_format, numeq::formats::e8m0fnu);
        const auto xf = block_data<float>(shape, s.block_shape, ++seed);
        const auto xd = block_data<double>(shape, s.block_shape, ++seed);
        const std::size_t sat = check(xf, shape, s, *c.grid, kE8M0) + check(xd, shape, s, *c.grid, kE8M0);
        if (mode == Rounding::upward) {
          EXPECT_EQ(sat, 0u) << "with scales rounded up no element may exceed the element range";
        } else {
          saturated_nearest += sat;
        }
      }
      // Nearest scales can be below amax / max_element: some elements then saturate (this is what
      // makes the upward check above meaningful).
      if (shape.size() == 2) {
        EXPECT_GT(saturated_nearest, 0u) << c.grid->name;
      }
    }
  }
}

// OCP MX v1.0 s6.3: shared_exp = floor(log2(amax)) - emax_elem, X = 2^shared_exp, elements
// x / X rounded to nearest even and clamped to the element format's largest magnitude. emax_elem
// from the spec's largest finite values (Grid), floor(log2) from frexp (exact).
double ocp_scale(double amax, const Grid& element) {
  int e_amax = 0, e_max = 0;
  std::frexp(amax, &e_amax);
  std::frexp(element.max_finite, &e_max);
  const int shared = (e_amax - 1) - (e_max - 1);
  return std::ldexp(1.0, std::clamp(shared, -127, 127));
}

TEST(BlockScale, MxDefaultIsTheOcpRule) {
  std::uint64_t seed = 700;
  for (const MxCase& c : kMx) {
    const BlockScaling s = numeq::mx_scaling(*c.format);
    EXPECT_EQ(s.scale_rule, ScaleRule::ocp);
    for (const std::vector<std::size_t>& shape : {std::vector<std::size_t>{4, 96}, std::vector<std::size_t>{64}}) {
      SCOPED_TRACE(std::string(c.grid->name) + " rank " + std::to_string(shape.size()));
      const auto x = block_data<double>(shape, s.block_shape, ++seed);
      const Result r = run(x, shape, s);
      std::vector<double> amax(r.scales.size(), 0.0);
      for (std::size_t i = 0; i < x.size(); ++i)
        amax[block_index(i, shape, s.block_shape)] = std::max(amax[block_index(i, shape, s.block_shape)], std::fabs(x[i]));
      for (std::size_t k = 0; k < amax.size(); ++k)
        if (amax[k] > 0) {
          EXPECT_EQ(r.scales[k], ocp_scale(amax[k], *c.grid)) << "block " << k << " amax " << amax[k];
        }
      for (std::size_t i = 0; i < x.size(); ++i)
        EXPECT_EQ(r.elements[i], oracle_element(x[i], r.scales[block_index(i, shape, s.block_shape)], *c.grid)) << i;
    }
    // amax just above a power of two: the quotient rule (nearest) takes the scale below
    // amax / max_element and clips the block's largest element; the spec's rule keeps it.
    std::vector<double> x(32, 0.0);
    x[0] = 1.2;
    x[5] = -0.3;
    const Result r = run(x, {32}, s);
    EXPECT_EQ(r.scales[0], ocp_scale(1.2, *c.grid));
    EXPECT_EQ(r.elements[0] * r.scales[0], oracle_element(1.2, ocp_scale(1.2, *c.grid), *c.grid) * r.scales[0]);
    EXPECT_GE(r.elements[0] * r.scales[0], 1.0) << c.grid->name << ": the block's amax must not clip below 1";
  }
}

// AWS's quantize_mx (nki.isa docstring): X = 2^(floor(log2 amax) - (E_max - 1)), twice the
// spec's scale, so the block's largest quotient lies in [2^(E_max - 1), 2^E_max) and never clips.
// One block of amax = 1.9 * 2^k in e4m3fn tells the two rules apart: the spec's quotient 486.4
// clips to 448, the doubled one, 243.2, rounds to 240.
TEST(BlockScale, OcpHeadroomIsTwiceTheSpecScaleAndNeverClips) {
  for (const MxCase& c : kMx) {
    if (c.grid->name != std::string("e4m3fn") && c.grid->name != std::string("e5m2")) continue;
    BlockScaling s = numeq::mx_scaling(*c.format, ScaleRule::ocp_headroom);
    const auto x = block_data<double>({4, 96}, s.block_shape, 900);
    const Result r = run(x, {4, 96}, s);
    std::vector<double> amax(r.scales.size(), 0.0);
    for (std::size_t i = 0; i < x.size(); ++i)
      amax[block_index(i, {4, 96}, s.block_shape)] = std::max(amax[block_index(i, {4, 96}, s.block_shape)], std::fabs(x[i]));
    for (std::size_t k = 0; k < amax.size(); ++k)
      if (amax[k] > 0) {
        EXPECT_EQ(r.scales[k], 2 * ocp_scale(amax[k], *c.grid)) << c.grid->name << " block " << k;
      }
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double scale = r.scales[block_index(i, {4, 96}, s.block_shape)];
      EXPECT_EQ(r.elements[i], oracle_element(x[i], scale, *c.grid)) << i;
      EXPECT_LT(std::fabs(x[i] / scale), c.grid->max_finite) << "no quotient reaches the clamp";
    }
  }
  for (int k : {-20, 0, 7}) {
    std::vector<double> x(32, 0.0);
    x[3] = 1.9 * std::ldexp(1.0, k);
    const Result spec = run(x, {32}, numeq::mx_scaling(numeq::formats::e4m3fn, ScaleRule::ocp));
    const Result doubled = run(x, {32}, numeq::mx_scaling(numeq::formats::e4m3fn, ScaleRule::ocp_headroom));
    EXPECT_EQ(spec.elements[3], 448.0);
    EXPECT_EQ(spec.elements[3] * spec.scales[0], 1.75 * std::ldexp(1.0, k));
    EXPECT_EQ(doubled.elements[3], 240.0);
    EXPECT_EQ(doubled.elements[3] * doubled.scales[0], 1.875 * std::ldexp(1.0, k));
  }
}

TEST(BlockScale, MxScalesArePowersOfTwoAtTheDocumentedPlace) {
  // amax / max_element exactly at powers of two and at the midpoints 1.5 * 2^k between them: E8M0
  // nearest rounding takes a midpoint up (both neighbours have significand 1), upward too.
  for (int k : {-10, 0, 3}) {
    for (double m : {1.0, 1.25, 1.5, 1.75}) {
      const double amax = m * std::ldexp(1.0, k) * 448.0;
      std::vector<float> x(32, 0.0f);
      x[5] = static_cast<float>(-amax);
      for (Rounding mode : {Rounding::nearest_even, Rounding::upward, Rounding::toward_zero}) {
        const auto r = run(x, {32}, numeq::mx_scaling(numeq::formats::e4m3fn, ScaleRule::quotient, mode));
        double want = std::ldexp(1.0, k);
        if (mode == Rounding::upward && m > 1) want *= 2;
        if (mode == Rounding::nearest_even && m >= 1.5) want *= 2;
        EXPECT_EQ(r.scales[0], want) << "m " << m << " k " << k << " " << numeq::to_string(mode);
        EXPECT_EQ(r.scales[0], oracle_scale(amax, kE4M3, kE8M0, mode));
      }
    }
  }
}

TEST(BlockScale, ElementTiesRoundToEven) {
  // Blocks whose scale is known exactly (amax = max_element * s gives scale s: a power of two for
  // E8M0, any fp32 value for fp32 scales), filled with the midpoints between consecutive element
  // values, times s. Each must go to the neighbour with an even significand.
  std::mt19937_64 g(11);
  for (const MxCase& c : kMx) {
    // Positive finite values of the element format, from its bit patterns (input generation only).
    std::vector<double> values;
    for (std::uint64_t b = 0; b < 256; ++b) {
      if ((b & ~numeq::pattern_mask(*c.format)) != 0) continue;
      const double v = numeq::decode(b, *c.format);
      if (std::isfinite(v) && v >= 0) values.push_back(v);
    }
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    std::vector<double> ties;
    for (std::size_t j = 0; j + 1 < values.size(); ++j) ties.push_back((values[j] + values[j + 1]) / 2);
    for (const Format* scale_format : {&numeq::formats::e8m0fnu, &numeq::formats::fp32}) {
      const bool e8m0 = *scale_format == numeq::formats::e8m0fnu;
      const double s = e8m0 ? 0x1p-5 : static_cast<double>(static_cast<float>(0.0123456789));
      const std::size_t n = 32 * ((ties.size() + 31) / 32 + 1);
      std::vector<double> x(n, 0.0);
      for (std::size_t b = 0; b < n; b += 32) x[b] = c.grid->max_finite * s;  // every block's amax
      std::size_t t = 0;
      for (std::size_t i = 0; i < n && t < ties.size(); ++i) {
        if (i % 32 == 0) continue;
        x[i] = ((g() & 1) ? 1.0 : -1.0) * ties[t++] * s;
      }
      BlockScaling bs = numeq::mx_scaling(*c.format, ScaleRule::quotient);
      bs.scale_format = *scale_format;
      const auto r = run(x, {n}, bs);
      for (std::size_t b = 0; b < n / 32; ++b) ASSERT_EQ(r.scales[b], s);
      for (std::size_t i = 0; i < n; ++i) {
        if (i % 32 == 0 || x[i] == 0) continue;
        const double want = oracle_element(x[i], s, *c.grid);
        EXPECT_EQ(r.elements[i], want) << c.grid->name << " x/s " << x[i] / s;
        // The hand rule: the result's significand (in units of its quantum) is even.
        const double q = std::fabs(want);
        const int e = std::max(std::ilogb(q), c.grid->emin);
        const double units = std::ldexp(q, -(e - (c.grid->p - 1)));
        EXPECT_EQ(std::fmod(units, 2.0), 0.0) << c.grid->name << " x/s " << x[i] / s << " -> " << want;
      }
    }
  }
}

TEST(BlockScale, ScaleRangeLimits) {
  // Beyond E8M0's range: huge blocks saturate the scale at 2^127, tiny ones get 2^-127 (no zero).
  std::vector<double> x(64, 0.0);
  x[0] = 1e300;
  x[40] = 1e-300;
  for (Rounding mode : {Rounding::nearest_even, Rounding::upward}) {
    const auto r = run(x, {64}, numeq::mx_scaling(numeq::formats::e4m3fn, ScaleRule::quotient, mode));
    EXPECT_EQ(r.scales[0], 0x1p127);
    EXPECT_EQ(r.elements[0], 448.0);  // saturated element
    EXPECT_EQ(r.scales[1], 0x1p-127);
    EXPECT_EQ(r.scales[0], oracle_scale(1e300, kE4M3, kE8M0, mode));
    EXPECT_EQ(r.scales[1], oracle_scale(1e-300, kE4M3, kE8M0, mode));
  }
}

TEST(BlockScale, DeepSeekFp32ScalesMatchMpfr) {
  std::uint64_t seed = 500;
  struct Case {
    std::vector<std::size_t> shape;
    std::vector<std::size_t> block;
  };
  const Case cases[] = {{{3, 256}, {128}}, {{2, 2, 384}, {128}}, {{256, 384}, {128, 128}}, {{2, 128, 256}, {128, 128}}};
  for (const Case& c : cases) {
    for (Rounding mode : {Rounding::nearest_even, Rounding::upward}) {
      BlockScaling s;
      s.element = Cast{numeq::formats::e4m3fn, Rounding::nearest_even, numeq::Overflow::saturate};
      s.scale_format = numeq::formats::fp32;
      s.scale_rounding = mode;
      s.block_shape = c.block;
      SCOPED_TRACE("rank " + std::to_string(c.shape.size()) + " blocks " + std::to_string(c.block.size()) + " " +
                   std::string(numeq::to_string(mode)));
      std::vector<std::size_t> want_shape = c.shape;
      for (std::size_t k = 0; k < c.block.size(); ++k) want_shape[c.shape.size() - c.block.size() + k] /= c.block[k];
      EXPECT_EQ(numeq::block_scale_shape(c.shape, s), want_shape);
      const auto xf = block_data<float>(c.shape, c.block, ++seed);
      const auto xd = block_data<double>(c.shape, c.block, ++seed);
      const std::size_t sat = check(xf, c.shape, s, kE4M3, kFp32) + check(xd, c.shape, s, kE4M3, kFp32);
      if (mode == Rounding::upward) {
        EXPECT_EQ(sat, 0u);
      }
    }
  }
}

TEST(BlockScale, AllZeroBlocks) {
  for (const MxCase& c : kMx) {
    std::vector<float> x(96, 0.0f);
    for (std::size_t i = 0; i < 32; ++i) x[i] = (i % 2) ? -0.0f : 0.0f;  // block 0: signed zeros
    x[70] = 3.0f;                                                         // block 2 non-zero
    const auto r = run(x, {96}, numeq::mx_scaling(*c.format, ScaleRule::quotient));
    EXPECT_EQ(r.scales[0], 1.0);
    EXPECT_EQ(r.scales[1], 1.0);
    EXPECT_EQ(r.scales[2], oracle_scale(3.0, *c.grid, kE8M0, Rounding::nearest_even));
    for (std::size_t i = 0; i < 96; ++i) {
      if (i == 70) continue;
      EXPECT_EQ(r.elements[i], 0.0);
      EXPECT_EQ(std::signbit(r.elements[i]), std::signbit(x[i])) << i;  // zeros keep their sign
    }
    // Dequantising gives the zeros back.
    std::vector<double> back(96);
    numeq::block_dequantize_into(r.elements.data(), {96}, r.scales.data(), numeq::mx_scaling(*c.format, ScaleRule::quotient),
                                 Cast{numeq::formats::fp32}, back.data());
    for (std::size_t i = 0; i < 32; ++i) EXPECT_EQ(bits_of(back[i]), bits_of(static_cast<double>(x[i])));
  }
}

TEST(BlockScale, StochasticElementsUseTheirCOrderIndex) {
  // E8M0 scales are powers of two, so x / scale is exact in binary64 (no underflow here): element
  // i must be the scalar stochastic rounding of x / scale with index i.
  std::vector<std::size_t> shape{3, 64};
  const auto x = block_data<double>(shape, {32}, 9);
  BlockScaling s = numeq::mx_scaling(numeq::formats::e4m3fn, ScaleRule::quotient);
  s.element.rounding = Rounding::stochastic;
  s.element.seed = 1234;
  const auto r = run(x, shape, s);
  std::size_t bad = 0, differs_from_nearest = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double scale = r.scales[block_index(i, shape, {32})];
    const double q = x[i] / scale;
    ASSERT_EQ(q * scale, x[i]);  // the division was exact
    const double want = numeq::round_to_format(q, s.element, i);
    if (bits_of(r.elements[i]) != bits_of(want)) ++bad;
    if (r.elements[i] != oracle_element(x[i], scale, kE4M3)) ++differs_from_nearest;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(differs_from_nearest, 0u);
}

TEST(BlockScale, DequantizeMatchesMpfr) {
  std::mt19937_64 g(3);
  struct Out {
    Cast cast;
    const Grid* grid;
  };
  const Out outs[] = {{Cast{numeq::formats::fp32}, &kFp32},
                      {Cast{numeq::formats::fp64}, &kFp64},
                      {Cast{numeq::formats::bf16}, &kBf16},
                      {Cast{numeq::formats::bf16, Rounding::toward_zero}, &kBf16},
                      {Cast{numeq::formats::fp32, Rounding::upward}, &kFp32}};
  for (const MxCase& c : kMx) {
    const std::vector<std::size_t> shape{4, 64};
    const auto x = block_data<float>(shape, {32}, g());
    for (const BlockScaling& s : {numeq::mx_scaling(*c.format, ScaleRule::quotient),
                                  BlockScaling{Cast{*c.format, Rounding::nearest_even, numeq::Overflow::saturate},
                                               numeq::formats::fp32, Rounding::nearest_even, {32}}}) {
      const auto r = run(x, shape, s);
      for (const Out& o : outs) {
        SCOPED_TRACE(std::string(c.grid->name) + " scale " + std::string(s.scale_format.name) + " -> " +
                     std::string(o.grid->name) + "/" + std::string(numeq::to_string(o.cast.rounding)));
        std::vector<double> back(x.size());
        numeq::block_dequantize_into(r.elements.data(), shape, r.scales.data(), s, o.cast, back.data());
        std::size_t bad = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
          const double scale = r.scales[block_index(i, shape, s.block_shape)];
          Mp p;
          mpfr_set_d(p.v, r.elements[i], MPFR_RNDN);
          mpfr_mul_d(p.v, p.v, scale, MPFR_RNDN);  // exact: 4 x 24 bits
          const double want = oracle_round(p.v, 0, *o.grid, o.cast.rounding, false);
          if (bits_of(back[i]) != bits_of(want) && ++bad <= 5)
            ADD_FAILURE() << "element " << i << ": got " << back[i] << " want " << want;
        }
        EXPECT_EQ(bad, 0u);
      }
    }
  }
}

using numeq_test::expect_error_mentioning;

TEST(BlockScale, Errors) {
  const BlockScaling mx = numeq::mx_scaling(numeq::formats::e4m3fn, ScaleRule::quotient);
  expect_error_mentioning([&] { (void)numeq::block_scale_shape({4, 33}, mx); }, "block");
  expect_error_mentioning([&] { (void)numeq::block_scale_shape({4, 16}, mx); }, "block");
  BlockScaling ds = mx;
  ds.scale_format = numeq::formats::fp32;
  ds.block_shape = {128, 128};
  expect_error_mentioning([&] { (void)numeq::block_scale_shape({128, 384 + 64}, ds); }, "block");
  expect_error_mentioning([&] { (void)numeq::block_scale_shape({200, 128}, ds); }, "block");
  expect_error_mentioning([&] { (void)numeq::block_scale_shape({128}, ds); }, "block");  // rank too small
  EXPECT_EQ(numeq::block_scale_shape({256, 384}, ds), (std::vector<std::size_t>{2, 3}));
  // The quantiser and dequantiser check the same shape rule.
  std::vector<float> x(4 * 33, 1.0f);
  expect_error_mentioning([&] { (void)run(x, {4, 33}, mx); }, "block");
  std::vector<double> e(4 * 33), s(8), out(4 * 33);
  expect_error_mentioning([&] { numeq::block_dequantize_into(e.data(), {4, 33}, s.data(), mx, Cast{}, out.data()); },
                          "block");
  // Non-finite inputs are refused, naming x.
  std::vector<double> bad(32, 1.0);
  bad[7] = kInf;
  expect_error_mentioning([&] { (void)run(bad, {32}, mx); }, "x");
  bad[7] = std::numeric_limits<double>::quiet_NaN();
  expect_error_mentioning([&] { (void)run(bad, {32}, mx); }, "x");
  // Scale formats and scale rounding.
  BlockScaling bad_scale = mx;
  bad_scale.scale_format = numeq::formats::int8;
  expect_error_mentioning([&] { (void)numeq::block_scale_shape({32}, bad_scale); }, "scale_fmt");
  bad_scale = mx;
  bad_scale.scale_rounding = Rounding::stochastic;
  expect_error_mentioning([&] { (void)numeq::block_scale_shape({32}, bad_scale); }, "scale_rounding");
  BlockScaling zero_block = mx;
  zero_block.block_shape = {0};
  expect_error_mentioning([&] { (void)numeq::block_scale_shape({32}, zero_block); }, "block");
}

}  // namespace
