// The built-in NVIDIA platforms, through the plan evaluator (platform -> plan -> core::dot), on
// every row of every GPU-measured vector set (tests/data/tensor-core-vectors): the same check as
// test_fused.cpp, but of what users call. Plus the platform registry and split-K option.

#include <gtest/gtest.h>

#include <functional>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/core/evaluate.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/format.hpp"

namespace {

namespace core = numeq::core;
namespace fs = std::filesystem;

double fp32_value(std::uint32_t bits) { return static_cast<double>(std::bit_cast<float>(bits)); }

// K hexadecimal fp32 patterns per row, as an xarray [rows, K].
xt::xarray<double> read_matrix(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::vector<double> values;
  std::size_t rows = 0, width = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string word;
    std::size_t k = 0;
    while (s >> word) {
      values.push_back(fp32_value(static_cast<std::uint32_t>(std::stoul(word, nullptr, 16))));
      ++k;
    }
    if (k == 0) continue;
    width = k;
    ++rows;
  }
  xt::xarray<double> m = xt::xarray<double>::from_shape({rows, width});
  std::copy(values.begin(), values.end(), m.begin());
  return m;
}

std::vector<std::uint32_t> read_patterns(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::vector<std::uint32_t> out;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) out.push_back(static_cast<std::uint32_t>(std::stoul(line, nullptr, 2)));
  }
  return out;
}

struct Case {
  const char* gpu;
  const char* dir;       // input format folder
  const char* platform;
  const char* in_fmt;
  const char* out;
  bool c_is_zero;        // H100 fp8 fp32 outputs were captured from a zeroed accumulator
  bool expected_exact;   // false: a published model the rows reject (report only)
};

// Rows the platform reproduces, of the set's rows.
std::pair<std::size_t, std::size_t> run(const Case& cs) {
  const fs::path dir = fs::path(NUMEQ_TEST_DATA_DIR) / "tensor-core-vectors" / cs.gpu / cs.dir;
  const std::string tag = std::string(cs.gpu) + "_" + cs.dir;
  const xt::xarray<double> a = read_matrix(dir / ("a_" + tag + ".txt"));
  const xt::xarray<double> b = read_matrix(dir / ("b_" + tag + ".txt"));
  const std::vector<std::uint32_t> c_bits = read_patterns(dir / ("c_" + std::string(cs.gpu) + "_fp32.txt"));
  const std::vector<std::uint32_t> d = read_patterns(dir / ("d_" + std::string(cs.gpu) + "_" + cs.out + ".txt"));
  xt::xarray<double> c = xt::xarray<double>::from_shape({c_bits.size()});
  for (std::size_t i = 0; i < c_bits.size(); ++i) {
    double v = cs.c_is_zero ? 0.0 : fp32_value(c_bits[i]);
    // An fp16 accumulator was fed c through __float2half (nearest even): the plan's c is that value.
    if (std::string(cs.out) == "fp16") v = numeq::round_to_format(v, numeq::Cast{numeq::formats::fp16});
    c(i) = v;
  }
  const core::Plan plan = core::plan_for(core::platform_by_name(cs.platform), core::Operation::dot, cs.in_fmt, cs.out);
  const xt::xarray<double> got = core::dot(a, b, &c, plan);
  std::size_t same = 0;
  for (std::size_t i = 0; i < d.size(); ++i)
    same += std::bit_cast<std::uint32_t>(static_cast<float>(got(i))) == d[i] ? 1 : 0;
  return {same, d.size()};
}

