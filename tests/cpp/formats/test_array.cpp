// The array engine (numeq::round / encode / decode / convert over xtensor expressions) against the
// scalar API, element for element. The scalar casts are checked against MPFR elsewhere; what is
// tested here is that the engine visits the right memory for every C-order index (contiguous,
// strided, transposed, reversed, broadcast and lazy expressions), that element i of a stochastic
// cast uses draw i, that the thread count never changes a result, and the engine's errors.
//
// Expected inputs are always computed by hand from the backing memory (never by iterating the
// xtensor expression under test), so a wrong stride or offset in the engine cannot cancel out.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include "array_test_support.hpp"
#include "numeq/numeq.hpp"

namespace {

using numeq::Cast;
using numeq::Format;
using numeq::Rounding;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using numeq_test::ArrayTest;
using numeq_test::bits_of;
using numeq_test::describe;
using numeq_test::with_bits_type;

// Doubles over many binades, with exact ties of narrow formats (few significand bits), the
// extremes of the 8-bit formats, subnormals of binary64 and fp32, zeros, Inf and (optionally) NaN.
std::vector<double> sample_values(std::size_t n, std::uint64_t seed, bool with_nan) {
  std::mt19937_64 g(seed);
  const double specials[] = {0.0, -0.0, kInf, -kInf, 448.0, 464.0, 480.0, -57344.0, 61440.0,
                             6.0, 7.0, 0x1p-149, 0x1p-127, 0x1p-128, 1e-310, 3.0e38, 1e300};
  std::vector<double> v(n);
  for (auto& x : v) {
    const std::uint64_t r = g();
    if (r % 13 == 0) {
      x = specials[(r >> 8) % std::size(specials)];
      if ((r >> 20) & 1) x = -x;
      if (with_nan && ((r >> 24) % 5 == 0)) x = (r >> 30) & 1 ? kNaN : -kNaN;
      continue;
    }
    std::uint64_t mant = g() >> 11;        // 53 random bits
    if (r % 3 == 0) mant &= ~((std::uint64_t{1} << 43) - 1);  // 10 significant bits: many ties
    const double m = std::ldexp(static_cast<double>(mant | (std::uint64_t{1} << 52)), -52);
    const int e = static_cast<int>((r >> 16) % 60) - 40;  // 2^-40 .. 2^19
    x = std::ldexp(m, e);
    if ((r >> 40) & 1) x = -x;
  }
  return v;
}

const std::vector<const Format*>& cast_formats() {
  static const std::vector<const Format*> f{&numeq::formats::fp32,   &numeq::formats::tf32,
                                            &numeq::formats::bf16,   &numeq::formats::fp16,
                                            &numeq::formats::e4m3fn, &numeq::formats::e5m2,
                                            &numeq::formats::e4m3fnuz, &numeq::formats::e8m0fnu,
                                            &numeq::formats::e3m2fn, &numeq::formats::e2m1fn};
  return f;
}

const std::vector<Rounding>& all_modes() {
  static const std::vector<Rounding> m{Rounding::nearest_even, Rounding::nearest_away,
                                       Rounding::toward_zero,  Rounding::upward,
                                       Rounding::downward,     Rounding::odd,
                                       Rounding::stochastic};
  return m;
}

std::vector<Cast> all_casts() {
  std::vector<Cast> casts;
  for (const Format* f : cast_formats())
    for (Rounding r : all_modes()) {
      Cast c{*f, r};
      c.seed = 0x1234 + static_cast<std::uint64_t>(r);
      casts.push_back(c);
      if (r == Rounding::stochastic) {
        c.random_bits = 5;
        c.overflow = numeq::Overflow::saturate;
        c.seed = 99;
        casts.push_back(c);
      }
    }
  return casts;
}


// The C-order inputs of an expression, with NaNs dropped for formats that cannot hold them, is
// given by the caller. Checks round and encode element for element against the scalar API with
// index i, and that the output shape is the expression's.
template <class E>
void expect_matches_scalar(const E& expr, const std::vector<std::size_t>& shape,
                           const std::vector<double>& inputs, const Cast& cast,
                           const std::string& label) {
  SCOPED_TRACE(label + " " + describe(cast));
  const xt::xarray<double> r = numeq::round(expr, cast);
  ASSERT_EQ(std::vector<std::size_t>(r.shape().begin(), r.shape().end()), shape);
  ASSERT_EQ(r.size(), inputs.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const double want = numeq::round_to_format(inputs[i], cast, i);
    if (bits_of(r.data()[i]) != bits_of(want) && ++mismatches <= 5)
      ADD_FAILURE() << "round: element " << i << " input " << inputs[i] << " got " << r.data()[i]
                    << " want " << want;
  }
  EXPECT_EQ(mismatches, 0u);
  with_bits_type(cast.format.storage_bits, [&]<class Bits>() {
    const xt::xarray<Bits> b = numeq::encode<Bits>(expr, cast);
    ASSERT_EQ(std::vector<std::size_t>(b.shape().begin(), b.shape().end()), shape);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto want = static_cast<Bits>(numeq::encode(inputs[i], cast, i));
      if (b.data()[i] != want && ++bad <= 5)
        ADD_FAILURE() << "encode: element " << i << " input " << inputs[i] << " got 0x" << std::hex
                      << +b.data()[i] << " want 0x" << +want;
    }
    EXPECT_EQ(bad, 0u);
  });
}

