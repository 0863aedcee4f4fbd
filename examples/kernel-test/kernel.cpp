// The tiled bf16 matmul of kernel.hpp. Compiled with -ffp-contract=off (CMakeLists.txt): a
// product followed by an addition must stay two operations, as on the device.

#include "kernel.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace kernel {

namespace {

constexpr std::size_t kTile = 128;  // rows of K per Tensor Engine matmul

// float -> bf16 (round to nearest, ties to even), returned as a float. Finite inputs only, which
// is all this kernel sees.
float to_bf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7FFFU + ((bits >> 16) & 1U);
  bits &= 0xFFFF0000U;
  float y;
  std::memcpy(&y, &bits, sizeof y);
  return y;
}

}  // namespace

Bug bug_by_name(std::string_view name) {
  if (name == "none") return Bug::none;
  if (name == "drop_last_k_tile") return Bug::drop_last_k_tile;
  if (name == "bf16_accumulator") return Bug::bf16_accumulator;
  throw std::invalid_argument("bug: unknown value \"" + std::string(name) +
                              "\"; choose none, drop_last_k_tile or bf16_accumulator");
}

std::vector<float> tiled_matmul(const std::vector<float>& a, const std::vector<float>& b, std::size_t m,
                                std::size_t k, std::size_t n, Bug bug) {
  if (a.size() != m * k || b.size() != k * n) throw std::invalid_argument("tiled_matmul: a or b has the wrong size");
  std::size_t tiles = (k + kTile - 1) / kTile;
  if (bug == Bug::drop_last_k_tile && tiles > 1) --tiles;
  std::vector<float> c(m * n, 0.0F);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      float psum = 0.0F;
      for (std::size_t t = 0; t < tiles; ++t) {
        // One matmul instruction: the products of rows k0 .. k1-1, summed down the PE column.
        const std::size_t k0 = t * kTile, k1 = std::min(k, k0 + kTile);
        float tile = 0.0F;
        for (std::size_t p = k0; p < k1; ++p) {
          // The product of two bf16 values is exact in fp32 (8 + 8 significand bits).
          tile = tile + a[i * k + p] * b[p * n + j];
          if (bug == Bug::bf16_accumulator) tile = to_bf16(tile);
        }
        // The first tile is written into PSUM, later ones are added to it.
        psum = t == 0 ? tile : psum + tile;
        if (bug == Bug::bf16_accumulator) psum = to_bf16(psum);
      }
      c[i * n + j] = psum;
    }
  }
  return c;
}

}  // namespace kernel
