#pragma once
// The "kernel" under test: a bf16 matmul as a Trainium (NKI) kernel computes it, written plainly in
// C++ on float so that it runs on any CPU. A real kernel test would launch the device kernel here
// and copy its output back; everything after that point (kernel_test.cpp) is the same.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kernel {

// Bugs to plant, as a kernel engineer might write them by mistake.
enum class Bug {
  none,
  drop_last_k_tile,  // the loop over K tiles stops before the last, partial, tile
  bf16_accumulator,  // the running sum is kept in bf16 instead of fp32
};

// "none", "drop_last_k_tile", "bf16_accumulator"; throws std::invalid_argument listing them otherwise.
Bug bug_by_name(std::string_view name);

// c[m, n] = sum_k a[m, k] * b[k, n] for row-major a (M x K) and b (K x N) holding bf16 values (as
// float), into row-major c (M x N, fp32). K is cut into tiles of 128 rows (the Tensor Engine's
// contraction limit); each tile's products are summed in fp32 from zero in k order, and the
// tiles' sums are accumulated in fp32 in tile order (PSUM).
std::vector<float> tiled_matmul(const std::vector<float>& a, const std::vector<float>& b, std::size_t m,
                                 std::size_t k, std::size_t n, Bug bug = Bug::none);

}  // namespace kernel
