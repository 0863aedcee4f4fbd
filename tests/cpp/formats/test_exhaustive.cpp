// Exhaustive check (CTest label `exhaustive`, opt-in): every one of the 2^32 fp32 bit patterns,
// cast into every floating format, under every deterministic rounding mode and stochastic
// rounding (seed 1), with Overflow::ieee and Subnormals::keep, plus Overflow::saturate for the
// 8-bit formats, against an independent comparison-based oracle.
//
// The oracle: MPFR (via decode_oracle) lists the target's non-negative values in increasing order,
// with their patterns, once per format, plus the first value past the maximum at an unbounded
// exponent (reaching it means overflow). The fp32 magnitudes are then swept in increasing order
// with a pointer into that list; each input's place (exactly on a value, below / at / above the
// midpoint of its two neighbours, past the list) and the mode's rule decide the expected pattern.
// Nothing of numeq's rounding kernel is used; only numeq's random stream (the spec of the draw).
//
// Environment:
//   NUMEQ_EXHAUSTIVE_STRIDE=k   test every k-th fp32 magnitude only (default 1: all of them);
//                               the run prints the time a full run would take.
//   NUMEQ_EXHAUSTIVE_THREADS=n  worker threads (default 2).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "numeq/formats/array.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/rounding.hpp"
#include "oracle/mpfr_oracle.hpp"
#include "oracle/test_support.hpp"

namespace {

using numeq::Cast;
using numeq::Format;
using numeq::Overflow;
using numeq::Rounding;
using numeq::Subnormals;
using numeq_oracle::Spec;

using numeq_test::kModes;
constexpr std::uint64_t kSeed = 1;
constexpr int kMaxReports = 10;
constexpr std::uint32_t kInf32 = 0x7F800000u;
constexpr std::uint32_t kMagnitudes = 0x80000000u;  // fp32 magnitude patterns: 0 .. 0x7FFFFFFF

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == 0) return fallback;
  const unsigned long long v = std::strtoull(s, nullptr, 10);
  return v == 0 ? fallback : v;
}

// The target, as the oracle sees it.
struct Target {
  const Format* f;
  Spec spec;
  // fp32 and fp64 hold every fp32 value exactly: the expected result is the input itself.
  bool superset = false;
  std::vector<double> vals;          // non-negative finite values ascending, then the virtual next
  std::vector<std::uint64_t> codes;  // pattern of each value (storage placement included)
  std::vector<std::uint8_t> odd;     // last significand bit of each value
  std::uint64_t sign = 0, inf_code = 0, max_code = 0;

  explicit Target(const Format& format) : f(&format), spec(format) {
    superset = format.name == "fp32" || format.name == "fp64";
    sign = spec.is_signed ? std::uint64_t{1} << (spec.shift + spec.e + spec.m) : 0;
    if (superset) return;
    // MPFR decodes every pattern; keep the non-negative finite ones, sorted by value.
    struct Entry {
      double v;
      std::uint64_t code;
    };
    std::vector<Entry> entries;
    const std::uint64_t n = std::uint64_t{1} << spec.pattern_bits();
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t code = i << spec.shift;
      const double v = numeq_oracle::decode_oracle(spec, code);
      if (v == HUGE_VAL) inf_code = code;
      if (std::isfinite(v) && !std::signbit(v)) entries.push_back({v, code});
    }
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.v < b.v; });
    for (const Entry& e : entries) {
      vals.push_back(e.v);
      codes.push_back(e.code);
      // Zero counts as even; with no fraction bits (E8M0) every significand is the single 1.
      const std::uint64_t fraction = (e.code >> spec.shift) & ((std::uint64_t{1} << spec.m) - 1);
      odd.push_back(e.v != 0 && (spec.m == 0 || (fraction & 1) != 0) ? 1 : 0);
    }
    max_code = codes.back();
    // The value past the maximum at an unbounded exponent: (max_n + 1) * 2^max_qe.
    const std::uint64_t next_n = spec.max_n + 1;
    vals.push_back(std::ldexp(static_cast<double>(next_n), spec.max_qe));
    codes.push_back(~std::uint64_t{0});
    // Its significand: 2^(m+1) is 1.000 (even) unless m == 0 (one bit, always 1).
    odd.push_back(spec.m == 0 || (next_n != (std::uint64_t{1} << (spec.m + 1)) && (next_n & 1))
                      ? 1
                      : 0);
  }

  std::uint64_t nan(bool negative) const { return f->nan_bits(negative) << f->storage_shift; }

  // Overflow (a rounded magnitude past max_finite): IEEE 754 s7.4 / OFP8 s5.2.
  std::uint64_t overflow(bool neg, Rounding mode, Overflow ov) const {
    const bool to_max = ov == Overflow::saturate || !spec.has_nan() ||
                        mode == Rounding::toward_zero || mode == Rounding::odd ||
                        (mode == Rounding::upward && neg) || (mode == Rounding::downward && !neg);
    if (to_max) return (neg ? sign : 0) | max_code;
    return spec.has_inf() ? ((neg ? sign : 0) | inf_code) : nan(neg);
  }
  std::uint64_t zero(bool neg) const {
    if (!spec.has_zero) return nan(neg);
    return neg && spec.has_negative_zero() ? sign : 0;
  }
};

