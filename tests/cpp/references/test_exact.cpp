// Exact sum / dot / matmul against MPFR: every result element is the MPFR sum of exact products
// (2400-bit, so exact) rounded by the independent oracle, compared bit for bit.

#include "numeq/references/exact.hpp"

#include <gtest/gtest.h>
#include <mpfr.h>

#include <bit>
#include <cmath>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "oracle/mpfr_oracle.hpp"
#include "oracle/test_support.hpp"

namespace {

using numeq::Cast;
using numeq::Format;
using numeq::Rounding;
namespace formats = numeq::formats;
namespace reference = numeq::reference;

enum class Kind { normal, cancelling, huge_range, subnormal, overflowing };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::normal: return "normal";
    case Kind::cancelling: return "cancelling";
    case Kind::huge_range: return "huge_range";
    case Kind::subnormal: return "subnormal";
    case Kind::overflowing: return "overflowing";
  }
  return "?";
}

// A random finite value of format f drawn as kind k. Values are produced as bit patterns of f
// (decoded by the oracle's own decoder), so every one lies in the format.
double draw(std::mt19937_64& rng, const Format& f, Kind k) {
  const int bits = f.bits();
  const std::uint64_t mask = bits == 64 ? ~0ull : (std::uint64_t{1} << bits) - 1;
  const std::uint64_t fraction_mask = (std::uint64_t{1} << f.mantissa_bits) - 1;
  const std::uint64_t sign = std::uint64_t{1} << (bits - 1);
  for (;;) {
    std::uint64_t pattern = rng() & mask;
    const std::uint64_t field = (pattern >> f.mantissa_bits) & ((std::uint64_t{1} << f.exponent_bits) - 1);
    const std::uint64_t top = (std::uint64_t{1} << f.exponent_bits) - 1;
    switch (k) {
      case Kind::normal:  // exponents within +-4 binades of 1
        pattern = (pattern & (sign | fraction_mask)) |
                  (static_cast<std::uint64_t>(f.bias - 4 + static_cast<int>(rng() % 9)) << f.mantissa_bits);
        break;
      case Kind::subnormal: pattern &= sign | fraction_mask; break;
      case Kind::overflowing:  // the top two binades
        pattern = (pattern & (sign | fraction_mask)) | ((top - 1 - (rng() % 2)) << f.mantissa_bits);
        break;
      default: (void)field; break;
    }
    const double x = numeq_oracle::decode_oracle(f, pattern << f.storage_shift);
    if (std::isfinite(x)) return x;
  }
}

// An array of the given shape, every element drawn from format f as kind k.
xt::xarray<double> drawn(std::mt19937_64& rng, const std::vector<std::size_t>& shape, const Format& f, Kind k) {
  xt::xarray<double> x = xt::xarray<double>::from_shape(shape);
  for (double& v : x) v = draw(rng, f, k);
  return x;
}

class MpfrDot {
 public:
  MpfrDot() {
    mpfr_init2(sum_, 2400);
    mpfr_init2(term_, 256);
  }
  ~MpfrDot() {
    mpfr_clear(sum_);
    mpfr_clear(term_);
  }
  void clear() { mpfr_set_zero(sum_, 1); }
  void add_product(double x, double y) {
    mpfr_set_d(term_, x, MPFR_RNDN);
    mpfr_mul_d(term_, term_, y, MPFR_RNDN);
    mpfr_add(sum_, sum_, term_, MPFR_RNDN);
  }
  void add(double x) {
    mpfr_set_d(term_, x, MPFR_RNDN);
    mpfr_add(sum_, sum_, term_, MPFR_RNDN);
  }
  mpfr_srcptr value() const { return sum_; }

 private:
  mpfr_t sum_, term_;
};

const Format* const kInputs[] = {&formats::bf16, &formats::fp16, &formats::e4m3fn, &formats::e5m2, &formats::fp32};
const Format* const kResults[] = {&formats::fp32, &formats::bf16, &formats::fp16};
const Rounding kChecked[] = {Rounding::nearest_even, Rounding::toward_zero, Rounding::upward, Rounding::odd,
                             Rounding::stochastic};

