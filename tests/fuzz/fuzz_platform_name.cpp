// libFuzzer target: platform names with assumption choices, "name[key=value,...]"
// (core/platform.hpp platform_by_name). Any input must give a platform or a numeq::error; a
// platform that comes back must evaluate its plans (exercise.hpp) without a crash.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "exercise.hpp"
#include "numeq/core/platform.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace core = numeq::core;
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  try {
    const core::Platform platform = core::platform_by_name(name);
    // One plan per call keeps the executions fast; which one follows the input.
    if (!platform.plans.empty()) numeq_fuzz::exercise(platform.plans[size % platform.plans.size()].plan, size);
  } catch (const numeq::error&) {
  }
  return 0;
}
