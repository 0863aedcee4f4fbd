// The models of a softmax kernel's mistakes (diagnosis.hpp): the row's maximum never subtracted
// (exp of the raw logits: it overflows where the logits are large), and the exponentials or the
// whole computation in a narrower format than the op's (an fp16 or bf16 intermediate). Each is
// the platform's own softmax emulation with that one choice changed, counted bit for bit on the
// failing elements.

#include "numeq/cases/diagnosis.hpp"

#include "verdict_text.hpp"

#include <string>
#include <vector>

#include "numeq/cases/normalization.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::cases {

std::vector<Diagnosis> diagnose_softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, bool log,
                                        const SoftmaxOptions& own, const DiagnosisData& d) {
  struct Hypothesis {
    SoftmaxOptions options;
    std::string kind, words;
  };
  std::vector<Hypothesis> tries;
  for (const Format* f : {&own.compute, &formats::fp16, &formats::bf16}) {
    if (f != &own.compute && *f == own.compute) continue;
    if (own.variant != SoftmaxVariant::plain) {
      SoftmaxOptions o = own;
      o.variant = SoftmaxVariant::plain;
      o.compute = *f;
      tries.push_back({o, "missing_max_subtraction",
                       "exp of the raw logits, the row's maximum never subtracted (computed in " + std::string(f->name) +
                           "): it overflows where the logits are large"});
    }
    if (*f != own.compute) {
      SoftmaxOptions o = own;
      o.compute = *f;
      tries.push_back({o, "narrow_intermediate",
                       "the softmax computed in " + std::string(f->name) + " where the op computes in " +
                           std::string(own.compute.name) + " (its exponentials and sum rounded to " +
                           std::string(f->name) + ")"});
    }
  }
  std::vector<Diagnosis> out;
  for (const Hypothesis& h : tries) {
    Emulation e;
    try {
      e = log ? log_softmax(x, axis, d.platform, d.out, h.options) : softmax(x, axis, d.platform, d.out, h.options);
    } catch (const numeq::error&) {
      continue;  // the platform has no such path
    }
    std::size_t hits = 0;
    for (const std::size_t i : d.failing) hits += detail::same_value(d.actual.data()[i], e.values.data()[i]);
    if (!hits) continue;
    const double share = static_cast<double>(hits) / static_cast<double>(d.failing.size());
    out.push_back({h.kind, share,
                   std::to_string(hits) + " of the " + std::to_string(d.failing.size()) + " failing elements are " +
                       h.words,
                   "bit for bit: the platform's softmax with that one choice changed, on every failing element"});
  }
  return out;
}

}  // namespace numeq::cases