TEST(ExactMatmul, AgreesWithMpfrBitForBit) {
  std::mt19937_64 rng(11);
  MpfrDot ref;
  std::size_t compared = 0;
  for (const Format* in : kInputs) {
    for (Kind kind : {Kind::normal, Kind::cancelling, Kind::huge_range, Kind::subnormal, Kind::overflowing}) {
      const std::size_t M = 12, K = 1 + rng() % 64, N = 10;
      xt::xarray<double> a = xt::xarray<double>::from_shape({M, K});
      xt::xarray<double> b = xt::xarray<double>::from_shape({K, N});
      for (double& x : a) x = draw(rng, *in, kind == Kind::cancelling ? Kind::normal : kind);
      for (double& x : b) x = draw(rng, *in, kind == Kind::cancelling ? Kind::normal : kind);
      if (kind == Kind::cancelling && K >= 2) {
        // Each row of a repeats its first half negated, against equal halves of b's columns, plus
        // one small term: the large products cancel exactly.
        for (std::size_t m = 0; m < M; ++m)
          for (std::size_t k = 0; k + 1 < K; k += 2) a(m, k + 1) = -a(m, k);
        for (std::size_t n = 0; n < N; ++n)
          for (std::size_t k = 0; k + 1 < K; k += 2) b(k + 1, n) = b(k, n);
        a(0, K - 1) = draw(rng, *in, Kind::subnormal);
      }
      for (const Format* out : kResults) {
        for (Rounding mode : kChecked) {
          Cast cast{*out, mode};
          cast.seed = 5;
          const xt::xarray<double> got = reference::matmul(a, b, cast);
          numeq_oracle::RoundOracle oracle(*out);
          for (std::size_t m = 0; m < M; ++m) {
            for (std::size_t n = 0; n < N; ++n) {
              ref.clear();
              for (std::size_t k = 0; k < K; ++k) ref.add_product(a(m, k), b(k, n));
              const auto expected = oracle.cast_value(ref.value(), cast, m * N + n);
              if (mpfr_zero_p(ref.value())) {
                ASSERT_EQ(got(m, n), 0.0);
                continue;
              }
              ASSERT_TRUE(numeq_oracle::same_value(got(m, n), expected.value))
                  << in->name << " " << kind_name(kind) << " -> " << out->name << " mode "
                  << static_cast<int>(mode) << " element (" << m << ", " << n << "): expected "
                  << numeq_oracle::describe(expected.value) << ", got " << numeq_oracle::describe(got(m, n));
              ++compared;
            }
          }
        }
      }
    }
  }
  std::printf("[ exact ] %zu matmul elements compared with MPFR\n", compared);
}

TEST(ExactMatmul, BatchesBroadcastAndBiasIsAddedExactly) {
  std::mt19937_64 rng(12);
  const std::size_t M = 3, K = 7, N = 2;
  const xt::xarray<double> a = drawn(rng, {2, 1, M, K}, formats::bf16, Kind::huge_range);
  const xt::xarray<double> b = drawn(rng, {3, K, N}, formats::bf16, Kind::huge_range);
  const xt::xarray<double> c = drawn(rng, {N}, formats::fp32, Kind::huge_range);
  const Cast cast{formats::fp32};
  const xt::xarray<double> got = reference::matmul(a, b, cast, &c);
  ASSERT_EQ(got.shape().size(), 4u);
  EXPECT_EQ(got.shape()[0], 2u);
  EXPECT_EQ(got.shape()[1], 3u);
  MpfrDot ref;
  numeq_oracle::RoundOracle oracle(formats::fp32);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t m = 0; m < M; ++m)
        for (std::size_t n = 0; n < N; ++n) {
          ref.clear();
          for (std::size_t k = 0; k < K; ++k) ref.add_product(a(i, 0, m, k), b(j, k, n));
          ref.add(c(n));
          const auto expected = oracle.cast_value(ref.value(), cast);
          ASSERT_TRUE(numeq_oracle::same_value(got(i, j, m, n), expected.value));
        }
}

