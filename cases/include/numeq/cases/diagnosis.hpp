#pragma once
// Diagnoses of a failing output (Verdict::diagnoses): hypotheses about the mistake that produced
// it, each tested on the data, never guessed. A hypothesis that models the mistake (a bf16
// accumulator in a named order, a K tile left out) is recomputed and counted bit for bit (or
// within the platform's bound where the order it would run in is unknown); a pattern (every
// failing row off by one factor, errors that are multiples of 2^16, failures exactly where the
// inputs sit at their format's largest value) is measured on every failing element. Each reports
// the fraction of the failing elements it explains.
//
// Kinds, with the mistake each stands for:
//   narrow_accumulator   the sum kept in bf16 / fp16 / fp8: sequentially (a textbook loop), or per
//                        K tile or PSUM group summed into a narrow tile (NKI's acc = acc + part);
//   missing_k_tile       one K tile never accumulated;    extra_k_tile  one K tile added twice;
//   transposed_tile      an operand read transposed, or output tiles written transposed;
//   shifted_tile         an off-by-one index: the output shifted by one row or column;
//   wrong_output_format  the output rounded into a narrower format than the op writes;
//   wrong_scale          every failing element the exact result times one factor (a scale applied
//                        twice, missing or inverted), said with the factor;
//   row_scale / column_scale  each failing row (column) off by one factor or one offset
//                        (a normalisation, scale or eps mistake);
//   integer_wrap         errors that are multiples of 2^8, 2^16 or 2^32 (a narrow integer wraps);
//   input_range          failures exactly in the rows / columns whose inputs sit at the input
//                        format's largest value (a format of another range, or no saturation);
//   special_values       NaN / Inf not the platform's: traced to the inputs, or to an
//                        intermediate value beyond a narrower format's range;
//   missing_max_subtraction, narrow_intermediate  a softmax's exp of the raw logits, or its
//                        computation in fp16 / bf16;
//   wrong_eps            a normalisation with another eps than the op's;
//   unbiased_variance    a layernorm whose variance divides by n - 1 (torch.var's default).

#include <cstddef>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/core/platform.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/composite.hpp"
#include "numeq/references/exact.hpp"

namespace numeq::cases {

struct Op;

struct Diagnosis {
  std::string kind;      // one of the kinds above
  double explains = 0;   // the fraction of the failing elements (or of the sample examined) it reproduces
  std::string detail;    // one sentence for the message
  std::string evidence;  // how it was tested, starting "bit for bit:", "within the platform's bound:",
                         // "pattern:" or "measured:", then on what
};

// Whether `d` rests on exact evidence: failing elements reproduced bit for bit, or a measurement
// of every failing element (special values traced to their exact values). Such a diagnosis ranks
// before those that only fit within a bound or show a pattern.
inline bool exact_evidence(const Diagnosis& d) {
  return d.evidence.starts_with("bit for bit") || d.evidence.starts_with("measured");
}

// Drops the diagnoses under kDiagnosisThreshold and orders the rest strongest first (see diagnose).
void rank(std::vector<Diagnosis>& found);

// What a diagnosis reads: the device's output, the platform's emulation and the bound the check
// judged by (per element), the exact result, and the failing elements (flat, C order, ascending).
struct DiagnosisData {
  const xt::xarray<double>& actual;
  const xt::xarray<double>& emulated;
  const xt::xarray<double>& bound;
  const reference::ExactValues& exact;
  const std::vector<std::size_t>& failing;
  const core::Platform& platform;
  const Cast& out;
};

// Only a hypothesis that explains at least this fraction of the failing elements is reported.
inline constexpr double kDiagnosisThreshold = 0.5;

// Every diagnosis of `data` that passes the threshold, strongest first: those that reproduce
// elements bit for bit, then the rest, each group by explains, descending (a model before a
// pattern at equal strength): the patterns any output shows, then the op's own models (Op::diagnose).
std::vector<Diagnosis> diagnose(const Op& op, const DiagnosisData& data);

// The models of a 2-D matmul's mistakes (narrow_accumulator, missing_k_tile, extra_k_tile,
// transposed_tile of an operand, input_range): a [M, K], b [K, N] of in_fmt, c (may be null)
// broadcast to the result. Op::diagnose of cases::matmul.
std::vector<Diagnosis> diagnose_matmul(const xt::xarray<double>& a, const xt::xarray<double>& b,
                                       const xt::xarray<double>* c, const std::string& in_fmt,
                                       const DiagnosisData& data);

// The models of a sum's mistakes (missing_k_tile, extra_k_tile), `terms` [..., K] summed along
// the last axis into the result's elements in C order. Op::diagnose of cases::reduce's sum and of
// sum_of_squares (its exact squares).
std::vector<Diagnosis> diagnose_reduction(const xt::xarray<double>& terms, const DiagnosisData& data);

// The models of a softmax's mistakes (missing_max_subtraction: exp of the raw logits;
// narrow_intermediate: the computation in fp16 or bf16), x along `axis` with the op's own
// options. Op::diagnose of cases::softmax and log_softmax.
struct SoftmaxOptions;
std::vector<Diagnosis> diagnose_softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, bool log,
                                        const SoftmaxOptions& own, const DiagnosisData& data);

// The models of an attention's mistakes (wrong_scale: the scale on the scores missing, applied twice
// or inverted; shifted_mask: a causal mask shifted by one key), q, k, v with the op's own
// parameters. Op::diagnose of cases::attention.
std::vector<Diagnosis> diagnose_attention(const xt::xarray<double>& q, const xt::xarray<double>& k,
                                          const xt::xarray<double>& v, const reference::AttentionParameters& own,
                                          const DiagnosisData& data);

// The models of a normalisation's mistakes (wrong_eps: the usual eps values tried, within the
// bound). Op::diagnose of cases::layernorm and rmsnorm.
struct NormOptions;
std::vector<Diagnosis> diagnose_norm(const xt::xarray<double>& x, const reference::NormParameters& own, bool centred,
                                     const NormOptions& options, const DiagnosisData& data);

}  // namespace numeq::cases
