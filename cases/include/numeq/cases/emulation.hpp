#pragma once
// What every operation of the catalogue returns for a platform: the emulated values and, per
// element, a bound on their distance to the exact result, computed in the same pass from the
// same machine model (core/bound.hpp for reductions; error propagation through the operation's
// stages for composite operations).

#include <xtensor/xarray.hpp>

namespace numeq::cases {

struct Emulation {
  xt::xarray<double> values;  // the platform's result, float64 values of the output format
  xt::xarray<double> bound;   // same shape: |values - exact| <= bound (NaN: no bound, non-finite input)
  // Probabilistic bounds: the stated probability that an element's bound fails; 0 when deterministic.
  double failure_probability = 0;
};

}  // namespace numeq::cases