TEST(ExactSum, AlongEveryAxisAndDot) {
  std::mt19937_64 rng(13);
  xt::xarray<double> x = xt::xarray<double>::from_shape({3, 4, 5});
  for (double& v : x) v = draw(rng, formats::fp32, Kind::huge_range);
  MpfrDot ref;
  const Cast cast{formats::bf16, Rounding::nearest_even};
  numeq_oracle::RoundOracle oracle(formats::bf16);
  for (std::ptrdiff_t axis : {0, 1, 2, -1}) {
    const xt::xarray<double> got = reference::sum(x, axis, cast);
    const std::size_t ax = static_cast<std::size_t>(axis < 0 ? axis + 3 : axis);
    ASSERT_EQ(got.dimension(), 2u);
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 4; ++j)
        for (std::size_t k = 0; k < 5; ++k) {
          std::size_t idx[3] = {i, j, k};
          if (idx[ax] != 0) continue;
          ref.clear();
          for (std::size_t t = 0; t < x.shape()[ax]; ++t) {
            idx[ax] = t;
            ref.add(x(idx[0], idx[1], idx[2]));
          }
          idx[ax] = 0;
          const double g = ax == 0 ? got(j, k) : ax == 1 ? got(i, k) : got(i, j);
          ASSERT_TRUE(numeq_oracle::same_value(g, oracle.cast_value(ref.value(), cast).value)) << "axis " << axis;
        }
  }
  xt::xarray<double> u = xt::xarray<double>::from_shape({100});
  xt::xarray<double> v = xt::xarray<double>::from_shape({100});
  for (double& t : u) t = draw(rng, formats::e4m3fn, Kind::huge_range);
  for (double& t : v) t = draw(rng, formats::e4m3fn, Kind::huge_range);
  ref.clear();
  for (std::size_t k = 0; k < 100; ++k) ref.add_product(u(k), v(k));
  const auto d = reference::dot(u, v, Cast{formats::fp16});
  numeq_oracle::RoundOracle o16(formats::fp16);
  EXPECT_TRUE(numeq_oracle::same_value(d(), o16.cast_value(ref.value(), Cast{formats::fp16}).value));
  // The double-double form: hi is the exact value to nearest.
  const auto e = reference::dot_exact(u, v);
  mpfr_t hi;
  mpfr_init2(hi, 53);
  mpfr_set(hi, ref.value(), MPFR_RNDN);
  EXPECT_EQ(e.hi(), mpfr_get_d(hi, MPFR_RNDN));
  mpfr_clear(hi);
}

TEST(ExactMatmul, ResultsDoNotDependOnTheThreadCount) {
  std::mt19937_64 rng(14);
  const xt::xarray<double> a = drawn(rng, {64, 300}, formats::bf16, Kind::normal);
  const xt::xarray<double> b = drawn(rng, {300, 64}, formats::bf16, Kind::normal);
  Cast cast{formats::bf16, Rounding::stochastic};
  cast.seed = 3;
  numeq::set_num_threads(1);
  const xt::xarray<double> one = reference::matmul(a, b, cast);
  numeq::set_num_threads(4);
  const xt::xarray<double> four = reference::matmul(a, b, cast);
  numeq::set_num_threads(0);
  EXPECT_EQ(one, four);
}

TEST(ExactMatmul, ExactZerosTakeTheSignIeee754Gives) {
  // IEEE 754-2019 s6.3: cancelling nonzero products give +0 (-0 rounding downward); a sum of
  // -0 products is -0; +0 + -0 is +0.
  auto m = [](std::initializer_list<double> row, std::initializer_list<double> col, Rounding mode,
              const xt::xarray<double>* c = nullptr) {
    xt::xarray<double> a = xt::xarray<double>::from_shape({1, row.size()});
    xt::xarray<double> b = xt::xarray<double>::from_shape({col.size(), 1});
    std::copy(row.begin(), row.end(), a.begin());
    std::copy(col.begin(), col.end(), b.begin());
    return reference::matmul(a, b, Cast{formats::fp32, mode}, c)(0, 0);
  };
  EXPECT_TRUE(std::signbit(m({-0.0, -0.0}, {1.0, 2.0}, Rounding::nearest_even)));
  EXPECT_FALSE(std::signbit(m({1.0, -1.0}, {3.0, 3.0}, Rounding::nearest_even)));
  EXPECT_TRUE(std::signbit(m({1.0, -1.0}, {3.0, 3.0}, Rounding::downward)));
  xt::xarray<double> minus_zero = xt::xarray<double>::from_shape({1});
  minus_zero(0) = -0.0;
  EXPECT_FALSE(std::signbit(m({0.0}, {1.0}, Rounding::nearest_even, &minus_zero)));
  EXPECT_TRUE(std::signbit(m({-0.0}, {1.0}, Rounding::nearest_even, &minus_zero)));
}

