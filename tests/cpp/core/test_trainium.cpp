// The Trainium platforms (trainium.hpp): every assumption's alternative, evaluated through the
// plan evaluator, against an oracle that writes the documented structure out in MPFR (tiles of
// 128 or 256 rows of K, each column sum in the chosen order and arithmetic, the tile rounded into
// an fp32 PSUM, PSUM accumulated in program order, the output cast) without numeq's plans or
// rounding kernel. Plus the assumption syntax, its errors, JSON and reports.

#include <gtest/gtest.h>
#include <mpfr.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/core/evaluate.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/core/trainium.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "oracle/mpfr_oracle.hpp"

namespace {

namespace core = numeq::core;

// What the oracle computes, written from the assumptions' meanings (trainium.hpp).
struct Model {
  std::string order = "sequential";  // sequential | pairwise | fused
  bool bf16_products = false;
  mpfr_rnd_t pe = MPFR_RNDN;
  int accumulator_precision = 24;  // fraction bits + 1
  mpfr_rnd_t psum = MPFR_RNDN;
  std::size_t tile = 128;  // rows of K per nc_matmul (256: trn2 fp8 double_row)
  bool pairs = false;      // double_row: each PE adds its two products first
  int piece_precision = 0; // fp32_matmul: 0 native; 8 (bf16x4) or 11 (tf32x4): 2 pieces, 4 passes
  int output_precision = 24;
  std::size_t group = 0;   // psum_group: tiles per PSUM group, groups added in fp32 (RNE) in SBUF
  int group_precision = 24; // group_accumulator: the SBUF accumulator's precision (bf16 8, fp16 11);
                            // each fp32 sum rounded into it (RNE), the first group too
};

// Values stay far inside every format's normal range here (inputs are normal and K is small), so
// rounding to a precision is rounding to the format.
class Oracle {
 public:
  Oracle() {
    mpfr_init2(x_, 4000);
    mpfr_init2(y_, 4000);
  }
  ~Oracle() {
    mpfr_clear(x_);
    mpfr_clear(y_);
  }
  Oracle(const Oracle&) = delete;
  Oracle& operator=(const Oracle&) = delete;

  static double round(double v, int precision, mpfr_rnd_t rnd) {
    mpfr_t r;
    mpfr_init2(r, precision);
    mpfr_set_d(r, v, rnd);
    const double out = mpfr_get_d(r, MPFR_RNDN);  // exact: precision <= 53
    mpfr_clear(r);
    return out;
  }
  // (sum of the terms, exactly) rounded once.
  double sum_rounded(const std::vector<double>& terms, int precision, mpfr_rnd_t rnd) {
    mpfr_set_zero(x_, 1);
    for (double t : terms) {
      mpfr_set_d(y_, t, MPFR_RNDN);  // exact (4000 bits)
      mpfr_add(x_, x_, y_, MPFR_RNDN);  // exact
    }
    mpfr_t r;
    mpfr_init2(r, precision);
    mpfr_set(r, x_, rnd);
    const double out = mpfr_get_d(r, MPFR_RNDN);
    mpfr_clear(r);
    return out;
  }
  double add(double a, double b, int precision, mpfr_rnd_t rnd) { return sum_rounded({a, b}, precision, rnd); }

