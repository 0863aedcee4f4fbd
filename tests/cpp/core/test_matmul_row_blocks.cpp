// core::matmul_row_blocks (evaluate.hpp): the Tensor Engine's operands read in place as row blocks
// along K, against the plan walk (KernelChoice::none) of core::matmul on the same values widened
// to doubles: bit for bit, for every block split, element type and Trainium tiling.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/core/evaluate.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"

namespace {

namespace core = numeq::core;
using numeq::Cast;
using numeq::ElementType;
using numeq::Rounding;

bool same_value(double x, double y) {
  return (std::isnan(x) && std::isnan(y)) || std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
}

// A value of f (or an integer of `int_bytes` bytes), mostly ordinary, sometimes zero, the largest
// finite, a subnormal, Inf or NaN where the format has them.
double value_of(std::mt19937_64& g, const numeq::Format& f, bool specials) {
  std::uniform_int_distribution<int> pick(0, 29), e(-6, 6);
  std::uniform_real_distribution<double> u(1.0, 2.0);
  const double sign = pick(g) < 15 ? 1.0 : -1.0;
  switch (pick(g)) {
    case 0: return sign * 0.0;
    case 1: return sign * numeq::max_finite(f);
    case 2: return sign * numeq::min_subnormal(f);
    case 3: return specials && f.has_inf() ? sign * INFINITY : 1.0;
    case 4: return specials && f.has_nan() ? NAN : -1.0;
    default: return numeq::round_to_format(sign * std::ldexp(u(g), e(g)), Cast{f, Rounding::nearest_even});
  }
}

// Storage for one block: the values as patterns of `f` (1 or 2 bytes), as floats, or as integers.
struct Stored {
  std::vector<std::uint8_t> bytes;
  ElementType type;
};
Stored store(const std::vector<double>& values, const numeq::Format& f, int how) {
  Stored s;
  if (how == 0) {  // float32 array
    s.type = ElementType::patterns(numeq::format_by_name("fp32"));
    s.bytes.resize(values.size() * 4);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float v = static_cast<float>(values[i]);
      std::memcpy(s.bytes.data() + 4 * i, &v, 4);
    }
  } else if (f.is_integer()) {
    const int bytes = f.storage_bits / 8;
    s.type = ElementType::integers(bytes, f.is_signed);
    s.bytes.resize(values.size() * bytes);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto v = static_cast<std::int64_t>(values[i]);
      std::memcpy(s.bytes.data() + bytes * i, &v, bytes);  // little-endian low bytes: two's complement
    }
  } else {
    const int bytes = f.storage_bits / 8;
    s.type = ElementType::patterns(f);
    s.bytes.resize(values.size() * bytes);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::uint64_t bits = numeq::encode(values[i], Cast{f, Rounding::nearest_even});
      std::memcpy(s.bytes.data() + bytes * i, &bits, bytes);
    }
  }
  return s;
}

struct Case {
  std::string platform, in_fmt, storage;  // storage: the format the blocks hold (an integer type too)
  bool fp32_chains = true;                // false: not a plan of fp32 chains, left to the caller
};