// ---- the sliced (error-free GEMM) paths, element by element against independent oracles ----

// Operands built to reach every path of the sliced matmul: one slice per vector (narrow inputs,
// written straight into the result), a few wide rows and columns (per-vector slice counts, the
// 128-bit window), very wide ones (the long accumulator over slice products), and the elements
// the long-accumulator loop keeps: rows and columns with Inf or NaN, all-zero vectors, exact
// zeros from cancellation, -0 entries.
struct Operands {
  std::string name;
  xt::xarray<double> a, b, c;  // c empty: no bias
};

// Adversarial edits to a (M x K) and b (K x N) drawn from `in`: rows 1 and 2 of a and columns 1
// and 2 of b get tiny entries (wide vectors); row 3 of a holds Inf, column 3 of b NaN; row 4 of
// a and column 4 of b are all zero (-0 in places); row 5 of a against column 5 of b cancels
// exactly.
void make_adversarial(std::mt19937_64& rng, const Format& in, xt::xarray<double>& a, xt::xarray<double>& b,
                      int tiny_exponent) {
  const std::size_t M = a.shape()[0], K = a.shape()[1], N = b.shape()[1];
  ASSERT_TRUE(M > 7 && N > 6 && K >= 4);
  const Cast into{in, Rounding::nearest_even};
  auto tiny = [&] { return numeq::round_to_format(std::ldexp(draw(rng, in, Kind::normal), tiny_exponent), into); };
  for (std::size_t k = 0; k < K; k += 3) {
    a(1, k) = tiny();
    b(k, 2) = tiny();
  }
  a(2, K / 2) = tiny();
  b(K - 1, 1) = tiny();
  a(3, K / 3) = std::numeric_limits<double>::infinity();
  b(K / 2, 3) = std::nan("");
  for (std::size_t k = 0; k < K; ++k) {
    a(4, k) = k % 2 ? -0.0 : 0.0;
    b(k, 4) = -0.0;
  }
  for (std::size_t k = 0; k + 1 < K; k += 2) {
    a(5, k + 1) = -a(5, k);
    b(k + 1, 5) = b(k, 5);
  }
  if (K % 2) a(5, K - 1) = 0.0;
  // The last entry of a row or column (left over by the scans' four lanes when K % 4 != 0) sets
  // its lowest bit, or its leading bit.
  a(6, K - 1) = tiny();
  a(7, K - 1) = numeq::round_to_format(std::ldexp(a(7, 0), 6), into);
  b(K - 1, 6) = tiny();
}

std::vector<Operands> sliced_cases() {
  std::mt19937_64 rng(21);
  std::vector<Operands> cases;
  auto make = [&](std::string name, const Format& in, Kind kind, std::size_t M, std::size_t K, std::size_t N,
                  int tiny_exponent, bool bias) {
    Operands o{std::move(name), drawn(rng, {M, K}, in, kind), drawn(rng, {K, N}, in, kind), {}};
    if (tiny_exponent != 0) make_adversarial(rng, in, o.a, o.b, tiny_exponent);
    if (bias) {
      o.c = drawn(rng, {M, N}, formats::fp32, Kind::normal);
      // Some far below the products' bits: their sums need a double-double (a TwoSum remainder).
      for (std::size_t m = 0; m < M; ++m)
        for (std::size_t n = m % 3; n < N; n += 3) o.c(m, n) = std::ldexp(o.c(m, n), -70);
      o.c(0, 0) = std::numeric_limits<double>::infinity();
    }
    cases.push_back(std::move(o));
  };
  make("e4m3fn one slice", formats::e4m3fn, Kind::normal, 33, 70, 29, 0, false);
  make("e4m3fn full range, adversarial", formats::e4m3fn, Kind::huge_range, 33, 70, 29, -3, false);
  make("bf16 one slice", formats::bf16, Kind::normal, 40, 300, 37, 0, false);
  make("bf16 wide vectors", formats::bf16, Kind::normal, 40, 300, 37, -30, false);
  make("bf16 wide vectors, bias", formats::bf16, Kind::normal, 40, 300, 37, -30, true);
  make("bf16 one slice, bias", formats::bf16, Kind::normal, 21, 1100, 19, 0, true);
  make("bf16 full range", formats::bf16, Kind::huge_range, 17, 40, 15, -100, false);
  make("fp16 subnormals", formats::fp16, Kind::subnormal, 17, 64, 15, -4, false);
  make("fp32 wide vectors", formats::fp32, Kind::normal, 17, 90, 15, -70, false);
  make("fp32 wide vectors, bias", formats::fp32, Kind::normal, 17, 90, 15, -70, true);
  // The exact value of a bias that cancels the product: the TwoSum sum is zero.
  Operands& last = cases[4];
  last.c(6, 6) = 0;
  {
    numeq::LongAccumulator acc;
    for (std::size_t k = 0; k < last.a.shape()[1]; ++k) acc.add_product(last.a(6, k), last.b(k, 6));
    last.c(6, 6) = -acc.to_double_double().hi;
  }
  return cases;
}