  // One column (one nc_matmul's products a_k b_k).
  double column(const Model& m, const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> terms;
    if (m.pairs) {  // each PE: its two products added exactly, rounded once
      for (std::size_t k = 0; k < a.size(); k += 2) {
        std::vector<double> pair{a[k] * b[k]};
        if (k + 1 < a.size()) pair.push_back(a[k + 1] * b[k + 1]);
        terms.push_back(sum_rounded(pair, m.accumulator_precision, m.pe));
      }
    } else {
      for (std::size_t k = 0; k < a.size(); ++k) {
        double p = a[k] * b[k];  // exact in binary64 for the inputs used here
        if (m.bf16_products) p = round(p, 8, MPFR_RNDN);
        terms.push_back(p);
      }
    }
    if (m.order == "fused") return sum_rounded(terms, m.accumulator_precision, m.pe);
    if (m.order == "sequential") {
      double acc = 0.0;  // down the column from 0
      for (double t : terms) acc = add(acc, t, m.accumulator_precision, m.pe);
      return acc;
    }
    // pairwise: neighbours first, level by level; in a leaf pair the first product is rounded
    // into the accumulator and the second added exactly with one rounding (an fma-style adder)
    std::vector<double> level;
    for (std::size_t i = 0; i < terms.size(); i += 2)
      level.push_back(i + 1 < terms.size()
                          ? add(round(terms[i], m.accumulator_precision, m.pe), terms[i + 1], m.accumulator_precision, m.pe)
                          : round(terms[i], m.accumulator_precision, m.pe));
    while (level.size() > 1) {
      std::vector<double> next;
      for (std::size_t i = 0; i + 1 < level.size(); i += 2) next.push_back(add(level[i], level[i + 1], m.accumulator_precision, m.pe));
      if (level.size() % 2 != 0) next.push_back(level.back());
      level.swap(next);
    }
    return level.empty() ? 0.0 : level[0];
  }

  double dot(const Model& m, const std::vector<double>& a, const std::vector<double>& b) {
    const std::size_t tile = m.tile;
    // Pieces: hi = RNE(x), lo = RNE(x - hi) at the piece precision (native: x itself, once).
    std::vector<std::vector<double>> pa{a}, pb{b};
    if (m.piece_precision > 0) {
      const auto split = [&](const std::vector<double>& x) {
        std::vector<double> hi(x.size()), lo(x.size());
        for (std::size_t k = 0; k < x.size(); ++k) {
          hi[k] = round(x[k], m.piece_precision, MPFR_RNDN);
          lo[k] = round(x[k] - hi[k], m.piece_precision, MPFR_RNDN);
        }
        return std::vector<std::vector<double>>{hi, lo};
      };
      pa = split(a);
      pb = split(b);
    }
    const std::vector<std::pair<int, int>> passes =
        m.piece_precision > 0 ? std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}
                              : std::vector<std::pair<int, int>>{{0, 0}};
    double psum = 0.0, sbuf = 0.0;
    bool first = true, first_group = true;
    std::size_t tiles = 0;
    for (std::size_t k0 = 0; k0 < a.size(); k0 += tile, ++tiles) {
      const std::size_t k1 = std::min(a.size(), k0 + tile);
      if (m.group && tiles % m.group == 0) first = true;  // a new PSUM group starts from its first tile
      for (const auto& [i, j] : passes) {
        const double t = column(m, {pa[i].begin() + k0, pa[i].begin() + k1}, {pb[j].begin() + k0, pb[j].begin() + k1});
        psum = first ? round(t, 24, m.psum) : add(psum, t, 24, m.psum);
        first = false;
      }
      if (m.group && (tiles % m.group == m.group - 1 || k1 == a.size())) {
        sbuf = round(first_group ? psum : add(sbuf, psum, 24, MPFR_RNDN), m.group_precision, MPFR_RNDN);
        first_group = false;
      }
    }
    return round(m.group ? sbuf : psum, m.output_precision, MPFR_RNDN);
  }

 private:
  mpfr_t x_, y_;
};

// Random normal values rounded to bf16 (8 significant bits) or fp32 (24), or values of both e4m3
// and e5m2 (3 significant bits, normal in both: 2^-6 .. 28).
std::vector<double> random_values(std::mt19937_64& rng, std::size_t n, bool fp8, int precision = 8) {
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> mantissa(4, 7), exponent(-6, 4), sign(0, 1);
  std::vector<double> v(n);
  for (double& x : v) {
    if (fp8) x = (sign(rng) ? -1 : 1) * std::ldexp(mantissa(rng), exponent(rng) - 2);
    else x = Oracle::round(normal(rng), precision, MPFR_RNDN);
  }
  return v;
}

