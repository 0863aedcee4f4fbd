#pragma once
// Platforms (profiles): a named bundle of plans, one per (operation, input format, output
// format), with the evidence for every parameter: measured, documented or assumed, and where
// from. Built-in platforms are constructed here and can be written out as JSON; users load their
// own (or edited built-ins) from JSON with platform_from_json and register_platform. A malformed
// profile is refused with an error naming the field by its path.

#include <cstdint>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "numeq/core/plan.hpp"
#include "numeq/formats/names.hpp"

namespace numeq::core {

enum class EvidenceKind : std::uint8_t { measured, documented, assumed };
using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)

// What supports one parameter of a platform: `parameter` names it (e.g. "matmul bf16->fp32:
// fused.fraction_bits"), `source` cites the paper, document or measurement.
struct Evidence {
  std::string parameter;
  EvidenceKind kind = EvidenceKind::assumed;
  std::string source;
  bool operator==(const Evidence&) const = default;
};

enum class Operation : std::uint8_t { sum, dot, matmul };
Operation operation_by_name(std::string_view name, std::string_view parameter = "op");

struct PlanEntry {
  Operation op = Operation::matmul;
  std::string in_fmt;   // input format name (both operands)
  std::string out_fmt;  // output format name
  Plan plan;
  bool operator==(const PlanEntry&) const = default;
};

// A parameter nobody has published: its value in force, every alternative numeq can evaluate
// (the default first), what it controls and why these alternatives. A platform with assumptions
// is built from their values; "name[assumption=value,...]" selects other values wherever a
// platform name is accepted (platform_by_name), and reports print every assumption in force.
struct Assumption {
  std::string name;                       // e.g. "pe_order"
  std::string value;                      // the alternative in force
  std::vector<std::string> alternatives;  // every valid value, the default first
  std::string meaning;                    // what it controls
  std::string source;                     // why these alternatives (claims, documents, reasoning)
  bool operator==(const Assumption&) const = default;
};

// How a platform computes one elementwise function (exp, tanh, gelu, rsqrt, ...; the names of
// numeq::reference::Function): in the format `compute`, either correctly rounded there, or within
// an error budget of `ulps` units in the last place of `compute` of the correctly rounded result
// (the CUDA C++ Programming Guide's definition of "maximum ulp error": the distance between the
// correctly rounded result and the one returned, in ulps). A device following an ulp_budget model
// may return any value of `compute` that close; the operation catalogue's bounds cover all of them.
// The result then passes through the operation's output cast. A function a platform does not list
// is modelled as correctly rounded in fp32 (function_model).
enum class FunctionModelKind : std::uint8_t { correctly_rounded, ulp_budget };

struct FunctionModel {
  std::string function;          // e.g. "exp"; one of function_model_names()
  FunctionModelKind kind = FunctionModelKind::correctly_rounded;
  double ulps = 0;               // ulp_budget: the budget (>= 0, finite); 0 for correctly_rounded
  std::string compute = "fp32";  // the format the function is computed in
  EvidenceKind evidence = EvidenceKind::assumed;
  std::string source;            // where the budget comes from
  bool operator==(const FunctionModel&) const = default;
};

// Every function a model may name, as numeq::reference spells them (core does not include
// references; the catalogue's tests check that the two lists agree).
std::span<const std::string_view> function_model_names();

struct Platform {
  std::string name;                  // e.g. "nvidia.h100"; a variant: "trainium.trn1[products=bf16]"
  std::vector<std::string> aliases;  // e.g. "nvidia.h200"
  std::string description;
  std::vector<PlanEntry> plans;
  std::vector<Evidence> evidence;
  std::vector<Assumption> assumptions;
  std::vector<FunctionModel> functions;  // at most one per function name
  bool operator==(const Platform&) const = default;
};

// The platform's model of `function` (a name of function_model_names(); numeq::error naming
// `parameter` otherwise), or, when it lists none, correctly rounded in fp32 (evidence: assumed).
FunctionModel function_model(const Platform& platform, std::string_view function,
                             std::string_view parameter = "function");

