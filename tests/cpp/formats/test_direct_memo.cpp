// direct_memo.hpp: whatever the keys and collisions, get() returns the function's own value, and
// a key seen last in its slot is not computed again. The oracle is the function itself.

#include "numeq/formats/direct_memo.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>

namespace {

std::uint64_t f(std::uint64_t x) { return x * x + 7; }

TEST(DirectMemo, ReturnsTheFunctionsValueForEveryKey) {
  numeq::DirectMemo<std::uint64_t, std::uint64_t, 4> memo;  // 16 slots: collisions are frequent
  std::mt19937_64 rng(3);
  int calls = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t k = rng() % 64;  // 64 keys over 16 slots
    const std::uint64_t got = memo.get(k, k, [&] { ++calls; return f(k); });
    ASSERT_EQ(got, f(k)) << "key " << k;
  }
  EXPECT_LT(calls, 20000);  // some repeats hit
}

TEST(DirectMemo, ARepeatedKeyIsComputedOnce) {
  numeq::DirectMemo<std::pair<std::uint64_t, std::uint64_t>, double> memo;
  int calls = 0;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(memo.get({1, 2}, 1, [&] { ++calls; return 0.5; }), 0.5);
  EXPECT_EQ(calls, 1);
  // Another key with the same hash takes the slot; the first is then computed again.
  EXPECT_EQ(memo.get({1, 3}, 1, [&] { ++calls; return 0.25; }), 0.25);
  EXPECT_EQ(memo.get({1, 2}, 1, [&] { ++calls; return 0.5; }), 0.5);
  EXPECT_EQ(calls, 3);
}

}  // namespace