// numeq's matmul under `platform` against the oracle, every element, for one K.
void expect_matches(const std::string& platform, const Model& m, const std::string& in_fmt, const std::string& out,
                    std::size_t K, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t M = 3, N = 4;
  const bool fp8 = in_fmt == "e4m3" || in_fmt == "e5m2";
  const int precision = in_fmt == "fp32" ? 24 : 8;
  const std::vector<double> av = random_values(rng, M * K, fp8, precision), bv = random_values(rng, K * N, fp8, precision);
  xt::xarray<double> A = xt::zeros<double>({M, K}), B = xt::zeros<double>({K, N});
  for (std::size_t i = 0; i < M * K; ++i) A.data()[i] = av[i];
  for (std::size_t i = 0; i < K * N; ++i) B.data()[i] = bv[i];
  const core::Plan plan = core::plan_for(core::platform_by_name(platform), core::Operation::matmul, in_fmt, out);
  const xt::xarray<double> D = core::matmul(A, B, nullptr, plan);
  Oracle oracle;
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      std::vector<double> a(K), b(K);
      for (std::size_t k = 0; k < K; ++k) {
        a[k] = A(i, k);
        b[k] = B(k, j);
      }
      const double want = oracle.dot(m, a, b);
      ASSERT_EQ(D(i, j), want) << platform << " " << in_fmt << " -> " << out << " K=" << K << " at (" << i << ", " << j
                               << ")";
    }
}

TEST(Trainium, DefaultsFollowTheDocumentedStructure) {
  for (const std::string p : {"trainium.trn1", "trainium.trn2", "trainium.inf2"})
    for (const std::size_t K : {1, 7, 128, 129, 300, 513}) {
      expect_matches(p, Model{}, "bf16", "fp32", K, K);
      Model bf16_out;
      bf16_out.output_precision = 8;
      expect_matches(p, bf16_out, "bf16", "bf16", K, K + 1);
    }
}

TEST(Trainium, EveryAlternativeMatchesItsOracle) {
  std::size_t combinations = 0;
  for (const std::string order : {"sequential", "pairwise", "fused"})
    for (const bool bf16_products : {false, true})
      for (const std::string pe_rounding : {"nearest_even", "toward_zero"})
        for (const int bits : {23, 25, 31})
          for (const std::string psum_rounding : {"nearest_even", "toward_zero"}) {
            if (order == "fused" && bf16_products) continue;  // refused, see AssumptionsAreChecked
            const std::string name = "trainium.trn1[pe_order=" + order + ", products=" + (bf16_products ? "bf16" : "exact") +
                                     ",pe_rounding=" + pe_rounding + ",accumulator_bits=" + std::to_string(bits) +
                                     ",psum_rounding=" + psum_rounding + "]";
            Model m;
            m.order = order;
            m.bf16_products = bf16_products;
            m.pe = pe_rounding == "nearest_even" ? MPFR_RNDN : MPFR_RNDZ;
            m.accumulator_precision = bits + 1;
            m.psum = psum_rounding == "nearest_even" ? MPFR_RNDN : MPFR_RNDZ;
            for (const std::size_t K : {5, 128, 300}) expect_matches(name, m, "bf16", "fp32", K, 7 * K + combinations);
            ++combinations;
          }
  EXPECT_EQ(combinations, 60u);
}

TEST(Trainium, Fp8DoubleRowContracts256RowsWithExactPairs) {
  for (const std::string order : {"sequential", "pairwise", "fused"})
    for (const std::string in : {"e4m3", "e5m2"}) {
      Model m;
      m.order = order;
      m.tile = 256;
      // The fused column adds the tile's exact products with one rounding: no pair step.
      m.pairs = order != "fused";
      const std::string name = "trainium.trn2[fp8_double_row=on,pe_order=" + order + "]";
      for (const std::size_t K : {3, 256, 257, 600}) expect_matches(name, m, in, "fp32", K, K + 11);
      Model single;  // double_row off: 128-row tiles
      single.order = order;
      expect_matches("trainium.trn2[pe_order=" + order + "]", single, in, "fp32", 300, 5);
    }
}

