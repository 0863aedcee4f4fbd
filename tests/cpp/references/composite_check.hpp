#pragma once
// Shared by test_composite.cpp and test_composite_attention.cpp: the Casts swept, the element-by-
// element comparison of a composite result with the MPFR oracle (composite_oracle.hpp), the
// description and run of an attention case, and the report of the comparisons made.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/composite.hpp"
#include "oracle/mpfr_oracle.hpp"
#include "composite_oracle.hpp"

// Unnamed, as composite_oracle.hpp: each test executable includes this once.
namespace {

// ---------------------------------------------------------------------------------------------
// Casts and comparison
// ---------------------------------------------------------------------------------------------
Cast make(const Format& f, Rounding r = Rounding::nearest_even, Overflow o = Overflow::ieee,
          Subnormals s = Subnormals::keep, int random_bits = 32, std::uint64_t seed = 2024) {
  return Cast{f, r, o, s, seed, random_bits};  // Cast's fields in their declared order
}

const Rounding kDeterministic[] = {Rounding::nearest_even, Rounding::nearest_away, Rounding::toward_zero,
                                   Rounding::upward,       Rounding::downward,     Rounding::odd};

// Every deterministic mode (ieee/keep), saturation and FTZ for some, and stochastic rounding with
// draws of 1, 32 and 64 bits (element i uses draw i of the seed's stream, composite.hpp).
std::vector<Cast> sweep_casts() {
  std::vector<Cast> out;
  for (const Format* f : {&formats::fp32, &formats::bf16, &formats::fp16, &formats::e4m3fn}) {
    for (Rounding r : kDeterministic) out.push_back(make(*f, r));
    for (Rounding r : {Rounding::nearest_even, Rounding::upward, Rounding::downward})
      out.push_back(make(*f, r, Overflow::saturate));
    for (Rounding r : {Rounding::nearest_even, Rounding::toward_zero, Rounding::upward})
      out.push_back(make(*f, r, Overflow::ieee, Subnormals::flush_outputs));
    for (int bits : {1, 32, 64}) out.push_back(make(*f, Rounding::stochastic, Overflow::ieee, Subnormals::keep, bits));
  }
  out.push_back(make(formats::fp64));
  out.push_back(make(formats::fp64, Rounding::downward));
  return out;
}

std::string cast_name(const Cast& c) {
  return std::string(c.format.name) + "/" + std::string(numeq::to_string(c.rounding)) + "/" +
         std::string(numeq::to_string(c.overflow)) + "/" + std::string(numeq::to_string(c.subnormals)) +
         (c.rounding == Rounding::stochastic ? "/R" + std::to_string(c.random_bits) : "");
}

std::string list(const double* p, std::size_t n) {
  std::ostringstream s;
  s.precision(17);
  s << "[";
  for (std::size_t i = 0; i < n; ++i) s << (i ? ", " : "") << p[i];
  s << "]";
  return s.str();
}

using Describe = std::function<std::string(std::size_t)>;

// run() under `cast` against the oracle, element by element; returns comparisons made.
std::size_t check(const std::string& what, const std::vector<Big>& oracle, const Cast& cast,
                  const std::function<xt::xarray<double>(const Cast&)>& run, const Describe& describe) {
  xt::xarray<double> got;
  try {
    got = run(cast);
  } catch (const std::exception& e) {
    // Name the inputs of the element the message points at, when it does.
    std::string inputs;
    const std::string message = e.what();
    const std::size_t at = message.find("element ");
    if (at != std::string::npos) {
      const std::size_t k = static_cast<std::size_t>(std::strtoull(message.c_str() + at + 8, nullptr, 10));
      if (k < oracle.size()) inputs = " [element " + std::to_string(k) + ": " + describe(k) + "]";
    }
    ADD_FAILURE() << what << " " << cast_name(cast) << ": threw " << message << inputs;
    return 0;
  }
  if (got.size() != oracle.size()) {
    ADD_FAILURE() << what << " " << cast_name(cast) << ": " << got.size() << " elements, want " << oracle.size();
    return 0;
  }
  numeq_oracle::RoundOracle o(cast.format);
  int reports = 0;
  for (std::size_t k = 0; k < oracle.size(); ++k) {
    const numeq_oracle::Expected e = o.cast_value(oracle[k].v, cast, k);
    EXPECT_FALSE(e.throws);
    if (!same_value(got.data()[k], e.value) && ++reports <= kMaxReports)
      ADD_FAILURE() << what << " " << cast_name(cast) << " element " << k << " " << describe(k) << ": got "
                    << numeq_oracle::describe(got.data()[k]) << " want " << numeq_oracle::describe(e.value);
  }
  EXPECT_EQ(reports, 0) << what << " " << cast_name(cast) << ": " << reports << " mismatches";
  g_comparisons.fetch_add(oracle.size());
  return oracle.size();
}

std::size_t check_all(const std::string& what, const std::vector<Big>& oracle,
                      const std::function<xt::xarray<double>(const Cast&)>& run, const Describe& describe) {
  EXPECT_EQ(g_oracle_inexact.load(), 0) << "oracle: a step meant to be exact was not";
  std::size_t n = 0;
  for (const Cast& c : sweep_casts()) n += check(what, oracle, c, run, describe);
  return n;
}

std::string describe_attention(const Attention& a, std::size_t k) {
  const std::size_t c = k % a.dv, i = (k / a.dv) % a.lq, b = k / (a.dv * a.lq);
  std::ostringstream s;
  s << "batch " << b << " query " << i << " column " << c << " d " << a.d << " Lk " << a.lk << " q "
    << list(a.q.data() + (b * a.lq + i) * a.d, a.d) << " k ";
  for (std::size_t j = 0; j < a.lk; ++j) s << list(a.k.data() + (b * a.lk + j) * a.d, a.d);
  s << " v[:, c] [";
  for (std::size_t j = 0; j < a.lk; ++j) s << (j ? ", " : "") << a.v.data()[(b * a.lk + j) * a.dv + c];
  s << "]";
  if (a.mask) s << " mask " << list(a.mask->data() + (b * a.lq + i) * a.lk, a.lk);
  if (a.scale) s << " scale " << *a.scale;
  if (a.causal) s << " causal";
  return s.str();
}

xt::xarray<double> run_attention(const Attention& a, const Cast& c) {
  reference::AttentionParameters p;
  p.scale = a.scale;
  p.causal = a.causal;
  p.mask = a.mask ? &*a.mask : nullptr;
  return reference::attention(a.q, a.k, a.v, p, c);
}

// Prints the number of comparisons with the oracle the executable `name` made.
class CountReport : public ::testing::Environment {
 public:
  explicit CountReport(const char* name) : name_(name) {}
  void TearDown() override { std::printf("%s: %zu comparisons with the MPFR oracle\n", name_, g_comparisons.load()); }

 private:
  const char* name_;
};

}  // namespace