// Built-in and registered platforms, in a stable order.
std::vector<std::string> platform_names();
// By name or alias; numeq::error naming `parameter` with the valid names otherwise. A built-in
// platform with assumptions also takes "name[assumption=value,...]" (spaces allowed), which
// rebuilds it with those values; an unknown assumption or value is an error listing the valid ones.
// Every platform also takes the plan options "split_k=N" (2..65536) and "split_mode=serial|parallel"
// (default serial) in its [...]: its matmul and dot plans cut K into N parts (with_split_k below,
// parallel partials in fp32), e.g. "nvidia.h100[split_k=4]", "trainium.trn2[pe_order=pairwise,split_k=2]".
Platform platform_by_name(std::string_view name, std::string_view parameter = "platform");
// The same platform without a copy: resolved once per name and kept (until the next
// register_platform), shared by every caller.
std::shared_ptr<const Platform> shared_platform(std::string_view name, std::string_view parameter = "platform");
// How many times the registry has changed (register_platform): a name means the same platform for
// as long as this stays the same (what caches of results by platform name key on).
std::uint64_t platform_generation();
// Adds (or replaces, by name) a platform for this process; validates it first. A built-in
// platform's name or alias is refused (numeq::error naming the built-in): load edits under a new name.
void register_platform(const Platform& platform);

// The plan for an operation; numeq::error naming the argument and listing what the platform has.
Plan plan_for(const Platform& platform, Operation op, std::string_view in_fmt, std::string_view out_fmt);

// plan_for, where the platform has no plan for in_fmt but has one for its twin and every value of
// `operands` is a value of both: e4m3 (IEEE-like, Trainium's float8_e4m3) and e4m3fn (OCP) share
// their exponent bias, their three fraction bits and so every finite value up to 240, e4m3's largest
// (ml_dtypes' tables; FACTS.md s1). A port of an e4m3fn CUDA kernel to trn2 quantises to e4m3: on
// such values the two are the same numbers, and the twin's plan is the platform's computation.
Plan plan_for_values(const Platform& platform, Operation op, std::string_view in_fmt, std::string_view out_fmt,
                     std::span<const double* const> data, std::span<const std::size_t> sizes);

// Split-K as a plan option: K cut into `parts`. serial: each part continues from the previous
// partial, which passes through the plan's output cast (CUTLASS serial split-K); parallel: parts
// reduced independently, each rounded to `partial`, then summed in order in `partial` arithmetic
// (CUTLASS parallel split-K's reduction kernel). FACTS.md s2 [code].
Plan with_split_k(const Plan& plan, std::size_t parts, SplitMode mode, const Cast& partial = Cast{});

// The candidates a fit tries among a platform's assumptions (numeq.assumption_candidates): every
// combination of the alternatives of the assumptions `names` of `platform` (nullopt: those of which
// one alternative alone changes its plan for (op, in_fmt -> out_fmt)), the first name's
// alternatives slowest, each as its label "name=value,..." ("default" with no names) and its
// platform string "base[name=value,...]". Combinations the platform refuses (an error building
// the variant or its plan) are left out. numeq::error naming `platform` when it has no
// assumptions, or `names` for a name it does not have.
struct AssumptionCandidate {
  std::string label;
  std::string platform;
};
std::vector<AssumptionCandidate> assumption_candidates(std::string_view platform, Operation op,
                                                       std::string_view in_fmt, std::string_view out_fmt,
                                                       const std::optional<std::vector<std::string>>& names);

std::string to_json(const Platform& platform, int indent = 2);
Platform platform_from_json(std::string_view text, std::string_view parameter = "profile");
// Every evidence entry, one line each, for reports: "measured  <parameter>  <source>"; then one
// line per function model: "documented  function exp: within 2 ulps of correctly rounded fp32
// <source>"; then every assumption in force: "assumption  <name> = <value>  (alternatives: ...)  <meaning>".
std::string evidence_report(const Platform& platform);

}  // namespace numeq::core