TEST(Platform, ReproducesEveryMeasuredTensorCoreVector) {
  const Case cases[] = {
      {"V100", "fp16", "nvidia.v100", "fp16", "fp32", false, true},
      {"V100", "fp16", "nvidia.v100", "fp16", "fp16", false, true},
      {"A100", "fp16", "nvidia.a100", "fp16", "fp32", false, true},
      {"A100", "fp16", "nvidia.a100", "fp16", "fp16", false, true},
      {"A100", "bf16", "nvidia.a100", "bf16", "fp32", false, true},
      {"A100", "tf32", "nvidia.a100", "tf32", "fp32", false, true},
      {"H100", "fp16", "nvidia.h100", "fp16", "fp32", false, true},
      {"H100", "fp16", "nvidia.h200", "fp16", "fp16", false, true},
      {"H100", "bf16", "nvidia.h100", "bf16", "fp32", false, true},
      {"H100", "tf32", "nvidia.h100", "tf32", "fp32", false, true},
      {"H100", "E4M3", "nvidia.h100", "e4m3fn", "fp32", true, true},
      {"H100", "E5M2", "nvidia.h100", "e5m2", "fp32", true, true},
      // wgmma's published single-step model: not what these mma.sync rows measured (report only)
      {"H100", "E4M3", "nvidia.h100", "e4m3fn", "fp16", false, false},
      {"H100", "E5M2", "nvidia.h100", "e5m2", "fp16", false, false},
      // mma.sync.m16n8k32: two interleaved fp16 steps, c added last
      {"H100", "E4M3", "nvidia.h100.mma_sync", "e4m3fn", "fp16", false, true},
      {"H100", "E5M2", "nvidia.h100.mma_sync", "e5m2", "fp16", false, true},
      {"B200", "fp16", "nvidia.b200", "fp16", "fp32", false, true},
      {"B200", "fp16", "nvidia.b200", "fp16", "fp16", false, true},
      {"B200", "bf16", "nvidia.b200", "bf16", "fp32", false, true},
      {"B200", "tf32", "nvidia.b200", "tf32", "fp32", false, true},
      // mma.sync.m16n8k32 with fp8 operands: two interleaved steps of 16, c added last
      {"B200", "E4M3", "nvidia.b200", "e4m3fn", "fp32", false, true},
      {"B200", "E5M2", "nvidia.b200", "e5m2", "fp32", false, true},
      {"B200", "E4M3", "nvidia.b200", "e4m3fn", "fp16", false, true},
      {"B200", "E5M2", "nvidia.b200", "e5m2", "fp16", false, true},
      // tcgen05.mma's published single-step model: not what these mma.sync rows measured (report only)
      {"B200", "E4M3", "nvidia.b200.tcgen05", "e4m3fn", "fp32", false, false},
      {"B200", "E5M2", "nvidia.b200.tcgen05", "e5m2", "fp32", false, false},
  };
  for (const Case& cs : cases) {
    const auto [same, rows] = run(cs);
    std::printf("[ vectors ] %s %s -> %s via %s: %zu/%zu\n", cs.gpu, cs.dir, cs.out, cs.platform, same, rows);
    EXPECT_EQ(rows, 5000u) << cs.gpu << " " << cs.dir;
    if (cs.expected_exact) {
      EXPECT_EQ(same, rows) << cs.gpu << " " << cs.dir << " -> " << cs.out;
    }
  }
}

TEST(Platform, MalformedProfilesNameTheField) {
  try {
    core::platform_from_json(R"({"name": "mine", "plans": [{"op": "conv", "in_fmt": "bf16", "out": "fp32", "plan": {}}]})");
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("profile.plans[0].op:", 0), 0u) << e.what();
  }
  try {
    core::platform_from_json(R"({"name": "mine", "plans": [], "evidence": [{"parameter": "x", "kind": "rumour", "source": "s"}]})");
    FAIL();
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("profile.evidence[0].kind:", 0), 0u) << e.what();
  }
}

TEST(Platform, UsersRegisterTheirOwn) {
  core::Platform mine = core::platform_by_name("cuda_core.fp32");
  mine.name = "mine.fp32";
  mine.aliases = {"mine"};
  core::register_platform(core::platform_from_json(core::to_json(mine)));
  EXPECT_EQ(core::platform_by_name("mine").name, "mine.fp32");
}

TEST(Platform, SplitKIsAPlanOption) {
  const core::Plan base = core::plan_for(core::platform_by_name("cuda_core.fp32"), core::Operation::matmul, "fp32", "fp32");
  const core::Plan serial = core::with_split_k(base, 4, core::SplitMode::serial);
  EXPECT_EQ(serial.reduction.kind, core::NodeKind::split);
  EXPECT_EQ(serial.reduction.parts, 4u);
  EXPECT_EQ(core::plan_from_json(core::to_json(serial)), serial);
  EXPECT_THROW(core::with_split_k(base, 0, core::SplitMode::serial), numeq::error);
}

