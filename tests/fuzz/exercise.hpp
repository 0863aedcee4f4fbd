#pragma once
// What every fuzz target does with a plan the parsers accepted: evaluate short sums, dot
// products and a matmul through it and walk its error bound, so that a plan which parses but
// crashes the evaluator or the bound walker is found too. numeq::error is a valid answer
// (inputs a plan refuses); anything else escaping, or a signal, is a finding.

#include <cstddef>
#include <cstdint>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/core/bound.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/core/plan.hpp"
#include "numeq/formats/error.hpp"

namespace numeq_fuzz {

// Small inputs whose products are exact in binary64 and representable in every fp8 format.
inline double value(std::size_t i, std::uint64_t salt) {
  static constexpr double kValues[] = {1.0, -0.5, 2.0, 0.25, -3.0, 0.0, -0.0, 1.5, -1.0, 0.125, 4.0, -0.75};
  return kValues[(i * 7 + salt) % (sizeof(kValues) / sizeof(kValues[0]))];
}

template <class F>
void allowing_errors(F&& f) {
  try {
    f();
  } catch (const numeq::error&) {
  }
}

// Lengths: 0 (K = 0), a few small ones, one past typical leaf and lane sizes.
inline void exercise(const numeq::core::Plan& plan, std::uint64_t salt) {
  namespace core = numeq::core;
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5},
                              std::size_t{9}, std::size_t{17 + salt % 24}}) {
    std::vector<double> a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = value(i, salt);
      b[i] = value(i + 3, salt);
    }
    allowing_errors([&] { (void)core::evaluate(a, {}, std::nullopt, plan); });
    allowing_errors([&] { (void)core::evaluate(a, b, 0.5, plan); });
    allowing_errors([&] { (void)core::reduction_weights(plan, n, true); });
  }
  // A small matmul (and K = 0) through the array entry points.
  for (const std::size_t K : {std::size_t{0}, std::size_t{4}}) {
    xt::xarray<double> a = xt::xarray<double>::from_shape({2, K});
    xt::xarray<double> b = xt::xarray<double>::from_shape({K, 3});
    for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = value(i, salt);
    for (std::size_t i = 0; i < b.size(); ++i) b.data()[i] = value(i + 5, salt);
    xt::xarray<double> c = xt::xarray<double>::from_shape({2, 3});
    for (std::size_t i = 0; i < c.size(); ++i) c.data()[i] = value(i + 1, salt);
    allowing_errors([&] {
      const xt::xarray<double> d = core::matmul(a, b, &c, plan);
      (void)core::matmul_bound(a, b, &c, plan, d);
    });
    allowing_errors([&] { (void)core::sum(a, -1, plan); });
  }
}

}  // namespace numeq_fuzz