TEST(MatmulRowBlocks, MatchTheWalkForEveryBlockSplitAndType) {
  const std::vector<Case> cases = {
      {"trainium.trn2", "bf16", "bf16"},
      {"trainium.trn2[k_tile=7]", "bf16", "bf16"},
      {"trainium.trn2[k_tile=32,psum_group=3]", "bf16", "bf16"},
      {"trainium.trn2[pe_order=pairwise,k_tile=37]", "fp16", "fp16"},
      {"trainium.trn2[psum_rounding=toward_zero]", "bf16", "bf16", false},
      {"trainium.trn2", "e5m2", "e5m2"},
      {"trainium.trn2", "e4m3", "e4m3"},
      {"trainium.trn2[fp8_double_row=on,k_tile=64,psum_group=2]", "e4m3", "e4m3"},
      {"trainium.trn1", "fp32", "fp32"},
      {"cuda_core.fp32", "fp32", "fp32"},
      {"trainium.trn2", "fp32", "int8"},
      {"trainium.trn2", "fp32", "uint8"},
  };
  struct Shape {
    std::size_t M, N, K;
  };
  const std::vector<Shape> shapes = {{1, 1, 1}, {13, 33, 31}, {128, 40, 300}, {5, 70, 129}};
  std::mt19937_64 g(2026);
  numeq::set_num_threads(2);
  for (const Case& cs : cases) {
    const core::Plan plan =
        core::plan_for(core::platform_by_name(cs.platform), core::Operation::matmul, cs.in_fmt, "fp32");
    const numeq::Format& f = numeq::format_by_name(cs.storage);
    for (const Shape& s : shapes)
      for (const bool specials : {false, true}) {
        // stationary [K, M] and moving [K, N], as values.
        std::vector<double> st(s.K * s.M), mv(s.K * s.N);
        std::uniform_int_distribution<int> integer(f.is_signed ? -128 : 0, f.is_signed ? 127 : 255);
        for (double& v : st) v = f.is_integer() ? integer(g) : value_of(g, f, specials);
        for (double& v : mv) v = f.is_integer() ? integer(g) : value_of(g, f, specials);
        // The walk on a = stationary^T, b = moving: the oracle.
        xt::xarray<double> a = xt::xarray<double>::from_shape({s.M, s.K}), b = xt::xarray<double>::from_shape({s.K, s.N});
        for (std::size_t k = 0; k < s.K; ++k) {
          for (std::size_t m = 0; m < s.M; ++m) a(m, k) = st[k * s.M + m];
          for (std::size_t n = 0; n < s.N; ++n) b(k, n) = mv[k * s.N + n];
        }
        core::detail::set_matmul_kernel(numeq::KernelChoice::none);
        const xt::xarray<double> want = core::matmul(a, b, nullptr, plan);
        core::detail::set_matmul_kernel(numeq::KernelChoice::automatic);
        // Cut K at random points (in twos under double_row: a pair never straddles a tile), each
        // block stored as the format's patterns or as floats.
        const std::size_t unit = cs.platform.find("double_row") != std::string::npos ? 2 : 1;
        for (int split = 0; split < 3; ++split) {
          std::vector<Stored> keep_s, keep_m;
          std::vector<core::RowBlock> bs, bm;
          std::uniform_int_distribution<std::size_t> len(1, std::max<std::size_t>(1, s.K / 3));
          std::uniform_int_distribution<int> how(0, 1);
          for (std::size_t k0 = 0; k0 < s.K;) {
            const std::size_t rows = split == 0 ? s.K : std::min(s.K - k0, len(g) * unit);
            keep_s.push_back(store({st.begin() + k0 * s.M, st.begin() + (k0 + rows) * s.M}, f, how(g)));
            keep_m.push_back(store({mv.begin() + k0 * s.N, mv.begin() + (k0 + rows) * s.N}, f, how(g)));
            k0 += rows;
          }
          for (std::size_t i = 0; i < keep_s.size(); ++i) {
            const std::size_t rows = keep_s[i].bytes.size() / (keep_s[i].type.format ? keep_s[i].type.format->storage_bits / 8
                                                                                       : keep_s[i].type.bytes) / s.M;
            bs.push_back({keep_s[i].bytes.data(), keep_s[i].type, rows});
            bm.push_back({keep_m[i].bytes.data(), keep_m[i].type, rows});
          }
          const auto got = core::matmul_row_blocks(bs, bm, s.M, s.N, plan);
          const std::string what = cs.platform + " " + cs.storage + " " + std::to_string(s.M) + "x" +
                                   std::to_string(s.N) + "x" + std::to_string(s.K) + " in " +
                                   std::to_string(bs.size()) + " blocks" + (specials ? " with specials" : "");
          if (!cs.fp32_chains) {
            ASSERT_FALSE(got.has_value()) << what;
            continue;
          }
          ASSERT_TRUE(got.has_value()) << what;
          ASSERT_EQ(got->shape(), want.shape()) << what;
          std::size_t bad = 0;
          for (std::size_t i = 0; i < want.size(); ++i)
            if (!same_value(got->data()[i], want.data()[i]) && bad++ < 5)
              ADD_FAILURE() << what << " element " << i << ": " << got->data()[i] << " vs walk " << want.data()[i];
          ASSERT_EQ(bad, 0u) << what;
        }
      }
  }
  numeq::set_num_threads(0);
}