const Cast kSlicedCasts[] = {
    Cast{formats::fp32, Rounding::nearest_even},
    Cast{formats::bf16, Rounding::toward_zero},
    Cast{formats::fp16, Rounding::stochastic, numeq::Overflow::ieee, numeq::Subnormals::keep, 7},
    Cast{formats::e4m3fn, Rounding::nearest_even, numeq::Overflow::saturate},
    Cast{formats::fp64, Rounding::downward},
};

// The long-accumulator oracle of element (m, n): the products added one by one, then c.
numeq::LongAccumulator slow_element(const Operands& o, std::size_t m, std::size_t n) {
  numeq::LongAccumulator acc;
  for (std::size_t k = 0; k < o.a.shape()[1]; ++k) acc.add_product(o.a(m, k), o.b(k, n));
  if (o.c.size() > 0) acc.add(o.c(m, n));
  return acc;
}

TEST(ExactMatmul, SlicedPathsAgreeWithMpfrAndTheLongAccumulator) {
  std::size_t mpfr_checked = 0;
  for (const Operands& o : sliced_cases()) {
    const std::size_t M = o.a.shape()[0], N = o.b.shape()[1], K = o.a.shape()[1];
    const xt::xarray<double>* c = o.c.size() > 0 ? &o.c : nullptr;
    const reference::ExactValues exact = reference::matmul_exact(o.a, o.b, c);
    std::vector<xt::xarray<double>> rounded;
    for (const Cast& cast : kSlicedCasts) rounded.push_back(reference::matmul(o.a, o.b, cast, c));
    MpfrDot ref;
    mpfr_t hi, rest;
    mpfr_init2(hi, 53);
    mpfr_init2(rest, 2400);
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t n = 0; n < N; ++n) {
        const std::size_t i = m * N + n;
        const numeq::LongAccumulator acc = slow_element(o, m, n);
        const numeq::DoubleDouble d = acc.to_double_double();
        ASSERT_TRUE(numeq_oracle::same_value(exact.hi(m, n), d.hi) && numeq_oracle::same_value(exact.lo(m, n), d.lo))
            << o.name << " element (" << m << ", " << n << "): hi, lo " << numeq_oracle::describe(exact.hi(m, n))
            << ", " << numeq_oracle::describe(exact.lo(m, n)) << "; long accumulator " << numeq_oracle::describe(d.hi)
            << ", " << numeq_oracle::describe(d.lo);
        for (std::size_t j = 0; j < std::size(kSlicedCasts); ++j) {
          const Cast& cast = kSlicedCasts[j];
          const std::uint64_t random =
              cast.rounding == Rounding::stochastic ? numeq::random_bits_at(numeq::random_stream_key(cast.seed), i) : 0;
          ASSERT_TRUE(numeq_oracle::same_value(rounded[j](m, n), acc.round_value(cast, random)))
              << o.name << " -> " << cast.format.name << " element (" << m << ", " << n << "): got "
              << numeq_oracle::describe(rounded[j](m, n)) << ", long accumulator "
              << numeq_oracle::describe(acc.round_value(cast, random));
        }
        // MPFR, independent of numeq's accumulator and kernel, where the value is finite and
        // non-zero (zero signs and specials are the accumulator's rules, tested above and in
        // ExactZerosTakeTheSignIeee754Gives).
        ref.clear();
        for (std::size_t k = 0; k < K; ++k) ref.add_product(o.a(m, k), o.b(k, n));
        if (c != nullptr) ref.add(o.c(m, n));
        if (!mpfr_number_p(ref.value()) || mpfr_zero_p(ref.value())) continue;
        mpfr_set(hi, ref.value(), MPFR_RNDN);
        mpfr_sub(rest, ref.value(), hi, MPFR_RNDN);  // exact: 2400 bits
        ASSERT_EQ(exact.hi(m, n), mpfr_get_d(hi, MPFR_RNDN)) << o.name << " (" << m << ", " << n << ")";
        ASSERT_EQ(exact.lo(m, n), mpfr_get_d(rest, MPFR_RNDN)) << o.name << " (" << m << ", " << n << ")";
        for (std::size_t j = 0; j < std::size(kSlicedCasts); ++j) {
          numeq_oracle::RoundOracle oracle(kSlicedCasts[j].format);
          const double expected = oracle.cast_value(ref.value(), kSlicedCasts[j], i).value;
          ASSERT_TRUE(numeq_oracle::same_value(rounded[j](m, n), expected))
              << o.name << " -> " << kSlicedCasts[j].format.name << " (" << m << ", " << n << ")";
        }
        ++mpfr_checked;
      }
    mpfr_clear(hi);
    mpfr_clear(rest);
  }
  std::printf("[ exact ] %zu sliced matmul elements compared with MPFR\n", mpfr_checked);
}

