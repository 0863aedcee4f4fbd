// libFuzzer target: plan and platform JSON (core/plan.hpp plan_from_json, platform.hpp
// platform_from_json). Any input must give a plan / platform or a numeq::error; what parses
// must write back to JSON that reads back equal, and must evaluate (exercise.hpp) without a
// crash.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "exercise.hpp"
#include "numeq/core/platform.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace core = numeq::core;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::uint64_t salt = size;
  for (std::size_t i = 0; i < size && i < 64; ++i) salt = salt * 31 + data[i];
  try {
    const core::Plan plan = core::plan_from_json(text);
    // The canonical JSON reads back to the same plan.
    if (!(core::plan_from_json(core::to_json(plan)) == plan)) std::abort();
    numeq_fuzz::exercise(plan, salt);
  } catch (const numeq::error&) {
  }
  try {
    const core::Platform platform = core::platform_from_json(text);
    if (!(core::platform_from_json(core::to_json(platform)) == platform)) std::abort();
    for (std::size_t i = 0; i < platform.plans.size() && i < 4; ++i) numeq_fuzz::exercise(platform.plans[i].plan, salt);
  } catch (const numeq::error&) {
  }
  return 0;
}
