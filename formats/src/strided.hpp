#pragma once
// Internal helpers shared by the array engines: walking a strided view in C order, loading
// elements of any width, and dispatching on element width.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "numeq/formats/array.hpp"
#include "numeq/formats/error.hpp"

// Element bodies are lambdas; they must inline into the loops below for the kernel to fold.
#if defined(__GNUC__) || defined(__clang__)
#define NUMEQ_LAMBDA_INLINE __attribute__((always_inline))
#else
#define NUMEQ_LAMBDA_INLINE
#endif

namespace numeq::detail {

inline bool is_contiguous(const BitsView& v) {
  std::ptrdiff_t expected = 1;
  for (std::size_t d = v.shape.size(); d-- > 0;) {
    if (v.shape[d] != 1 && v.strides[d] != expected) return false;
    expected *= static_cast<std::ptrdiff_t>(v.shape[d]);
  }
  return true;
}

// Calls f(i, offset) for the C-order elements i in [begin, end) of v, offset in elements.
template <class F>
[[gnu::always_inline]] inline void for_each_offset(const BitsView& v, bool contiguous, std::size_t begin, std::size_t end, F&& f) {
  if (contiguous) {
    for (std::size_t i = begin; i < end; ++i) f(i, static_cast<std::ptrdiff_t>(i));
    return;
  }
  const std::size_t dims = v.shape.size();
  std::vector<std::size_t> index(dims, 0);
  std::ptrdiff_t offset = 0;
  std::size_t rest = begin;
  for (std::size_t d = dims; d-- > 0;) {
    index[d] = rest % v.shape[d];
    rest /= v.shape[d];
    offset += static_cast<std::ptrdiff_t>(index[d]) * v.strides[d];
  }
  const std::size_t inner = dims - 1;
  const std::ptrdiff_t inner_stride = v.strides[inner];
  std::size_t i = begin;
  while (i < end) {
    const std::size_t run = std::min(end - i, v.shape[inner] - index[inner]);
    for (std::size_t k = 0; k < run; ++k, ++i, offset += inner_stride) f(i, offset);
    index[inner] += run;
    // Carry into the outer dimensions.
    for (std::size_t d = inner; d > 0 && index[d] == v.shape[d]; --d) {
      offset -= static_cast<std::ptrdiff_t>(index[d]) * v.strides[d];
      index[d] = 0;
      ++index[d - 1];
      offset += v.strides[d - 1];
    }
  }
}

template <class T>
inline std::uint64_t load(const void* data, std::ptrdiff_t offset) {
  T value;
  std::memcpy(&value, static_cast<const char*>(data) + offset * static_cast<std::ptrdiff_t>(sizeof(T)),
              sizeof(T));
  return static_cast<std::uint64_t>(value);
}

// Runs f.template operator()<T>() with T the unsigned type of the given width.
template <class F>
inline void with_width(int bytes, F&& f) {
  switch (bytes) {
    case 1: f.template operator()<std::uint8_t>(); return;
    case 2: f.template operator()<std::uint16_t>(); return;
    case 4: f.template operator()<std::uint32_t>(); return;
    case 8: f.template operator()<std::uint64_t>(); return;
    default: throw error("element width must be 1, 2, 4 or 8 bytes, got " + std::to_string(bytes));
  }
}

}  // namespace numeq::detail
