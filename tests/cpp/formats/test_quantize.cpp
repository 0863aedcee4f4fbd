// Integer quantisation (quantize.hpp) against MPFR.
//
//   quantize:   q = clamp(round(x / scale) + zero_point, qmin, qmax). The oracle divides with MPFR
//               at 256 bits (checking that this precision decides every rounding), rounds to an
//               integer with mpfr_rint / mpfr_round / mpfr_trunc (+ "make odd"), then clamps.
//   dequantize: (q - zero_point) * scale, exact in MPFR, then rounded into the output format on
//               its own grid (precision and subnormal range) in the requested mode.
//   quant_params: test_quant_params.cpp.
//   stochastic: the exact per-index rule (draw i decides element i), and binomial statistics.
//
// Element-to-parameter mapping is recomputed here from multi-indices, not with numeq's helper.

#include <gtest/gtest.h>
#include <mpfr.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numeq/numeq.hpp"

#include "quantize_test_support.hpp"
#include "oracle/test_support.hpp"

namespace {

using numeq::BitsView;
using numeq::Cast;
using numeq::Format;
using numeq::QuantGroups;
using numeq::QuantRange;
using numeq::Quantization;
using numeq::Rounding;
using numeq_test::quant::Layout;
using numeq_test::quant::Mp;
using numeq_test::quant::QuantizeTest;
using numeq_test::quant::describe;
using numeq_test::quant::int_formats;
using numeq_test::quant::kInf;
using numeq_test::quant::kNaN;
using numeq_test::quant::layouts;
using numeq_test::quant::oracle_round_to_format;
using numeq_test::quant::param_index;
using numeq_test::quant::product;
using numeq_test::quant::round_to_integer;

// ---- oracle helpers ---------------------------------------------------------------------------

// True when the value held by v (a rounded result, `ternary` != 0 if inexact) could be on the
// wrong side of an integer or half-integer boundary: then 256 bits would not decide the rounding.
bool undecided(const mpfr_t v, int ternary) {
  if (ternary == 0) return false;
  Mp twice;
  mpfr_mul_2si(twice.v, v, 1, MPFR_RNDN);
  return mpfr_integer_p(twice.v) != 0;
}


// The quantised code of x (deterministic modes).
std::int64_t oracle_code(double x, double scale, std::int64_t zp, Rounding mode, std::int64_t lo,
                         std::int64_t hi) {
  if (std::isinf(x)) return x < 0 ? lo : hi;
  Mp q;
  mpfr_set_d(q.v, x, MPFR_RNDN);
  const int t = mpfr_div_d(q.v, q.v, scale, MPFR_RNDN);
  if (undecided(q.v, t)) ADD_FAILURE() << "MPFR precision does not decide x=" << x << " scale=" << scale;
  round_to_integer(q.v, mode);
  if (mpfr_cmp_si(q.v, std::int64_t{1} << 40) > 0) return hi;
  if (mpfr_cmp_si(q.v, -(std::int64_t{1} << 40)) < 0) return lo;
  const std::int64_t v = mpfr_get_si(q.v, MPFR_RNDN) + zp;
  return v < lo ? lo : (v > hi ? hi : v);
}


// ---- arrays, groups ---------------------------------------------------------------------------

using numeq_test::c_strides;


using numeq_test::view_of;


const Rounding kDeterministic[] = {Rounding::nearest_even, Rounding::nearest_away, Rounding::toward_zero,
                                   Rounding::upward,       Rounding::downward,     Rounding::odd};

// Per-group scales: fp32 values over many binades, a third of them powers of two.
std::vector<double> random_scales(std::size_t n, std::mt19937_64& g, const Format& f) {
  std::vector<double> s(n);
  const int span = f.storage_bits == 32 ? 10 : 30;
  for (auto& x : s) {
    const int e = static_cast<int>(g() % static_cast<unsigned>(2 * span)) - span;
    if (g() % 3 == 0) {
      x = std::ldexp(1.0, e);
    } else {
      x = static_cast<double>(static_cast<float>(std::ldexp(1.0 + static_cast<double>(g() >> 11) * 0x1p-53, e)));
    }
  }
  return s;
}

std::vector<std::int64_t> random_zero_points(std::size_t n, std::mt19937_64& g, const Quantization& q) {
  std::vector<std::int64_t> z(n);
  for (auto& v : z) {
    if (q.format.storage_bits == 32) {
      v = static_cast<std::int64_t>(g() % 2001) - 1000;
    } else {
      v = q.format.int_min() + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(q.format.int_max() - q.format.int_min() + 1));
    }
  }
  return z;
}

