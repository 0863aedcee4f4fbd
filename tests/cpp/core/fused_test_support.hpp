#pragma once
// The GPU-measured tensor-core vectors (tests/data/tensor-core-vectors, from
// north-numerical-computing/MATLAB-tensor-core, BSD-2: see its LICENCE and README.md) read and
// counted against a model of numeq::core::fused_step: shared by test_fused_vectors.cpp (the vectors
// and what they settle) and test_fused_fast.cpp (the general path alone still reproduces them).
//
// The vectors are found under NUMEQ_TEST_DATA_DIR (a compile definition: the tests/data folder),
// or next to this source when the definition is absent.

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "numeq/core/fused.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/format.hpp"

namespace numeq_test::fused {

namespace fs = std::filesystem;
namespace nv = numeq::core::nvidia;
namespace fmts = numeq::formats;
using numeq::Cast;
using numeq::Rounding;
using numeq::core::FusedStep;
using numeq::core::fused_chain;

inline fs::path vector_dir() {
#ifdef NUMEQ_TEST_DATA_DIR
  return fs::path(NUMEQ_TEST_DATA_DIR) / "tensor-core-vectors";
#else
  return fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" /
         "tensor-core-vectors";
#endif
}

// ---- reading the vectors -----------------------------------------------------------------------

inline double fp32_value(std::uint32_t bits) { return static_cast<double>(std::bit_cast<float>(bits)); }

inline std::uint32_t fp32_bits(double x) { return std::bit_cast<std::uint32_t>(static_cast<float>(x)); }

// Rows of whitespace-separated hexadecimal fp32 patterns.
inline std::vector<std::vector<double>> read_hex_rows(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::vector<std::vector<double>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::vector<double> row;
    std::string word;
    while (s >> word) row.push_back(fp32_value(static_cast<std::uint32_t>(std::stoul(word, nullptr, 16))));
    if (!row.empty()) rows.push_back(std::move(row));
  }
  return rows;
}

// One 32-character binary fp32 pattern per row.
inline std::vector<std::uint32_t> read_binary_rows(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::vector<std::uint32_t> rows;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    if (line.size() != 32) throw std::runtime_error("not a 32-bit pattern in " + p.string() + ": " + line);
    rows.push_back(static_cast<std::uint32_t>(std::stoul(line, nullptr, 2)));
  }
  return rows;
}

struct VectorSet {
  std::string gpu, fmt;
  std::vector<std::vector<double>> a, b;
  std::vector<double> c;                               // fp32 values
  std::map<std::string, std::vector<std::uint32_t>> d;  // "fp32" / "fp16" -> patterns
};

inline const VectorSet& load(const std::string& gpu, const std::string& fmt) {
  static std::map<std::string, VectorSet> cache;
  const std::string key = gpu + "/" + fmt;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const fs::path dir = vector_dir() / gpu / fmt;
  VectorSet s;
  s.gpu = gpu;
  s.fmt = fmt;
  s.a = read_hex_rows(dir / ("a_" + gpu + "_" + fmt + ".txt"));
  s.b = read_hex_rows(dir / ("b_" + gpu + "_" + fmt + ".txt"));
  for (std::uint32_t bits : read_binary_rows(dir / ("c_" + gpu + "_fp32.txt"))) s.c.push_back(fp32_value(bits));
  for (const char* out : {"fp32", "fp16"}) {
    const fs::path p = dir / ("d_" + gpu + "_" + out + ".txt");
    if (fs::exists(p)) s.d[out] = read_binary_rows(p);
  }
  return cache.emplace(key, std::move(s)).first->second;
}

// c as the capture programs fed an fp16 accumulator: __float2half, nearest-even
// (MATLAB-tensor-core model_validation/CUDA/*.cu; Validate_TC_models.m comment).
inline double to_fp16(double x) { return numeq::round_to_format(x, Cast{fmts::fp16, Rounding::nearest_even}); }

using Model = std::function<double(std::span<const double>, std::span<const double>, double)>;

// Model applied to a whole row: a chain of steps of `step.n` along the row's K products.
inline Model chain(const FusedStep& step) {
  return [step](std::span<const double> a, std::span<const double> b, double c) {
    return fused_chain(a, b, c, a.size(), step);
  };
}

struct Count {
  int reproduced = 0;
  int total = 0;
  std::vector<int> first_misses;
};

// c_mode: how the row's c enters: as stored (fp32), through __float2half, or not at all.
enum class CInput { fp32, fp16, zero };

inline Count count(const VectorSet& s, const std::string& out, CInput c_mode, const Model& model) {
  Count r;
  const auto& d = s.d.at(out);
  for (std::size_t i = 0; i < d.size(); ++i) {
    double c = s.c[i];
    if (c_mode == CInput::fp16) c = to_fp16(c);
    if (c_mode == CInput::zero) c = 0.0;
    const double got = model(s.a[i], s.b[i], c);
    ++r.total;
    if (fp32_bits(got) == d[i]) {
      ++r.reproduced;
    } else if (r.first_misses.size() < 5) {
      r.first_misses.push_back(static_cast<int>(i));
    }
  }
  return r;
}

// Every set with its model: GPU, input format, output, products per row, how c enters, step.
struct Expected {
  std::string gpu, fmt, out;
  std::size_t K;
  CInput c_mode;
  FusedStep step;
};

inline const std::vector<Expected>& expected_sets() {
  static const std::vector<Expected> sets = {
      {"V100", "fp16", "fp32", 4, CInput::fp32, nv::v100_fp16},
      {"V100", "fp16", "fp16", 4, CInput::fp16, nv::v100_fp16_f16},
      {"A100", "fp16", "fp32", 8, CInput::fp32, nv::a100_fp16},
      {"A100", "fp16", "fp16", 8, CInput::fp16, nv::a100_fp16_f16},
      {"A100", "bf16", "fp32", 8, CInput::fp32, nv::a100_bf16},
      {"A100", "tf32", "fp32", 4, CInput::fp32, nv::a100_tf32},
      {"H100", "fp16", "fp32", 16, CInput::fp32, nv::h100_fp16},
      {"H100", "fp16", "fp16", 16, CInput::fp16, nv::h100_fp16_f16},
      {"H100", "bf16", "fp32", 16, CInput::fp32, nv::h100_bf16},
      {"H100", "tf32", "fp32", 4, CInput::fp32, nv::h100_tf32},
      // wgmma with a zeroed accumulator: the stored c never entered these d (test below).
      {"H100", "E4M3", "fp32", 32, CInput::zero, nv::h100_e4m3},
      {"H100", "E5M2", "fp32", 32, CInput::zero, nv::h100_e5m2},
      {"B200", "fp16", "fp32", 16, CInput::fp32, nv::b200_fp16},
      {"B200", "fp16", "fp16", 16, CInput::fp16, nv::b200_fp16_f16},
      {"B200", "bf16", "fp32", 16, CInput::fp32, nv::b200_bf16},
      {"B200", "tf32", "fp32", 4, CInput::fp32, nv::b200_tf32},
  };
  return sets;
}

inline std::string name(const Expected& e) { return e.gpu + " " + e.fmt + " -> " + e.out; }

}  // namespace numeq_test::fused