TEST(MatmulRowBlocks, OtherPlansAndTypesAreLeftToTheCaller) {
  std::vector<double> d(4, 1.0);
  std::vector<std::int32_t> i32(4, 1);
  std::vector<float> f32(4, 1.0f);
  const core::RowBlock floats{f32.data(), ElementType::patterns(numeq::format_by_name("fp32")), 2};
  const core::Plan trn2 = core::plan_for(core::platform_by_name("trainium.trn2"), core::Operation::matmul, "bf16", "fp32");
  // A tensor-core plan is not fp32 chains.
  const core::Plan h100 = core::plan_for(core::platform_by_name("nvidia.h100"), core::Operation::matmul, "bf16", "fp32");
  EXPECT_FALSE(core::matmul_row_blocks(std::span(&floats, 1), std::span(&floats, 1), 2, 2, h100).has_value());
  // Doubles and 32-bit integers hold values fp32 does not.
  const core::RowBlock doubles{d.data(), ElementType::patterns(numeq::format_by_name("fp64")), 2};
  const core::RowBlock ints{i32.data(), ElementType::integers(4, true), 2};
  EXPECT_FALSE(core::matmul_row_blocks(std::span(&doubles, 1), std::span(&floats, 1), 2, 2, trn2).has_value());
  EXPECT_FALSE(core::matmul_row_blocks(std::span(&floats, 1), std::span(&ints, 1), 2, 2, trn2).has_value());
  EXPECT_TRUE(core::matmul_row_blocks(std::span(&floats, 1), std::span(&floats, 1), 2, 2, trn2).has_value());
}

TEST(MatmulRowBlocks, ErrorsNameTheOperand) {
  const core::Plan trn2 = core::plan_for(core::platform_by_name("trainium.trn2"), core::Operation::matmul, "fp32", "fp32");
  std::vector<float> f32(6, 1.0f);
  const core::RowBlock three{f32.data(), ElementType::patterns(numeq::format_by_name("fp32")), 3};
  const core::RowBlock two{f32.data(), ElementType::patterns(numeq::format_by_name("fp32")), 2};
  try {
    (void)core::matmul_row_blocks(std::span(&three, 1), std::span(&two, 1), 2, 3, trn2);
    FAIL() << "rows of K differ";
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("moving: 2 rows of K, but stationary has 3"), std::string::npos) << e.what();
  }
  // e3m2fn patterns travel in bytes whose top two bits must be clear: element 5 of moving (its
  // second block's second element) is not a pattern.
  std::vector<std::uint8_t> fp6 = {0x01, 0x02, 0x03, 0x04, 0x05, 0xC5};
  const ElementType e3m2fn = ElementType::patterns(numeq::format_by_name("e3m2fn"));
  const core::RowBlock first{fp6.data(), e3m2fn, 2}, second{fp6.data() + 4, e3m2fn, 1};
  const std::vector<core::RowBlock> moving = {first, second};
  const core::RowBlock st{fp6.data(), e3m2fn, 3};
  try {
    (void)core::matmul_row_blocks(std::span(&st, 1), moving, 1, 2, trn2);
    FAIL() << "a byte outside e3m2fn's patterns";
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("moving: element 5 (C order) is not a bit pattern of e3m2fn"), std::string::npos)
        << e.what();
  }
}

}  // namespace