// A strided adaptor over caller memory: xt::adapt(pointer, size, no_ownership, shape, strides).
// xtensor 0.24 wants `size` to be the number of elements of the shape (it checks it against the
// shape's product when it sets the strides), not the extent of memory the strides span.
template <class T>
auto strided(T* data, std::vector<std::size_t> shape, std::vector<std::ptrdiff_t> strides) {
  std::size_t size = 1;
  for (std::size_t s : shape) size *= s;
  return xt::adapt(data, size, xt::no_ownership(), std::move(shape), std::move(strides));
}

bool holds_nan(const Format& f) { return f.has_nan(); }

std::vector<double> for_format(std::vector<double> v, const Format& f) {
  if (!holds_nan(f))
    for (auto& x : v)
      if (std::isnan(x)) x = 1.5;
  return v;
}

// ---------------------------------------------------------------------------------------------

TEST_F(ArrayTest, XarrayOfDoublesMatchesScalar) {
  const auto base = sample_values(2 * 3 * 167, 1, true);
  for (const Cast& cast : all_casts()) {
    const auto v = for_format(base, cast.format);
    xt::xarray<double> a = xt::adapt(v, std::vector<std::size_t>{2, 3, 167});
    expect_matches_scalar(a, {2, 3, 167}, v, cast, "xarray<double>");
  }
}

TEST_F(ArrayTest, XarrayOfFloatsMatchesScalar) {
  const auto base = sample_values(1009, 2, true);
  for (const Cast& cast : all_casts()) {
    const auto v = for_format(base, cast.format);
    xt::xarray<float> a = xt::zeros<float>(std::vector<std::size_t>{1009});
    std::vector<double> widened(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      a(i) = static_cast<float>(v[i]);  // the float array is the input; its values widen exactly
      widened[i] = static_cast<double>(a(i));
    }
    expect_matches_scalar(a, {1009}, widened, cast, "xarray<float>");
  }
}

TEST_F(ArrayTest, ZeroDimensionalAndEmptyArrays) {
  const Cast cast{numeq::formats::bf16};
  xt::xarray<double> scalar = 1.0 / 3.0;
  const auto r = numeq::round(scalar, cast);
  EXPECT_EQ(r.dimension(), 0u);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(bits_of(r()), bits_of(numeq::round_to_format(1.0 / 3.0, cast)));
  xt::xarray<double> empty = xt::zeros<double>(std::vector<std::size_t>{0, 4});
  EXPECT_EQ(numeq::round(empty, cast).size(), 0u);
  EXPECT_EQ(numeq::encode<std::uint16_t>(empty, cast).size(), 0u);
}

