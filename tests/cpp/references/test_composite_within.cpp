// Enclosed composite results (references/composite.hpp: Within) against the MPFR oracle of
// composite_oracle.hpp (each definition evaluated at 3064 bits, the last step rounded to odd at
// 3000 bits): every element must lie within relative_error x |exact| of the exact value (plus
// binary64's half subnormal spacing, 2^-1075, below its normal range); a zero, an infinity or a
// NaN must be the oracle's own (sign included). The fast enclosure must take part: on rows where
// it applies, the results differ from the certified binary64 values somewhere (a midpoint is
// rarely the correctly rounded value), so a fast path that never ran would fail the test.

#include "numeq/references/composite.hpp"

#include "composite_oracle.hpp"

#include <gtest/gtest.h>

namespace {

constexpr double kWithin = 0x1p-40;

// |got - exact| <= e |exact| (+ 2^-1075 below 2^-1022), or the same special value.
struct WithinCheck {
  std::size_t checked = 0, failures = 0;

  void element(double got, mpfr_srcptr exact, double e, const std::string& what, std::size_t i) {
    ++checked;
    bool ok = false;
    if (mpfr_nan_p(exact)) {
      ok = std::isnan(got);
    } else if (mpfr_inf_p(exact) || mpfr_zero_p(exact)) {
      ok = !std::isnan(got) && mpfr_cmp_d(exact, got) == 0 && (std::signbit(got) == (mpfr_signbit(exact) != 0));
    } else if (std::isfinite(got)) {
      Big diff, allowed;
      mpfr_sub_d(diff.v, exact, got, MPFR_RNDN);  // exact at 3064 bits: these values' bits fit
      mpfr_abs(diff.v, diff.v, MPFR_RNDN);
      mpfr_abs(allowed.v, exact, MPFR_RNDN);
      mpfr_mul_d(allowed.v, allowed.v, e, MPFR_RNDN);
      if (mpfr_cmp_d(exact, 0x1p-1022) < 0 && mpfr_cmp_d(exact, -0x1p-1022) > 0) {
        Big half_spacing;  // 2^-1075: no double
        mpfr_set_ui_2exp(half_spacing.v, 1, -1075, MPFR_RNDN);
        mpfr_add(allowed.v, allowed.v, half_spacing.v, MPFR_RNDN);
      }
      ok = mpfr_lessequal_p(diff.v, allowed.v) != 0;
    }
    if (!ok && ++failures <= 8) {
      ADD_FAILURE() << what << ": element " << i << " got " << got << ", exact "
                    << mpfr_get_d(exact, MPFR_RNDN) << " (relative error allowed " << e << ")";
    }
  }
  void all(const xt::xarray<double>& got, const std::vector<Big>& exact, double e, const std::string& what) {
    ASSERT_EQ(got.size(), exact.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) element(got.data()[i], exact[i].v, e, what, i);
  }
};

// How many elements differ from the certified binary64 values (out = fp64, nearest even).
std::size_t differing(const xt::xarray<double>& within, const xt::xarray<double>& certified) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < within.size(); ++i)
    if (!same_value(within.data()[i], certified.data()[i])) ++n;
  return n;
}

xt::xarray<double> rows_array(const std::vector<std::vector<double>>& rows) {
  xt::xarray<double> x = xt::empty<double>({rows.size(), rows.front().size()});
  for (std::size_t r = 0; r < rows.size(); ++r)
    std::copy(rows[r].begin(), rows[r].end(), x.data() + r * rows[r].size());
  return x;
}

TEST(Within, SoftmaxAndLogSoftmaxRowsOfEveryKind) {
  std::mt19937_64 rng(41);
  WithinCheck check;
  for (const bool log : {false, true})
    for (const Format* f : kInputFormats)
      for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{300}})
        for (unsigned kind = 0; kind < 8; ++kind) {
          std::vector<std::vector<double>> rows;
          for (std::size_t r = 0; r < scaled(3, 1); ++r) rows.push_back(softmax_row_input(rng, *f, n, kind + 8 * static_cast<unsigned>(r)));
          const xt::xarray<double> x = rows_array(rows);
          const std::vector<Big> exact = softmax_oracle(x, -1, log);
          for (const double e : {kWithin, 0x1p-53, 0x1p-20}) {
            const xt::xarray<double> got =
                log ? reference::log_softmax(x, -1, reference::Within{e}) : reference::softmax(x, -1, reference::Within{e});
            check.all(got, exact, e,
                      std::string(log ? "log_softmax" : "softmax") + " " + std::string(f->name) + " n=" +
                          std::to_string(n) + " kind " + std::to_string(kind));
          }
        }
  EXPECT_EQ(check.failures, 0u) << "of " << check.checked;
  EXPECT_EQ(g_oracle_inexact.load(), 0);
}