// Where a finite non-zero magnitude x lies relative to the list.
struct Place {
  enum Kind : std::uint8_t { exact, between, past, below } kind;
  std::size_t k;  // vals[k] <= x < vals[k + 1] (between), or x == vals[k] (exact)
  int vs_mid;     // sign of x - (vals[k] + vals[k+1]) / 2
};

// Whether mode picks the upper neighbour vals[k + 1] (in magnitude).
bool picks_upper(const Target& t, const Place& p, double x, bool neg, Rounding mode,
                 std::uint64_t random, int R) {
  const std::size_t k = p.k;
  switch (mode) {
    case Rounding::nearest_even:
      if (p.vs_mid != 0) return p.vs_mid > 0;
      // Tie: the even neighbour; with p = 1 both are odd and ties go to the larger (MPFR).
      if (t.odd[k] == t.odd[k + 1]) return true;
      return t.odd[k] != 0;
    case Rounding::nearest_away: return p.vs_mid >= 0;
    case Rounding::toward_zero: return false;
    case Rounding::upward: return !neg;
    case Rounding::downward: return neg;
    case Rounding::odd: return t.odd[k] == 0;
    case Rounding::stochastic: {
      // frac = (x - lo) / (hi - lo): exact in binary64 (lo <= x < hi <= 2 lo or lo == 0; the
      // spacing is a power of two).
      const double lo = t.vals[k], hi = t.vals[k + 1];
      const double scaled = std::ldexp((x - lo) / (hi - lo), R);
      const auto frac = static_cast<std::uint64_t>(std::floor(scaled));
      const std::uint64_t draw = random >> (64 - R);
      return static_cast<numeq_oracle::u128>(frac) + draw >= (numeq_oracle::u128{1} << R);
    }
  }
  return false;
}