// x values for a given per-element scale: codes over and beyond the range, exact ties
// ((k + 1/2) * scale is exact in binary64 for an fp32 scale), ties one ulp off, zeros, Inf.
double sample_x(std::mt19937_64& g, double scale, const Quantization& q) {
  const double range = static_cast<double>(q.format.storage_bits == 32 ? (std::int64_t{1} << 31) : 256);
  const std::uint64_t r = g();
  switch (r % 10) {
    case 0: {
      const double k = std::floor(static_cast<double>(g() % 1000) - 500) + 0.5;
      return k * scale;  // an exact tie
    }
    case 1: {
      const double k = std::floor(static_cast<double>(g() % 1000) - 500) + 0.5;
      return std::nextafter(k * scale, (r >> 8) & 1 ? kInf : -kInf);
    }
    case 2: return ((r >> 8) & 1) ? 0.0 : -0.0;
    case 3: return ((r >> 8) % 50 == 0) ? ((r >> 16) & 1 ? kInf : -kInf) : 1.7 * range * scale;
    default: {
      const double u = (static_cast<double>(g() >> 11) * 0x1p-53 * 2 - 1) * 1.3 * range;
      return u * scale;
    }
  }
}

template <class T>
void check_quantize(const Layout& layout, const Quantization& q, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  const std::size_t groups = product(layout.param_shape);
  const auto scales = random_scales(groups, g, q.format);
  const auto zps = random_zero_points(groups, g, q);
  const int axis = layout.axis < 0 ? layout.axis + static_cast<int>(layout.shape.size()) : layout.axis;
  const std::size_t n = product(layout.shape);
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t k = param_index(i, layout.shape, layout.param_shape, axis, layout.block);
    x[i] = static_cast<T>(sample_x(g, scales[k], q));
  }
  const QuantGroups qg = numeq::quant_groups(layout.shape, layout.param_shape, layout.axis, layout.block);
  std::vector<std::int64_t> out(n, 0x5A5A5A5A);
  numeq::quantize_into(view_of(x, layout.shape), q, scales.data(), zps.data(), qg, out.data());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t k = param_index(i, layout.shape, layout.param_shape, axis, layout.block);
    const std::int64_t want =
        oracle_code(static_cast<double>(x[i]), scales[k], zps[k], q.rounding, q.qmin(), q.qmax());
    if (out[i] != want && ++bad <= 5)
      ADD_FAILURE() << "element " << i << " x=" << static_cast<double>(x[i]) << " scale=" << scales[k]
                    << " zp=" << zps[k] << ": got " << out[i] << " want " << want;
  }
  EXPECT_EQ(bad, 0u);
}


// ---- quantize ---------------------------------------------------------------------------------

TEST_F(QuantizeTest, EveryModeFormatRangeAndLayoutMatchesMpfr) {
  std::uint64_t seed = 1;
  for (const Layout& layout : layouts())
    for (const Format* f : int_formats())
      for (QuantRange range : {QuantRange::full, QuantRange::symmetric})
        for (Rounding mode : kDeterministic) {
          Quantization q{*f, mode, range};
          SCOPED_TRACE(layout.name + " " + describe(q));
          check_quantize<double>(layout, q, ++seed);
          check_quantize<float>(layout, q, ++seed);
        }
}

TEST_F(QuantizeTest, RangesAreTheDocumentedOnes) {
  EXPECT_EQ((Quantization{numeq::formats::int8, Rounding::nearest_even, QuantRange::full}.qmin()), -128);
  EXPECT_EQ((Quantization{numeq::formats::int8, Rounding::nearest_even, QuantRange::full}.qmax()), 127);
  EXPECT_EQ((Quantization{numeq::formats::int8, Rounding::nearest_even, QuantRange::symmetric}.qmin()), -127);
  EXPECT_EQ((Quantization{numeq::formats::uint8, Rounding::nearest_even, QuantRange::full}.qmin()), 0);
  EXPECT_EQ((Quantization{numeq::formats::uint8, Rounding::nearest_even, QuantRange::full}.qmax()), 255);
  EXPECT_EQ((Quantization{numeq::formats::uint8, Rounding::nearest_even, QuantRange::symmetric}.qmin()), 1);
  EXPECT_EQ((Quantization{numeq::formats::int32, Rounding::nearest_even, QuantRange::full}.qmin()),
            -2147483648LL);
  EXPECT_EQ((Quantization{numeq::formats::int32, Rounding::nearest_even, QuantRange::full}.qmax()),
            2147483647LL);
}