TEST_F(ArrayTest, AdaptedContiguousVector) {
  const auto base = sample_values(4 * 250, 3, true);
  for (const Cast& cast : all_casts()) {
    const auto v = for_format(base, cast.format);
    std::vector<float> f(v.begin(), v.end());
    std::vector<double> widened(f.begin(), f.end());
    const auto ad = xt::adapt(v, std::vector<std::size_t>{4, 250});
    expect_matches_scalar(ad, {4, 250}, v, cast, "adapt(vector<double>)");
    const auto af = xt::adapt(f, std::vector<std::size_t>{1000});
    expect_matches_scalar(af, {1000}, widened, cast, "adapt(vector<float>)");
  }
}

TEST_F(ArrayTest, AdaptedEveryThirdElement) {
  const std::size_t n = 700;
  const auto base = sample_values(3 * n, 4, true);
  for (const Cast& cast : all_casts()) {
    const auto v = for_format(base, cast.format);
    const auto view = strided(v.data(), std::vector<std::size_t>{n}, std::vector<std::ptrdiff_t>{3});
    std::vector<double> expected(n);
    for (std::size_t i = 0; i < n; ++i) expected[i] = v[3 * i];
    expect_matches_scalar(view, {n}, expected, cast, "stride 3");
    // 2-D: rows of 20 taken from every 3rd element, rows 70 elements apart.
    const auto view2 = strided(v.data() + 1, std::vector<std::size_t>{29, 20}, std::vector<std::ptrdiff_t>{70, 3});
    std::vector<double> expected2;
    for (std::size_t r = 0; r < 29; ++r)
      for (std::size_t c = 0; c < 20; ++c) expected2.push_back(v[1 + r * 70 + c * 3]);
    expect_matches_scalar(view2, {29, 20}, expected2, cast, "2-D strided");
  }
}

TEST_F(ArrayTest, TransposedViews) {
  const std::size_t rows = 37, cols = 23;
  const auto base = sample_values(rows * cols, 5, true);
  for (const Cast& cast : all_casts()) {
    const auto v = for_format(base, cast.format);
    std::vector<double> expected;  // element (j, i) of the transpose is m[i][j]
    for (std::size_t j = 0; j < cols; ++j)
      for (std::size_t i = 0; i < rows; ++i) expected.push_back(v[i * cols + j]);
    // xt::adapt with the transposed strides.
    const auto t1 = strided(v.data(), std::vector<std::size_t>{cols, rows}, std::vector<std::ptrdiff_t>{1, static_cast<std::ptrdiff_t>(cols)});
    expect_matches_scalar(t1, {cols, rows}, expected, cast, "adapt transposed");
    // xt::transpose of an xarray.
    xt::xarray<double> m = xt::adapt(v, std::vector<std::size_t>{rows, cols});
    expect_matches_scalar(xt::transpose(m), {cols, rows}, expected, cast, "xt::transpose");
    // A column-major container: its memory is the transpose's, its C-order elements are m's.
    xt::xarray<double, xt::layout_type::column_major> cm = m;
    expect_matches_scalar(cm, {rows, cols}, v, cast, "column-major xarray");
  }
}

TEST_F(ArrayTest, NegativeStrides) {
  const std::size_t n = 401;
  const auto base = sample_values(2 * n, 6, true);
  for (const Cast& cast : all_casts()) {
    const auto v = for_format(base, cast.format);
    // Every 2nd element, last to first, through a pointer at the last element.
    const auto rev = strided(v.data() + (2 * n - 1), std::vector<std::size_t>{n}, std::vector<std::ptrdiff_t>{-2});
    std::vector<double> expected(n);
    for (std::size_t i = 0; i < n; ++i) expected[i] = v[2 * n - 1 - 2 * i];
    expect_matches_scalar(rev, {n}, expected, cast, "adapt stride -2");
    // xt::view reversing the columns of a matrix (a data offset and a negative stride).
    xt::xarray<double> m = xt::adapt(v, std::vector<std::size_t>{2, n});
    const auto flipped =
        xt::view(m, xt::all(), xt::range(xt::placeholders::_, xt::placeholders::_, -1));
    std::vector<double> expected2;
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t c = 0; c < n; ++c) expected2.push_back(v[r * n + (n - 1 - c)]);
    expect_matches_scalar(flipped, {2, n}, expected2, cast, "view reversed columns");
  }
}

