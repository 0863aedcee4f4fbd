#pragma once
// The built-in platforms (builtin_platforms.cpp), each parameter with its evidence.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "numeq/core/platform.hpp"

namespace numeq::core {

std::vector<Platform> builtin_platforms();
// The NVIDIA tensor-core generations (nvidia_platforms.cpp), from the fused-step parameter sets.
std::vector<Platform> nvidia_platforms();
// The Trainium generations (trainium_platforms.cpp) with every assumption at its default.
std::vector<Platform> trainium_platforms();

// (assumption, value) pairs as written in "name[assumption=value,...]".
using AssumptionChoices = std::vector<std::pair<std::string, std::string>>;
// The built-in platform `base` (by name) rebuilt with the chosen assumption values, or nullopt
// when `base` is not a built-in platform with assumptions. Errors name `parameter`.
// The value of a platform option "key=value" that counts something (split_k, k_tile,
// psum_group): an integer in 1 .. most, else an error naming the key and the range.
std::size_t option_count(const std::string& key, const std::string& value, std::size_t most,
                         std::string_view parameter);

std::optional<Platform> builtin_variant(std::string_view base, const AssumptionChoices& choices,
                                        std::string_view parameter);

}  // namespace numeq::core