// Quantises a 1-D double array per tensor.
std::vector<std::int64_t> quantize_1d(const std::vector<double>& x, const Quantization& q, double scale,
                                      std::int64_t zp) {
  const std::vector<std::size_t> shape{x.size()};
  const QuantGroups g = numeq::quant_groups(shape, {1}, 0, 1);
  std::vector<std::int64_t> out(x.size());
  numeq::quantize_into(view_of(x, shape), q, &scale, &zp, g, out.data());
  return out;
}

TEST_F(QuantizeTest, ExactTiesWithPowerOfTwoScales) {
  // x = (k + 1/2) * 2^e: the quotient is exactly a tie. Checked against MPFR and against the
  // definition of each mode written out by hand for these small cases.
  for (int e : {-20, -3, 0, 5}) {
    const double scale = std::ldexp(1.0, e);
    std::vector<double> x;
    for (int k = -6; k <= 5; ++k) x.push_back((k + 0.5) * scale);
    for (Rounding mode : kDeterministic) {
      const Quantization q{numeq::formats::int8, mode};
      const auto codes = quantize_1d(x, q, scale, 0);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double t = x[i] / scale;  // exact here
        double want = 0;
        switch (mode) {
          case Rounding::nearest_even: want = std::nearbyint(t); break;  // default FE_TONEAREST
          case Rounding::nearest_away: want = std::round(t); break;
          case Rounding::toward_zero: want = std::trunc(t); break;
          case Rounding::upward: want = std::ceil(t); break;
          case Rounding::downward: want = std::floor(t); break;
          case Rounding::odd: {
            const double tr = std::trunc(t);
            want = std::fmod(tr, 2) == 0 ? tr + (t > 0 ? 1 : -1) : tr;
            break;
          }
          case Rounding::stochastic: break;
        }
        EXPECT_EQ(codes[i], static_cast<std::int64_t>(want)) << numeq::to_string(mode) << " t=" << t;
        EXPECT_EQ(codes[i], oracle_code(x[i], scale, 0, mode, -128, 127));
      }
    }
  }
  // 2.5 * scale goes to 2 (even) under nearest_even and to 3 under nearest_away; -2.5 to -2 / -3.
  const std::vector<double> x{2.5 / 8, -2.5 / 8, 3.5 / 8, -3.5 / 8};
  EXPECT_EQ(quantize_1d(x, Quantization{numeq::formats::int8, Rounding::nearest_even}, 0.125, 0),
            (std::vector<std::int64_t>{2, -2, 4, -4}));
  EXPECT_EQ(quantize_1d(x, Quantization{numeq::formats::int8, Rounding::nearest_away}, 0.125, 0),
            (std::vector<std::int64_t>{3, -3, 4, -4}));
}

TEST_F(QuantizeTest, QuotientIsExactNotRoundedThroughBinary64) {
  // Search (MPFR decides) for pairs where the binary64 quotient x / scale is exactly a tie
  // k + 1/2 while the exact quotient is not: rounding the binary64 quotient would then break the
  // tie by the mode's tie rule, but the exact quotient lies on one side of it. Candidates: binary64
  // scales with 53 significant bits and x = the binary64 product (k + 1/2) * scale, rounded.
  std::mt19937_64 g(2024);
  int found = 0, differs = 0;
  for (int attempt = 0; attempt < 200000 && found < 400; ++attempt) {
    const double scale = std::ldexp(1.0 + static_cast<double>(g() >> 11) * 0x1p-52, static_cast<int>(g() % 20) - 10);
    const double k = static_cast<double>(static_cast<int>(g() % 200) - 100) + 0.5;
    const double x = k * scale;
    if (x / scale != k) continue;  // the binary64 quotient must be the tie itself
    Mp exact;
    mpfr_set_d(exact.v, x, MPFR_RNDN);
    if (mpfr_div_d(exact.v, exact.v, scale, MPFR_RNDN) == 0 && mpfr_cmp_d(exact.v, k) == 0) continue;
    ++found;
    for (Rounding mode : {Rounding::nearest_even, Rounding::nearest_away}) {
      const Quantization q{numeq::formats::int8, mode};
      const std::int64_t got = quantize_1d({x}, q, scale, 0)[0];
      const std::int64_t want = oracle_code(x, scale, 0, mode, -128, 127);
      // What rounding the binary64 quotient would give.
      const double naive = mode == Rounding::nearest_even ? std::nearbyint(k) : std::round(k);
      if (want != static_cast<std::int64_t>(naive)) ++differs;
      EXPECT_EQ(got, want) << "x=" << x << " scale=" << scale << " (binary64 quotient " << k << ")";
    }
  }
  EXPECT_GE(found, 50) << "search found too few cases";
  EXPECT_GE(differs, 20) << "too few cases where the exact quotient changes the answer";
}