TEST_F(ArrayTest, ZeroStrideBroadcast) {
  const auto base = sample_values(50, 7, true);
  for (const Cast& cast : all_casts()) {
    const auto v = for_format(base, cast.format);
    const auto b = strided(v.data(), std::vector<std::size_t>{4, 50}, std::vector<std::ptrdiff_t>{0, 1});
    std::vector<double> expected;
    for (int r = 0; r < 4; ++r) expected.insert(expected.end(), v.begin(), v.end());
    // Rows repeat the same inputs but have their own indices, hence their own stochastic draws.
    expect_matches_scalar(b, {4, 50}, expected, cast, "stride 0");
  }
}

TEST_F(ArrayTest, LazyExpressions) {
  const std::size_t n = 600;
  const auto av = sample_values(n, 8, false);
  const auto bv = sample_values(n, 9, false);
  xt::xarray<double> a = xt::adapt(av, std::vector<std::size_t>{20, 30});
  xt::xarray<double> b = xt::adapt(bv, std::vector<std::size_t>{20, 30});
  xt::xarray<float> af = xt::cast<float>(a);
  xt::xarray<float> bf = xt::cast<float>(b);
  std::vector<double> sum(n), product(n), sumf(n);
  for (std::size_t i = 0; i < n; ++i) {
    sum[i] = av[i] + bv[i];
    product[i] = av[i] * 0.75;
    sumf[i] = static_cast<double>(static_cast<float>(av[i]) + static_cast<float>(bv[i]));
  }
  for (const Cast& cast : all_casts()) {
    if (!cast.format.has_nan()) continue;  // Inf - Inf in the sums is NaN
    expect_matches_scalar(a + b, {20, 30}, sum, cast, "a + b");
    expect_matches_scalar(a * 0.75, {20, 30}, product, cast, "a * 0.75");
    expect_matches_scalar(af + bf, {20, 30}, sumf, cast, "float a + b");
  }
  // A lazy view of a lazy expression: the transpose of a + b.
  std::vector<double> tsum;
  for (std::size_t j = 0; j < 30; ++j)
    for (std::size_t i = 0; i < 20; ++i) tsum.push_back(sum[i * 30 + j]);
  Cast c{numeq::formats::e4m3fn, Rounding::stochastic};
  c.seed = 5;
  expect_matches_scalar(xt::transpose(a + b), {30, 20}, tsum, c, "transpose(a + b)");
}

// ---------------------------------------------------------------------------------------------
// Thread counts: results (stochastic included) are identical for 1, 2, 3 and 7 threads on arrays
// far above the parallel threshold (2^16), contiguous and strided (chunks start mid-row).

TEST_F(ArrayTest, ThreadCountNeverChangesResults) {
  const std::size_t rows = 600, cols = 500;  // 300,000 elements
  const auto v = sample_values(rows * cols, 10, false);
  std::vector<Cast> casts{Cast{numeq::formats::bf16}, Cast{numeq::formats::e4m3fn, Rounding::stochastic},
                          Cast{numeq::formats::e2m1fn, Rounding::stochastic, numeq::Overflow::saturate},
                          Cast{numeq::formats::fp16, Rounding::odd}};
  casts[1].seed = 7;
  casts[2].seed = 11;
  casts[2].random_bits = 3;
  const auto contiguous = xt::adapt(v, std::vector<std::size_t>{rows, cols});
  const auto transposed = strided(v.data(), std::vector<std::size_t>{cols, rows}, std::vector<std::ptrdiff_t>{1, static_cast<std::ptrdiff_t>(cols)});
  std::vector<double> transposed_inputs;
  transposed_inputs.reserve(v.size());
  for (std::size_t j = 0; j < cols; ++j)
    for (std::size_t i = 0; i < rows; ++i) transposed_inputs.push_back(v[i * cols + j]);

  for (const Cast& cast : casts) {
    SCOPED_TRACE(describe(cast));
    // The reference: the scalar API, element by element.
    std::vector<double> want_c(v.size()), want_t(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      want_c[i] = numeq::round_to_format(v[i], cast, i);
      want_t[i] = numeq::round_to_format(transposed_inputs[i], cast, i);
    }
    for (int threads : {1, 2, 3, 7}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      numeq::set_num_threads(threads);
      ASSERT_EQ(numeq::num_threads(), threads);
      const auto rc = numeq::round(contiguous, cast);
      const auto rt = numeq::round(transposed, cast);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (bits_of(rc.data()[i]) != bits_of(want_c[i])) ++bad;
        if (bits_of(rt.data()[i]) != bits_of(want_t[i])) ++bad;
      }
      EXPECT_EQ(bad, 0u);
      with_bits_type(cast.format.storage_bits, [&]<class Bits>() {
        const auto bc = numeq::encode<Bits>(contiguous, cast);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < v.size(); ++i)
          if (bc.data()[i] != static_cast<Bits>(numeq::encode(v[i], cast, i))) ++wrong;
        EXPECT_EQ(wrong, 0u);
      });
    }
  }
}

