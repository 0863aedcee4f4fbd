#pragma once
// The data-driven probabilistic bound (bound_probabilistic.cpp; the model is stated there and in
// bound.hpp): private to numeq::core, used by bound.cpp's dot_bound and matmul_bound.

#include <cstddef>
#include <memory>
#include <vector>

#include "numeq/core/plan.hpp"

namespace numeq::core::detail {

class DataWalk {
 public:
  // Compiles the plan for K terms (products a_k b_k) with or without c. supported() is false when
  // the plan has a node this analysis does not model (then only bound.cpp's walk applies).
  DataWalk(const Plan& plan, std::size_t K, bool with_init);
  ~DataWalk();
  DataWalk(const DataWalk&) = delete;
  DataWalk& operator=(const DataWalk&) = delete;
  bool supported() const;

  // The plan's input casts applied to n values (x itself when the plan has none for that side).
  std::vector<double> cast_a(const double* x, std::size_t n) const;
  std::vector<double> cast_b(const double* x, std::size_t n) const;

  // Per-thread scratch.
  struct Scratch {
    std::vector<double> t;
    std::vector<int> exponent, low;
  };
  // One element: a and b the operands as given (a[k], b[k * b_stride]), ac and bc the same after
  // the input casts, c the element's c (nullptr when none). Returns a bound on |v - s| (v the value
  // before the output cast, s the exact a.b + c) that holds with probability at least
  // 1 - 2 exp(-lambda^2 / 2) under the model; +Inf when the data leave the model's range.
  double pre_cast(const double* a, const double* b, std::size_t b_stride, const double* ac, const double* bc,
                  std::size_t bc_stride, const double* c, double lambda, Scratch& scratch) const;

  struct Program;

 private:
  std::unique_ptr<Program> program_;
};

// The per-element failure probability of DataWalk::pre_cast at this lambda: 2 exp(-lambda^2 / 2)
// (Azuma-Hoeffding for one martingale), rounded upward.
double data_walk_failure(double lambda);

}  // namespace numeq::core::detail