// c added last (and numpy's initial +0) goes in the arithmetic of the reduction's outermost
// addition: a serial split-K keeps the split plan's, a parallel one its combine's (plan.hpp,
// outer_cast); and the JSON of every split plan evaluates as the plan does.
TEST(Platform, SplitKKeepsTheArithmeticOfTheFinalAdditions) {
  const numeq::Cast partial{numeq::formats::fp32};
  for (const std::string& name : core::platform_names()) {
    for (const core::PlanEntry& e : core::platform_by_name(name).plans) {
      if (e.op != core::Operation::matmul && e.op != core::Operation::dot) continue;
      const core::Plan serial = core::with_split_k(e.plan, 3, core::SplitMode::serial);
      const core::Plan parallel = core::with_split_k(e.plan, 3, core::SplitMode::parallel, partial);
      EXPECT_EQ(core::outer_cast(serial), core::outer_cast(e.plan)) << e.plan.name;
      EXPECT_EQ(core::outer_cast(parallel), partial) << e.plan.name;
      for (const core::Plan* p : {&serial, &parallel}) EXPECT_EQ(core::plan_from_json(core::to_json(*p)), *p) << p->name;
    }
  }
}

TEST(Platform, EveryPlatformCarriesEvidence) {
  for (const std::string& name : core::platform_names()) {
    const core::Platform p = core::platform_by_name(name);
    EXPECT_FALSE(p.evidence.empty()) << name;
    EXPECT_FALSE(core::evidence_report(p).empty()) << name;
  }
}

// Function models (how a platform computes exp, tanh, ...): CUDA's documented budgets on every
// NVIDIA platform, the scalar_activation_ulps assumption on Trainium, a JSON round trip, errors
// naming the field, and one evidence line per model.
TEST(Platform, FunctionModels) {
  const core::FunctionModel exp_h100 = core::function_model(core::platform_by_name("nvidia.h100"), "exp");
  EXPECT_EQ(exp_h100.kind, core::FunctionModelKind::ulp_budget);
  EXPECT_EQ(exp_h100.ulps, 2.0);
  EXPECT_EQ(exp_h100.compute, "fp32");
  EXPECT_EQ(exp_h100.evidence, core::EvidenceKind::documented);
  EXPECT_NE(exp_h100.source.find("CUDA C++ Programming Guide"), std::string::npos);
  EXPECT_EQ(core::function_model(core::platform_by_name("cuda_core.fp32"), "rsqrt").ulps, 2.0);
  EXPECT_EQ(core::function_model(core::platform_by_name("nvidia.a100"), "reciprocal").kind,
            core::FunctionModelKind::correctly_rounded);
  EXPECT_EQ(core::function_model(core::platform_by_name("nvidia.h100"), "tanh").ulps, 2.0);
  // Trainium: the assumption's value, default and chosen.
  EXPECT_EQ(core::function_model(core::platform_by_name("trainium.trn1"), "gelu").ulps, 4.0);
  const core::Platform trn16 = core::platform_by_name("trainium.trn1[scalar_activation_ulps=16]");
  for (const char* f : {"exp", "tanh", "sigmoid", "gelu", "gelu_tanh", "silu", "rsqrt", "reciprocal"}) {
    const core::FunctionModel m = core::function_model(trn16, f);
    EXPECT_EQ(m.ulps, 16.0) << f;
    EXPECT_EQ(m.evidence, core::EvidenceKind::assumed) << f;
  }
  // numpy's documented SIMD exp.
  EXPECT_EQ(core::function_model(core::platform_by_name("numpy"), "exp").ulps, 2.52);
  // A platform listing nothing: correctly rounded in fp32, assumed.
  core::Platform bare;
  bare.name = "bare";
  const core::FunctionModel cr = core::function_model(bare, "silu");
  EXPECT_EQ(cr.kind, core::FunctionModelKind::correctly_rounded);
  EXPECT_EQ(cr.compute, "fp32");
  EXPECT_THROW(core::function_model(bare, "cosh"), numeq::error);
  // Round trip and report lines, for every built-in.
  for (const std::string& name : core::platform_names()) {
    const core::Platform p = core::platform_by_name(name);
    EXPECT_EQ(core::platform_from_json(core::to_json(p)), p) << name;
    const std::string report = core::evidence_report(p);
    for (const core::FunctionModel& m : p.functions)
      EXPECT_NE(report.find("function " + m.function + ": "), std::string::npos) << name << " " << m.function;
  }
  EXPECT_NE(core::evidence_report(core::platform_by_name("nvidia.h100")).find("documented  function exp: within 2 ulps of correctly rounded fp32"),
            std::string::npos);
}