TEST_F(QuantizeTest, ClampingAndSaturation) {
  for (const Format* f : int_formats())
    for (QuantRange range : {QuantRange::full, QuantRange::symmetric}) {
      const Quantization q{*f, Rounding::nearest_even, range};
      SCOPED_TRACE(describe(q));
      const double big = 1e300, tiny = 1e-300;
      const std::vector<double> x{kInf, -kInf, big, -big, tiny, -tiny, 0.0, -0.0,
                                  std::numeric_limits<double>::max(), -std::numeric_limits<double>::denorm_min()};
      const std::int64_t zp = f->is_signed ? 3 : 100;
      const auto codes = quantize_1d(x, q, 0.5, zp);
      EXPECT_EQ(codes[0], q.qmax());
      EXPECT_EQ(codes[1], q.qmin());
      EXPECT_EQ(codes[2], q.qmax());
      EXPECT_EQ(codes[3], q.qmin());
      for (std::size_t i = 4; i < 8; ++i) EXPECT_EQ(codes[i], zp);
      EXPECT_EQ(codes[8], q.qmax());
      EXPECT_EQ(codes[9], zp);
      // A zero point at the edge of the format: zero clamps into the symmetric range.
      const std::int64_t edge = f->int_min();
      const auto at_edge = quantize_1d({0.0, -1.0, 1.0}, q, 1.0, edge);
      EXPECT_EQ(at_edge[0], q.qmin());
      EXPECT_EQ(at_edge[1], q.qmin());
      EXPECT_EQ(at_edge[2], std::max(q.qmin(), edge + 1));
    }
}

TEST_F(QuantizeTest, StridedInputUsesCOrder) {
  // A transposed view of a 2-D array, per channel along axis 0 of the view.
  const std::size_t rows = 16, cols = 24;  // memory is rows x cols; the view is cols x rows
  std::mt19937_64 g(5);
  std::vector<float> mem(rows * cols);
  for (auto& v : mem) v = static_cast<float>((static_cast<double>(g() >> 11) * 0x1p-53 - 0.5) * 300);
  BitsView t;
  t.data = mem.data();
  t.element_bytes = 4;
  t.format = &numeq::formats::fp32;
  t.shape = {cols, rows};
  t.strides = {1, static_cast<std::ptrdiff_t>(cols)};
  std::vector<double> scales(cols);
  std::vector<std::int64_t> zps(cols);
  for (std::size_t c = 0; c < cols; ++c) {
    scales[c] = 0.25 + 0.125 * static_cast<double>(c);
    zps[c] = static_cast<std::int64_t>(c) - 12;
  }
  const QuantGroups qg = numeq::quant_groups(t.shape, {cols, 1}, 0, 1);
  for (int threads : {1, 3}) {
    numeq::set_num_threads(threads);
    std::vector<std::int64_t> out(rows * cols);
    const Quantization q{numeq::formats::int8};
    numeq::quantize_into(t, q, scales.data(), zps.data(), qg, out.data());
    for (std::size_t c = 0; c < cols; ++c)
      for (std::size_t r = 0; r < rows; ++r)
        EXPECT_EQ(out[c * rows + r], oracle_code(mem[r * cols + c], scales[c], zps[c], q.rounding, -128, 127));
  }
}

// ---- stochastic -------------------------------------------------------------------------------

