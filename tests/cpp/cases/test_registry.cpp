// numeq/cases/registry.hpp: every row builds from the inputs its catalogue setup draws; an op built
// by name is the op its factory builds (same exact values, same emulation, bit for bit); the
// exact values of the matmul and sum rows agree with MPFR sums of exact products (the oracle,
// independent of numeq's long accumulator); bad arguments are refused naming the parameter and
// the valid choices.

#include <gtest/gtest.h>

#include <mpfr.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "numeq/cases/generators.hpp"
#include "numeq/cases/registry.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/formats/error.hpp"
#include "op_test_support.hpp"

namespace {

namespace cases = numeq::cases;
namespace core = numeq::core;
using Array = xt::xarray<double>;

// The arguments the catalogue would build `s` from: its drawn inputs at small dimensions (K = 32),
// its catalogue params, values of its first input format.
cases::OpArguments catalogue_arguments(const cases::OpSpec& s, std::uint64_t seed) {
  cases::OpArguments a;
  const std::string fmt = s.catalogue.formats.empty() ? "fp32" : s.catalogue.formats.front();
  const std::size_t k = 64;  // a whole flash key block
  std::vector<std::size_t> dims(s.catalogue.shape.size(), 3);
  if (dims.empty()) dims = {3};
  if (s.name == "attention") dims = {1, 4, 8};
  std::uint64_t i = 0;
  for (const cases::InputSpec& in : s.inputs) {
    if (in.catalogue_shape.empty()) continue;
    std::vector<std::size_t> shape;
    for (int d : in.catalogue_shape) shape.push_back(d < 0 ? k : dims[static_cast<std::size_t>(d)]);
    Array x = numeq_test::generate(cases::Distribution::normal, seed + i++,
                                   numeq::format_by_name(in.role == cases::InputRole::codes ? "fp32" : fmt), shape);
    if (in.role == cases::InputRole::codes) x = xt::clip(xt::round(x * 16.0), -128.0, 127.0);
    a.inputs.emplace(in.name, std::move(x));
  }
  if (s.catalogue.params)
    for (auto& [name, value] : s.catalogue.params(dims, k)) {
      if (const double* v = std::get_if<double>(&value); v && (name == "scale_a" || name == "scale_b")) {
        a.inputs.emplace(name, Array(*v));
      } else {
        a.params.emplace(name, value);
      }
    }
  a.in_fmt = fmt;
  const std::string out = s.default_out.empty() ? fmt : s.default_out;
  if (s.format_keywords) a.out = numeq::Cast{numeq::format_by_name(out)};
  return a;
}

TEST(Registry, NamesAreUniqueAndEveryRowIsComplete) {
  std::set<std::string> names;
  for (const cases::OpSpec& s : cases::op_registry()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_FALSE(s.doc.empty()) << s.name;
    EXPECT_TRUE(s.build) << s.name;
    EXPECT_FALSE(s.inputs.empty()) << s.name;
    for (const cases::ParamSpec& p : s.params) {
      if (p.type == cases::ParamType::text && !p.choices.empty()) {
        EXPECT_NE(std::find(p.choices.begin(), p.choices.end(), std::get<std::string>(p.default_value)),
                  p.choices.end())
            << s.name << "." << p.name << ": its default is one of its choices";
      }
    }
    // Every registered op has a catalogue setup: a tolerance table and numeq.tolerance for each.
    EXPECT_FALSE(s.catalogue.formats.empty()) << s.name;
    EXPECT_EQ(s.catalogue.shape.size(), s.catalogue.table_shape.size()) << s.name;
    EXPECT_FALSE(s.catalogue.k_meaning.empty()) << s.name;
  }
  for (const char* expected : {"matmul", "sum", "softmax", "layernorm", "rmsnorm", "attention", "exp"})
    EXPECT_TRUE(names.count(expected)) << expected;
}

// Each catalogue row builds on the inputs its catalogue setup draws, and emulates on H100.
TEST(Registry, EveryCatalogueRowBuildsAndEmulates) {
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  for (const cases::OpSpec& s : cases::op_registry()) {
    if (s.catalogue.formats.empty()) {
      continue;
    }
    SCOPED_TRACE(s.name);
    const cases::Op op = cases::build_op(s.name, catalogue_arguments(s, 7));
    EXPECT_EQ(op.name.empty(), false);
    const cases::Emulation e = op.emulate(h100, {});
    EXPECT_EQ(e.values.shape(), op.reference_values().shape());
  }
}

// An op built by name is the factory's op: same reference, same H100 emulation, bit for bit.
TEST(Registry, BuildByNameIsTheFactory) {
  const core::Platform h100 = core::platform_by_name("nvidia.h100");
  const cases::OpSpec& s = cases::op_spec("softmax");
  cases::OpArguments a = catalogue_arguments(s, 3);
  const Array x = a.inputs.at("x");
  a.params.clear();  // every parameter from its default
  const cases::Op by_name = cases::build_op("softmax", a);
  const cases::Op direct = cases::softmax(x, -1, a.in_fmt, a.out, cases::SoftmaxOptions{});
  EXPECT_EQ(by_name.signature, direct.signature);
  const Array e1 = by_name.emulate(h100, {}).values, e2 = direct.emulate(h100, {}).values;
  ASSERT_EQ(e1.size(), e2.size());
  for (std::size_t i = 0; i < e1.size(); ++i) EXPECT_EQ(e1.data()[i], e2.data()[i]) << i;
}

// The exact sums of the matmul, sum and sum_of_squares rows against MPFR: sum of exact products at 2000 bits,
// rounded once to binary64 (2000 bits hold these sums exactly: 64 products of 24-bit values).
double mpfr_dot(const double* a, std::size_t stride_a, const double* b, std::size_t stride_b, std::size_t n) {
  mpfr_t acc, p;
  mpfr_inits2(2000, acc, p, static_cast<mpfr_ptr>(nullptr));
  mpfr_set_zero(acc, 1);
  for (std::size_t k = 0; k < n; ++k) {
    mpfr_set_d(p, a[k * stride_a], MPFR_RNDN);
    mpfr_mul_d(p, p, b == nullptr ? 1.0 : b[k * stride_b], MPFR_RNDN);
    mpfr_add(acc, acc, p, MPFR_RNDN);
  }
  const double out = mpfr_get_d(acc, MPFR_RNDN);
  mpfr_clears(acc, p, static_cast<mpfr_ptr>(nullptr));
  return out;
}

TEST(Registry, MatmulSumAndSumOfSquaresRowsAreExactAgainstMpfr) {
  {
    const cases::OpSpec& s = cases::op_spec("matmul");
    const cases::OpArguments a = catalogue_arguments(s, 11);
    const cases::Op op = cases::build_op("matmul", a);
    const Array &x = a.inputs.at("a"), &y = a.inputs.at("b");
    const std::size_t m = x.shape()[0], k = x.shape()[1], n = y.shape()[1];
    const Array& hi = op.exact_values().hi;
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j)
        EXPECT_EQ(hi(i, j), mpfr_dot(x.data() + i * k, 1, y.data() + j, n, k)) << i << "," << j;
  }
  {
    const cases::OpArguments a = catalogue_arguments(cases::op_spec("sum"), 12);
    const cases::Op op = cases::build_op("sum", a);
    const Array& x = a.inputs.at("x");
    const std::size_t r = x.shape()[0], k = x.shape()[1];
    for (std::size_t i = 0; i < r; ++i)
      EXPECT_EQ(op.exact_values().hi(i), mpfr_dot(x.data() + i * k, 1, nullptr, 0, k)) << i;
  }
  {
    // fp32 inputs: their squares round in the kernel, never in the exact result.
    cases::OpArguments a = catalogue_arguments(cases::op_spec("sum_of_squares"), 13);
    a.in_fmt = "fp32";
    const cases::Op op = cases::build_op("sum_of_squares", a);
    const Array& x = a.inputs.at("x");
    const std::size_t r = x.shape()[0], k = x.shape()[1];
    for (std::size_t i = 0; i < r; ++i)
      EXPECT_EQ(op.exact_values().hi(i), mpfr_dot(x.data() + i * k, 1, x.data() + i * k, 1, k)) << i;
  }
}