TEST_F(ArrayTest, NaNIntoFormatWithoutNaNNamesFirstElement) {
  const std::size_t rows = 600, cols = 500;
  std::vector<double> v = sample_values(rows * cols, 12, false);
  v[200000] = kNaN;
  v[150001] = -kNaN;
  v[299999] = kNaN;
  const auto a = xt::adapt(v, std::vector<std::size_t>{rows, cols});
  // In the transpose, element (j, i) is v[i * cols + j]: its C-order index is j * rows + i.
  const auto t = strided(v.data(), std::vector<std::size_t>{cols, rows}, std::vector<std::ptrdiff_t>{1, static_cast<std::ptrdiff_t>(cols)});
  std::size_t first_in_t = std::numeric_limits<std::size_t>::max();
  for (std::size_t k : {200000u, 150001u, 299999u})
    first_in_t = std::min(first_in_t, (k % cols) * rows + k / cols);
  for (const Format* f : {&numeq::formats::e2m1fn, &numeq::formats::e3m2fn, &numeq::formats::e2m3fn}) {
    for (int threads : {1, 2, 3, 7}) {
      numeq::set_num_threads(threads);
      for (Rounding r : {Rounding::nearest_even, Rounding::stochastic}) {
        const Cast cast{*f, r};
        SCOPED_TRACE(describe(cast) + " threads " + std::to_string(threads));
        try {
          (void)numeq::round(a, cast);
          ADD_FAILURE() << "no error for a NaN into " << f->name;
        } catch (const numeq::error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("element 150001 "), std::string::npos) << what;
          EXPECT_NE(what.find(std::string(f->name)), std::string::npos) << what;
          EXPECT_EQ(what.rfind("x", 0), 0u) << what;  // names the argument
        }
        try {
          (void)numeq::encode<std::uint8_t>(t, cast);
          ADD_FAILURE() << "no error for a NaN into " << f->name;
        } catch (const numeq::error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("element " + std::to_string(first_in_t) + " "), std::string::npos) << what;
        }
      }
    }
  }
  // A format with NaN takes the same array.
  numeq::set_num_threads(3);
  const auto r = numeq::round(a, Cast{numeq::formats::e4m3fn});
  EXPECT_TRUE(std::isnan(r.data()[150001]));
}

// ---------------------------------------------------------------------------------------------
// decode and convert

TEST_F(ArrayTest, DecodeEveryPatternMatchesScalar) {
  for (const Format* f : numeq::all_formats()) {
    if (f->storage_bits > 16) continue;
    SCOPED_TRACE(std::string(f->name));
    const std::uint64_t mask = numeq::pattern_mask(*f);
    with_bits_type(f->storage_bits, [&]<class Bits>() {
      std::vector<Bits> patterns;
      for (std::uint64_t b = 0; b <= mask; ++b)
        if ((b & ~mask) == 0) patterns.push_back(static_cast<Bits>(b));
      const auto a = xt::adapt(patterns, std::vector<std::size_t>{patterns.size()});
      const auto d = numeq::decode(a, *f);
      ASSERT_EQ(d.size(), patterns.size());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < patterns.size(); ++i)
        if (bits_of(d.data()[i]) != bits_of(numeq::decode(patterns[i], *f))) ++bad;
      EXPECT_EQ(bad, 0u);
      // Reversed: element i is pattern n-1-i.
      const std::size_t n = patterns.size();
      const auto rev = strided(patterns.data() + (n - 1), std::vector<std::size_t>{n}, std::vector<std::ptrdiff_t>{-1});
      const auto dr = numeq::decode(rev, *f);
      for (std::size_t i = 0; i < n; ++i)
        if (bits_of(dr.data()[i]) != bits_of(numeq::decode(patterns[n - 1 - i], *f))) ++bad;
      EXPECT_EQ(bad, 0u);
    });
  }
}