TEST(Trainium, Fp32MatmulAsPassesOfPieces) {
  for (const std::string order : {"sequential", "pairwise", "fused"})
    for (const auto& [name, precision] : {std::pair<std::string, int>{"native", 0}, {"bf16x4", 8}, {"tf32x4", 11}}) {
      Model m;
      m.order = order;
      m.piece_precision = precision;
      for (const std::size_t K : {1, 100, 128, 300})
        expect_matches("trainium.trn1[fp32_matmul=" + name + ",pe_order=" + order + "]", m, "fp32", "fp32", K, K + 3);
    }
  // bf16 inputs are one piece already: the assumption leaves their plans alone.
  EXPECT_EQ(core::plan_for(core::platform_by_name("trainium.trn2[fp32_matmul=bf16x4]"), core::Operation::matmul, "bf16", "fp32").reduction,
            core::plan_for(core::platform_by_name("trainium.trn2"), core::Operation::matmul, "bf16", "fp32").reduction);
  const core::Plan p = core::plan_for(core::platform_by_name("trainium.trn1[fp32_matmul=tf32x4]"), core::Operation::matmul, "fp32", "fp32");
  EXPECT_EQ(core::plan_from_json(core::to_json(p)), p);
  EXPECT_NE(core::to_string(p).find("decompose(128, 2 x tf32"), std::string::npos) << core::to_string(p);
}

TEST(Trainium, KernelTilesAndPsumGroups) {
  // The kernel's own tiling (k_tile rows of K per nc_matmul, psum_group tiles per PSUM group with
  // the groups added in SBUF), under every PE order, with fp32 pieces and fp8 double_row.
  for (const std::string order : {"sequential", "pairwise", "fused"})
    for (const std::size_t tile : {1u, 32u, 64u, 100u, 128u})
      for (const std::size_t group : {0u, 1u, 3u}) {
        Model m;
        m.order = order;
        m.tile = tile;
        m.group = group;
        const std::string name = "trainium.trn1[pe_order=" + order + ",k_tile=" + std::to_string(tile) +
                                 (group ? ",psum_group=" + std::to_string(group) : std::string()) + "]";
        for (const std::size_t K : {1u, 63u, 300u}) expect_matches(name, m, "bf16", "fp32", K, K * 31 + tile + group);
        m.piece_precision = 8;
        expect_matches("trainium.trn2[fp32_matmul=bf16x4,pe_order=" + order + ",k_tile=" + std::to_string(tile) +
                           (group ? ",psum_group=" + std::to_string(group) : std::string()) + "]",
                       m, "fp32", "fp32", 200, tile + group);
      }
  for (const std::size_t tile : {2u, 64u, 256u}) {
    Model m;
    m.tile = tile;
    m.pairs = true;
    m.group = 2;
    expect_matches("trainium.trn2[fp8_double_row=on,k_tile=" + std::to_string(tile) + ",psum_group=2]", m, "e4m3",
                   "fp32", 600, tile);
  }
  // An SBUF accumulator narrower than fp32 (the NKI tutorial's bf16 groups): two roundings per
  // group, fp32 then the accumulator's.
  for (const auto& [acc, precision] : {std::pair<std::string, int>{"bf16", 8}, {"fp16", 11}})
    for (const std::size_t group : {1u, 2u, 3u}) {
      Model m;
      m.group = group;
      m.group_precision = precision;
      for (const std::size_t K : {1u, 300u, 1000u})
        expect_matches("trainium.trn2[psum_group=" + std::to_string(group) + ",group_accumulator=" + acc + "]", m,
                       "bf16", "fp32", K, K + group);
    }
  EXPECT_THROW(core::platform_by_name("trainium.trn2[group_accumulator=bf16]"), numeq::error);
  EXPECT_THROW(core::platform_by_name("trainium.trn2[psum_group=2,group_accumulator=e4m3]"), numeq::error);
  // Named as given; refused beyond the instruction's rows, and with an odd double_row tile.
  EXPECT_EQ(core::platform_by_name("trainium.trn2[pe_order=pairwise,k_tile=64,psum_group=2]").name,
            "trainium.trn2[pe_order=pairwise,k_tile=64,psum_group=2]");
  EXPECT_THROW(core::platform_by_name("trainium.trn1[k_tile=129]"), numeq::error);
  EXPECT_THROW(core::platform_by_name("trainium.trn2[fp8_double_row=on,k_tile=257]"), numeq::error);
  EXPECT_THROW(core::platform_by_name("trainium.trn2[fp8_double_row=on,k_tile=5]"), numeq::error);
  EXPECT_THROW(core::platform_by_name("trainium.trn1[psum_group=0]"), numeq::error);
  // k_tile above 128 leaves only the fp8 plans.
  EXPECT_THROW(core::plan_for(core::platform_by_name("trainium.trn2[fp8_double_row=on,k_tile=256]"),
                              core::Operation::matmul, "bf16", "fp32"),
               numeq::error);
}

