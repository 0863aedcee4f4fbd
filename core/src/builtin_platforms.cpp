// Built-in platforms. Every parameter carries its evidence (FACTS.md gives the sources).

#include "builtin_platforms.hpp"

#include "numeq/core/numpy_reduction.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::core {

namespace {

Cast nearest(const Format& f) { return Cast{f, Rounding::nearest_even}; }

FunctionModel budget(std::string function, double ulps, EvidenceKind evidence, std::string source) {
  return FunctionModel{std::move(function), FunctionModelKind::ulp_budget, ulps, "fp32", evidence, std::move(source)};
}

// CUDA's single-precision math library, the same on every generation's CUDA cores (elementwise
// steps of softmax and normalisation kernels run there, not on tensor cores). The guide's table
// states the largest distance between the correctly rounded fp32 result and the returned one, and
// warns that the bounds "are generated from extensive but not exhaustive tests, so they are not
// guaranteed bounds"; the numbers vary by toolkit version (FACTS.md s2).
std::vector<FunctionModel> cuda_function_models() {
  const std::string guide =
      "CUDA C++ Programming Guide, appendix Mathematical Functions, Standard Functions: single-precision "
      "table 'Maximum ULP Error' (FACTS.md s2)";
  const std::string composed =
      "composed by the kernel from CUDA fp32 functions (2 ulp each) and IEEE divisions; no library function, "
      "so no documented bound: an assumed budget";
  return {
      budget("exp", 2, EvidenceKind::documented, guide + ": expf(x) 2 (full range)"),
      budget("exp2", 2, EvidenceKind::documented, guide + ": exp2f(x) 2 (full range)"),
      budget("log", 1, EvidenceKind::documented, guide + ": logf(x) 1 (full range)"),
      budget("tanh", 2, EvidenceKind::documented, guide + ": tanhf(x) 2 (full range)"),
      budget("rsqrt", 2, EvidenceKind::documented, guide + ": rsqrtf(x) 2 (full range)"),
      FunctionModel{"reciprocal", FunctionModelKind::correctly_rounded, 0, "fp32", EvidenceKind::documented,
                    guide + ": 1/x 0 ulp with -prec-div=true (the nvcc default without --use_fast_math)"},
      FunctionModel{"sqrt", FunctionModelKind::correctly_rounded, 0, "fp32", EvidenceKind::documented,
                    guide + ": sqrtf(x) 0 ulp with -prec-sqrt=true (the nvcc default without --use_fast_math)"},
      budget("sigmoid", 4, EvidenceKind::assumed, "1 / (1 + expf(-x)): " + composed),
      budget("silu", 4, EvidenceKind::assumed, "x / (1 + expf(-x)): " + composed),
      budget("softplus", 4, EvidenceKind::assumed, "log1pf(expf(x)): " + composed),
      budget("gelu", 4, EvidenceKind::assumed,
             "x/2 * (1 + erff(x/sqrt 2)) (erff 2 ulp): " + composed +
                 "; where 1 + erf cancels (x below about -3) such a kernel's relative error grows without bound: "
                 "raise the budget for those inputs"),
      budget("gelu_tanh", 4, EvidenceKind::assumed,
             "x/2 * (1 + tanhf(sqrt(2/pi) (x + 0.044715 x^3))): " + composed +
                 "; where 1 + tanh cancels (x below about -3) such a kernel's relative error grows without bound"),
  };
}

// A CUDA row reduction in fp32 as a warp-per-row kernel does it (PyTorch's softmax_warp_forward in
// aten/src/ATen/native/cuda/PersistentSoftmax.cuh): lane l of 32 adds elements l, l + 32, ... in
// order, then a shuffle tree combines the 32 lanes. Modelled by lanes(32): the same per-lane
// chains and a balanced tree of the same depth (5), in another pairing than the shuffle's
// xor 16, 8, ..., 1; the bound walker's weights depend on the depth only.
PlanEntry cuda_row_sum(const std::string& platform) {
  const Arithmetic arithmetic{nearest(formats::fp32)};
  Plan plan;
  plan.name = platform + " sum fp32 -> fp32";
  plan.reduction = lanes(32, arithmetic);
  plan.output = nearest(formats::fp32);
  return PlanEntry{Operation::sum, "fp32", "fp32", plan};
}

const Evidence kCudaRowSum{"sum fp32 -> fp32: 32 strided lanes, each summed in order, then a 5-level tree",
                           EvidenceKind::assumed,
                           "a warp-per-row reduction (PyTorch PersistentSoftmax.cuh softmax_warp_forward) [code]; "
                           "other kernels order it otherwise: give their plan or use reveal_order"};

// numpy's np.sum: add.reduce starts from the identity +0 and adds the pairwise sum of the terms
// (numpy/_core/src/umath/loops_utils.h.src, pairwise_sum: blocks of at most PW_BLOCKSIZE = 128
// terms reduced by 8 interleaved accumulators, larger ranges halved at a multiple of 8); float16
// sums pairwise in float32 and rounds once per call (loops.c.src, HALF_add). These are the plans
// of a contiguous 1-d array; for any other layout, axis or axis tuple the order depends on the
// strides, and numpy_reduction (numpy_reduction.hpp) gives the plan: numeq.sum and the operation
// catalogue use it for this platform. Reproduced bit for bit against numpy 2.x in
// tests/python/test_platforms.py and test_numpy_order.py.
Platform numpy_platform() {
  Platform p;
  p.name = "numpy";
  p.description = "numpy's np.sum / np.add.reduce / np.mean of float16, float32 and float64 arrays; the order "
                  "follows the array's memory layout (numpy_reduction): pairwise along a contiguous reduced "
                  "axis, element by element in iteration order when a kept axis is innermost";
  for (const Format* f : {&formats::fp16, &formats::fp32, &formats::fp64}) {
    Plan plan = numpy_reduction({2}, {1}, {0}, *f, *f).plan;  // a contiguous 1-d array: no runs
    plan.name = std::string("numpy sum ") + std::string(f->name);
    p.plans.push_back(PlanEntry{Operation::sum, std::string(f->name), std::string(f->name), plan});
  }
  const std::string source = "numpy/_core/src/umath/loops_utils.h.src (pairwise_sum) and loops_arithm_fp (add reduce)";
  const std::string iter = "numpy/_core/src/multiarray/nditer_constr.c (npyiter_find_best_axis_ordering, "
                           "npyiter_coalesce_axes, npyiter_find_buffering_setup), nditer_api.c (npyiter_copy_to_buffers)";
  p.evidence = {
      {"sum: pairwise leaf 128 (PW_BLOCKSIZE), split at a multiple of 8", EvidenceKind::documented, source},
      {"sum: 8 interleaved accumulators, combined ((0+1)+(2+3))+((4+5)+(6+7)), tail in order", EvidenceKind::documented, source},
      {"sum: output starts at +0", EvidenceKind::measured, "np.sum of -0.0 arrays gives +0.0 (numpy 2.x)"},
      {"sum: adds in the array's own type, round to nearest even", EvidenceKind::documented, "IEEE 754 host arithmetic"},
      {"sum: float16 pairwise sums in float32, each call stores half(float(out) + sum)", EvidenceKind::documented,
       "numpy/_core/src/umath/loops.c.src (HALF_add) and loops_utils.h.src (HALF_pairwise_sum)"},
      {"sum: axes ordered by the input's strides, merged where contiguous; a kept innermost axis adds element by "
       "element; runs cut by the 8192-element buffer when the input is cast or its axes do not merge",
       EvidenceKind::documented, iter},
  };
  // float32 ufuncs: numpy's own SIMD exp and log (AVX2/AVX-512F hosts), documented against the
  // exact result; without those instructions numpy calls the C library. Everything else is
  // written by users from ufuncs (1 / (1 + np.exp(-x)), ...), so its budget is assumed.
  const std::string simd = "numpy/_core/src/umath/loops_exponent_log.dispatch.c.src (simd_exp_FLOAT, simd_log_FLOAT): "
                           "documented maximum error against the exact result";
  const std::string composed = "written by users from float32 ufuncs (np.exp, np.tanh, IEEE division); assumed";
  p.functions = {
      budget("exp", 2.52, EvidenceKind::documented, simd + " 2.52 ulp"),
      budget("log", 3.83, EvidenceKind::documented, simd + " 3.83 ulp"),
      budget("tanh", 2, EvidenceKind::assumed, "np.tanh float32 SIMD kernel; no published bound"),
      FunctionModel{"reciprocal", FunctionModelKind::correctly_rounded, 0, "fp32", EvidenceKind::documented,
                    "np.reciprocal / 1 / x: one IEEE 754 division"},
      FunctionModel{"sqrt", FunctionModelKind::correctly_rounded, 0, "fp32", EvidenceKind::documented,
                    "np.sqrt: IEEE 754 square root"},
      budget("rsqrt", 3, EvidenceKind::assumed,
             "1 / np.sqrt(x): two correctly rounded IEEE operations, within 2^-23 relative of the exact value "
             "(Higham 2002, ch. 2), so within 3 ulps of the correctly rounded one"),
      budget("sigmoid", 4, EvidenceKind::assumed, "1 / (1 + np.exp(-x)): " + composed),
      budget("silu", 4, EvidenceKind::assumed, "x / (1 + np.exp(-x)): " + composed),
      budget("gelu", 4, EvidenceKind::assumed, "x/2 * (1 + erf(x/sqrt 2)) (scipy.special.erf): " + composed),
      budget("gelu_tanh", 4, EvidenceKind::assumed, "x/2 * (1 + np.tanh(...)): " + composed),
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
      kCudaRowSum,
  };
  p.plans.push_back(cuda_row_sum(p.name));
  p.functions = cuda_function_models();
  return p;
}

}  // namespace

std::vector<Platform> builtin_platforms() {
  std::vector<Platform> platforms{cuda_core_platform(), numpy_platform()};
  for (Platform& p : nvidia_platforms()) {
    // Row sums and elementwise functions of every NVIDIA generation run on CUDA cores.
    p.plans.push_back(cuda_row_sum(p.name));
    p.evidence.push_back(kCudaRowSum);
    p.functions = cuda_function_models();
    platforms.push_back(std::move(p));
  }
  for (Platform& p : trainium_platforms()) platforms.push_back(std::move(p));
  return platforms;
}

}  // namespace numeq::core