TEST_F(ArrayTest, DecodeIntegersIsTwosComplement) {
  std::vector<std::uint8_t> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(b);
  const auto a = xt::adapt(bytes, std::vector<std::size_t>{16, 16});
  const auto d8 = numeq::decode(a, numeq::formats::int8);
  const auto du8 = numeq::decode(a, numeq::formats::uint8);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(d8.data()[b], b < 128 ? b : b - 256);
    EXPECT_EQ(du8.data()[b], b);
  }
  std::vector<std::int8_t> signed_bytes{-128, -1, 0, 1, 127};
  const auto ds = numeq::decode(xt::adapt(signed_bytes, std::vector<std::size_t>{5}), numeq::formats::int8);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(ds.data()[i], signed_bytes[i]);
  std::vector<std::uint32_t> words{0u, 1u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu};
  const auto d32 = numeq::decode(xt::adapt(words, std::vector<std::size_t>{5}), numeq::formats::int32);
  const double want32[] = {0.0, 1.0, 2147483647.0, -2147483648.0, -1.0};
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(d32.data()[i], want32[i]);
}

TEST_F(ArrayTest, DecodeRejectsBitsOutsideThePattern) {
  struct Case {
    const Format* f;
    std::uint64_t bad;
  };
  // e3m2fn patterns are 6 bits, e2m1fn 4 bits, tf32 the top 19 bits of 32, e8m0fnu all 8 bits of
  // a byte are valid (so a wider element type is used to go outside).
  for (const Case& c : {Case{&numeq::formats::e3m2fn, 0x40}, Case{&numeq::formats::e2m1fn, 0x10},
                        Case{&numeq::formats::e2m3fn, 0x80}, Case{&numeq::formats::tf32, 0x3F800001},
                        Case{&numeq::formats::e4m3fn, 0x100}, Case{&numeq::formats::bf16, 0x10000}}) {
    SCOPED_TRACE(std::string(c.f->name));
    std::vector<std::uint32_t> bits(300000, 0);
    bits[123457] = static_cast<std::uint32_t>(c.bad);
    bits[250000] = static_cast<std::uint32_t>(c.bad);
    for (int threads : {1, 3}) {
      numeq::set_num_threads(threads);
      try {
        (void)numeq::decode(xt::adapt(bits, std::vector<std::size_t>{bits.size()}), *c.f);
        ADD_FAILURE() << "no error";
      } catch (const numeq::error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("element 123457 "), std::string::npos) << what;
        EXPECT_NE(what.find(std::string(c.f->name)), std::string::npos) << what;
      }
    }
    // The scalar API agrees that the pattern is invalid and the valid part of the array decodes.
    EXPECT_THROW((void)numeq::decode(c.bad, *c.f), numeq::error);
  }
  // A signed element type: -1 as int8 elements is 0xFF, outside e3m2fn's 6 bits.
  std::vector<std::int8_t> s{0, 1, -1};
  EXPECT_THROW((void)numeq::decode(xt::adapt(s, std::vector<std::size_t>{3}), numeq::formats::e3m2fn),
               numeq::error);
}

TEST_F(ArrayTest, ConvertMatchesScalar) {
  // Every bf16 pattern into e4m3fn, e5m2 and e2m1fn (NaN patterns skipped for e2m1fn).
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (const Format* f : {&numeq::formats::e4m3fn, &numeq::formats::e5m2, &numeq::formats::e2m1fn}) {
    std::vector<std::uint16_t> patterns;
    for (std::uint16_t p : all)
      if (f->has_nan() || !std::isnan(numeq::decode(p, numeq::formats::bf16))) patterns.push_back(p);
    // A strided view: every 2nd pattern.
    const std::size_t n = patterns.size() / 2;
    const auto view = strided(patterns.data(), std::vector<std::size_t>{n}, std::vector<std::ptrdiff_t>{2});
    for (Rounding r : all_modes()) {
      Cast cast{*f, r};
      cast.seed = 3;
      SCOPED_TRACE(describe(cast));
      numeq::set_num_threads(r == Rounding::stochastic ? 3 : 1);
      const auto got = numeq::convert(view, numeq::formats::bf16, cast);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double want = numeq::decode(numeq::convert(patterns[2 * i], numeq::formats::bf16, cast, i), *f);
        if (bits_of(got.data()[i]) != bits_of(want)) ++bad;
      }
      EXPECT_EQ(bad, 0u);
    }
  }
}

