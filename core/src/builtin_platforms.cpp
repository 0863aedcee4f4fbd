// Built-in platforms. Every parameter carries its evidence (FACTS.md gives the sources).

#include "builtin_platforms.hpp"

#include "numeq/formats/format.hpp"

namespace numeq::core {

namespace {

Cast nearest(const Format& f) { return Cast{f, Rounding::nearest_even}; }

// numpy's float32 / float64 np.sum: add.reduce starts from the identity +0 and adds the pairwise
// sum of the whole array (numpy/_core/src/umath/loops_utils.h.src, pairwise_sum: blocks of at most
// PW_BLOCKSIZE = 128 terms reduced by 8 interleaved accumulators, larger ranges halved at a
// multiple of 8). Reproduced bit for bit against numpy 2.x in tests/python/test_platforms.py.
Platform numpy_platform() {
  Platform p;
  p.name = "numpy";
  p.description = "numpy's np.sum / np.add.reduce of float32 and float64 arrays along a contiguous axis (across "
                  "a strided axis numpy adds whole rows in order: a sequential plan from +0)";
  for (const Format* f : {&formats::fp32, &formats::fp64}) {
    const Arithmetic arithmetic{nearest(*f)};
    Plan plan;
    plan.name = std::string("numpy sum ") + std::string(f->name);
    plan.reduction = pairwise(128, 8, lanes(8, arithmetic), arithmetic);
    plan.initial = 0.0;
    plan.output = nearest(*f);
    p.plans.push_back(PlanEntry{Operation::sum, std::string(f->name), std::string(f->name), plan});
  }
  const std::string source = "numpy/_core/src/umath/loops_utils.h.src (pairwise_sum) and loops_arithm_fp (add reduce)";
  p.evidence = {
      {"sum: pairwise leaf 128 (PW_BLOCKSIZE), split at a multiple of 8", EvidenceKind::documented, source},
      {"sum: 8 interleaved accumulators, combined ((0+1)+(2+3))+((4+5)+(6+7)), tail in order", EvidenceKind::documented, source},
      {"sum: output starts at +0", EvidenceKind::measured, "np.sum of -0.0 arrays gives +0.0 (numpy 2.x)"},
      {"sum: adds in the array's own type, round to nearest even", EvidenceKind::documented, "IEEE 754 host arithmetic"},
  };
  return p;
}

// A CUDA-core fp32 dot product / GEMM as a naive kernel writes it: float acc = 0; for k:
// acc = fmaf(a[k], b[k], acc) (nvcc contracts a*b+acc into fma by default, --fmad=true); then
// d = acc + c.
Platform cuda_core_platform() {
  Platform p;
  p.name = "cuda_core.fp32";
  p.description = "CUDA cores, fp32: a sequential fma chain from +0 per output element, c added last";
  const Arithmetic fma32{nearest(formats::fp32), ProductMode::fma};
  for (const Format* in : {&formats::fp32, &formats::bf16, &formats::fp16}) {
    for (const Operation op : {Operation::dot, Operation::matmul}) {
      Plan plan;
      plan.name = std::string("cuda_core.fp32 ") + std::string(to_string(op)) + " " + std::string(in->name) + " -> fp32";
      plan.reduction = sequential(fma32, true);
      plan.c_placement = CPlacement::last;
      plan.output = nearest(formats::fp32);
      p.plans.push_back(PlanEntry{op, std::string(in->name), "fp32", plan});
    }
  }
  p.evidence = {
      {"fp32 add and fma round to nearest even, no flush", EvidenceKind::documented,
       "CUDA C++ Programming Guide, floating-point standard; FACTS.md s2"},
      {"a*b+acc contracted to fma", EvidenceKind::documented, "nvcc --fmad=true default; FACTS.md s2"},
      {"order: one sequential chain per output element from +0, c added last", EvidenceKind::assumed,
       "a naive kernel; use split-K plan options or reveal_order for others"},
      {"bf16/fp16 inputs widened exactly to fp32 before the fma", EvidenceKind::assumed, "a naive kernel"},
  };
  return p;
}

}  // namespace

std::vector<Platform> builtin_platforms() {
  std::vector<Platform> platforms{cuda_core_platform(), numpy_platform()};
  for (Platform& p : nvidia_platforms()) platforms.push_back(std::move(p));
  for (Platform& p : trainium_platforms()) platforms.push_back(std::move(p));
  return platforms;
}

}  // namespace numeq::core
