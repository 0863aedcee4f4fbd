#pragma once
// What the plan evaluator's tests share (tests/cpp/core/test_evaluate.cpp, test_matmul.cpp): the
// names they use, fp32 values spread over many binades and a plan made of one reduction node.

#include <cmath>
#include <random>
#include <utility>

#include "numeq/core/plan.hpp"
#include "numeq/formats/format.hpp"

namespace evaluate_test {

using numeq::Cast;
using numeq::Rounding;
namespace core = numeq::core;
namespace formats = numeq::formats;

// Doubles spread over many binades, values of fp32 (so that sums land near every format's range).
inline double random_value(std::mt19937_64& g) {
  std::uniform_int_distribution<int> e(-30, 30);
  std::normal_distribution<double> n;
  const double v = std::ldexp(n(g), e(g));
  return static_cast<double>(static_cast<float>(v));
}

inline core::Plan plan_of(core::PlanNode node, const Cast& out = Cast{formats::fp32}) {
  core::Plan p;
  p.reduction = std::move(node);
  p.output = out;
  return p;
}

}  // namespace evaluate_test
