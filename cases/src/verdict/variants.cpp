#include "numeq/cases/variants.hpp"

#include "verdict_text.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "numeq/formats/error.hpp"

namespace numeq::cases {

namespace {

using detail::same_value;


std::string base_name(const std::string& name) { return name.substr(0, name.find('[')); }

// What of `platform` op's emulation reads (Op::model_key), or the whole platform but its name.
std::string model_key(const core::Platform& platform, const Op& op) {
  if (op.model_key) return op.model_key(platform);
  core::Platform p = platform;
  p.name.clear();
  p.aliases.clear();
  p.assumptions.clear();
  return core::to_json(p, -1);
}

// The items of a platform name's [...] that are not assumptions (a Trainium kernel's k_tile and
// psum_group, a split-K), in order: every variant of the platform keeps them.
std::vector<std::string> kept_options(const core::Platform& platform) {
  std::vector<std::string> kept;
  const std::string& name = platform.name;
  const auto open = name.find('[');
  if (open == std::string::npos || name.back() != ']') return kept;
  std::string body = name.substr(open + 1, name.size() - open - 2);
  while (!body.empty()) {
    const auto comma = body.find(',');
    const std::string item = body.substr(0, comma);
    const std::string key = item.substr(0, item.find('='));
    const bool assumption = std::any_of(platform.assumptions.begin(), platform.assumptions.end(),
                                        [&](const core::Assumption& a) { return a.name == key; });
    if (!assumption) kept.push_back(item);
    if (comma == std::string::npos) break;
    body = body.substr(comma + 1);
  }
  return kept;
}

// "base[a=v,...,options...]" naming every assumption whose value is not its default (its first
// alternative), then the platform's kept options.
std::string assumption_name(const std::string& base, const std::vector<core::Assumption>& as,
                            const std::vector<std::string>& values, const std::vector<std::string>& kept) {
  std::string inside;
  for (std::size_t i = 0; i < as.size(); ++i)
    if (values[i] != as[i].alternatives.front()) inside += (inside.empty() ? "" : ",") + as[i].name + "=" + values[i];
  for (const std::string& k : kept) inside += (inside.empty() ? "" : ",") + k;
  return inside.empty() ? base : base + "[" + inside + "]";
}

// The combinations of the alternatives of the assumptions that matter to op (changing one alone
// changes what op reads), fewest changes from the platform's own values first, one name per
// distinct model, the platform's own model left out. An error building a variant (an alternative
// that cannot apply) leaves that variant out.
std::vector<std::string> assumption_variants(const core::Platform& platform, const Op& op) {
  const std::vector<core::Assumption>& as = platform.assumptions;
  if (as.empty()) return {};
  const std::string base = base_name(platform.name);
  const std::vector<std::string> kept = kept_options(platform);
  std::vector<std::string> own;
  for (const core::Assumption& a : as) own.push_back(a.value);
  const auto key_of = [&](const std::vector<std::string>& values) -> std::optional<std::string> {
    try {
      return model_key(core::platform_by_name(assumption_name(base, as, values, kept), "variant"), op);
    } catch (const numeq::error&) {
      return std::nullopt;
    }
  };
  const std::optional<std::string> own_key = key_of(own);
  if (!own_key) return {};
  // Each single change (assumption i, alternative alt) that gives another model than the own:
  // visit(i, values) is called for it; returning true skips i's other alternatives.
  const auto each_single_change = [&](const auto& visit) {
    for (std::size_t i = 0; i < as.size(); ++i) {
      for (const std::string& alt : as[i].alternatives) {
        if (alt == own[i]) continue;
        std::vector<std::string> values = own;
        values[i] = alt;
        const std::optional<std::string> k = key_of(values);
        if (k && *k != *own_key && visit(i, values)) break;
      }
    }
  };
  if (!op.model_key) {
    // The op does not say what of a platform it reads: every assumption may matter, and their
    // combinations are too many to emulate in full (Trainium's: tens of thousands). One change
    // at a time, each alternative of each assumption whose platform differs from the own.
    std::vector<std::string> names;
    each_single_change([&](std::size_t, const std::vector<std::string>& values) {
      names.push_back(assumption_name(base, as, values, kept));
      return false;
    });
    return names;
  }
  std::vector<std::size_t> matter;  // the assumptions that change op's model alone
  each_single_change([&](std::size_t i, const std::vector<std::string>&) {
    matter.push_back(i);
    return true;
  });
  // Every combination of the assumptions that matter, as an odometer over their alternatives.
  std::vector<std::pair<std::size_t, std::vector<std::string>>> combos;  // (changes, values)
  std::vector<std::size_t> pick(matter.size(), 0);
  while (combos.size() < max_variants) {
    std::vector<std::string> values = own;
    std::size_t changes = 0;
    for (std::size_t j = 0; j < matter.size(); ++j) {
      values[matter[j]] = as[matter[j]].alternatives[pick[j]];
      changes += values[matter[j]] != own[matter[j]];
    }
    if (changes > 0) combos.emplace_back(changes, std::move(values));
    std::size_t j = 0;
    for (; j < matter.size(); ++j) {
      if (++pick[j] < as[matter[j]].alternatives.size()) break;
      pick[j] = 0;
    }
    if (j == matter.size()) break;
  }
  std::stable_sort(combos.begin(), combos.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> names;
  std::set<std::string> seen{*own_key};
  for (const auto& [changes, values] : combos) {
    const std::optional<std::string> k = key_of(values);
    if (!k || !seen.insert(*k).second) continue;
    names.push_back(assumption_name(base, as, values, kept));
  }
  return names;
}

// The same device's other instruction paths: built-in platforms named base.<path>, or base itself
// for a platform named base.<path>.
std::vector<std::string> sibling_variants(const core::Platform& platform) {
  const std::string own = base_name(platform.name);
  std::vector<std::string> out;
  for (const std::string& other : core::platform_names()) {
    if (other == own) continue;
    const bool child = other.rfind(own + ".", 0) == 0;
    const bool parent = own.rfind(other + ".", 0) == 0;
    // Siblings share the parent: nvidia.h100.mma_sync beside nvidia.h100.fp8_promoted.
    const std::size_t dot = own.rfind('.');
    const bool sibling = dot != std::string::npos && own.find('.') != dot &&
                         other.rfind(own.substr(0, dot + 1), 0) == 0 && other.find('.', dot + 1) == std::string::npos;
    if (child || parent || sibling) out.push_back(other);
  }
  return out;
}

// `name` with its [...] items keyed `keys` replaced by `items` (appended in order).
std::string with_options(const std::string& name, const std::vector<std::string>& keys,
                         const std::vector<std::string>& items) {
  const std::string base = base_name(name);
  std::string inside;
  const auto open = name.find('[');
  if (open != std::string::npos && name.back() == ']') {
    std::string body = name.substr(open + 1, name.size() - open - 2);
    while (!body.empty()) {
      const auto comma = body.find(',');
      const std::string item = body.substr(0, comma);
      if (std::find(keys.begin(), keys.end(), item.substr(0, item.find('='))) == keys.end())
        inside += (inside.empty() ? "" : ",") + item;
      if (comma == std::string::npos) break;
      body = body.substr(comma + 1);
    }
  }
  for (const std::string& item : items) inside += (inside.empty() ? "" : ",") + item;
  return inside.empty() ? base : base + "[" + inside + "]";
}

// A Trainium kernel's tilings of a matmul's K (trainium_platforms.cpp's kernel options): each K
// tile (the divisors of K, and the usual 32, 64, 128, 256 whose last tile is partial), alone and
// with PSUM groups of 2, 4, 8 and 16 tiles; those platform_by_name refuses (a tile the instruction cannot
// contract) are left out. The platform's own tiling is not among them.
std::vector<std::string> trainium_tilings(const core::Platform& platform, const Op& op) {
  std::vector<std::string> out;
  const std::size_t K = op.reduction_length;
  if (op.name != "matmul" || K == 0 || base_name(platform.name).rfind("trainium", 0) != 0) return out;
  std::set<std::size_t> tiles;
  for (std::size_t t = 1; t <= std::min<std::size_t>(K, 256); ++t)
    if (K % t == 0) tiles.insert(t);
  for (const std::size_t t : {32u, 64u, 128u, 256u})
    if (t < K) tiles.insert(t);
  const std::vector<std::string> keys{"k_tile", "psum_group"};
  // Larger tiles first: the kernels' usual ones (128, 64) before the rows one at a time.
  for (auto t = tiles.rbegin(); t != tiles.rend(); ++t) {
    const std::string tile = "k_tile=" + std::to_string(*t);
    out.push_back(with_options(platform.name, keys, {tile}));
    for (const std::size_t g : {2u, 4u, 8u, 16u})
      if (*t * g < K) out.push_back(with_options(platform.name, keys, {tile, "psum_group=" + std::to_string(g)}));
  }
  out.erase(std::remove(out.begin(), out.end(), platform.name), out.end());
  // Only the tilings the platform takes (k_tile above the instruction's rows is refused).
  std::erase_if(out, [](const std::string& name) {
    try {
      core::platform_by_name(name, "variant");
      return false;
    } catch (const numeq::error&) {
      return true;
    }
  });
  return out;
}

}  // namespace

std::vector<std::string> platform_variants(const core::Platform& platform, const Op& op, VariantScope scope) {
  // The list depends on the platform, what of it the op reads, and K: kept per such key, since
  // naming the assumption variants builds a plan per combination (a failing check's variant
  // search would otherwise pay it on every call).
  static std::mutex mutex;
  static std::map<std::string, std::vector<std::string>> kept;
  const std::string key = core::to_json(platform, -1) + '\n' + op.name + '\n' + model_key(platform, op) + '\n' +
                          std::to_string(op.reduction_length) + (scope == VariantScope::hardware ? "\nhardware" : "");
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto found = kept.find(key); found != kept.end()) return found->second;
  }
  std::vector<std::string> out = assumption_variants(platform, op);
  for (std::string& s : sibling_variants(platform)) out.push_back(std::move(s));
  // A Trainium kernel's tiling before split-K: the name its author would give the same order.
  if (scope == VariantScope::all)
    for (std::string& s : trainium_tilings(platform, op)) out.push_back(std::move(s));
  if (scope == VariantScope::all && (op.name == "matmul" || op.name == "dot")) {
    const std::string own = platform.name;
    for (const std::size_t k : {2u, 3u, 4u, 8u, 16u}) {
      for (const char* mode : {"", ",split_mode=parallel"}) {
        const std::string added = "split_k=" + std::to_string(k) + mode;
        out.push_back(own.back() == ']' ? own.substr(0, own.size() - 1) + "," + added + "]" : own + "[" + added + "]");
      }
    }
  }
  if (out.size() > max_variants) out.resize(max_variants);
  const std::lock_guard<std::mutex> lock(mutex);
  if (kept.size() >= 256) kept.clear();  // a bounded memory of the platforms in use
  kept.emplace(key, out);
  return out;
}

