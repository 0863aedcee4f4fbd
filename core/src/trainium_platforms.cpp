// The Trainium platforms (trainium.hpp): the documented structure of an nc_matmul GEMM (tiles of
// at most 128 rows of K, each tile's fp32 result accumulated into PSUM in program order) and
// every undocumented detail as an Assumption whose value picks the plan nodes.

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "builtin_platforms.hpp"
#include "numeq/core/trainium.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::core {

namespace {

const std::string kArch =
    "aws-neuron-sdk nki/guides/architecture/trainium_inferentia2_arch.rst and trainium2_arch.rst; "
    "nki.isa.nc_matmul docstring (FACTS.md s3)";
const std::string kArchV4 = "aws-neuron-sdk nki/guides/architecture/trainium3_arch.rst; nki.isa.nc_matmul docstring";
const std::string kDataTypes = "aws-neuron-sdk about-neuron/arch/neuron-features/data-types.rst, rounding-modes.rst (FACTS.md s3)";
const std::string kNothingPublished = "not documented by AWS (FACTS.md s3); settle it with numeq.probes and numeq.fit_platform";

// The NeuronCore generation of a Trainium platform: 2 (trn1, inf2), 3 (trn2), 4 (trn3).
int generation_of(const std::string& base) {
  return base == "trainium.trn3" ? 4 : base == "trainium.trn2" ? 3 : 2;
}

// The assumptions of a generation, every one at its default (the first alternative).
std::vector<Assumption> default_assumptions(int generation) {
  std::vector<Assumption> a = {
      {"pe_order", "sequential", {"sequential", "pairwise", "fused"},
       "how the Tensor Engine adds the products of one nc_matmul: sequential down the PE column from 0 "
       "(a systolic array passes the partial sum from row to row), a pairwise tree (neighbours first; in a "
       "leaf pair the first product is rounded into the accumulator and the second added with one rounding), "
       "or fused (the exact sum of the tile's products rounded once)",
       kNothingPublished},
      {"products", "exact", {"exact", "bf16"},
       "each product a_k * b_k enters the adder exactly, or rounded to bf16 (nearest even) first",
       "bf16: a third-party claim for trn1 (trnsci.dev), unverified; " + kNothingPublished},
      {"pe_rounding", "nearest_even", {"nearest_even", "toward_zero"},
       "the rounding of every addition inside the array", kNothingPublished},
      {"accumulator_bits", "23", {"23", "24", "25", "26", "27", "31"},
       "fraction bits of the in-array accumulator: 23 is fp32; more keeps extra bits until the tile's "
       "result is rounded into the fp32 PSUM",
       "docs: \"accumulations at FP32 precision\" (" + kArch + "), which does not exclude guard bits; " +
           kNothingPublished},
      {"fp32_matmul", "native", {"native", "bf16x4", "tf32x4"},
       "how fp32 x fp32 matmuls are computed: native (exact fp32 products, one pass), or each operand split "
       "into two pieces (hi = RNE(x), lo = RNE(x - hi)) of bf16 (16 of fp32's 24 bits kept) or tf32 (22 bits), "
       "run as 4 passes hi*hi, hi*lo, lo*hi, lo*lo per 128-row tile, each accumulated into PSUM",
       "fp32 matmul costs 4x bf16 and is_stationary_onezero / is_moving_onezero halve it (nki.isa.nc_matmul "
       "docs), which suggests 2 x 2 reduced-precision passes; the piece format and order are not documented"},
      {"psum_rounding", "nearest_even", {"nearest_even", "toward_zero"},
       "the rounding of the PSUM fp32 accumulation psum += tile (and of a tile entering PSUM)",
       "docs say fp32 accumulation, not its rounding; " + kNothingPublished},
      {"output_rounding", "nearest_even", {"nearest_even", "stochastic"},
       "the cast of the fp32 PSUM result into a narrower output",
       "RNE by default; stochastic with NEURON_RT_STOCHASTIC_ROUNDING_EN=1, whose generator is not "
       "published, so numeq's own counter-based bits give the same statistics, not the same bits (" +
           kDataTypes + ")"},
      {"vector_reduce_order", "sequential", {"sequential", "pairwise"},
       "the order in which Vector-engine tensor_reduce adds along the free axis (sum plans), in fp32",
       "the NKI docs show sequential pseudocode; the hardware order is not documented (FACTS.md s3)"},
      {"bn_aggr_merge", "chan", {"chan", "naive"},
       "how bn_aggr merges the (count, mean, var*count) statistics of bn_stats chunks in fp32: Chan, Golub, "
       "LeVeque's pairwise update, or the naive mean of means with E[x^2] - mean^2 (used by the operation "
       "catalogue's layernorm)",
       "nki.isa.bn_stats / bn_aggr docstrings give the statistics, not the merge formula (FACTS.md s3)"},
      {"scalar_activation_ulps", "4", {"4", "1", "2", "8", "16", "64"},
       "the error budget, in fp32 ulps, of ScalarE activation functions (exp, tanh, gelu, silu, ...): "
       "modelled as correctly rounded fp32 plus this budget (used by the operation catalogue's bounds)",
       "ScalarE functions are piecewise polynomials with no published error bound (FACTS.md s3)"},
  };
  if (generation >= 3)  // NeuronCore-v3 and -v4 (nki.isa.nc_matmul docstring, Performance mode)
    a.insert(a.begin() + 4, Assumption{"fp8_double_row", "off", {"off", "on"},
                                       "fp8 matmuls in double_row mode: one instruction contracts 256 rows of K, each "
                                       "PE adding two fp8 products (exactly, here) before the column sum",
                                       "the mode is documented (" + kArch + "); whether kernels use it is the "
                                       "kernel's choice, and how the pair is added is not documented"});
  if (generation >= 4)  // NeuronCore-v4's MX matmul (nki.isa.nc_matmul_mx; trainium3_arch.rst)
    a.insert(a.begin() + 5, Assumption{"mx_pe_add", "fused", {"fused", "sequential"},
                                       "how each PE of an MX matmul (nc_matmul_mx) adds its four products before the "
                                       "column sum: fused (their exact sum rounded once into the accumulator, as "
                                       "fp8_double_row's pair) or sequential (added one by one from 0 with the PE's "
                                       "rounding)",
                                       "\"each processing element performs four pairs of MX multiplications and also "
                                       "accumulation of the four multiplication results per cycle\" (" + kArchV4 +
                                           "); how the four are added is not documented"});
  return a;
}

std::string value_of(const std::vector<Assumption>& a, const std::string& name) {
  for (const Assumption& x : a)
    if (x.name == name) return x.value;
  return {};
}

Format accumulator_format(int fraction_bits) {
  if (fraction_bits == 23) return formats::fp32;
  for (const Format* f : formats::wide_accumulators)
    if (f->mantissa_bits == fraction_bits) return *f;
  throw numeq::error("accumulator_bits: no accumulator format with " + std::to_string(fraction_bits) + " fraction bits");
}

// The fused alternative: the tile's products summed exactly (F = 700 covers every product of
// fp32 values, exponents -298 .. 256) and rounded once into the accumulator.
FusedStep exact_tile_step(std::size_t products, const Format& in, const Cast& accumulate) {
  FusedStep s;
  s.n = static_cast<int>(products);
  s.fraction_bits = max_fraction_bits;
  s.alignment = Alignment::truncate;
  s.a_format = in;
  s.b_format = in;
  s.c_format = formats::fp32;
  s.output = accumulate;
  s.overflow = OverflowRule::cast;
  s.zero_sign = ZeroSign::ieee;
  return s;
}

// How the kernel itself tiles its matmul: not assumptions about the hardware but the kernel's
// choices, which a port review reads from the kernel's tiling (numeq review's manifest).
//   k_tile      rows of K each nc_matmul contracts (0: the most the instruction takes, 128, or 256
//               in trn2's fp8 double_row mode); the last tile of K takes the rest
//   psum_group  K tiles accumulated in one PSUM tile before the group's sum is added into an
//               SBUF accumulator on the Vector engine in program order (0: every K tile of an output
//               tile into one PSUM tile)
//   group_accumulator  the dtype of that SBUF accumulator: fp32 (default), or bf16 / fp16, as the
//               NKI tutorial's fully optimised matmul keeps it in the input dtype: each group is then
//               added in fp32 (the Vector engine's arithmetic, nki.isa docs) and the sum rounded into
//               the accumulator, two roundings, the first group copied into it
//   mx          the matmuls are NeuronCore-v4 MX matmuls (nc_matmul_mx): each PE takes four
//               products, one instruction contracts 512 elements of K (128 partitions x 4), and the
//               operands are the dequantized values (element x its block's scale), which the plan
//               reads as fp32 (exact while they lie in fp32's range; numeq.nki checks it)
struct KernelOptions {
  std::size_t k_tile = 0;
  bool mx = false;
  std::size_t psum_group = 0;
  const Format* group_accumulator = &formats::fp32;
};

// The accumulator dtypes an SBUF accumulator of PSUM groups may have.
const std::vector<const Format*> kGroupAccumulators = {&formats::fp32, &formats::bf16, &formats::fp16};

// More parts than any K has groups: split_starts makes one part per term.
constexpr std::size_t kOnePartPerTerm = std::size_t{1} << 30;

struct Build {
  std::string platform;
  std::vector<Assumption> assumptions;
  KernelOptions kernel;
};

Plan matmul_plan(const Build& b, Operation op, const Format& in, const Format& out) {
  const auto& a = b.assumptions;
  const Rounding pe_rounding = rounding_by_name(value_of(a, "pe_rounding"), "pe_rounding");
  const Rounding psum_rounding = rounding_by_name(value_of(a, "psum_rounding"), "psum_rounding");
  const Cast accumulate{accumulator_format(std::stoi(value_of(a, "accumulator_bits"))), pe_rounding};
  Arithmetic pe{accumulate, ProductMode::fma};
  if (value_of(a, "products") == "bf16") {
    pe.product = ProductMode::rounded;
    pe.product_cast = Cast{formats::bf16};
  }
  const bool fp8 = in == formats::e4m3 || in == formats::e5m2 || in == formats::e4m3fn;
  const bool double_row = fp8 && value_of(a, "fp8_double_row") == "on";
  // builtin_variant has checked k_tile against the instruction's rows (and left the plans of
  // the formats it does not fit out).
  const std::size_t tile = b.kernel.k_tile ? b.kernel.k_tile : b.kernel.mx ? 512 : double_row ? 256 : 128;
  const std::string order = value_of(a, "pe_order");
  if (order == "fused" && pe.product == ProductMode::rounded)
    throw numeq::error("platform: the assumptions pe_order=fused and products=bf16 cannot be combined (a fused "
                       "tile adds exact products); choose pe_order sequential or pairwise with products=bf16");
  PlanNode column;  // the reduction of one nc_matmul's products down the array
  if (order == "fused") {
    column = fused(exact_tile_step(tile, in, accumulate));
  } else {
    PlanNode adder = order == "pairwise" ? tree(2, pe) : sequential(pe, /*start_from_zero=*/true);
    if (b.kernel.mx) {
      // Each PE adds its four products (the four values of one x4 element of each operand,
      // trainium3_arch.rst "Quad-MXFP8/MXFP4 Matmul Performance"); the column then adds the PE
      // sums as values. The four share one scale pair (a block is 8 partitions x 4 values), so a
      // PE's products are the dequantized operands' products.
      PlanNode quad = value_of(a, "mx_pe_add") == "sequential" ? sequential(pe, /*start_from_zero=*/true)
                                                               : fused(exact_tile_step(4, in, accumulate));
      Arithmetic values{accumulate};
      adder = chunked(4, quad, order == "pairwise" ? tree(2, values) : sequential(values, true));
    } else if (double_row) {
      // Each PE adds its two fp8 products exactly and rounds once into the accumulator; the
      // column then adds the pair sums as values.
      PlanNode pair = fused(exact_tile_step(2, in, accumulate));
      Arithmetic values{accumulate};
      adder = chunked(2, pair, order == "pairwise" ? tree(2, values) : sequential(values, true));
    }
    column = adder;
  }
  // PSUM: the first tile written, later tiles added in program order, in fp32.
  const Arithmetic psum{Cast{formats::fp32, psum_rounding}};
  Plan p;
  p.name = b.platform + " " + std::string(to_string(op)) + " " + std::string(in.name) + " -> " + std::string(out.name);
  p.reduction = chunked(tile, column, sequential(psum));
  const std::string fp32_matmul = value_of(a, "fp32_matmul");
  if (in == formats::fp32 && fp32_matmul != "native" && !b.kernel.mx) {  // MX operands are no fp32 inputs
    // Two pieces per operand, four passes per tile, each pass one nc_matmul into PSUM.
    const Format& piece = fp32_matmul == "bf16x4" ? formats::bf16 : formats::tf32;
    p.reduction = decompose(tile, 2, Cast{piece}, {{0, 0}, {0, 1}, {1, 0}, {1, 1}}, column, sequential(psum));
  }
  if (b.kernel.psum_group) {
    // Each group's PSUM sum is copied out and added into the SBUF accumulator: the first group
    // copied, later ones added in fp32 to nearest even (Vector-engine tensor_tensor, FACTS.md s3).
    const Arithmetic fp32_add{Cast{formats::fp32}};
    if (*b.kernel.group_accumulator == formats::fp32) {
      p.reduction = chunked(tile * b.kernel.psum_group, p.reduction, sequential(fp32_add));
    } else {
      // A narrower accumulator: acc = round(fp32(acc + group)), the first group rounded into it.
      // A serial split with one part per group (split_starts never makes more parts than terms)
      // passes each running sum through the accumulator's cast.
      p.reduction = chunked(tile * b.kernel.psum_group, p.reduction,
                            split(kOnePartPerTerm, SplitMode::serial, Cast{*b.kernel.group_accumulator},
                                  sequential(fp32_add)));
    }
  }
  // nc_matmul has no addend: a bias or c is added to the PSUM result afterwards (fp32 add).
  p.c_placement = CPlacement::last;
  const bool stochastic = value_of(a, "output_rounding") == "stochastic";
  p.output = Cast{out, out == formats::fp32 || !stochastic ? Rounding::nearest_even : Rounding::stochastic};
  return p;
}

Plan sum_plan(const Build& b, const Format& in, const Format& out) {
  const Arithmetic fp32_add{Cast{formats::fp32}};
  Plan p;
  p.name = b.platform + " sum " + std::string(in.name) + " -> " + std::string(out.name);
  p.reduction = value_of(b.assumptions, "vector_reduce_order") == "pairwise" ? tree(2, fp32_add) : sequential(fp32_add);
  const bool stochastic = value_of(b.assumptions, "output_rounding") == "stochastic";
  p.output = Cast{out, out == formats::fp32 || !stochastic ? Rounding::nearest_even : Rounding::stochastic};
  return p;
}

// base[assumptions that differ from their default..., kernel options that are set...]
std::string variant_name(const std::string& base, const std::vector<Assumption>& a, const KernelOptions& k) {
  std::string chosen;
  for (const Assumption& x : a)
    if (x.value != x.alternatives.front()) chosen += (chosen.empty() ? "" : ",") + x.name + "=" + x.value;
  if (k.mx) chosen += (chosen.empty() ? "" : ",") + std::string("mx=on");
  if (k.k_tile) chosen += (chosen.empty() ? "" : ",") + std::string("k_tile=") + std::to_string(k.k_tile);
  if (k.psum_group) chosen += (chosen.empty() ? "" : ",") + std::string("psum_group=") + std::to_string(k.psum_group);
  if (*k.group_accumulator != formats::fp32)
    chosen += (chosen.empty() ? "" : ",") + std::string("group_accumulator=") + std::string(k.group_accumulator->name);
  return chosen.empty() ? base : base + "[" + chosen + "]";
}

Platform build_trainium(const std::string& base, const std::vector<Assumption>& assumptions,
                        const KernelOptions& kernel = {}) {
  const int generation = generation_of(base);
  Build b{variant_name(base, assumptions, kernel), assumptions, kernel};
  Platform p;
  p.name = b.platform;
  if (b.platform == base)
    p.aliases = generation == 4   ? std::vector<std::string>{"neuron.v4"}
                : generation == 3 ? std::vector<std::string>{"neuron.v3"}
                                  : std::vector<std::string>{"trainium.inf2", "neuron.v2"};
  p.description = generation == 4
                      ? "AWS Trainium3 (NeuronCore-v4): Tensor Engine matmul into fp32 (or bf16) PSUM, Vector-engine sums"
                  : generation == 3
                      ? "AWS Trainium2 (NeuronCore-v3): Tensor Engine matmul into fp32 PSUM, Vector-engine sums"
                      : "AWS Trainium1 / Inferentia2 (NeuronCore-v2): Tensor Engine matmul into fp32 PSUM, "
                        "Vector-engine sums";
  std::vector<const Format*> inputs = {&formats::fp32, &formats::tf32, &formats::bf16,
                                       &formats::fp16, &formats::e4m3, &formats::e5m2};
  // NeuronCore-v4 takes OCP e4m3fn beside Trainium's e4m3 (never both in one matmul: the kernel
  // layer's matmul_dtype rule; nki.isa.nc_matmul docstring, Data types).
  if (generation == 4) inputs.push_back(&formats::e4m3fn);
  // An MX matmul's operands are dequantized values, read as fp32 (KernelOptions::mx).
  if (kernel.mx) inputs = {&formats::fp32};
  const std::vector<const Format*> outputs = {&formats::fp32, &formats::bf16, &formats::fp16};
  for (const Format* in : inputs)
    for (const Format* out : outputs)
      for (const Operation op : {Operation::dot, Operation::matmul}) {
        // A k_tile above 128 (fp8 double_row) leaves the formats one instruction cannot contract
        // that many rows of out of the platform (an MX matmul's K counts values, 4 per row).
        if (!b.kernel.mx && b.kernel.k_tile > 128 && *in != formats::e4m3 && *in != formats::e5m2 &&
            *in != formats::e4m3fn)
          continue;
        p.plans.push_back(PlanEntry{op, std::string(in->name), std::string(out->name), matmul_plan(b, op, *in, *out)});
      }
  for (const Format* in : {&formats::fp32, &formats::bf16, &formats::fp16})
    for (const Format* out : outputs)
      p.plans.push_back(PlanEntry{Operation::sum, std::string(in->name), std::string(out->name), sum_plan(b, *in, *out)});
  p.evidence = {
      {"matmul: one nc_matmul contracts at most 128 rows of K (the partition axis)", EvidenceKind::documented, kArch},
      {"matmul: tiles accumulate into an fp32 PSUM tile in program order (psum += tile)", EvidenceKind::documented, kArch},
      {"matmul: inputs fp32, tf32, bf16, fp16, fp8 e4m3 (IEEE-like, max 240), e5m2; output in fp32",
       EvidenceKind::documented, kArch + "; " + kDataTypes},
      {"output casts round to nearest even and overflow to Inf", EvidenceKind::documented, kDataTypes},
      {"c (bias) is added to the PSUM result afterwards, one fp32 addition", EvidenceKind::assumed,
       "nc_matmul has no addend operand; a kernel adds the bias on the Vector engine"},
      {"sum: Vector-engine tensor_reduce in fp32, inputs widened exactly", EvidenceKind::documented,
       "nki.isa.tensor_reduce docstring (FACTS.md s3)"},
  };
  if (generation >= 3)
    p.evidence.push_back({"matmul: fp8 double_row mode contracts 256 rows, each PE taking two products",
                          EvidenceKind::documented, kArch});
  if (generation == 4) {
    p.evidence.push_back({"matmul: NeuronCore-v4 accumulates inside the systolic array in fp32, as NeuronCore-v3 "
                          "(\"the accumulation performed during a matmul operation within the systolic array is "
                          "still performed using FP32 data\"); its adder order, products and rounding are taken as "
                          "NeuronCore-v3's, whose assumptions it carries",
                          EvidenceKind::documented, kArchV4});
    p.evidence.push_back({"matmul: inputs add OCP e4m3fn (max 448), not mixed with e4m3 in one matmul; a bf16 PSUM "
                          "destination takes each fp32 result rounded (RNE or stochastic) as it is written, and adds "
                          "into it in fp32 before rounding again",
                          EvidenceKind::documented, kArchV4});
  }
  if (kernel.mx) {
    p.evidence.push_back({"matmul: MX (nc_matmul_mx): one instruction contracts up to 512 elements of K, 128 "
                          "partitions x the 4 values of an x4 element, each PE multiplying and adding four pairs; "
                          "blocks of 32 values along K (8 partitions x 4) share one E8M0 scale per operand",
                          EvidenceKind::documented, kArchV4 + "; nki.isa.nc_matmul_mx docstring"});
    p.evidence.push_back({"matmul: MX operands enter as element x 2^(scale - 127), exact in fp32 while in its range; "
                          "the scales are powers of two shared by a PE's four products, so where they apply changes "
                          "no value inside that range; fp4 (e2m1) values are fp8 values, so how fp4 is widened "
                          "changes none either",
                          EvidenceKind::documented,
                          "derived from the layout (" + kArchV4 + ") and the formats' values (OCP MX v1.0)"});
  }
  if (kernel.k_tile)
    p.evidence.push_back({"matmul: the kernel cuts K into tiles of " + std::to_string(kernel.k_tile) + " rows",
                          EvidenceKind::documented, "the kernel's tiling (k_tile), as its author states it"});
  if (kernel.psum_group)
    p.evidence.push_back({"matmul: " + std::to_string(kernel.psum_group) +
                              " K tiles per PSUM group, the groups added in fp32 into a " +
                              std::string(kernel.group_accumulator->name) + " SBUF accumulator in program order",
                          EvidenceKind::documented,
                          "the kernel's tiling (psum_group, group_accumulator), as its author states it or as "
                          "numeq.nki reads it from the kernel's trace"});
  for (const Assumption& x : assumptions)
    p.evidence.push_back({x.name + " = " + x.value + " (alternatives: " +
                              [&] {
                                std::string s;
                                for (const std::string& v : x.alternatives) s += (s.empty() ? "" : ", ") + v;
                                return s;
                              }() + ")",
                          EvidenceKind::assumed, x.source});
  p.assumptions = assumptions;
  // ScalarE activations (and VectorE reciprocal): fp32 in and out, piecewise polynomials with no
  // published error bound, so every function carries the scalar_activation_ulps budget. The
  // documented valid ranges (rsqrt [2^-87, 2^97], reciprocal +-[2^-42, 2^42], log [2^-64, 2^64])
  // are not modelled: outside them the hardware extrapolates (FACTS.md s3).
  const double ulps = std::stod(value_of(assumptions, "scalar_activation_ulps"));
  // The activation table of the NKI API reference (nki.api.shared, "Accepted op by Scalar Engine")
  // lists erf, erf_dx, sin, arctan, mish, gelu_apprx_sigmoid, gelu_dx, silu_dx and
  // gelu_apprx_sigmoid_dx as well; sin's range is [-pi, pi], arctan's [-pi/2, pi/2] (outside, sin
  // "extrapolates a cubic": numeq.nki's assumption activation_sin_outside).
  for (const char* f : {"exp", "tanh", "sigmoid", "gelu", "gelu_tanh", "silu", "rsqrt", "reciprocal", "log", "softplus",
                        "erf", "erf_dx", "sin", "atan", "mish", "gelu_sigmoid", "gelu_dx", "silu_dx", "gelu_sigmoid_dx"})
    p.functions.push_back(FunctionModel{f, FunctionModelKind::ulp_budget, ulps, "fp32", EvidenceKind::assumed,
                                        "assumption scalar_activation_ulps = " + value_of(assumptions, "scalar_activation_ulps") +
                                            ": ScalarE functions are piecewise polynomials with no published error "
                                            "bound (nki.isa.activation docs; FACTS.md s3)"});
  return p;
}

}  // namespace