TEST_F(ArrayTest, CastToWritesValuesAndBitsIntoCallerMemory) {
  // The form the Python bindings use: an xt::adapt view of caller memory in, caller memory out.
  // Reversed bf16 patterns (negative stride) into e4m3fn, both outputs, against the scalar API.
  std::vector<std::uint16_t> patterns(4096);
  for (std::size_t i = 0; i < patterns.size(); ++i) patterns[i] = static_cast<std::uint16_t>(0x3000 + 7 * i);
  const std::size_t n = patterns.size();
  const auto view = strided(patterns.data() + n - 1, std::vector<std::size_t>{n}, std::vector<std::ptrdiff_t>{-1});
  Cast cast{numeq::formats::e4m3fn, Rounding::stochastic, numeq::Overflow::saturate};
  cast.seed = 11;
  std::vector<double> values(n);
  std::vector<std::uint8_t> bits(n);
  numeq::cast_to(view, numeq::formats::bf16, cast, values.data(), bits.data());
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t want = numeq::convert(patterns[n - 1 - i], numeq::formats::bf16, cast, i);
    ASSERT_EQ(bits[i], want) << i;
    ASSERT_EQ(bits_of(values[i]), bits_of(numeq::decode(want, numeq::formats::e4m3fn))) << i;
  }
  // Elements of the wrong width for the source format.
  EXPECT_THROW(numeq::cast_to(view, numeq::formats::e4m3fn, cast, values.data(), nullptr), numeq::error);
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST_F(ArrayTest, EncodeWithTheWrongWidthThrows) {
  xt::xarray<double> a = {1.0, 2.0};
  EXPECT_THROW((void)numeq::encode<std::uint16_t>(a, Cast{numeq::formats::e4m3fn}), numeq::error);
  EXPECT_THROW((void)numeq::encode<std::uint8_t>(a, Cast{numeq::formats::bf16}), numeq::error);
  EXPECT_THROW((void)numeq::encode<std::uint64_t>(a, Cast{numeq::formats::fp32}), numeq::error);
  EXPECT_THROW((void)numeq::encode<std::uint16_t>(a, Cast{numeq::formats::tf32}), numeq::error);
  EXPECT_NO_THROW((void)numeq::encode<std::uint32_t>(a, Cast{numeq::formats::tf32}));
  // tf32 travels as fp32 patterns with the 13 low bits zero.
  const auto t = numeq::encode<std::uint32_t>(xt::xarray<double>{1.0 / 3.0}, Cast{numeq::formats::tf32});
  EXPECT_EQ(t(0) & 0x1FFFu, 0u);
  EXPECT_EQ(t(0), numeq::encode(1.0 / 3.0, Cast{numeq::formats::tf32}));
}

TEST_F(ArrayTest, InvalidCastsThrow) {
  xt::xarray<double> a = {1.0, 2.0};
  EXPECT_THROW((void)numeq::round(a, Cast{numeq::formats::int8}), numeq::error);
  Cast bad{numeq::formats::bf16, Rounding::stochastic};
  bad.random_bits = 0;
  EXPECT_THROW((void)numeq::round(a, bad), numeq::error);
  bad.random_bits = 65;
  EXPECT_THROW((void)numeq::round(a, bad), numeq::error);
  std::vector<std::uint8_t> p{1, 2};
  EXPECT_THROW((void)numeq::convert(xt::adapt(p, std::vector<std::size_t>{2}), numeq::formats::int8,
                                    Cast{numeq::formats::bf16}),
               numeq::error);
}

}  // namespace
