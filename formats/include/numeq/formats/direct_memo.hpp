#pragma once
// Results of a pure function remembered for the last keys seen: a direct-mapped table (one key
// per slot, a new key replaces the old). For per-element work whose arguments repeat, such as
// exp of x_j - max over rows of narrow inputs: a repeated argument costs a lookup instead of an
// evaluation. The key is compared whole, so a collision only costs a recomputation.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace numeq {

template <class Key, class Value, int Bits = 12>
class DirectMemo {
 public:
  DirectMemo() : slots_(std::size_t{1} << Bits) {}
  // The value for `key`: the slot's where it holds key, else compute() stored there. `hash`
  // spreads the keys (any 64 bits of them; multiplied by a Fibonacci constant here).
  template <class Compute>
  const Value& get(const Key& key, std::uint64_t hash, Compute&& compute) {
    Slot& s = slots_[(hash * 0x9e3779b97f4a7c15u) >> (64 - Bits)];
    if (!s.used || !(s.key == key)) s = Slot{key, compute(), true};
    return s.value;
  }

 private:
  struct Slot {
    Key key{};
    Value value{};
    bool used = false;
  };
  std::vector<Slot> slots_;
};

}  // namespace numeq