// The catalogue's draw: deterministic per (generator, seed), input i from seed + i (a redraw of
// one input alone gives the same values), codes integral within int8, and catalogue_op the op
// built_op makes of that draw.
TEST(Registry, CatalogueDrawsAreSeededPerInput) {
  const auto draw = cases::catalogue_inputs("matmul", "bf16", {3, 5}, 64, cases::Distribution::normal, 40);
  EXPECT_EQ(draw.at("a"), cases::generate({cases::Distribution::normal, 40, 1.0}, numeq::formats::bf16, {3, 64}));
  EXPECT_EQ(draw.at("b"), cases::generate({cases::Distribution::normal, 41, 1.0}, numeq::formats::bf16, {64, 5}));
  const auto codes = cases::catalogue_inputs("int8_matmul", "int8", {3, 5}, 64, cases::Distribution::lognormal, 1);
  for (const auto& [name, x] : codes)
    for (double v : x) EXPECT_TRUE(v == std::nearbyint(v) && v >= -128 && v <= 127) << name << " " << v;
  const cases::Op op = cases::catalogue_op("matmul", "bf16", "fp32", {3, 5}, 64, cases::Distribution::normal, 40);
  cases::OpArguments a;
  a.inputs = draw;
  a.in_fmt = "bf16";
  a.out = numeq::Cast{numeq::formats::fp32};
  EXPECT_EQ(op.reference_values(), cases::build_op("matmul", a).reference_values());
  EXPECT_THROW(cases::catalogue_inputs("meen", "fp32", {3}, 8, cases::Distribution::normal, 0), numeq::error);
  // subnormal_rich values times 16 round to code 0: no meaningful integer GEMM, refused by name.
  for (double c : cases::generate({cases::Distribution::subnormal_rich, 1, 16.0}, numeq::formats::fp32, {64}))
    EXPECT_EQ(std::nearbyint(c), 0.0);
  try {
    cases::catalogue_inputs("int8_matmul", "int8", {3, 5}, 64, cases::Distribution::subnormal_rich, 1);
    ADD_FAILURE() << "subnormal_rich int8 codes accepted";
  } catch (const numeq::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("generator: subnormal_rich", 0), 0u) << e.what();
  }
  EXPECT_THROW(cases::catalogue_inputs("matmul", "bf16", {3}, 8, cases::Distribution::normal, 0), numeq::error);
}