// floor(frac(|x / scale|) * 2^R) for R <= 62, and trunc(|x / scale|), from MPFR.
void exact_parts(double x, double scale, int random_bits, std::uint64_t& whole, std::uint64_t& frac_r) {
  Mp q;
  mpfr_set_d(q.v, x, MPFR_RNDN);
  mpfr_div_d(q.v, q.v, scale, MPFR_RNDN);
  mpfr_abs(q.v, q.v, MPFR_RNDN);
  Mp w;
  mpfr_trunc(w.v, q.v);
  whole = mpfr_get_ui(w.v, MPFR_RNDN);
  mpfr_sub(q.v, q.v, w.v, MPFR_RNDN);
  mpfr_mul_2si(q.v, q.v, random_bits, MPFR_RNDN);
  mpfr_floor(q.v, q.v);
  frac_r = mpfr_get_ui(q.v, MPFR_RNDN);
}

TEST_F(QuantizeTest, StochasticDecisionForElementIUsesDrawI) {
  // Away from zero iff the top R bits of random_bits_at(random_stream_key(seed), i) are
  // >= 2^R - floor(frac * 2^R), with frac the exact fractional part of |x / scale|.
  std::mt19937_64 g(9);
  const std::size_t n = 300000;  // above the parallel threshold
  std::vector<double> x(n);
  const double scale = static_cast<double>(0.1f);
  for (auto& v : x) v = (static_cast<double>(g() >> 11) * 0x1p-53 - 0.5) * 200 * scale;
  for (int random_bits : {1, 8, 32}) {
    Quantization q{numeq::formats::int8, Rounding::stochastic};
    q.random_bits = random_bits;
    q.seed = 4242 + static_cast<std::uint64_t>(random_bits);
    const std::uint64_t key = numeq::random_stream_key(q.seed);
    std::vector<std::int64_t> first;
    for (int threads : {1, 2, 7}) {
      numeq::set_num_threads(threads);
      const auto codes = quantize_1d(x, q, scale, 0);
      if (first.empty()) {
        first = codes;
        std::size_t bad = 0;
        for (std::size_t i = 0; i < n; ++i) {
          std::uint64_t whole = 0, frac_r = 0;
          exact_parts(x[i], scale, random_bits, whole, frac_r);
          const std::uint64_t r = numeq::random_bits_at(key, i) >> (64 - random_bits);
          const bool away = frac_r != 0 && r >= (std::uint64_t{1} << random_bits) - frac_r;
          const auto magnitude = static_cast<std::int64_t>(whole + (away ? 1 : 0));
          const std::int64_t want = std::clamp<std::int64_t>(x[i] < 0 ? -magnitude : magnitude, -128, 127);
          if (codes[i] != want && ++bad <= 5)
            ADD_FAILURE() << "R=" << random_bits << " element " << i << " got " << codes[i] << " want " << want;
        }
        EXPECT_EQ(bad, 0u);
      } else {
        EXPECT_EQ(codes, first) << "threads " << threads;
      }
    }
  }
}

TEST_F(QuantizeTest, StochasticMeanConvergesToTheQuotient) {
  // One value repeated 10^6 times: the codes are floor or floor + 1 of x / scale, and the number
  // of rounded-away codes is Binomial(n, floor(frac * 2^R) / 2^R) within 6 sigma.
  const std::size_t n = 1000000;
  const double scale = static_cast<double>(0.3f);
  for (double t : {2.3, -7.75, 0.001, 100.999, -0.5}) {
    const double x = t * scale;
    std::vector<double> xs(n, x);
    for (int random_bits : {1, 8, 32}) {
      Quantization q{numeq::formats::int8, Rounding::stochastic};
      q.random_bits = random_bits;
      q.seed = 17;
      const auto codes = quantize_1d(xs, q, scale, 0);
      std::uint64_t whole = 0, frac_r = 0;
      exact_parts(x, scale, random_bits, whole, frac_r);
      const auto lo = static_cast<std::int64_t>(whole);
      std::uint64_t away = 0, other = 0;
      for (std::int64_t c : codes) {
        const std::int64_t m = c < 0 ? -c : c;
        if (m == lo + 1) ++away;
        else if (m != lo) ++other;
      }
      EXPECT_EQ(other, 0u);
      const double p = std::ldexp(static_cast<double>(frac_r), -random_bits);
      const double sigma = std::sqrt(static_cast<double>(n) * p * (1 - p));
      EXPECT_LE(std::fabs(static_cast<double>(away) - static_cast<double>(n) * p), 6 * sigma)
          << "t=" << t << " R=" << random_bits << " away " << away << " p " << p;
      if (random_bits == 32) {
        double mean = 0;
        for (std::int64_t c : codes) mean += static_cast<double>(c);
        mean /= static_cast<double>(n);
        Mp exact;
        mpfr_set_d(exact.v, x, MPFR_RNDN);
        mpfr_div_d(exact.v, exact.v, scale, MPFR_RNDN);
        const double quotient = mpfr_get_d(exact.v, MPFR_RNDN);
        EXPECT_LE(std::fabs(mean - quotient), 6 * std::sqrt(p * (1 - p) / static_cast<double>(n)) + 1e-9)
            << "t=" << t;
      }
    }
  }
}

