// The models of an attention kernel's mistakes (diagnosis.hpp, diagnose_attention): its scale on the
// scores missing, applied twice or inverted (wrong_scale, with the factor), its probabilities handed
// to the second matmul untransposed (transposed_tile: P^T V), and its causal mask shifted by one key
// (shifted_mask: the diagonal masked too, or one key past it let through). Each is
// the op's exact attention with that one change, computed for the rows of a sample of failing
// elements and tested within the platform's bound: a kernel's own order of operations is unknown,
// so a model fits within the bound rather than reproducing bits.

#include "numeq/cases/diagnosis.hpp"

#include "verdict_text.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "numeq/formats/format.hpp"
#include "numeq/references/composite.hpp"

namespace numeq::cases {
namespace {

// Masks larger than this many elements (32 MiB of binary64) are not built: a mask model needs the
// full [B..., Lq, Lk], and a diagnosis must not cost more memory than the check.
constexpr std::size_t kMaskElementsLimit = std::size_t{1} << 22;

struct Sample {
  std::vector<std::size_t> elements;  // failing elements, spread evenly
  std::vector<std::size_t> rows;      // their rows (flat over batch and queries), ascending, distinct
};

Sample sample_of(const DiagnosisData& d, std::size_t dv) {
  Sample s;
  s.elements = detail::spread_evenly(d.failing, 64);
  for (const std::size_t e : s.elements)
    if (s.rows.empty() || s.rows.back() != e / dv) s.rows.push_back(e / dv);
  return s;
}

// How many sampled elements the attention with `changed` parameters explains: within the
// platform's bound (scaled by `factor` where the model rescales the result) and two ulps of the
// output format, or NaN where the model is NaN.
std::size_t hits_of(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                    const reference::AttentionParameters& changed, const Sample& s, std::size_t dv,
                    const DiagnosisData& d) {
  const xt::xarray<double> model = reference::attention(q, k, v, changed, Cast{formats::fp64}, s.rows);
  const double two_ulps = std::ldexp(2.0, -d.out.format.mantissa_bits);
  std::size_t hits = 0, row = 0;
  for (const std::size_t e : s.elements) {
    while (s.rows[row] != e / dv) ++row;
    const double want = model.data()[row * dv + e % dv], got = d.actual.data()[e];
    if (std::isnan(want)) {
      hits += std::isnan(got);
      continue;
    }
    hits += std::isfinite(got) && std::abs(got - want) <= d.bound.data()[e] + two_ulps * std::abs(want);
  }
  return hits;
}

// The causal mask shifted by `shift` keys: key j is kept for query i where j <= i + shift
// (shift -1: the diagonal masked too; +1: one key past it let through), additive 0 / -Inf over the
// full [B..., Lq, Lk].
xt::xarray<double> shifted_causal_mask(const xt::xarray<double>& q, const xt::xarray<double>& k, int shift) {
  std::vector<std::size_t> shape(q.shape().begin(), q.shape().end());
  const std::size_t lk = k.shape()[k.dimension() - 2];
  shape.back() = lk;
  xt::xarray<double> mask = xt::zeros<double>(shape);
  const std::size_t lq = q.shape()[q.dimension() - 2];
  for (std::size_t flat = 0; flat < mask.size(); ++flat) {
    const auto i = static_cast<long long>((flat / lk) % lq), j = static_cast<long long>(flat % lk);
    if (j > i + shift) mask.data()[flat] = -std::numeric_limits<double>::infinity();
  }
  return mask;
}

}  // namespace

std::vector<Diagnosis> diagnose_attention(const xt::xarray<double>& q, const xt::xarray<double>& k,
                                          const xt::xarray<double>& v, const reference::AttentionParameters& own,
                                          const DiagnosisData& d) {
  std::vector<Diagnosis> out;
  if (d.failing.empty() || q.dimension() < 2 || v.dimension() < 2) return out;
  const std::size_t dv = v.shape()[v.dimension() - 1], dk = q.shape()[q.dimension() - 1];
  if (dv == 0 || dk == 0) return out;
  const Sample s = sample_of(d, dv);
  const std::string on = detail::sample_words(s.elements.size(), d.failing.size());
  const auto share_of = [&](std::size_t hits) {
    return static_cast<double>(hits) / static_cast<double>(s.elements.size());
  };

  // The scale: the op's (given, or exactly 1/sqrt(d)) against none, its square and its inverse.
  const double scale = own.scale ? *own.scale : 1.0 / std::sqrt(static_cast<double>(dk));
  struct Candidate {
    double scale;
    const char* what;
  };
  for (const Candidate c : {Candidate{1.0, "never applied"}, Candidate{scale * scale, "applied twice"},
                            Candidate{1.0 / scale, "inverted"}}) {
    if (!std::isfinite(c.scale) || c.scale == scale) continue;
    reference::AttentionParameters changed = own;
    changed.scale = c.scale;
    const double share = share_of(hits_of(q, k, v, changed, s, dv, d));
    if (share < kDiagnosisThreshold) continue;
    out.push_back(Diagnosis{"wrong_scale", share,
                            "the scores scaled by " + detail::number(c.scale, 6) + " where the op scales by " +
                                detail::number(scale, 6) + " (the attention scale " + c.what + ", a factor " +
                                detail::number(c.scale / scale, 6) + " on the scores) reproduces " +
                                detail::number(100 * share, 3) + "% of the failing elements",
                            "within the platform's bound: the op's exact attention with that scale, on " + on});
  }

  // The probabilities handed to the second matmul untransposed: P^T V where the op computes P V (an
  // NKI kernel must give the PE array P^T as its stationary operand; passing P computes P^T V), in
  // both of attention's usual orders: P normalised before the matmul, or exp(s - row max) multiplied
  // first and each output row divided by its own sum after (flash attention's order). Square score
  // matrices only; the scores in binary64 per batch that holds a sampled element.
  const std::size_t lq = q.shape()[q.dimension() - 2], lk = k.shape()[k.dimension() - 2];
  if (lq == lk && lq * lk <= kMaskElementsLimit && own.mask == nullptr) {
    const double two_ulps = std::ldexp(2.0, -d.out.format.mantissa_bits);
    std::size_t hits[2] = {0, 0};
    std::size_t batch = static_cast<std::size_t>(-1);
    std::vector<double> e(lq * lk), sums(lq);
    for (const std::size_t el : s.elements) {
      const std::size_t row = el / dv, b = row / lq, i = row % lq, c = el % dv;
      if (b != batch) {  // exp(scale q k^T - row max) over the causal keys j <= r, and each row's sum
        batch = b;
        for (std::size_t r = 0; r < lq; ++r) {
          double top = -std::numeric_limits<double>::infinity();
          for (std::size_t j = 0; j < lk; ++j) {
            double dot = 0;
            for (std::size_t t = 0; t < dk; ++t) dot += q.data()[(b * lq + r) * dk + t] * k.data()[(b * lk + j) * dk + t];
            e[r * lk + j] = (own.causal && j > r) ? -std::numeric_limits<double>::infinity() : dot * scale;
            top = std::max(top, e[r * lk + j]);
          }
          sums[r] = 0;
          for (std::size_t j = 0; j < lk; ++j) sums[r] += (e[r * lk + j] = std::exp(e[r * lk + j] - top));
        }
      }
      double normalised = 0, deferred = 0;  // sum_r P[r, i] v[r, c]; (sum_r E[r, i] v[r, c]) / l_i
      for (std::size_t r = 0; r < lq; ++r) {
        normalised += e[r * lk + i] / sums[r] * v.data()[(b * lk + r) * dv + c];
        deferred += e[r * lk + i] * v.data()[(b * lk + r) * dv + c];
      }
      deferred /= sums[i];
      const double got = d.actual.data()[el];
      for (const int o : {0, 1}) {
        const double want = o ? deferred : normalised;
        hits[o] += std::isfinite(got) && std::abs(got - want) <= d.bound.data()[el] + two_ulps * std::abs(want) +
                                                                     std::ldexp(std::abs(want), -40);
      }
    }
    const int o = hits[1] > hits[0];
    const double share = share_of(hits[o]);
    if (share >= kDiagnosisThreshold)
      out.push_back(Diagnosis{"transposed_tile", share,
                              std::string("the probabilities handed to the second matmul untransposed (P^T V where "
                                          "the op computes P V") +
                                  (o ? ", each row divided by its own sum after" : "") + ") reproduces " +
                                  detail::number(100 * share, 3) + "% of the failing elements",
                              "within the platform's bound: the scores in binary64 and P^T V, on " + on});
  }

  // The causal mask, shifted by one key either way.
  std::size_t mask_elements = 1;
  for (std::size_t i = 0; i + 1 < q.dimension(); ++i) mask_elements *= q.shape()[i];
  mask_elements *= k.shape()[k.dimension() - 2];
  if (own.causal && own.mask == nullptr && mask_elements <= kMaskElementsLimit) {
    for (const int shift : {-1, +1}) {
      const xt::xarray<double> mask = shifted_causal_mask(q, k, shift);
      reference::AttentionParameters changed = own;
      changed.causal = false;
      changed.mask = &mask;
      const double share = share_of(hits_of(q, k, v, changed, s, dv, d));
      if (share < kDiagnosisThreshold) continue;
      out.push_back(Diagnosis{"shifted_mask", share,
                              std::string("the causal mask shifted by one key (") +
                                  (shift < 0 ? "each query's own key masked too: j < i kept"
                                             : "one key past the diagonal let through: j <= i + 1 kept") +
                                  ") reproduces " + detail::number(100 * share, 3) + "% of the failing elements",
                              "within the platform's bound: the op's exact attention with that mask, on " + on});
    }
  }
  return out;
}

}  // namespace numeq::cases
