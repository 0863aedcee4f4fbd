// The NVIDIA tensor-core platforms: a GEMM chains fused steps along K (each step's result is the
// c of the next, FACTS.md s2), with the per-generation step parameters of fused.hpp.

#include <string>
#include <utility>
#include <vector>

#include "builtin_platforms.hpp"
#include "numeq/core/fused.hpp"
#include "numeq/core/tensor_core.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::core {

namespace {

const std::string kKhattak = "Khattak & Mikaitis, Accurate Models of NVIDIA Tensor Cores, arXiv:2512.07004 (2025)";
const std::string kMmaSim = "Xie et al., MMA-Sim, arXiv:2511.10909 (2025)";
const std::string kVectors = "tests/data/tensor-core-vectors (GPU-measured, Khattak & Mikaitis)";
const std::string kB200Vectors = "tests/data/tensor-core-vectors/B200 (GPU-measured: Khattak & Mikaitis, arXiv:2512.07004, "
                                 "data of north-numerical-computing/MATLAB-tensor-core commit b12b5a70)";

struct Entry {
  std::string in_fmt;
  std::string out_fmt;
  FusedStep step;
  std::optional<Cast> input_cast;  // applied to both operands first (fp32 inputs in TF32 mode)
  std::optional<Cast> final_cast;  // an epilogue rounding after the chain (bf16 outputs)
  // mma.sync.m16n8k32 with fp8 operands (fused.hpp h100_mma_sync_fp8_f16): `step` is one half.
  bool mma_sync_fp8 = false;
};

Plan chain_plan(const std::string& platform, const Entry& e, Operation op) {
  Plan p;
  p.name = platform + " " + std::string(to_string(op)) + " " + e.in_fmt + " -> " + e.out_fmt;
  p.input_a = e.input_cast;
  p.input_b = e.input_cast;
  // mma.sync fp8: the outer chain starts from c (c + d2 per instruction); `step` is one half
  // (tensor_core.hpp, structure halves).
  p.reduction = tensor_core_reduction(e.step, e.mma_sync_fp8 ? TensorCoreStructure::halves : TensorCoreStructure::chain);
  p.c_placement = CPlacement::first;
  // The chain's own result is a value of its accumulator (fp32, or fp16 for fp16 accumulators);
  // an epilogue cast, when there is one, rounds it once more (CUTLASS's default converter rounds
  // to nearest even [code]).
  p.output = e.final_cast ? *e.final_cast : Cast{e.step.output.format == nvidia::e8m13 ? formats::fp32 : e.step.output.format};
  return p;
}

// fp8 GEMM with DeepSeek-V3's promotion: every 128 products (4 WGMMAs of K = 32) the tensor-core
// partial is added to an fp32 register accumulator on CUDA cores (round to nearest even).
Plan promoted_plan(const std::string& platform, const Entry& e, Operation op) {
  Plan p = chain_plan(platform, e, op);
  p.name += ", fp32 promotion every 128";
  const Arithmetic fp32_add{Cast{formats::fp32}};
  p.reduction = chunked(128, fused(e.step), sequential(fp32_add));
  return p;
}

std::vector<Evidence> step_evidence(const std::string& label, const FusedStep& s, bool measured,
                                    const std::string& vectors = kVectors) {
  const EvidenceKind k = measured ? EvidenceKind::measured : EvidenceKind::documented;
  const std::string where = measured ? vectors + "; " + kKhattak : kKhattak + "; " + kMmaSim + " (not measured here)";
  return {
      {label + ": products per fused step n = " + std::to_string(s.n), k, where},
      {label + ": fraction bits F = " + std::to_string(s.fraction_bits) + ", alignment truncates toward zero", k, where},
      {label + ": alignment exponent = ea + eb as encoded, before renormalising (fused.hpp MaxExponent::encoded)", k, where},
      {label + ": final rounding " + std::string(s.output.format.name) + " " + std::string(to_string(s.output.rounding)), k, where},
      {label + ": exact zeros enter the maximum at fp32 emin (MMA-Sim)", EvidenceKind::assumed, kMmaSim + "; no vector row settles it"},
      {label + ": finite overflow gives Inf; a zero result is +0", EvidenceKind::assumed, kMmaSim + "; no vector row settles it"},
  };
}

struct Generation {
  std::string name;
  std::vector<std::string> aliases;
  std::string description;
  std::vector<Entry> entries;
  bool measured;  // whether vectors of this generation were measured (tests/data)
  std::string vectors = kVectors;  // where, when measured
};

Platform build(const Generation& g) {
  Platform p;
  p.name = g.name;
  p.aliases = g.aliases;
  p.description = g.description;
  for (const Entry& e : g.entries) {
    for (const Operation op : {Operation::dot, Operation::matmul})
      p.plans.push_back(PlanEntry{op, e.in_fmt, e.out_fmt, chain_plan(g.name, e, op)});
    const std::string label = "matmul " + e.in_fmt + " -> " + e.out_fmt;
    for (Evidence& ev : step_evidence(label, e.step, g.measured, g.vectors)) p.evidence.push_back(std::move(ev));
    if (e.mma_sync_fp8)
      p.evidence.push_back({label + ": mma.sync k32: two steps of " + std::to_string(e.step.n) +
                                " (products k mod 4 in {0,1}, then {2,3} fed with the first's result), c added last by "
                                "one " + std::string(e.step.output.format.name) + " nearest-even addition",
                            g.measured ? EvidenceKind::measured : EvidenceKind::assumed,
                            g.vectors + "; structure as MATLAB-tensor-core GEMM.m inter_pattern"});
    if (e.mma_sync_fp8) {
      p.evidence.push_back({label + ": F = " + std::to_string(e.step.fraction_bits) +
                                " in the halves, the generation's fp16 step; the fp8 rows bound it only from below",
                            EvidenceKind::measured, g.vectors});
      p.evidence.push_back({label + ": instructions of k = " + std::to_string(2 * e.step.n) +
                                " chain along K through the accumulator",
                            EvidenceKind::assumed,
                            "PTX mma.sync semantics (d = a.b + c per instruction); the vectors hold one instruction per row"});
    }
    if (e.input_cast)
      p.evidence.push_back({label + ": fp32 inputs truncated to tf32 (low 13 bits dropped)", EvidenceKind::documented,
                            "PTX ISA, wgmma / mma .tf32 operands; FACTS.md s2"});
    if (e.final_cast)
      p.evidence.push_back({label + ": epilogue rounds the fp32 result to " + e.out_fmt + " nearest even",
                            EvidenceKind::assumed, "CUTLASS NumericConverter default (round_to_nearest)"});
  }
  p.evidence.push_back({"a GEMM chains steps along K in order, each result the next step's c", EvidenceKind::documented,
                        kKhattak + "; " + kMmaSim + "; FACTS.md s2"});
  return p;
}

const Cast kTf32Truncate{formats::tf32, Rounding::toward_zero};
const Cast kBf16{formats::bf16};
const Cast kFp16{formats::fp16};

// The usual entries of a generation with fp16/bf16/tf32 (and fp8) steps.
std::vector<Entry> entries(const FusedStep& fp16, const FusedStep& fp16_f16, const FusedStep& bf16, const FusedStep& tf32) {
  return {
      {"fp16", "fp32", fp16, std::nullopt, std::nullopt},
      {"fp16", "fp16", fp16_f16, std::nullopt, std::nullopt},
      {"fp16", "bf16", fp16, std::nullopt, kBf16},
      {"bf16", "fp32", bf16, std::nullopt, std::nullopt},
      {"bf16", "bf16", bf16, std::nullopt, kBf16},
      {"bf16", "fp16", bf16, std::nullopt, kFp16},
      {"tf32", "fp32", tf32, std::nullopt, std::nullopt},
      {"fp32", "fp32", tf32, kTf32Truncate, std::nullopt},
  };
}

void add_fp8(std::vector<Entry>& e, const FusedStep& e4m3, const FusedStep& e5m2, const FusedStep& e4m3_f16,
             const FusedStep& e5m2_f16) {
  e.push_back({"e4m3fn", "fp32", e4m3, std::nullopt, std::nullopt});
  e.push_back({"e5m2", "fp32", e5m2, std::nullopt, std::nullopt});
  e.push_back({"e4m3fn", "bf16", e4m3, std::nullopt, kBf16});
  e.push_back({"e5m2", "bf16", e5m2, std::nullopt, kBf16});
  e.push_back({"e4m3fn", "fp16", e4m3_f16, std::nullopt, std::nullopt});
  e.push_back({"e5m2", "fp16", e5m2_f16, std::nullopt, std::nullopt});
}

}  // namespace