TEST(ExactMatmul, BlocksAndBatchesWithDifferentSlicesAgreeWithTheLongAccumulator) {
  // Results larger than one block of slice products (several dgemm calls per matrix), and
  // batches whose b matrices need different slice counts (one narrow, one with wide columns).
  std::mt19937_64 rng(22);
  const std::size_t M = 400, K = 6, N = 600;
  xt::xarray<double> a = drawn(rng, {2, 1, M, K}, formats::bf16, Kind::normal);
  xt::xarray<double> b = drawn(rng, {2, K, N}, formats::bf16, Kind::normal);
  for (std::size_t m = 0; m < M; m += 2) a(1, 0, m, m % K) = std::ldexp(a(1, 0, m, m % K), -40);
  for (std::size_t n = 0; n < N; n += 2) b(1, n % K, n) = std::ldexp(b(1, n % K, n), -40);
  b(0, 0, 0) = std::ldexp(b(0, 0, 0), -40);  // b matrix 0: one wide column
  const reference::ExactValues exact = reference::matmul_exact(a, b);
  const Cast cast{formats::bf16, Rounding::stochastic, numeq::Overflow::ieee, numeq::Subnormals::keep, 3};
  const xt::xarray<double> rounded = reference::matmul(a, b, cast);
  const std::uint64_t key = numeq::random_stream_key(cast.seed);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 2; ++j)
      for (std::size_t m = 0; m < M; ++m)
        for (std::size_t n = 0; n < N; ++n) {
          numeq::LongAccumulator acc;
          for (std::size_t k = 0; k < K; ++k) acc.add_product(a(i, 0, m, k), b(j, k, n));
          const numeq::DoubleDouble d = acc.to_double_double();
          const std::size_t index = ((i * 2 + j) * M + m) * N + n;
          ASSERT_TRUE(numeq_oracle::same_value(exact.hi(i, j, m, n), d.hi) &&
                      numeq_oracle::same_value(exact.lo(i, j, m, n), d.lo))
              << "batch (" << i << ", " << j << ") element (" << m << ", " << n << ")";
          const double expected = acc.round_value(cast, numeq::random_bits_at(key, index));
          ASSERT_TRUE(numeq_oracle::same_value(rounded(i, j, m, n), expected))
              << "batch (" << i << ", " << j << ") element (" << m << ", " << n << ")";
        }
}

