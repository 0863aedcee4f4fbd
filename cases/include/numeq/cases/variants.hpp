#pragma once
// The named variants of a platform: what else the hardware might do that numeq can evaluate bit
// for bit, each named in the platform string syntax (core/platform.hpp, platform_by_name), so a
// verdict of tier `variant` (verdict.hpp) says which one a device's output equals:
//   - every combination of the alternatives of the platform's named assumptions that change what
//     the op reads (Op::model_key; Trainium's unknowns: "trainium.trn2[pe_order=pairwise]"),
//     fewest changes first; for an op without a model key, each alternative alone;
//   - the sibling instruction paths of the same device ("nvidia.h100.mma_sync" beside
//     "nvidia.h100", "nvidia.b200.tcgen05" beside "nvidia.b200");
//   - a Trainium kernel's tiling of a matmul: K tiles (k_tile: the divisors of K up to the rows one
//     nc_matmul contracts, and 32, 64, 128, 256 where they fit) and PSUM groups of 2, 4, 8 and 16
//     K tiles ("trainium.trn2[k_tile=64]", "trainium.trn2[k_tile=128,psum_group=4]");
//   - split-K of matmul and dot by 2, 3, 4, 8 and 16, serial and parallel ("nvidia.h100[split_k=4]").

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/cases/op.hpp"
#include "numeq/core/platform.hpp"

namespace numeq::cases {

// Which variants a search may name. `hardware`: only what the hardware might do (the assumption
// alternatives and sibling instruction paths), for an output whose dataflow is known (a kernel's
// run: its tiling and how it sums are read from its trace, so a Trainium tiling or a split-K that
// reproduces the output is the kernel's own choice, a finding, never an explanation).
enum class VariantScope : std::uint8_t { all, hardware };

// The variants of `platform` for `op`, in the order the search tries them (the platform itself
// not among them). At most max_variants.
inline constexpr std::size_t max_variants = 4096;
std::vector<std::string> platform_variants(const core::Platform& platform, const Op& op,
                                           VariantScope scope = VariantScope::all);

struct VariantSearch {
  std::string exact;                // the first variant equal to actual on every element; empty if none
  std::vector<std::string> also;    // other variants equal to actual on every element (at most 3)
  std::string nearest;              // otherwise: the variant equal to actual on the most elements
  std::size_t nearest_matches = 0;  //   and on how many
  std::size_t searched = 0;         // variants tried
};

// Searches platform_variants for one whose emulation equals `actual` bit for bit (NaN matches NaN,
// zeros by sign). `sample`: flat indices of elements where actual differs from the platform's own
// emulation; each variant is first emulated on op.restrict_to(sample) where the op has it, and
// only a variant that explains the sample is emulated in full.
VariantSearch search_variants(const xt::xarray<double>& actual, const Op& op, const core::Platform& platform,
                              const std::vector<std::size_t>& sample, VariantScope scope = VariantScope::all);

}  // namespace numeq::cases
