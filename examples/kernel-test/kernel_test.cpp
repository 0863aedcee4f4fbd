// A kernel test binary as a kernel engineer writes it: run the kernel on seeded inputs, then let
// numeq judge the output against the operation on a platform (numeq/testing.hpp's matchers). On
// failure the message is numeq's verdict: tier, counts, where the failures lie, worst elements.
//
//   ./kernel_test                          the kernel as written: every test passes
//   ./kernel_test --bug=bf16_accumulator   a planted bug (or KERNEL_BUG=bf16_accumulator): tests fail
//   ./kernel_test --bug=drop_last_k_tile

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <xtensor/xarray.hpp>

#include <numeq/numeq.hpp>
#include <numeq/testing.hpp>

#include "kernel.hpp"

namespace {

kernel::Bug planted = kernel::Bug::none;

// K = 300: two full 128-row tiles and a partial one of 44 rows, so that the tile loop's edge is
// exercised. Small enough that the whole binary runs in about a second.
constexpr std::size_t kM = 64, kK = 300, kN = 48;

struct Case {
  // Seeded normal inputs, rounded to bf16 (the kernel's input format).
  xt::xarray<double> a = numeq::cases::generate({numeq::cases::Distribution::normal, 1, 1.0}, numeq::formats::bf16, {kM, kK});
  xt::xarray<double> b = numeq::cases::generate({numeq::cases::Distribution::normal, 2, 1.0}, numeq::formats::bf16, {kK, kN});
  // The operation the kernel computes: bf16 inputs, fp32 output.
  numeq::cases::Op op = numeq::cases::matmul(a, b, nullptr, "bf16", numeq::Cast{numeq::formats::fp32});

  // The kernel's output (fp32, row-major M x N), as the device would hand it back.
  std::vector<float> run() const {
    const std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());  // bf16 values are exact in float
    return kernel::tiled_matmul(af, bf, kM, kK, kN, planted);
  }
};

using numeq::testing::IsBitExactWith;
using numeq::testing::IsExplainedBy;
using numeq::testing::IsPortOf;

// The check a Trainium kernel's test makes: the output is explained by the platform, bit for bit,
// by a named variant of an undocumented detail (the PE adder's order, ...), or else within the
// probabilistic bound of the exact result.
TEST(TiledMatmul, ExplainedByTrainium2) {
  const Case c;
  EXPECT_THAT(c.run(), IsExplainedBy(c.op, "trainium.trn2"));
}

// This CPU kernel follows the structure numeq's trainium.trn2 model states (128-row K tiles, each
// summed in fp32 from zero in k order, tiles added in fp32 in order; the documented structure plus
// the model's default assumptions), so it matches the emulation bit for bit. A device kernel may
// instead match a variant (the tier above says which); bit-exactness with the default model is
// then not what to require of it.
TEST(TiledMatmul, BitExactWithTheTrainium2Model) {
  const Case c;
  EXPECT_THAT(c.run(), IsBitExactWith(c.op, "trainium.trn2"));
}

// Platform-independent: within the bound of a plain fp32 accumulation (CUDA cores, one fma chain
// over K). Any correct fp32-accumulating order is: each product passes through fewer roundings
// in 128-row tiles than in one chain of 300, so the worst-case bound holds with certainty; the
// probabilistic one (the default tier) fails with probability at most 1e-6 for a correct kernel.
TEST(TiledMatmul, ExplainedByAPlainFp32Accumulation) {
  const Case c;
  EXPECT_THAT(c.run(), IsExplainedBy(c.op, "cuda_core.fp32"));
}

// The port check: the CUDA kernel's output of the same matmul on the same inputs, and this
// kernel's, each explained by its platform and no farther apart than both bounds together. The
// CUDA output here is numeq's emulation of an H100 tensor-core matmul, standing in for an output
// recorded on the GPU (numeq's H100 model is checked against GPU-measured vectors).
TEST(TiledMatmul, PortOfTheH100Kernel) {
  const Case c;
  const xt::xarray<double> h100 = c.op.emulate(numeq::core::platform_by_name("nvidia.h100"), {}).values;
  EXPECT_THAT(c.run(), IsPortOf(h100, c.op, "nvidia.h100", "trainium.trn2"));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleMock(&argc, argv);  // removes the flags GoogleTest knows
  try {
    std::string_view bug = std::getenv("KERNEL_BUG") ? std::getenv("KERNEL_BUG") : "none";
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg.starts_with("--bug=")) {
        bug = arg.substr(6);
      } else {
        std::fprintf(stderr, "kernel_test: unknown argument %s (use --bug=NAME or GoogleTest's --gtest_* flags)\n", argv[i]);
        return 2;
      }
    }
    planted = kernel::bug_by_name(bug);
    std::printf("kernel_test: planted bug: %.*s\n", static_cast<int>(bug.size()), bug.data());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_test: %s\n", e.what());
    return 2;
  }
  return RUN_ALL_TESTS();
}
