// numeq::quant_params (quantize.hpp) against the header's definitions evaluated exactly in MPFR and
// rounded to fp32 (symmetric and full ranges, per tensor, channel and block), with worked examples.

#include <gtest/gtest.h>
#include <mpfr.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numeq/numeq.hpp"

#include "quantize_test_support.hpp"
#include "oracle/test_support.hpp"

namespace {

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
using numeq_test::quant::fp32_nearest;
using numeq_test::quant::int_formats;
using numeq_test::quant::kNaN;
using numeq_test::quant::layouts;
using numeq_test::quant::param_index;
using numeq_test::quant::product;
using numeq_test::view_of;

// ---- quant_params -----------------------------------------------------------------------------

struct Params {
  double scale;
  std::int64_t zero_point;
};

// The header's definitions, exactly: symmetric: scale = amax / steps with steps = (qmax - qmin) / 2
// (127 for int8 and uint8 [1, 255], 2^31 - 1 for int32), zero point the middle code; full: scale
// = (max - min) / (qmax - qmin) with min <= 0 <= max, zero point = qmin - round(min / scale)
// clamped to the range. Scales rounded to nearest fp32; an all-zero group gets scale 1.
Params oracle_params(const std::vector<double>& group, const Quantization& q) {
  double lo = 0, hi = 0;
  for (double v : group) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const std::int64_t qmin = q.qmin(), qmax = q.qmax();
  const bool symmetric = q.range == QuantRange::symmetric;
  Mp span(4096);  // max - min exactly, whatever the exponents
  if (symmetric) {
    mpfr_set_d(span.v, std::max(-lo, hi), MPFR_RNDN);
  } else {
    mpfr_set_d(span.v, hi, MPFR_RNDN);
    mpfr_sub_d(span.v, span.v, lo, MPFR_RNDN);
  }
  Params p{1.0, 0};
  if (!mpfr_zero_p(span.v)) {
    Mp quotient(4096);
    const int t = mpfr_div_si(quotient.v, span.v, symmetric ? (qmax - qmin) / 2 : qmax - qmin, MPFR_RNDN);
    (void)t;  // 4096 bits: ties of the 24-bit rounding are decided (a tie would need the divisor's
              // inverse to terminate within them)
    p.scale = fp32_nearest(quotient.v);
    if (p.scale == 0) p.scale = 0x1p-149;
  }
  if (symmetric) {
    p.zero_point = (qmin + qmax + 1) / 2;  // 0 for int8 / int32, 128 for uint8 [1, 255]
  } else {
    Mp a;
    mpfr_set_d(a.v, lo, MPFR_RNDN);
    mpfr_div_d(a.v, a.v, p.scale, MPFR_RNDN);
    mpfr_rint(a.v, a.v, MPFR_RNDN);
    const std::int64_t zp = qmin - mpfr_get_si(a.v, MPFR_RNDN);
    p.zero_point = std::clamp(zp, qmin, qmax);
  }
  return p;
}

TEST_F(QuantizeTest, QuantParamsMatchTheirDefinition) {
  std::mt19937_64 g(77);
  for (const Layout& layout : layouts()) {
    const int axis = layout.axis < 0 ? layout.axis + static_cast<int>(layout.shape.size()) : layout.axis;
    const std::size_t n = product(layout.shape);
    const std::size_t groups = product(layout.param_shape);
    for (const Format* f : int_formats())
      for (QuantRange range : {QuantRange::full, QuantRange::symmetric}) {
        const Quantization q{*f, Rounding::nearest_even, range};
        SCOPED_TRACE(layout.name + " " + describe(q));
        // Each group gets its own magnitude and offset; some groups are all zero, some one-signed.
        std::vector<double> group_scale(groups), group_offset(groups);
        for (std::size_t k = 0; k < groups; ++k) {
          group_scale[k] = (g() % 7 == 0) ? 0.0 : std::ldexp(1.0, static_cast<int>(g() % 40) - 20);
          group_offset[k] = static_cast<double>(static_cast<int>(g() % 3) - 1);  // -1, 0, 1
        }
        std::vector<float> x(n);
        std::vector<std::vector<double>> members(groups);
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t k = param_index(i, layout.shape, layout.param_shape, axis, layout.block);
          const double u = static_cast<double>(g() >> 11) * 0x1p-53 - 0.5 + group_offset[k];
          x[i] = static_cast<float>(u * group_scale[k]);
          members[k].push_back(static_cast<double>(x[i]));
        }
        const QuantGroups qg = numeq::quant_groups(layout.shape, layout.param_shape, layout.axis, layout.block);
        std::vector<double> scales(groups);
        std::vector<std::int64_t> zps(groups);
        numeq::quant_params_into(view_of(x, layout.shape), q, qg, scales.data(), zps.data());
        for (std::size_t k = 0; k < groups; ++k) {
          const Params want = oracle_params(members[k], q);
          EXPECT_EQ(scales[k], want.scale) << "group " << k;
          // int32 full range: see QuantParamsInt32FullRangeZeroPoint (a known discrepancy).
          if (!(range == QuantRange::full && f->storage_bits == 32)) {
            EXPECT_EQ(zps[k], want.zero_point) << "group " << k;
          }
        }
        // Round trip: with these parameters nearest rounding loses at most half a step per
        // element, except at the ends: the fp32 rounding of the scale (relative error <= 2^-24)
        // can push the extreme element past the last code by steps * 2^-24 of a step, hence the
        // allowance steps * 2^-23 (negligible for 8-bit codes, up to 256 steps for int32). int32
        // full range is skipped (the zero point itself may clamp there), and int32 codes times an
        // fp32 scale may round in binary64 (the |x| * 2^-52 term).
        for (Rounding mode : {Rounding::nearest_even, Rounding::nearest_away}) {
          Quantization qq = q;
          qq.rounding = mode;
          std::vector<std::int64_t> codes(n);
          numeq::quantize_into(view_of(x, layout.shape), qq, scales.data(), zps.data(), qg, codes.data());
          std::vector<double> back(n);
          numeq::dequantize_into(codes.data(), layout.shape, scales.data(), zps.data(), qg, Cast{numeq::formats::fp64},
                                 back.data());
          const double steps = static_cast<double>(range == QuantRange::full ? q.qmax() - q.qmin()
                                                                             : (q.qmax() - q.qmin()) / 2);
          for (std::size_t i = 0; i < n; ++i) {
            const std::size_t k = param_index(i, layout.shape, layout.param_shape, axis, layout.block);
            if (range == QuantRange::full && f->storage_bits == 32) continue;
            const double allowance = steps * 0x1p-23;
            const double bound = scales[k] * (0.5 + allowance) + std::fabs(static_cast<double>(x[i])) * 0x1p-52;
            EXPECT_LE(std::fabs(back[i] - static_cast<double>(x[i])), bound)
                << "element " << i << " x " << x[i] << " code " << codes[i] << " scale " << scales[k];
          }
        }
      }
  }
}

