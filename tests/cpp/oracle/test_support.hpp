#pragma once
// Small helpers shared by the C++ tests (not oracles: they lay out inputs and check errors).

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "numeq/formats/array.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq_test {

inline constexpr numeq::Rounding kModes[] = {
    numeq::Rounding::nearest_even, numeq::Rounding::nearest_away, numeq::Rounding::toward_zero,
    numeq::Rounding::upward,       numeq::Rounding::downward,     numeq::Rounding::odd,
    numeq::Rounding::stochastic};

// Element strides of a C-order array of the given shape.
inline std::vector<std::ptrdiff_t> c_strides(const std::vector<std::size_t>& shape) {
  std::vector<std::ptrdiff_t> s(shape.size());
  std::ptrdiff_t stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    s[d] = stride;
    stride *= static_cast<std::ptrdiff_t>(shape[d]);
  }
  return s;
}

// A C-order BitsView over a vector of float (fp32 patterns) or double (fp64 patterns).
template <class T>
numeq::BitsView view_of(const std::vector<T>& data, const std::vector<std::size_t>& shape) {
  numeq::BitsView v;
  v.data = data.data();
  v.element_bytes = sizeof(T);
  v.format = sizeof(T) == 4 ? &numeq::formats::fp32 : &numeq::formats::fp64;
  v.shape = shape;
  v.strides = c_strides(shape);
  return v;
}

// Runs f and expects a numeq::error whose message contains `word` (the argument it names).
inline void expect_error_mentioning(const std::function<void()>& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "no numeq::error (expected one mentioning '" << word << "')";
  } catch (const numeq::error& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

// The message of the numeq::error f throws; a test failure (and "") when it throws none.
template <class F>
std::string error_message_of(F&& f) {
  try {
    (void)f();
  } catch (const numeq::error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no numeq::error";
  return {};
}

}  // namespace numeq_test
