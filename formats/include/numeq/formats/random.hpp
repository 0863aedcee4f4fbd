#pragma once
// Counter-based random bits for stochastic rounding. The bits for element i depend only on
// (seed, i), never on threads, chunking or call order, so a cast is reproducible anywhere.
//
// The generator is SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014) evaluated at a counter: state_i = key(seed) + (i + 1) * gamma, output
// = mix(state_i). SplitMix64's output sequence passes BigCrush; keying its start by a mixed seed
// places streams of different seeds at unrelated points of the 2^64 cycle.

#include <cstdint>

namespace numeq {

inline constexpr std::uint64_t splitmix64_gamma = 0x9E3779B97F4A7C15ull;

constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The stream key for a seed: computed once per cast.
constexpr std::uint64_t random_stream_key(std::uint64_t seed) {
  return splitmix64_mix(seed ^ 0x243F6A8885A308D3ull);
}

// 64 random bits for element `index` of the stream `key`.
constexpr std::uint64_t random_bits_at(std::uint64_t key, std::uint64_t index) {
  return splitmix64_mix(key + (index + 1) * splitmix64_gamma);
}

}  // namespace numeq