TEST_F(QuantizeTest, QuantParamsInt32FullRangeZeroPoint) {
  // zero_point = qmin - round(min / scale), clamped to [qmin, qmax]. For int32 the rounded
  // quotient itself can lie below -2^31 (here about -(2^32 - 1)): the zero point must then be
  // qmax, so that min maps to qmin and 0 to the top code.
  const std::vector<std::size_t> shape{2};
  const QuantGroups g = numeq::quant_groups(shape, {1}, 0, 1);
  const std::vector<double> x{-1.0, 0.0};
  double scale = 0;
  std::int64_t zp = 0;
  const Quantization q{numeq::formats::int32};
  numeq::quant_params_into(view_of(x, shape), q, g, &scale, &zp);
  const Params want = oracle_params(x, q);
  EXPECT_EQ(scale, want.scale);
  EXPECT_EQ(scale, static_cast<double>(static_cast<float>(1.0 / 4294967295.0)));
  EXPECT_EQ(want.zero_point, 2147483647);
  EXPECT_EQ(zp, want.zero_point);
  // With these parameters -1 must come back close to -1 (it is the group's minimum).
  std::int64_t code = 0;
  numeq::quantize_into(view_of(std::vector<double>{-1.0}, {1}), q, &scale, &zp,
                       numeq::quant_groups({1}, {1}, 0, 1), &code);
  EXPECT_NEAR(static_cast<double>(code - zp) * scale, -1.0, 300 * scale);
}

