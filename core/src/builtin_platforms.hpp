#pragma once
// The built-in platforms (builtin_platforms.cpp), each parameter with its evidence.

#include <vector>

#include "numeq/core/platform.hpp"

namespace numeq::core {

std::vector<Platform> builtin_platforms();
// The NVIDIA tensor-core generations (nvidia_platforms.cpp), from the fused-step parameter sets.
std::vector<Platform> nvidia_platforms();

}  // namespace numeq::core