// Expected pattern for the fp32 input `bits` (magnitude at place p) under (mode, overflow).
// throws: numeq must throw (NaN into a format without NaN).
std::uint64_t expect(const Target& t, std::uint32_t bits, const Place& p, Rounding mode,
                     Overflow ov, std::uint64_t random, int R, bool& throws) {
  throws = false;
  const bool neg = (bits >> 31) != 0;
  const std::uint32_t mag = bits & 0x7FFFFFFFu;
  const float xf = std::bit_cast<float>(bits);
  const double x = std::fabs(static_cast<double>(xf));
  if (mag > kInf32) {  // NaN
    if (!t.spec.has_nan()) throws = true;
    return t.nan(neg);
  }
  if (t.superset) {
    if (t.f->storage_bits == 32) return bits;
    return std::bit_cast<std::uint64_t>(static_cast<double>(xf));
  }
  if (!t.spec.is_signed && neg) return t.nan(neg);  // E8M0 holds no negative value
  if (mag == kInf32) {
    if (ov == Overflow::saturate || !t.spec.has_nan()) return (neg ? t.sign : 0) | t.max_code;
    return t.spec.has_inf() ? ((neg ? t.sign : 0) | t.inf_code) : t.nan(neg);
  }
  if (mag == 0) return t.zero(neg);
  const std::uint64_t s = neg ? t.sign : 0;
  switch (p.kind) {
    case Place::below: return s | t.codes[0];  // E8M0: below 2^-127 is 2^-127
    case Place::past: return t.overflow(neg, mode, ov);
    case Place::exact: return s | t.codes[p.k];
    case Place::between: break;
  }
  std::size_t k = p.k;
  if (picks_upper(t, p, x, neg, mode, random, R)) ++k;
  if (k + 1 == t.vals.size()) return t.overflow(neg, mode, ov);  // the virtual value
  if (t.vals[k] == 0) return t.zero(neg);
  return s | t.codes[k];
}

struct Config {
  Rounding mode;
  bool saturate_too;  // also check Overflow::saturate on the same pass
};

struct Report {
  std::mutex mu;
  std::atomic<std::uint64_t> bad{0};
  std::vector<std::string> lines;
  void add(std::string line) {
    if (bad.fetch_add(1) >= kMaxReports) return;
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(std::move(line));
  }
};