TEST(Trainium, AssumptionsChangeResults) {
  // Each alternative is live: on random data it changes some element (else the parameter would
  // be decorative).
  std::mt19937_64 rng(3);
  const std::size_t M = 8, N = 8, K = 512;
  const std::vector<double> av = random_values(rng, M * K, false), bv = random_values(rng, K * N, false);
  xt::xarray<double> A = xt::zeros<double>({M, K}), B = xt::zeros<double>({K, N});
  for (std::size_t i = 0; i < M * K; ++i) A.data()[i] = av[i];
  for (std::size_t i = 0; i < K * N; ++i) B.data()[i] = bv[i];
  const auto run = [&](const std::string& name) {
    return core::matmul(A, B, nullptr, core::plan_for(core::platform_by_name(name), core::Operation::matmul, "bf16", "fp32"));
  };
  const xt::xarray<double> base = run("trainium.trn1");
  for (const std::string variant : {"pe_order=pairwise", "pe_order=fused", "products=bf16", "pe_rounding=toward_zero",
                                    "accumulator_bits=31", "psum_rounding=toward_zero"})
    EXPECT_NE(run("trainium.trn1[" + variant + "]"), base) << variant;
  // Recorded-only assumptions do not change matmul plans.
  EXPECT_EQ(run("trainium.trn1[bn_aggr_merge=naive,scalar_activation_ulps=1]"), base);
}

TEST(Trainium, SumFollowsTheVectorEngineOrder) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal;
  const std::size_t n = 1000;
  xt::xarray<double> x = xt::zeros<double>({n});
  for (std::size_t i = 0; i < n; ++i) x(i) = normal(rng);
  float sequential = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sequential = i == 0 ? static_cast<float>(x(0)) : sequential + static_cast<float>(x(i));
  std::vector<float> level(n);
  for (std::size_t i = 0; i < n; ++i) level[i] = static_cast<float>(x(i));
  while (level.size() > 1) {
    std::vector<float> next;
    for (std::size_t i = 0; i + 1 < level.size(); i += 2) next.push_back(level[i] + level[i + 1]);
    if (level.size() % 2 != 0) next.push_back(level.back());
    level.swap(next);
  }
  const auto run = [&](const std::string& name) {
    return core::sum(x, 0, core::plan_for(core::platform_by_name(name), core::Operation::sum, "fp32", "fp32"))();
  };
  EXPECT_EQ(run("trainium.trn2"), static_cast<double>(sequential));
  EXPECT_EQ(run("trainium.trn2[vector_reduce_order=pairwise]"), static_cast<double>(level[0]));
  EXPECT_NE(static_cast<double>(sequential), static_cast<double>(level[0]));  // the data tell them apart
}