TEST(Platform, MalformedFunctionModelsNameTheField) {
  const auto error_of = [](const std::string& functions) -> std::string {
    try {
      core::platform_from_json(R"({"name": "mine", "plans": [], "functions": )" + functions + "}");
    } catch (const numeq::error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(R"([{"function": "cosh", "model": "ulp_budget", "ulps": 1}])").rfind("profile.functions[0].function:", 0), 0u);
  EXPECT_EQ(error_of(R"([{"function": "exp", "model": "polynomial"}])").rfind("profile.functions[0].model:", 0), 0u);
  EXPECT_EQ(error_of(R"([{"function": "exp", "model": "ulp_budget"}])").rfind("profile.functions[0].ulps:", 0), 0u);
  EXPECT_EQ(error_of(R"([{"function": "exp", "model": "ulp_budget", "ulps": -1}])").rfind("profile.functions[0].ulps:", 0), 0u);
  EXPECT_EQ(error_of(R"([{"function": "exp", "model": "ulp_budget", "ulps": 2, "compute": "int8"}])").rfind("profile.functions[0].compute:", 0), 0u);
  EXPECT_EQ(error_of(R"([{"function": "exp", "model": "ulp_budget", "ulps": 2, "compute": "fp33"}])").rfind("profile.functions[0].compute:", 0), 0u);
  EXPECT_EQ(error_of(R"([{"function": "exp", "model": "ulp_budget", "ulps": 2, "evidence": "rumour"}])").rfind("profile.functions[0].evidence:", 0), 0u);
  EXPECT_EQ(error_of(R"([{"function": "exp", "model": "correctly_rounded"}, {"function": "exp", "model": "correctly_rounded"}])").rfind("profile.functions[1].function:", 0), 0u);
  EXPECT_EQ(error_of(R"({"function": "exp"})").rfind("profile.functions:", 0), 0u);
  EXPECT_EQ(error_of(R"([{"function": "exp", "model": "ulp_budget", "ulps": 3, "compute": "bf16", "evidence": "measured", "source": "mine"}])"), "");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const numeq::error& e) {
    return e.what();
  }
  return "";
}

// Platform strings are read strictly: an assumption given twice was once accepted (which value
// won was an accident of the loop), and a stray comma or empty [] passed silently.
TEST(Platform, VariantStringsAreStrict) {
  const std::string twice = error_of([] { core::platform_by_name("trainium.trn2[pe_order=fused,pe_order=sequential]"); });
  EXPECT_EQ(twice.rfind("platform: assumption 'pe_order' is given twice", 0), 0u) << twice;
  const std::string comma = error_of([] { core::platform_by_name("trainium.trn2[pe_order=fused,]"); });
  EXPECT_EQ(comma.rfind("platform: '' in 'trainium.trn2[pe_order=fused,]' is not assumption=value", 0), 0u) << comma;
  const std::string empty = error_of([] { core::platform_by_name("trainium.trn2[]"); });
  EXPECT_EQ(empty.rfind("platform: 'trainium.trn2[]' selects nothing", 0), 0u) << empty;
  const std::string bracket = error_of([] { core::platform_by_name("trainium.trn2[pe_order=[fused]]"); });
  EXPECT_EQ(bracket.rfind("platform: 'trainium.trn2[pe_order=[fused]]' has a bracket inside", 0), 0u) << bracket;
  EXPECT_EQ(error_of([] { core::platform_by_name("trainium.trn2[pe_order=fused]"); }), "");
}

// Loading a profile under a built-in's name (or alias) once replaced the built-in for the rest
// of the process.
TEST(Platform, BuiltinsCannotBeReplaced) {
  core::Platform edited = core::platform_by_name("cuda_core.fp32");
  edited.description = "edited";
  const std::string same = error_of([&] { core::register_platform(edited); });
  EXPECT_EQ(same.rfind("profile.name: 'cuda_core.fp32' is the built-in platform cuda_core.fp32", 0), 0u) << same;
  EXPECT_NE(core::platform_by_name("cuda_core.fp32").description, "edited");
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  ASSERT_FALSE(h100.aliases.empty());
  edited.name = "team.fp32";
  edited.aliases = {h100.aliases[0]};
  const std::string alias = error_of([&] { core::register_platform(edited); });
  EXPECT_EQ(alias.rfind("profile.aliases[0]: '" + h100.aliases[0] + "' is the built-in platform nvidia.h100", 0), 0u)
      << alias;
  edited.aliases.clear();
  EXPECT_EQ(error_of([&] { core::register_platform(edited); }), "");
  EXPECT_EQ(error_of([&] { core::register_platform(edited); }), "");  // a loaded profile may be reloaded
}