// Runs one (format, mode) over the sampled fp32 patterns; returns the number of comparisons.
std::uint64_t run(const Target& t, const Config& cfg, std::uint64_t stride, unsigned threads,
                  Report& report) {
  const Format& f = *t.f;
  const std::uint64_t key = numeq::random_stream_key(kSeed);
  const std::uint64_t samples = (std::uint64_t{kMagnitudes} + stride - 1) / stride;
  constexpr std::uint64_t kChunk = 1 << 20;
  std::atomic<std::uint64_t> next{0};
  std::atomic<std::uint64_t> total{0};
  // A NaN into a format without NaN throws; 2^24 throws per config would dominate the run, so
  // those formats see every 4096th NaN pattern.
  const bool sample_nans = !t.spec.has_nan();

  auto worker = [&] {
    Cast ieee;
    ieee.format = f;
    ieee.rounding = cfg.mode;
    ieee.seed = kSeed;
    Cast sat = ieee;
    sat.overflow = Overflow::saturate;
    const int R = ieee.random_bits;
    std::uint64_t local = 0;
    std::vector<std::uint32_t> inputs;
    std::vector<Place> places;
    std::vector<std::uint32_t> nan_inputs;
    std::vector<std::uint8_t> out;
    for (;;) {
      const std::uint64_t j0 = next.fetch_add(kChunk);
      if (j0 >= samples) break;
      const std::uint64_t j1 = std::min(samples, j0 + kChunk);
      // The pointer: first place for this chunk by binary search, then moved forward.
      std::size_t k = 0;
      if (!t.superset) {
        const double x0 = std::bit_cast<float>(static_cast<std::uint32_t>(
            std::min<std::uint64_t>(j0 * stride, kInf32)));
        const auto it = std::upper_bound(t.vals.begin(), t.vals.end(), x0);
        k = it == t.vals.begin() ? 0 : static_cast<std::size_t>(it - t.vals.begin()) - 1;
      }
      for (std::uint64_t j = j0; j < j1; ++j) {
        const auto mag = static_cast<std::uint32_t>(j * stride);
        if (mag > kInf32 && sample_nans && (mag & 0xFFF) != 1) continue;
        Place p{Place::exact, 0, 0};
        const double x = std::bit_cast<float>(mag);
        if (!t.superset && mag > 0 && mag < kInf32) {
          while (k + 1 < t.vals.size() && t.vals[k + 1] <= x) ++k;
          if (x < t.vals[0]) {
            p.kind = Place::below;
          } else if (k + 1 == t.vals.size()) {
            p.kind = Place::past;  // at or beyond the first value past the maximum
          } else {
            p.k = k;
            if (x == t.vals[k]) {
              p.kind = Place::exact;
            } else {
              p.kind = Place::between;
              const double mid = (t.vals[k] + t.vals[k + 1]) / 2;  // exact in binary64
              p.vs_mid = x < mid ? -1 : (x > mid ? 1 : 0);
            }
          }
        }
        for (std::uint32_t sgn : {0u, 0x80000000u}) {
          const std::uint32_t bits = mag | sgn;
          if (mag > kInf32 && !t.spec.has_nan()) {
            nan_inputs.push_back(bits);  // these throw: checked one by one below
          } else {
            inputs.push_back(bits);
            places.push_back(p);
          }
        }
      }
      // The array engine (the path users hit, specialised per format) casts the whole chunk;
      // element i of the chunk draws its stochastic bits at index i.
      const std::size_t n = inputs.size();
      numeq::BitsView view;
      view.data = inputs.data();
      view.element_bytes = 4;
      view.format = &numeq::formats::fp32;
      view.shape = {n};
      view.strides = {1};
      const int width = f.storage_bits / 8;
      for (int pass = 0; pass < (cfg.saturate_too ? 2 : 1); ++pass) {
        const Cast& c = pass == 0 ? ieee : sat;
        out.resize(n * static_cast<std::size_t>(width));
        numeq::cast_into(view, c, nullptr, out.data());
        for (std::size_t i = 0; i < n; ++i) {
          std::uint64_t got = 0;
          std::memcpy(&got, out.data() + i * static_cast<std::size_t>(width), static_cast<std::size_t>(width));
          const std::uint64_t random = cfg.mode == Rounding::stochastic ? numeq::random_bits_at(key, i) : 0;
          bool throws = false;
          const std::uint64_t want = expect(t, inputs[i], places[i], cfg.mode, c.overflow, random, R, throws);
          ++local;
          if (throws || got != want) {
            std::ostringstream msg;
            msg << f.name << " " << numeq::to_string(cfg.mode) << " overflow="
                << numeq::to_string(c.overflow) << ": fp32 0x" << std::hex << inputs[i] << " ("
                << numeq_oracle::hex(static_cast<double>(std::bit_cast<float>(inputs[i])))
                << "): expected " << (throws ? "throw" : "0x") << std::hex << want << ", got 0x" << got;
            report.add(msg.str());
          }
        }
        for (std::uint32_t bits : nan_inputs) {
          bool threw = false;
          try {
            numeq::convert(bits, numeq::formats::fp32, c, 0);
          } catch (const numeq::error&) {
            threw = true;
          }
          ++local;
          if (!threw) report.add(std::string(f.name) + ": NaN input did not throw");
        }
      }
      inputs.clear();
      places.clear();
      nan_inputs.clear();
    }
    total += local;
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  return total.load();
}

class Exhaustive : public ::testing::TestWithParam<const char*> {};

TEST_P(Exhaustive, AllFp32Patterns) {
  numeq::set_num_threads(1);  // the sweep runs its own threads, one chunk each
  const Format& f = numeq::format_by_name(GetParam());
  const std::uint64_t stride = env_u64("NUMEQ_EXHAUSTIVE_STRIDE", 1);
  const auto threads = static_cast<unsigned>(env_u64("NUMEQ_EXHAUSTIVE_THREADS", 2));
  const Target t(f);
  const bool eight_bit = f.storage_bits == 8;
  double seconds_all = 0;
  std::uint64_t all = 0;
  for (Rounding mode : kModes) {
    Report report;
    const auto start = std::chrono::steady_clock::now();
    const std::uint64_t n = run(t, {mode, eight_bit}, stride, threads, report);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seconds_all += s;
    all += n;
    std::cout << "[exhaustive] " << f.name << " " << numeq::to_string(mode)
              << (eight_bit ? " (ieee+saturate)" : " (ieee)") << ": " << n << " comparisons, "
              << s << " s" << std::endl;
    for (const std::string& line : report.lines) ADD_FAILURE() << line;
    if (report.bad > kMaxReports)
      ADD_FAILURE() << f.name << " " << numeq::to_string(mode) << ": " << report.bad
                    << " mismatches in all";
  }
  std::cout << "[exhaustive] " << f.name << ": " << all << " comparisons in " << seconds_all
            << " s";
  if (stride > 1) std::cout << " (stride " << stride << "; a full run: ~" << seconds_all * static_cast<double>(stride) << " s)";
  std::cout << std::endl;
  RecordProperty("comparisons", std::to_string(all));
}

INSTANTIATE_TEST_SUITE_P(AllFloatingFormats, Exhaustive,
                         ::testing::Values("fp64", "fp32", "tf32", "bf16", "fp16", "e4m3fn",
                                           "e4m3", "e4m3fnuz", "e5m2", "e5m2fnuz", "e8m0fnu",
                                           "e3m2fn", "e2m3fn", "e2m1fn"),
                         [](const auto& p) { return std::string(p.param); });

// The comparison oracle against the MPFR rounding oracle on a sample, so the two independent
// oracles check each other (a bug shared by numeq and one oracle would show here).
TEST(ExhaustiveOracle, AgreesWithMpfrOracle) {
  std::uint64_t checked = 0;
  for (const Format* f : numeq::all_formats()) {
    if (f->is_integer()) continue;
    const Target t(*f);
    numeq_oracle::RoundOracle mpfr(*f);
    const std::uint64_t key = numeq::random_stream_key(kSeed);
    for (Rounding mode : kModes) {
      for (Overflow ov : {Overflow::ieee, Overflow::saturate}) {
        std::size_t k = 0;
        for (std::uint32_t mag = 0; mag <= kInf32; mag += 40009) {
          const double x = std::bit_cast<float>(mag);
          Place p{Place::exact, 0, 0};
          if (!t.superset && mag > 0 && mag < kInf32) {
            while (k + 1 < t.vals.size() && t.vals[k + 1] <= x) ++k;
            if (x < t.vals[0]) p.kind = Place::below;
            else if (k + 1 == t.vals.size()) p.kind = Place::past;
            else if (x == t.vals[k]) p = {Place::exact, k, 0};
            else {
              const double mid = (t.vals[k] + t.vals[k + 1]) / 2;
              p = {Place::between, k, x < mid ? -1 : (x > mid ? 1 : 0)};
            }
          }
          for (std::uint32_t sgn : {0u, 0x80000000u}) {
            const std::uint32_t bits = mag | sgn;
            const std::uint64_t random = numeq::random_bits_at(key, bits);
            bool throws = false;
            const std::uint64_t want = expect(t, bits, p, mode, ov, random, 32, throws);
            const float xf = std::bit_cast<float>(bits);
            const numeq_oracle::Expected e = mpfr.finish(
                mpfr.round(static_cast<double>(xf), mode, random, 32), ov, Subnormals::keep,
                std::fpclassify(xf) == FP_SUBNORMAL);
            ++checked;
            ASSERT_EQ(throws, e.throws) << f->name << " " << numeq_oracle::hex(static_cast<double>(xf));
            if (throws) continue;
            const double v = t.f->storage_bits == 32
                                 ? static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(want)))
                                 : (t.f->storage_bits == 64 ? std::bit_cast<double>(want)
                                                            : numeq_oracle::decode_oracle(t.spec, want));
            ASSERT_TRUE(numeq_oracle::same_value(v, e.value))
                << f->name << " " << numeq::to_string(mode) << " " << numeq::to_string(ov) << " "
                << numeq_oracle::hex(static_cast<double>(xf)) << ": list oracle "
                << numeq_oracle::hex(v) << ", MPFR oracle " << numeq_oracle::hex(e.value);
          }
        }
      }
    }
  }
  std::cout << "[exhaustive] oracle cross-check: " << checked << " cases\n";
}

}  // namespace