VariantSearch search_variants(const xt::xarray<double>& actual, const Op& op, const core::Platform& platform,
                              const std::vector<std::size_t>& sample, VariantScope scope) {
  VariantSearch s;
  // The first look: a smaller op holding the sample, where the op has one.
  std::optional<std::pair<Op, std::vector<std::size_t>>> small, tiny;
  if (op.restrict_to && !sample.empty()) small = op.restrict_to(sample);
  // A glance before the first look: most variants differ on the first few elements already.
  constexpr std::size_t kGlance = 4;
  const std::vector<std::size_t> glance(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(
                                                                         std::min(kGlance, sample.size())));
  if (small && sample.size() > kGlance) tiny = op.restrict_to(glance);
  std::string best_on_glance;
  std::size_t best_glance_matches = 0;
  // Bits only: the op's values where it has them (no bound walked), else its emulation's.
  const auto values_of = [](const Op& o, const core::Platform& variant) {
    return o.values ? o.values(variant) : o.emulate(variant, core::BoundOptions{}).values;
  };
  const auto full_matches = [&](const core::Platform& variant) {
    const xt::xarray<double> e = values_of(op, variant);
    std::size_t matches = 0;
    for (std::size_t i = 0; i < actual.size(); ++i) matches += same_value(actual.data()[i], e.data()[i]);
    return matches;
  };
  std::string best_on_sample;
  std::size_t best_sample_matches = 0;
  // After the first exact variant, this many more are looked at for the same bits (sample first).
  constexpr std::size_t kLookFurther = 64;
  std::size_t further = 0;
  for (const std::string& name : platform_variants(platform, op, scope)) {
    if (!s.exact.empty() && ++further > kLookFurther) break;
    // The process's parsed platform, shared (a copy per variant cost a failing check more than
    // its glance at the variant).
    std::shared_ptr<const core::Platform> shared;
    try {
      shared = core::shared_platform(name, "variant");
    } catch (const numeq::error&) {
      continue;  // not a platform in this process
    }
    const core::Platform& variant = *shared;
    try {
      if (tiny) {
        const xt::xarray<double> e = values_of(tiny->first, variant);
        std::size_t matches = 0;
        for (std::size_t j = 0; j < glance.size(); ++j)
          matches += same_value(actual.data()[glance[j]], e.data()[tiny->second[j]]);
        if (matches > best_glance_matches) best_on_glance = name, best_glance_matches = matches;
        if (matches < glance.size()) {
          ++s.searched;
          continue;  // differs at a glance: not this variant
        }
      }
      if (small) {
        const xt::xarray<double> e = values_of(small->first, variant);
        std::size_t matches = 0;
        for (std::size_t j = 0; j < sample.size(); ++j)
          matches += same_value(actual.data()[sample[j]], e.data()[small->second[j]]);
        ++s.searched;
        if (matches > best_sample_matches) best_on_sample = name, best_sample_matches = matches;
        if (matches < sample.size()) continue;  // differs somewhere: not this variant
      } else {
        ++s.searched;
      }
      const std::size_t matches = full_matches(variant);
      if (matches == actual.size()) {
        // The first variant names the output; up to kAlso more with the same bits on this data
        // are said beside it (looked for only where the sample rules the rest out cheaply).
        constexpr std::size_t kAlso = 3;
        if (s.exact.empty()) s.exact = name;
        else s.also.push_back(name);
        if (!small || s.also.size() == kAlso) return s;
        continue;
      }
      if (!s.exact.empty()) continue;
      if (matches > s.nearest_matches) s.nearest = name, s.nearest_matches = matches;
    } catch (const numeq::error&) {
      // The variant has no plan for this op's formats (a sibling path without fp32 inputs, say).
    }
  }
  if (!s.exact.empty()) return s;
  // None exact: the nearest in full, or else the one that explained most of the sample.
  if (best_on_sample.empty()) best_on_sample = best_on_glance;  // no variant passed the glance
  // The nearest in full costs a whole emulation: only for a variant that reproduced some of the
  // sampled differing elements (one that reproduced none rarely beats the platform's own matches,
  // the only case the verdict names it).
  const std::size_t sampled_matches = best_sample_matches > 0 ? best_sample_matches : best_glance_matches;
  if (s.nearest.empty() && !best_on_sample.empty() && sampled_matches > 0) {
    s.nearest = best_on_sample;
    s.nearest_matches = full_matches(*core::shared_platform(best_on_sample, "variant"));
  }
  return s;
}

}  // namespace numeq::cases
