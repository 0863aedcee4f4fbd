#pragma once
// Shared by test_op.cpp and test_op_tolerance.cpp: an input array drawn by one of the catalogue's
// generators (cases/generators.hpp) at scale 1.

#include <cstdint>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/cases/generators.hpp"
#include "numeq/formats/format.hpp"

namespace numeq_test {

inline xt::xarray<double> generate(numeq::cases::Distribution d, std::uint64_t seed, const numeq::Format& f,
                                   std::vector<std::size_t> shape) {
  return numeq::cases::generate(numeq::cases::Generator{d, seed, 1.0}, f, shape);
}

}  // namespace numeq_test