// ---- dequantize -------------------------------------------------------------------------------

TEST_F(QuantizeTest, DequantizeMatchesMpfr) {
  std::mt19937_64 g(31);
  struct Out {
    Cast cast;
    int p;
    int emin;
    double max_finite;
  };
  const double fp32_max = static_cast<double>(std::numeric_limits<float>::max());
  const double bf16_max = 0x1.fep127;
  const Out outs[] = {{Cast{numeq::formats::fp64}, 53, -1022, std::numeric_limits<double>::max()},
                      {Cast{numeq::formats::fp32}, 24, -126, fp32_max},
                      {Cast{numeq::formats::bf16}, 8, -126, bf16_max},
                      {Cast{numeq::formats::fp32, Rounding::toward_zero}, 24, -126, fp32_max},
                      {Cast{numeq::formats::bf16, Rounding::upward}, 8, -126, bf16_max},
                      {Cast{numeq::formats::fp16, Rounding::odd}, 11, -14, 65504.0},
                      {Cast{numeq::formats::fp16, Rounding::nearest_even}, 11, -14, 65504.0},
                      {Cast{numeq::formats::fp16, Rounding::downward}, 11, -14, 65504.0}};
  for (const Layout& layout : layouts()) {
    const int axis = layout.axis < 0 ? layout.axis + static_cast<int>(layout.shape.size()) : layout.axis;
    for (const Format* f : int_formats()) {
      const Quantization q{*f};
      const std::size_t groups = product(layout.param_shape);
      auto scales = random_scales(groups, g, *f);
      // Some binary64 scales with 53 significant bits: the product is then inexact in fp64 too.
      for (std::size_t k = 0; k < groups; k += 3) scales[k] = std::ldexp(1.0 + static_cast<double>(g() >> 11) * 0x1p-53, -7);
      const auto zps = random_zero_points(groups, g, q);
      const std::size_t n = product(layout.shape);
      std::vector<std::int64_t> codes(n);
      for (auto& c : codes) c = q.qmin() + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(q.qmax() - q.qmin() + 1));
      const QuantGroups qg = numeq::quant_groups(layout.shape, layout.param_shape, layout.axis, layout.block);
      for (const Out& o : outs) {
        SCOPED_TRACE(layout.name + " " + std::string(f->name) + " -> " + std::string(o.cast.format.name) + "/" +
                     std::string(numeq::to_string(o.cast.rounding)));
        std::vector<double> values(n);
        numeq::dequantize_into(codes.data(), layout.shape, scales.data(), zps.data(), qg, o.cast, values.data());
        std::size_t bad = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t k = param_index(i, layout.shape, layout.param_shape, axis, layout.block);
          Mp exact;
          mpfr_set_si(exact.v, codes[i] - zps[k], MPFR_RNDN);
          mpfr_mul_d(exact.v, exact.v, scales[k], MPFR_RNDN);  // exact: 33 x 53 bits < 256
          const double want = oracle_round_to_format(exact.v, o.p, o.emin, o.cast.rounding, o.max_finite);
          if (std::bit_cast<std::uint64_t>(values[i]) != std::bit_cast<std::uint64_t>(want) && ++bad <= 5)
            ADD_FAILURE() << "element " << i << " code " << codes[i] << " zp " << zps[k] << " scale " << scales[k]
                          << ": got " << values[i] << " want " << want;
        }
        EXPECT_EQ(bad, 0u);
      }
    }
  }
}

// ---- errors -----------------------------------------------------------------------------------

using numeq_test::expect_error_mentioning;