// docs/cpp.md's example: an online softmax by name, its parameters given and defaulted.
TEST(Registry, TheDocsExampleBuildsAnOnlineSoftmax) {
  const Array x = numeq_test::generate(cases::Distribution::normal, 5, numeq::formats::bf16, {4, 256});
  cases::OpArguments args;
  args.inputs.emplace("x", x);
  args.params.emplace("variant", std::string("online"));
  args.params.emplace("block", std::int64_t{64});
  args.in_fmt = "bf16";
  args.out = numeq::Cast{numeq::formats::bf16};
  const cases::Op op = cases::build_op("softmax", args);
  cases::SoftmaxOptions o;
  o.variant = cases::SoftmaxVariant::online;
  o.block = 64;
  const cases::Op direct = cases::softmax(x, -1, "bf16", numeq::Cast{numeq::formats::bf16}, o);
  EXPECT_EQ(op.signature, direct.signature);
  EXPECT_NE(op.signature.find("online"), std::string::npos) << op.signature;
}

// What build_op refuses, and that each message names the parameter and the valid choices.
void expect_error(const std::string& op, cases::OpArguments a, const std::vector<std::string>& words) {
  try {
    cases::build_op(op, std::move(a));
    ADD_FAILURE() << op << ": no error";
  } catch (const numeq::error& e) {
    for (const std::string& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

TEST(Registry, BadArgumentsNameTheParameterAndTheChoices) {
  const cases::OpArguments good = catalogue_arguments(cases::op_spec("softmax"), 1);
  expect_error("softmaks", good, {"op: unknown operation 'softmaks'", "softmax", "matmul"});
  {
    cases::OpArguments a = good;
    a.inputs.emplace("y", Array{1.0});
    expect_error("softmax", a, {"y:", "its inputs: x"});
  }
  {
    cases::OpArguments a = good;
    a.inputs.clear();
    expect_error("softmax", a, {"x:", "needs this input"});
  }
  {
    cases::OpArguments a = good;
    a.params["varient"] = std::string("online");
    expect_error("softmax", a, {"varient:", "its parameters: axis, variant"});
  }
  {
    cases::OpArguments a = good;
    a.params["variant"] = std::string("fast");
    expect_error("softmax", a, {"variant: unknown variant 'fast'", "plain, max_subtracted, online"});
  }
  {
    cases::OpArguments a = good;
    a.params["axis"] = 1.5;
    expect_error("softmax", a, {"axis: expected integer"});
  }
  {
    cases::OpArguments a = catalogue_arguments(cases::op_spec("attention"), 1);
    a.params["block_rows"] = std::int64_t{0};
    expect_error("attention", a, {"block_rows:"});
  }
}

}  // namespace
