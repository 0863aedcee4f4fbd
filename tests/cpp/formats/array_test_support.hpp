#pragma once
// Shared by test_array.cpp and test_memo_cast.cpp: the fixture that restores the thread count, a
// double's bits, a Cast's description, and a call with the unsigned type of a storage width.

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <utility>

#include "numeq/numeq.hpp"

#include "../../../formats/src/strided.hpp"

namespace numeq_test {

inline std::uint64_t bits_of(double x) { return std::bit_cast<std::uint64_t>(x); }

// Restores the default thread count whatever a test did.
class ArrayTest : public ::testing::Test {
 protected:
  void TearDown() override { numeq::set_num_threads(0); }
};

inline std::string describe(const numeq::Cast& c) {
  return std::string(c.format.name) + "/" + std::string(numeq::to_string(c.rounding)) + "/R" +
         std::to_string(c.random_bits) + "/" + std::string(numeq::to_string(c.overflow));
}

// Calls f.template operator()<Bits>() with the unsigned type a format's bits are stored in: the
// library's own width switch (formats/src/strided.hpp).
template <class F>
inline void with_bits_type(int storage_bits, F&& f) {
  numeq::detail::with_width(storage_bits / 8, std::forward<F>(f));
}

}  // namespace numeq_test
