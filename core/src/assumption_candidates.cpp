// The candidates a fit tries among a platform's assumptions (platform.hpp, assumption_candidates).

#include <string>
#include <vector>

#include "numeq/core/platform.hpp"
#include "numeq/formats/error.hpp"

namespace numeq::core {

namespace {

// The plan's arithmetic: the plan without its name (which names the variant).
std::optional<Plan> arithmetic(const std::string& platform, Operation op, std::string_view in_fmt,
                               std::string_view out_fmt) {
  try {
    Plan p = plan_for(platform_by_name(platform, "platform"), op, in_fmt, out_fmt);
    p.name.clear();
    return p;
  } catch (const numeq::error&) {
    return std::nullopt;
  }
}

}  // namespace

std::vector<AssumptionCandidate> assumption_candidates(std::string_view platform, Operation op,
                                                       std::string_view in_fmt, std::string_view out_fmt,
                                                       const std::optional<std::vector<std::string>>& names) {
  const std::string base(platform.substr(0, platform.find('[')));
  const std::string trimmed = base.substr(0, base.find_last_not_of(' ') + 1);
  const std::vector<Assumption> as = platform_by_name(trimmed, "platform").assumptions;
  if (as.empty())
    throw numeq::error("platform: " + trimmed + " has no assumptions to choose among; give candidates as plans or names");
  const auto find = [&](const std::string& n) -> const Assumption* {
    for (const Assumption& a : as)
      if (a.name == n) return &a;
    return nullptr;
  };
  std::vector<const Assumption*> chosen;
  if (names) {
    for (const std::string& n : *names) {
      const Assumption* a = find(n);
      if (!a) {
        std::string valid;
        for (const Assumption& x : as) valid += (valid.empty() ? "" : ", ") + x.name;
        throw numeq::error("names: " + trimmed + " has no assumption '" + n + "'; valid: " + valid);
      }
      chosen.push_back(a);
    }
  } else {
    // Those of which one alternative alone changes the plan's arithmetic (refused ones skipped).
    const std::optional<Plan> own = arithmetic(trimmed, op, in_fmt, out_fmt);
    if (!own) plan_for(platform_by_name(trimmed, "platform"), op, in_fmt, out_fmt);  // its error
    for (const Assumption& a : as)
      for (std::size_t i = 1; i < a.alternatives.size(); ++i) {
        const std::optional<Plan> p = arithmetic(trimmed + "[" + a.name + "=" + a.alternatives[i] + "]", op, in_fmt,
                                                 out_fmt);
        if (p && *p != *own) {
          chosen.push_back(&a);
          break;
        }
      }
  }
  // Every combination, the first name's alternatives slowest (an odometer whose last wheel turns first).
  std::vector<AssumptionCandidate> out;
  std::vector<std::size_t> pick(chosen.size(), 0);
  while (true) {
    std::string label;
    for (std::size_t j = 0; j < chosen.size(); ++j)
      label += (j ? "," : "") + chosen[j]->name + "=" + chosen[j]->alternatives[pick[j]];
    const std::string variant = chosen.empty() ? trimmed : trimmed + "[" + label + "]";
    if (arithmetic(variant, op, in_fmt, out_fmt)) out.push_back({chosen.empty() ? "default" : label, variant});
    std::size_t j = chosen.size();
    while (j > 0 && ++pick[j - 1] == chosen[j - 1]->alternatives.size()) pick[--j] = 0;
    if (j == 0) break;
  }
  return out;
}

}  // namespace numeq::core