TEST_F(QuantizeTest, QuantParamsSpanIsNotRoundedBeforeTheDivision) {
  // Full range: scale = (max - min) / (qmax - qmin) rounded once to fp32. Two fp32 inputs whose
  // exact span, 255 * 16777469 + 2^-22, needs more than 53 bits: rounded to binary64 first it is
  // 255 * 16777469 exactly, whose quotient 16777469 is an fp32 tie (neighbours 16777468 and
  // 16777470) that goes to even, 16777468; the exact quotient lies above the tie: 16777470.
  const std::vector<float> x{4278254592.0f, -3.0000002384185791015625f};
  ASSERT_EQ(static_cast<double>(x[1]), -(3 + 0x1p-22));
  const std::vector<std::size_t> shape{2};
  const QuantGroups g = numeq::quant_groups(shape, {1}, 0, 1);
  for (const Format* f : {&numeq::formats::uint8, &numeq::formats::int8}) {
    const Quantization q{*f};
    double scale = 0;
    std::int64_t zp = 0;
    numeq::quant_params_into(view_of(x, shape), q, g, &scale, &zp);
    const Params want = oracle_params({static_cast<double>(x[0]), static_cast<double>(x[1])}, q);
    EXPECT_EQ(want.scale, 16777470.0);
    EXPECT_EQ(scale, want.scale) << f->name << ": got " << std::to_string(scale) << ", want "
                                 << std::to_string(want.scale);
  }
}

TEST_F(QuantizeTest, QuantParamsWorkedExamples) {
  // Values that make the definitions easy to follow by hand.
  const std::vector<std::size_t> shape{4};
  const QuantGroups g = numeq::quant_groups(shape, {1}, 0, 1);
  std::vector<double> scale(1);
  std::vector<std::int64_t> zp(1);
  const std::vector<double> x{-1.0, 0.5, 2.0, 3.0};
  // int8 symmetric: scale = fp32(3 / 127), zero point 0.
  numeq::quant_params_into(view_of(x, shape), Quantization{numeq::formats::int8, Rounding::nearest_even, QuantRange::symmetric},
                           g, scale.data(), zp.data());
  EXPECT_EQ(scale[0], static_cast<double>(3.0f / 127.0f));
  EXPECT_EQ(zp[0], 0);
  // uint8 full: scale = fp32(4 / 255); zero point = 0 - round(-1 / scale) = round(63.75) = 64.
  numeq::quant_params_into(view_of(x, shape), Quantization{numeq::formats::uint8}, g, scale.data(), zp.data());
  EXPECT_EQ(scale[0], static_cast<double>(4.0f / 255.0f));
  EXPECT_EQ(zp[0], 64);
  // All zeros: scale 1.
  const std::vector<double> zeros(4, 0.0);
  numeq::quant_params_into(view_of(zeros, shape), Quantization{numeq::formats::int8}, g, scale.data(), zp.data());
  EXPECT_EQ(scale[0], 1.0);
  // Non-finite input is refused, naming x.
  const std::vector<double> bad{1.0, kNaN, 0.0, 0.0};
  try {
    numeq::quant_params_into(view_of(bad, shape), Quantization{numeq::formats::int8}, g, scale.data(), zp.data());
    ADD_FAILURE() << "no error";
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("x", 0), 0u) << e.what();
  }
}

}  // namespace