std::vector<Platform> trainium_platforms() {
  return {build_trainium("trainium.trn1", default_assumptions(2)), build_trainium("trainium.trn2", default_assumptions(3)),
          build_trainium("trainium.trn3", default_assumptions(4))};
}

std::optional<Platform> builtin_variant(std::string_view base, const AssumptionChoices& choices,
                                        std::string_view parameter) {
  std::string name(base);
  if (name == "trainium.inf2" || name == "neuron.v2") name = "trainium.trn1";
  if (name == "neuron.v3") name = "trainium.trn2";
  if (name == "neuron.v4") name = "trainium.trn3";
  if (name != "trainium.trn1" && name != "trainium.trn2" && name != "trainium.trn3") return std::nullopt;
  std::vector<Assumption> assumptions = default_assumptions(generation_of(name));
  KernelOptions kernel;
  for (const auto& [key, value] : choices) {
    if (key == "group_accumulator") {
      const std::string& name_given = value;  // (no lambda captures a structured binding before clang 16)
      const auto f = std::find_if(kGroupAccumulators.begin(), kGroupAccumulators.end(),
                                  [&](const Format* x) { return x->name == name_given; });
      if (f == kGroupAccumulators.end()) {
        std::string valid;
        for (const Format* x : kGroupAccumulators) valid += (valid.empty() ? "" : ", ") + std::string(x->name);
        throw numeq::error(std::string(parameter) + ": group_accumulator=" + value + " is unknown; valid: " + valid);
      }
      kernel.group_accumulator = *f;
      continue;
    }
    if (key == "mx") {
      if (value != "on" && value != "off")
        throw numeq::error(std::string(parameter) + ": mx=" + value + " is unknown; valid: on, off");
      if (value == "on" && generation_of(name) < 4)
        throw numeq::error(std::string(parameter) + ": mx=on needs trainium.trn3 (MX matmuls are NeuronCore-v4 "
                           "and newer: nki.isa.nc_matmul_mx docstring); " + name + " has none");
      kernel.mx = value == "on";
      continue;
    }
    if (key == "k_tile" || key == "psum_group") {
      (key == "k_tile" ? kernel.k_tile : kernel.psum_group) = option_count(key, value, 65536, parameter);
      continue;
    }
    // A lambda cannot capture a structured binding before clang 16 (the fuzz build's compiler).
    const std::string& wanted = key;
    const auto it = std::find_if(assumptions.begin(), assumptions.end(), [&](const Assumption& a) { return a.name == wanted; });
    if (it == assumptions.end()) {
      std::string valid;
      for (const Assumption& a : assumptions) valid += (valid.empty() ? "" : ", ") + a.name;
      valid += "; kernel options: k_tile, psum_group, group_accumulator, mx";
      throw numeq::error(std::string(parameter) + ": " + name + " has no assumption '" + key + "'; valid: " + valid);
    }
    if (std::find(it->alternatives.begin(), it->alternatives.end(), value) == it->alternatives.end()) {
      std::string valid;
      for (const std::string& v : it->alternatives) valid += (valid.empty() ? "" : ", ") + v;
      throw numeq::error(std::string(parameter) + ": assumption " + key + " of " + name + " cannot be '" + value +
                         "'; valid: " + valid);
    }
    it->value = value;
  }
  if (*kernel.group_accumulator != formats::fp32 && !kernel.psum_group)
    throw numeq::error(std::string(parameter) + ": group_accumulator=" + std::string(kernel.group_accumulator->name) +
                       " needs psum_group=N (the K tiles each PSUM group holds)");
  const bool double_row = value_of(assumptions, "fp8_double_row") == "on";
  if (kernel.mx) {
    // nc_matmul_mx: K in partitions (a multiple of 32, at most 128) x 4 values per x4 element.
    if (kernel.k_tile > 512 || kernel.k_tile % 128 != 0)
      throw numeq::error(std::string(parameter) + ": k_tile=" + std::to_string(kernel.k_tile) +
                         " with mx=on: an MX matmul contracts 4 x its partitions, a multiple of 32 up to 128, so "
                         "k_tile is 128, 256, 384 or 512 (nki.isa.nc_matmul_mx docstring, Tile size)");
    return build_trainium(name, assumptions, kernel);
  }
  if (kernel.k_tile > (double_row ? 256u : 128u))
    throw numeq::error(std::string(parameter) + ": k_tile=" + std::to_string(kernel.k_tile) + " exceeds the " +
                       (double_row ? "256 rows of K one fp8 double_row nc_matmul contracts"
                                   : "128 rows of K one nc_matmul contracts" +
                                         std::string(generation_of(name) >= 3 ? " (256 with fp8_double_row=on)" : "")) +
                       " (" + kArch + ")");
  if (double_row && kernel.k_tile % 2 == 1)
    throw numeq::error(std::string(parameter) + ": k_tile=" + std::to_string(kernel.k_tile) +
                       " is odd; fp8 double_row contracts rows in pairs (" + kArch + ")");
  return build_trainium(name, assumptions, kernel);
}

}  // namespace numeq::core
