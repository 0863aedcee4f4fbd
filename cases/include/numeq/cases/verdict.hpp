#pragma once
// The verdict on a device's output: the first tier of a ladder that explains it, and a message a
// reviewer can act on.
//
// The ladder, strongest first (Verdict::tier):
//   bit_exact      equal to the platform's emulation, every element (NaN matches NaN, zeros by sign);
//   variant        equal, bit for bit, to a named variant of the platform (an assumption's
//                  alternative, a split-K, a sibling instruction path; variants.hpp), which
//                  Verdict::explained_by names in the platform string syntax: the check doubles
//                  as a measurement of what the hardware does;
//   probabilistic  every element within the probabilistic bound of the exact result (bound.hpp),
//                  which fails with at most CompareOptions::failure_probability per check;
//   deterministic  within the worst-case bound only: the output may be correct, but it is farther
//                  from the exact result than the platform's arithmetic makes likely (flagged);
//   violation      beyond the worst-case bound somewhere, or a special value (NaN, +-Inf) that is
//                  not the platform's own, or a value the output format does not hold.
// A check passes when its tier is at least as strong as CompareOptions::accept.

#include <cstddef>
#include <memory>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/cases/diagnosis.hpp"
#include "numeq/cases/op.hpp"
#include "numeq/cases/variants.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::cases {

enum class Tier : std::uint8_t { bit_exact, variant, probabilistic, deterministic, violation };
using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)
// numeq::error naming `parameter` and listing the tiers otherwise.
Tier tier_by_name(std::string_view name, std::string_view parameter = "accept");

struct WorstElement {
  std::vector<std::size_t> index;
  double got = 0, emulated = 0, reference = 0, exact = 0, bound = 0;
  double error = 0;       // |got - exact|
  double ulps = 0;        // (got - reference) in ulps of the output format at the reference
  bool violation = false; // beyond the accepted tier's bound (or a special or foreign value)
};

struct Verdict {
  bool passed = false;
  Tier tier = Tier::violation;
  Tier accept = Tier::probabilistic;
  // bit_exact: the platform's name; variant: the variant's platform string (e.g.
  // "trainium.trn2[pe_order=pairwise]", "nvidia.h100[split_k=4]"); empty otherwise.
  std::string explained_by;
  // variant: other variants whose emulation gives the same bits on this data (at most 3; e.g. a
  // Trainium k_tile beside the split-K that orders K alike).
  std::vector<std::string> also_explained_by;
  std::string platform;   // the platform judged against
  std::string signature;  // the op's, e.g. "a[64,128] bf16 @ b[128,32] bf16 -> fp32"

  std::size_t elements = 0;
  std::size_t bit_exact = 0;           // got == emulated (NaNs alike, zeros by sign)
  std::size_t within_bound = 0;        // not bit-exact, within the probabilistic bound
  std::size_t deterministic_only = 0;  // beyond the probabilistic bound, within the deterministic one
  std::size_t violations = 0;          // beyond the deterministic bound, special or foreign values
  std::size_t unwalked = 0;            // differ within the deterministic bound, the probabilistic walk cut off
                                       // (a violation was certain: the check fails whatever it says)
  std::size_t special_mismatches = 0;  // violations: NaN / +-Inf (or an infinite bound) not the platform's
  std::size_t nan_mismatches = 0;      //   of which the device or the platform gives NaN
  std::size_t inf_mismatches = 0;      //   of which the device or the platform gives +-Inf (no NaN)
  std::size_t not_in_format = 0;       // violations: values that the output format does not hold
  std::size_t failures = 0;            // elements that keep the check from passing at `accept`
  double worst_error_over_bound = 0;   // max |got - exact| / bound (accepted tier's bound)
  double max_ulps = 0;                 // max |got - reference| in ulps
  double failure_probability = 0;      // per check, of the probabilistic bound (0: deterministic)

  // When no variant is bit-exact: the variant that equals the output on most elements.
  std::string nearest_variant;
  std::size_t nearest_variant_matches = 0;
  std::size_t variants_searched = 0;

  // Where the failing elements lie, over the result's last two axes (rows, columns), e.g.
  // "all 512 failures lie in columns 384..511 (the last 128-column tile)"; empty when none fail.
  std::string concentration;

  // Where the bound of the first worst element comes from, step by step of the platform's model,
  // e.g. "at [2,5]: accumulation fused(...) 96%, output rounding into fp32 nearest_even 4%"
  // (bound_source.hpp); empty when the output is bit-exact or explained by a variant.
  std::string bound_source;

  // Failing elements first (special values before the rest), then by error / bound, descending
  // (a value outside the output format ranked by its distance too); ties in index order.
  std::vector<WorstElement> worst;
  // The bound as a tolerance over every element, and which bound that is: the probabilistic one
  // where it was walked over the whole op, else the deterministic (worst-case) one. The ladder
  // walks the probabilistic bound only where it must (elements neither bit-exact nor explained by
  // a variant; the rows of a matmul that hold them).
  Tolerance tolerance;
  Tier tolerance_bound = Tier::deterministic;
  std::string diagnosis;  // one line: what explains the result
  // A failing check: the hypotheses about the mistake, each tested on the data, strongest first
  // (diagnosis.hpp); empty when the check passes or nothing tested explains enough of it.
  std::vector<Diagnosis> diagnoses;
  bool integer_output = false;  // the output format is an integer one: errors are said in integers
};

struct CompareOptions {
  Tier accept = Tier::probabilistic;
  // The probabilistic tier: its bound fails with at most this probability per check (all
  // elements together, by a union bound over them).
  double failure_probability = 1e-6;
  bool search_variants = true;  // the variant tier (variants.hpp); off: straight from bit_exact to probabilistic
  VariantScope variant_scope = VariantScope::all;  // hardware: a kernel run's output (variants.hpp)
  std::size_t worst = 5;        // how many worst elements to list
};

// actual: the device's output as float64 values, of the op's result shape (numeq::error naming
// `actual` otherwise). Where the emulation is NaN or +-Inf, or a bound is infinite or NaN, only
// the platform's own value passes; a value the output format does not hold never passes.
Verdict compare(const xt::xarray<double>& actual, const Op& op, const core::Platform& platform,
                const CompareOptions& options = {});

// The emulation whose bound compare() judges by: the deterministic bound when options.accept is
// deterministic, else the probabilistic one at the lambda whose failure probability for a check of
// `elements` elements (a union bound) is at most options.failure_probability. The op's own kept
// emulation (Op::emulation), not a copy.
std::shared_ptr<const Emulation> check_emulation(const Op& op, const core::Platform& platform,
                                                 const CompareOptions& options, std::size_t elements);

// The message a reviewer reads (Python's str(verdict), numeq/testing.hpp's failure messages):
// verdict and tier; op and platform; mismatch counts and percentages, NaN and Inf apart; where the
// failures concentrate; the nearest variant; the bound as a tolerance; the worst elements.
std::string describe(const Verdict& v);

}  // namespace numeq::cases
