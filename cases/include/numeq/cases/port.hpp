#pragma once
// The port check: a CUDA kernel's output and its NKI port's output of the same operation on the
// same inputs. Each output is judged against its own platform (the verdict ladder, verdict.hpp),
// and their difference against the cross-platform bound: two implementations each within their
// bound of the exact result differ by at most the sum of the bounds (FACTS.md s4), so a larger
// difference means at least one of the two is not what its platform computes.

#include <cstddef>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/cases/op.hpp"
#include "numeq/cases/verdict.hpp"
#include "numeq/core/platform.hpp"

namespace numeq::cases {

struct PortElement {
  std::vector<std::size_t> index;
  double gpu = 0, trainium = 0;
  double difference = 0;  // |gpu - trainium|
  double bound = 0;       // the cross-platform bound there
};

struct PortVerdict {
  bool passed = false;     // both verdicts pass and no difference exceeds the cross-platform bound
  Verdict gpu, trainium;   // each output against its own platform
  std::size_t elements = 0;
  std::size_t equal = 0;   // bit for bit (NaN matches NaN, zeros by sign)
  std::size_t beyond = 0;  // |gpu - trainium| beyond the cross-platform bound (or special values that differ)
  double max_difference_over_bound = 0;
  std::vector<PortElement> worst;  // by difference / bound, descending
  std::string diagnosis;
};

// gpu, trainium: the two devices' outputs (float64 values, the op's result shape). The bounds
// are those of options.accept (the probabilistic one unless deterministic is accepted; each
// platform's failure probability is options.failure_probability / 2, so the check's is at most
// options.failure_probability).
PortVerdict compare_port(const xt::xarray<double>& gpu, const xt::xarray<double>& trainium, const Op& op,
                         const core::Platform& gpu_platform, const core::Platform& trainium_platform,
                         const CompareOptions& options = {});

// Both verdicts' messages under one heading, and the difference's worst elements.
std::string describe(const PortVerdict& v);

}  // namespace numeq::cases
