#pragma once
// Shared by test_array.cpp and test_memo_cast.cpp: the fixture that restores the thread count, a
// double's bits, a Cast's description, and a call with the unsigned type of a storage width.

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>

#include "numeq/numeq.hpp"

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

// Calls f.template operator()<Bits>() with the unsigned type of the given width.
template <class F>
inline void with_bits_type(int storage_bits, F&& f) {
  switch (storage_bits) {
    case 8: f.template operator()<std::uint8_t>(); break;
    case 16: f.template operator()<std::uint16_t>(); break;
    case 32: f.template operator()<std::uint32_t>(); break;
    default: f.template operator()<std::uint64_t>(); break;
  }
}

}  // namespace numeq_test