TEST(Within, NormRowsOfEveryKind) {
  std::mt19937_64 rng(43);
  WithinCheck check;
  for (const bool rms : {false, true})
    for (const Format* f : kInputFormats)
      for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{96}})
        for (unsigned kind = 0; kind < 7; ++kind)
          for (const int affine : {0, 1, 2}) {
            std::vector<std::vector<double>> rows;
            for (std::size_t r = 0; r < scaled(3, 1); ++r) rows.push_back(norm_row_input(rng, *f, n, kind + 7 * static_cast<unsigned>(r)));
            const xt::xarray<double> x = rows_array(rows);
            // gamma and beta: none; values of f (zeros and negatives among them); with beta = -gamma * a
            // typical output, so that results cross zero.
            std::vector<double> gamma(n), beta(n);
            for (std::size_t j = 0; j < n; ++j) {
              gamma[j] = rng() % 5 == 0 ? 0.0 : draw(rng, *f, -2, 2);
              beta[j] = affine == 2 ? -gamma[j] * 0.75 : draw(rng, *f, -3, 1);
            }
            Norm p;
            p.rms = rms;
            p.eps = (kind % 2 == 0) ? 0.0 : 0x1p-17;
            if (affine > 0) {
              p.gamma = &gamma;
              p.beta = &beta;
            }
            const std::vector<Big> exact = norm_oracle(x, p);
            const xt::xarray<double> g = xt::adapt(gamma, {n}), b = xt::adapt(beta, {n});
            reference::NormParameters np;
            np.eps = p.eps;
            if (affine > 0) {
              np.gamma = &g;
              np.beta = &b;
            }
            for (const double e : {kWithin, 0x1p-53}) {
              const xt::xarray<double> got =
                  rms ? reference::rmsnorm(x, np, reference::Within{e}) : reference::layernorm(x, np, reference::Within{e});
              check.all(got, exact, e,
                        std::string(rms ? "rmsnorm" : "layernorm") + " " + std::string(f->name) + " n=" +
                            std::to_string(n) + " kind " + std::to_string(kind) + " affine " + std::to_string(affine));
            }
          }
  EXPECT_EQ(check.failures, 0u) << "of " << check.checked;
  EXPECT_EQ(g_oracle_inexact.load(), 0);
}

TEST(Within, TheFastEnclosureTakesPart) {
  std::mt19937_64 rng(47);
  std::vector<std::vector<double>> rows;
  for (std::size_t r = 0; r < 8; ++r) rows.push_back(softmax_row_input(rng, formats::bf16, 256, 0));
  const xt::xarray<double> x = rows_array(rows);
  const Cast binary64{formats::fp64};
  const reference::NormParameters np;
  const reference::Within within{kWithin};
  EXPECT_GT(differing(reference::softmax(x, -1, within), reference::softmax(x, -1, binary64)), x.size() / 4);
  EXPECT_GT(differing(reference::log_softmax(x, -1, within), reference::log_softmax(x, -1, binary64)), x.size() / 4);
  EXPECT_GT(differing(reference::layernorm(x, np, within), reference::layernorm(x, np, binary64)), x.size() / 4);
  EXPECT_GT(differing(reference::rmsnorm(x, np, within), reference::rmsnorm(x, np, binary64)), x.size() / 4);
  // At 2^-53 no enclosure is narrow enough: every element is the certified binary64 value.
  EXPECT_EQ(differing(reference::softmax(x, -1, reference::Within{0x1p-53}), reference::softmax(x, -1, binary64)), 0u);
}

TEST(Within, RelativeErrorOutOfRangeIsRefused) {
  const xt::xarray<double> x = {{1.0, 2.0}};
  for (const double e : {0x1p-54, 0x1p-19, 3e-13, 0.0, -0x1p-40, std::numeric_limits<double>::quiet_NaN()}) {
    try {
      (void)reference::softmax(x, -1, reference::Within{e});
      ADD_FAILURE() << "relative_error " << e << " accepted";
    } catch (const numeq::error& err) {
      EXPECT_NE(std::string(err.what()).find("within: relative_error"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("[2^-53, 2^-20]"), std::string::npos) << err.what();
    }
  }
}

}  // namespace