std::vector<Platform> nvidia_platforms() {
  using namespace nvidia;
  std::vector<Platform> out;
  // V100: fp16 only, 4 products per step.
  out.push_back(build({"nvidia.v100", {}, "NVIDIA Volta V100 tensor cores (fp16)",
                       {{"fp16", "fp32", v100_fp16, std::nullopt, std::nullopt},
                        {"fp16", "fp16", v100_fp16_f16, std::nullopt, std::nullopt},
                        {"fp16", "bf16", v100_fp16, std::nullopt, kBf16}},
                       true}));
  out.push_back(build({"nvidia.a100", {"nvidia.a2", "nvidia.a30"}, "NVIDIA Ampere A100 (also A2, A30) tensor cores",
                       entries(a100_fp16, a100_fp16_f16, a100_bf16, a100_tf32), true}));
  {
    std::vector<Entry> e = entries(ada_fp16, ada_fp16_f16, ada_bf16, ada_tf32);
    add_fp8(e, ada_e4m3, ada_e5m2, ada_e4m3_f16, ada_e5m2_f16);
    out.push_back(build({"nvidia.ada", {"nvidia.l40s", "nvidia.rtx_ada"},
                         "NVIDIA Ada Lovelace (L40S, RTX Ada) tensor cores, from published facts (not measured here)", e,
                         false}));
  }
  {
    std::vector<Entry> e = entries(h100_fp16, h100_fp16_f16, h100_bf16, h100_tf32);
    add_fp8(e, h100_e4m3, h100_e5m2, h100_e4m3_f16, h100_e5m2_f16);
    out.push_back(build({"nvidia.h100", {"nvidia.h200"},
                         "NVIDIA Hopper H100 (also H200) tensor cores; fp8 accumulates raw (cuBLASLt FAST_ACCUM)", e, true}));
    // The same generation with DeepSeek-V3's fp32 promotion every 128 fp8 products.
    Platform promoted;
    promoted.name = "nvidia.h100.fp8_promoted";
    promoted.aliases = {"nvidia.h200.fp8_promoted"};
    promoted.description = "NVIDIA H100 fp8 GEMM promoting partial sums to fp32 every 128 products (DeepSeek-V3; "
                           "cuBLAS without fast accumulation)";
    for (const Entry& entry : e) {
      if (entry.in_fmt != "e4m3fn" && entry.in_fmt != "e5m2") continue;
      if (entry.out_fmt == "fp16") continue;  // the promotion accumulates in fp32
      for (const Operation op : {Operation::dot, Operation::matmul})
        promoted.plans.push_back(PlanEntry{op, entry.in_fmt, entry.out_fmt, promoted_plan(promoted.name, entry, op)});
    }
    promoted.evidence = step_evidence("fp8 step", h100_e4m3, true);
    promoted.evidence.push_back({"promotion to an fp32 accumulator every N_C = 128 products (4 WGMMAs)",
                                 EvidenceKind::documented, "DeepSeek-V3 technical report, arXiv:2412.19437, s3.3.2"});
    promoted.evidence.push_back({"the promoted add rounds to nearest even in fp32 (CUDA cores)", EvidenceKind::documented,
                                 "CUDA C++ Programming Guide; FACTS.md s2"});
    // B200: every set of the B200 vectors is measured. The fp8 rows were captured with
    // mma.sync.m16n8k32 (fp32 and fp16 accumulators), so the fp8 entries are that instruction's
    // measured model; tcgen05.mma's published fp8 model is nvidia.b200.tcgen05 below.
    std::vector<Entry> b = entries(b200_fp16, b200_fp16_f16, b200_bf16, b200_tf32);
    add_fp8(b, b200_mma_sync_e4m3_half, b200_mma_sync_e5m2_half, h100_mma_sync_e4m3_f16_half, h100_mma_sync_e5m2_f16_half);
    for (Entry& entry : b)
      if (entry.in_fmt == "e4m3fn" || entry.in_fmt == "e5m2") entry.mma_sync_fp8 = true;
    out.push_back(build({"nvidia.b200", {},
                         "NVIDIA Blackwell B200 tensor cores, measured: fp16/bf16/tf32 steps (wmma rows) and fp8 as "
                         "mma.sync.m16n8k32 (e4m3/e5m2 -> fp32 and -> fp16 rows: two interleaved steps of 16, c added "
                         "last); tcgen05.mma fp8 as published is nvidia.b200.tcgen05 (not measured)",
                         b, true, kB200Vectors}));
    std::vector<Entry> t;
    add_fp8(t, b200_e4m3, b200_e5m2, b200_e4m3_f16, b200_e5m2_f16);
    out.push_back(build({"nvidia.b200.tcgen05", {},
                         "NVIDIA Blackwell B200 tcgen05.mma fp8 as published (one step of 32, F = 25, c inside; "
                         "MMA-Sim), not measured here: the B200 vectors were captured with mma.sync and reject it there "
                         "(fp8 -> fp32: 3207/5000 e4m3, 3236/5000 e5m2)",
                         t, false}));
    out.push_back(std::move(promoted));
  }
  {
    // Hopper mma.sync.m16n8k32 with fp8 operands and an fp16 accumulator (fused.hpp
    // h100_mma_sync_fp8_f16): per k32 instruction, products k mod 4 in {0, 1} go through one
    // fp16 step of 16 from 0, products {2, 3} through a second fed with the first's result, and
    // the accumulator c is added last by one fp16 addition; instructions chain along K.
    Platform sync;
    sync.name = "nvidia.h100.mma_sync";
    sync.aliases = {"nvidia.h200.mma_sync"};
    sync.description = "NVIDIA H100 mma.sync.m16n8k32, fp8 operands with an fp16 accumulator";
    for (const auto& [fmt, half] : {std::pair{"e4m3fn", h100_mma_sync_e4m3_f16_half}, std::pair{"e5m2", h100_mma_sync_e5m2_f16_half}}) {
      for (const Operation op : {Operation::dot, Operation::matmul}) {
        Plan p;
        p.name = sync.name + " " + std::string(to_string(op)) + " " + fmt + " -> fp16";
        p.reduction = tensor_core_reduction(half, TensorCoreStructure::halves);
        p.c_placement = CPlacement::first;  // the outer chain starts from c: c + d2 per instruction
        p.output = Cast{formats::fp16};
        sync.plans.push_back(PlanEntry{op, fmt, "fp16", p});
      }
    }
    sync.evidence = {
        {"fp8 -> fp16: two fp16 steps of 16 products (F = 25, nearest even), k mod 4 in {0,1} then {2,3}, c added last",
         EvidenceKind::measured, kVectors + " (H100 E4M3/E5M2 d_H100_fp16: 5000/5000 each); structure as MATLAB-tensor-core GEMM.m interleaved pattern"},
        {"F = 25 for the halves (every F from 17/18 to 40 reproduces the rows)", EvidenceKind::measured, kVectors},
        {"instructions of k = 32 chain along K through the fp16 accumulator", EvidenceKind::assumed,
         "PTX mma.sync semantics (d = a.b + c per instruction); the vectors hold one instruction per row"},
    };
    out.push_back(std::move(sync));
  }
  return out;
}

}  // namespace numeq::core