TEST(ExactMatmul, SlicesReachTheExactnessBoundAndNoFurther) {
  // K = 512 terms allow slices of wa + wb = 53 - 9 = 44 bits. Rows of a span 22 bits (integers in
  // [2^21, 2^22), some odd) and columns of b 23: taken whole (45 bits) their dot products reach
  // about 2^53.2 with low bits set, which a double sum rounds; the slicing must split one side.
  std::mt19937_64 rng(23);
  const std::size_t M = 9, K = 512, N = 7;
  xt::xarray<double> a = xt::xarray<double>::from_shape({M, K});
  xt::xarray<double> b = xt::xarray<double>::from_shape({K, N});
  for (double& x : a) x = static_cast<double>((std::uint64_t{1} << 21) + rng() % (std::uint64_t{1} << 21)) ;
  for (double& x : b) x = static_cast<double>((std::uint64_t{1} << 22) + rng() % (std::uint64_t{1} << 22));
  for (std::size_t m = 0; m < M; ++m) a(m, 0) = (std::uint64_t{1} << 21) + 1;
  for (std::size_t n = 0; n < N; ++n) b(0, n) = (std::uint64_t{1} << 22) + 1;
  const reference::ExactValues exact = reference::matmul_exact(a, b);
  std::size_t rounded_by_doubles = 0;
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t n = 0; n < N; ++n) {
      numeq::LongAccumulator acc;
      double naive = 0;
      for (std::size_t k = 0; k < K; ++k) {
        acc.add_product(a(m, k), b(k, n));
        naive += a(m, k) * b(k, n);
      }
      const numeq::DoubleDouble d = acc.to_double_double();
      ASSERT_EQ(exact.hi(m, n), d.hi) << "(" << m << ", " << n << ")";
      ASSERT_EQ(exact.lo(m, n), d.lo) << "(" << m << ", " << n << ")";
      rounded_by_doubles += d.lo != 0 || naive != d.hi;
    }
  // The inputs do exceed what one dgemm of the whole values computes exactly.
  EXPECT_GT(rounded_by_doubles, M * N / 2);
}

TEST(ExactMatmul, Binary64SubnormalsTakeTheLongAccumulator) {
  // A binary64 subnormal lies outside every slice's range: the matmul takes the loop, exactly.
  xt::xarray<double> a = xt::ones<double>({3, 5});
  xt::xarray<double> b = xt::ones<double>({5, 2});
  a(1, 2) = 3 * std::numeric_limits<double>::denorm_min();
  const reference::ExactValues exact = reference::matmul_exact(a, b);
  EXPECT_EQ(exact.hi(1, 0), 4.0);  // 4 + 3 * 2^-1074
  EXPECT_EQ(exact.lo(1, 0), 3 * std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(exact.hi(0, 0), 5.0);
  EXPECT_EQ(exact.lo(0, 0), 0.0);
  const Cast up{formats::fp32, Rounding::upward};
  EXPECT_EQ(reference::matmul(a, b, up)(1, 1), static_cast<double>(std::nextafter(4.0f, 5.0f)));
}

TEST(ExactErrors, ShapesAndFormatsAreChecked) {
  xt::xarray<double> a = xt::zeros<double>({2, 3});
  xt::xarray<double> b = xt::zeros<double>({4, 2});
  numeq_test::expect_error_mentioning([&] { reference::matmul(a, b, Cast{formats::fp32}); }, "inner dimensions");
  xt::xarray<double> v = xt::zeros<double>({3});
  numeq_test::expect_error_mentioning([&] { reference::matmul(v, a, Cast{formats::fp32}); }, "use dot");
  numeq_test::expect_error_mentioning([&] { reference::dot(v, xt::xarray<double>(xt::zeros<double>({4})), Cast{formats::fp32}); },
                                      "equal length");
  numeq_test::expect_error_mentioning([&] { reference::sum(a, 2, Cast{formats::fp32}); }, "axis");
  xt::xarray<double> c = xt::zeros<double>({5});
  xt::xarray<double> bb = xt::zeros<double>({3, 2});
  numeq_test::expect_error_mentioning([&] { reference::matmul(a, bb, Cast{formats::fp32}, &c); }, "c:");
  xt::xarray<double> nan = xt::xarray<double>::from_shape({1, 1});
  nan(0, 0) = std::nan("");
  xt::xarray<double> one = xt::ones<double>({1, 1});
  numeq_test::expect_error_mentioning([&] { reference::matmul(nan, one, Cast{formats::e2m1fn}); }, "no NaN");
  EXPECT_TRUE(std::isnan(reference::matmul(nan, one, Cast{formats::fp32})(0, 0)));
}

}  // namespace