TEST_F(QuantizeTest, Errors) {
  const std::vector<std::size_t> shape{4};
  const QuantGroups g = numeq::quant_groups(shape, {1}, 0, 1);
  std::vector<std::int64_t> out(4);
  const std::vector<double> ok{1.0, 2.0, 3.0, 4.0};
  const Quantization q8{numeq::formats::int8};
  const Quantization qu8{numeq::formats::uint8};
  auto run = [&](const std::vector<double>& x, const Quantization& q, double scale, std::int64_t zp) {
    return [=, &out, &g] {
      numeq::quantize_into(view_of(x, shape), q, &scale, &zp, g, out.data());
    };
  };
  // NaN: mentions x (the message starts with the argument name).
  for (int threads : {1, 3}) {
    numeq::set_num_threads(threads);
    std::vector<double> big(300000, 1.0);
    big[200000] = kNaN;
    const std::vector<std::size_t> big_shape{big.size()};
    const QuantGroups bg = numeq::quant_groups(big_shape, {1}, 0, 1);
    std::vector<std::int64_t> big_out(big.size());
    const double s = 1;
    const std::int64_t z = 0;
    expect_error_mentioning([&] { numeq::quantize_into(view_of(big, big_shape), q8, &s, &z, bg, big_out.data()); }, "x:");
  }
  expect_error_mentioning(run({1.0, kNaN, 0.0, 0.0}, q8, 1.0, 0), "x");
  // zero_point out of the format's range.
  expect_error_mentioning(run(ok, q8, 1.0, 128), "zero_point");
  expect_error_mentioning(run(ok, q8, 1.0, -129), "zero_point");
  expect_error_mentioning(run(ok, qu8, 1.0, -1), "zero_point");
  expect_error_mentioning(run(ok, qu8, 1.0, 256), "zero_point");
  EXPECT_NO_THROW(run(ok, qu8, 1.0, 255)());
  // scale <= 0, NaN or Inf.
  for (double s : {0.0, -0.0, -1.0, kNaN, kInf, -kInf}) expect_error_mentioning(run(ok, q8, s, 0), "scale");
  // Integer formats only; random_bits in 1..64.
  expect_error_mentioning(run(ok, Quantization{numeq::formats::fp32}, 1.0, 0), "fmt");
  Quantization bad_bits{numeq::formats::int8, Rounding::stochastic};
  bad_bits.random_bits = 0;
  expect_error_mentioning(run(ok, bad_bits, 1.0, 0), "random_bits");
  // Groups: block size, axis, parameter shape.
  expect_error_mentioning([] { (void)numeq::quant_groups({6, 64}, {6, 5}, 1, 13); }, "block_size");
  expect_error_mentioning([] { (void)numeq::quant_groups({6, 64}, {1, 1}, 1, 0); }, "block_size");
  expect_error_mentioning([] { (void)numeq::quant_groups({6, 64}, {4, 1}, 0, 4); }, "block_size");
  expect_error_mentioning([] { (void)numeq::quant_groups({6, 64}, {1, 1}, 2, 1); }, "axis");
  expect_error_mentioning([] { (void)numeq::quant_groups({6, 64}, {1, 1}, -3, 1); }, "axis");
  expect_error_mentioning([] { (void)numeq::quant_groups({6, 64}, {6, 2}, 0, 1); }, "scale");
  expect_error_mentioning([] { (void)numeq::quant_groups({6, 64}, {6}, 0, 1); }, "scale");
  EXPECT_NO_THROW((void)numeq::quant_groups({6, 64}, {1, 64}, -1, 1));
  EXPECT_EQ(numeq::quant_groups({6, 64}, {1, 64}, -1, 1).axis, 1);
  // dequantize checks its scales and output format.
  std::vector<double> values(4);
  const std::vector<std::int64_t> codes{1, 2, 3, 4};
  const std::int64_t z = 0;
  for (double s : {0.0, -2.0, kNaN, kInf})
    expect_error_mentioning([&] { numeq::dequantize_into(codes.data(), shape, &s, &z, g, Cast{numeq::formats::fp64}, values.data()); },
                            "scale");
  const double one = 1.0;
  expect_error_mentioning([&] { numeq::dequantize_into(codes.data(), shape, &one, &z, g, Cast{numeq::formats::int8}, values.data()); },
                          "out");
  // Parsing the range names.
  EXPECT_EQ(numeq::quant_range_by_name("full"), QuantRange::full);
  EXPECT_EQ(numeq::quant_range_by_name("symmetric"), QuantRange::symmetric);
  expect_error_mentioning([] { (void)numeq::quant_range_by_name("narrow"); }, "range");
}

}  // namespace