TEST(Trainium, StochasticOutputPicksANeighbour) {
  std::mt19937_64 rng(4);
  const std::size_t M = 64, N = 64, K = 256;
  const std::vector<double> av = random_values(rng, M * K, false), bv = random_values(rng, K * N, false);
  xt::xarray<double> A = xt::zeros<double>({M, K}), B = xt::zeros<double>({K, N});
  for (std::size_t i = 0; i < M * K; ++i) A.data()[i] = av[i];
  for (std::size_t i = 0; i < K * N; ++i) B.data()[i] = bv[i];
  const auto run = [&](const std::string& name, const std::string& out) {
    return core::matmul(A, B, nullptr, core::plan_for(core::platform_by_name(name), core::Operation::matmul, "bf16", out));
  };
  const xt::xarray<double> exact = run("trainium.trn1", "fp32");
  const xt::xarray<double> sr = run("trainium.trn1[output_rounding=stochastic]", "bf16");
  std::size_t up = 0, down = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double lo = Oracle::round(exact.data()[i], 8, MPFR_RNDD), hi = Oracle::round(exact.data()[i], 8, MPFR_RNDU);
    ASSERT_TRUE(sr.data()[i] == lo || sr.data()[i] == hi) << i;
    if (lo != hi) (sr.data()[i] == hi ? up : down) += 1;
  }
  EXPECT_GT(up, 100u);
  EXPECT_GT(down, 100u);
}

TEST(Trainium, AssumptionsAreCheckedAndNamed) {
  const auto message = [](const std::string& name) {
    try {
      core::platform_by_name(name);
    } catch (const numeq::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("trainium.trn1[order=sequential]").find("has no assumption 'order'; valid: pe_order, products"),
            std::string::npos)
      << message("trainium.trn1[order=sequential]");
  EXPECT_NE(message("trainium.trn1[pe_order=random]").find("pe_order of trainium.trn1 cannot be 'random'; valid: "
                                                          "sequential, pairwise, fused"),
            std::string::npos);
  EXPECT_NE(message("trainium.trn1[fp8_double_row=on]").find("has no assumption 'fp8_double_row'"), std::string::npos);
  EXPECT_NE(message("trainium.trn1[pe_order]").find("is not assumption=value"), std::string::npos);
  EXPECT_NE(message("trainium.trn1[pe_order=fused").find("does not end with ']'"), std::string::npos);
  EXPECT_NE(message("nvidia.h100[pe_order=fused]").find("takes no [assumption=value] choices"), std::string::npos);
  EXPECT_NE(message("trainium.trn1[pe_order=fused,products=bf16]").find("cannot be combined"), std::string::npos);
  // Canonical names list only the choices that differ from the defaults, in declaration order.
  EXPECT_EQ(core::platform_by_name("trainium.trn1[products=bf16, pe_order=pairwise]").name,
            "trainium.trn1[pe_order=pairwise,products=bf16]");
  EXPECT_EQ(core::platform_by_name("trainium.trn1[pe_order=sequential]").name, "trainium.trn1");
  EXPECT_EQ(core::platform_by_name("neuron.v3[fp8_double_row=on]").name, "trainium.trn2[fp8_double_row=on]");
  // An input format the platform lacks: the error lists what it has.
  try {
    core::plan_for(core::platform_by_name("trainium.trn1"), core::Operation::matmul, "e4m3fn", "fp32");
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find("in_fmt: platform trainium.trn1 has no matmul for e4m3fn -> fp32"),
              std::string::npos)
        << e.what();
  }
}

TEST(Trainium, AssumptionsTravelInJsonAndReports) {
  const core::Platform p = core::platform_by_name("trainium.trn2[accumulator_bits=25,products=bf16]");
  ASSERT_FALSE(p.assumptions.empty());
  const core::Platform back = core::platform_from_json(core::to_json(p));
  EXPECT_EQ(back, p);
  const std::string report = core::evidence_report(p);
  for (const core::Assumption& a : p.assumptions)
    EXPECT_NE(report.find("assumption  " + a.name + " = " + a.value), std::string::npos) << a.name;
  EXPECT_NE(report.find("accumulator_bits = 25"), std::string::npos);
  try {
    core::platform_from_json(R"({"name": "x", "plans": [], "assumptions": [{"name": "a", "value": "v", "alternatives": ["w"]}]})");
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("profile.assumptions[0].value:", 0), 0u) << e.what();
  }
}

}  // namespace
