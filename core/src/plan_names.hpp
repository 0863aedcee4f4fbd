#pragma once
// The names of a plan's enums (plan.hpp, fused.hpp), one table each (numeq/formats/names.hpp):
// to_string, node_kind_by_name and the plan JSON reader and writer (plan_json.cpp) all read them.

#include "numeq/core/fused.hpp"
#include "numeq/core/plan.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::core::detail {

inline constexpr NameTable<NodeKind, 11> kNodeKinds{{{NodeKind::sequential, "sequential"},
                                                     {NodeKind::lanes, "lanes"},
                                                     {NodeKind::pairwise, "pairwise"},
                                                     {NodeKind::chunked, "chunked"},
                                                     {NodeKind::split, "split"},
                                                     {NodeKind::tree, "tree"},
                                                     {NodeKind::fused, "fused"},
                                                     {NodeKind::permute, "permute"},
                                                     {NodeKind::group, "group"},
                                                     {NodeKind::term, "term"},
                                                     {NodeKind::decompose, "decompose"}}};
inline constexpr NameTable<ProductMode, 2> kProductModes{{{ProductMode::fma, "fma"}, {ProductMode::rounded, "rounded"}}};
inline constexpr NameTable<SplitMode, 2> kSplitModes{{{SplitMode::parallel, "parallel"}, {SplitMode::serial, "serial"}}};
inline constexpr NameTable<CPlacement, 2> kCPlacements{{{CPlacement::first, "first"}, {CPlacement::last, "last"}}};
inline constexpr NameTable<Alignment, 2> kAlignments{
    {{Alignment::truncate, "truncate"}, {Alignment::nearest_even, "nearest_even"}}};
inline constexpr NameTable<MaxExponent, 3> kMaxExponents{{{MaxExponent::encoded, "encoded"},
                                                          {MaxExponent::normalized, "normalized"},
                                                          {MaxExponent::largest_term, "largest_term"}}};
inline constexpr NameTable<ZeroTerms, 2> kZeroTerms{
    {{ZeroTerms::fp32_emin, "fp32_emin"}, {ZeroTerms::excluded, "excluded"}}};
inline constexpr NameTable<OverflowRule, 2> kOverflowRules{
    {{OverflowRule::infinity, "infinity"}, {OverflowRule::cast, "cast"}}};
inline constexpr NameTable<ZeroSign, 2> kZeroSigns{{{ZeroSign::positive, "positive"}, {ZeroSign::ieee, "ieee"}}};

}  // namespace numeq::core::detail