// A profile named like a variant ("x[a=b]") was registered and then never found: a use of that
// string reads the platform x with option a=b.
TEST(Platform, ProfileNamesWithOptionBracketsAreRefused) {
  core::Platform mine = core::platform_by_name("cuda_core.fp32");
  mine.aliases.clear();
  for (const std::string name : {"trainium.trn2[pe_order=pairwise]", "mine]", "[x"}) {
    mine.name = name;
    const std::string e = error_of([&] { core::register_platform(mine); });
    EXPECT_EQ(e.rfind("profile.name: '" + name + "' holds [ or ]", 0), 0u) << e;
  }
  mine.name = "fitted.n=16,F=25";  // = and , outside brackets name nothing: numeq.fit_platform writes such names
  EXPECT_EQ(error_of([&] { core::register_platform(mine); }), "");
  mine.name = "plain.name";
  mine.aliases = {"alias[x=1]"};
  EXPECT_EQ(error_of([&] { core::register_platform(mine); }).rfind("profile.aliases[0]: 'alias[x=1]'", 0), 0u);
}

TEST(Platform, ProfilesWithUnknownKeysAreRefused) {
  const std::string e = error_of([] {
    core::platform_from_json(R"({"name": "mine", "plans": [], "evidnce": []})");
  });
  EXPECT_EQ(e.rfind("profile.evidnce: unknown key 'evidnce'", 0), 0u) << e;
  const std::string plan = error_of([] {
    core::platform_from_json(R"({"name": "mine", "plans": [{"op": "sum", "in_fmt": "fp32", "out": "fp32", "plan":
        {"reduction": {"kind": "sequential", "arithmetic": {"accumulate": {"format": "fp32"}}},
         "output": {"format": "fp32", "overflw": "saturate"}}}]})");
  });
  EXPECT_EQ(plan.rfind("profile.plans[0].plan.output.overflw: unknown key", 0), 0u) << plan;
}

}  // namespace

namespace {

// core::assumption_candidates: the combinations a fit tries among a platform's assumptions.
TEST(AssumptionCandidates, CombinationsLabelledAndRefusalsLeftOut) {
  namespace core = numeq::core;
  const auto pe = core::assumption_candidates("trainium.trn2", core::Operation::matmul, "bf16", "fp32",
                                              std::vector<std::string>{"pe_order"});
  const core::Platform trn2 = core::platform_by_name("trainium.trn2");
  const auto assumption = std::find_if(trn2.assumptions.begin(), trn2.assumptions.end(),
                                       [](const core::Assumption& a) { return a.name == "pe_order"; });
  ASSERT_NE(assumption, trn2.assumptions.end());
  ASSERT_EQ(pe.size(), assumption->alternatives.size());
  for (std::size_t i = 0; i < pe.size(); ++i) {
    EXPECT_EQ(pe[i].label, "pe_order=" + assumption->alternatives[i]);
    EXPECT_EQ(pe[i].platform, "trainium.trn2[" + pe[i].label + "]");
  }
  // Without names: only assumptions that change the matmul plan, every combination a distinct
  // platform string that builds.
  const auto all = core::assumption_candidates("trainium.trn2", core::Operation::matmul, "bf16", "fp32", std::nullopt);
  ASSERT_GT(all.size(), pe.size());
  for (const auto& c : all) EXPECT_NO_THROW(core::plan_for(core::platform_by_name(c.platform), core::Operation::matmul, "bf16", "fp32")) << c.platform;
  EXPECT_THROW(core::assumption_candidates("nvidia.h100", core::Operation::matmul, "bf16", "fp32", std::nullopt),
               numeq::error);
  EXPECT_THROW(core::assumption_candidates("trainium.trn2", core::Operation::matmul, "bf16", "fp32",
                                           std::vector<std::string>{"pe_ordre"}),
               numeq::error);
}

}  // namespace
