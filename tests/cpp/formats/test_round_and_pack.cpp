// The big sweep: every floating format x every rounding mode x both overflow policies x all four
// subnormal policies, against the MPFR oracle, bit for bit.
//
// Inputs per target format (FACTS.md s1 conversion rules are where bugs hide, so the inputs
// cluster there): every fp32 value within 4 fp32-ulps of every representable value and of every
// midpoint between neighbours (ties and the one-ulp-off non-ties around them); the same
// neighbourhoods in binary64 for the 8- and 16-bit formats (ties that only a double input can
// miss by one ulp, the ml_dtypes double-rounding case); random fp32 bit patterns through
// convert(); random doubles (raw bit patterns, and values spread over the target's range); the
// published overflow thresholds and their binary64 neighbours; zeros, infinities and NaNs.
//
// MPFR runs once per (format, rounding, input); the 8 overflow x subnormal variants are derived
// from that one result by the oracle's policy code, and numeq runs for each of them.
//
// NUMEQ_SWEEP_SCALE (default 1) scales the random and fp32-target input counts, e.g. 0.1 for a
// quick run or 4 for a longer one.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "numeq/formats/cast.hpp"
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
using numeq_oracle::Expected;
using numeq_oracle::RoundOracle;
using numeq_oracle::Rounded;
using numeq_oracle::Spec;

using numeq_test::kModes;
constexpr Overflow kOverflows[] = {Overflow::ieee, Overflow::saturate};
constexpr Subnormals kSubnormals[] = {Subnormals::keep, Subnormals::flush_outputs,
                                      Subnormals::flush_inputs, Subnormals::flush_both};
// Stochastic rounding cycles through these draw widths (element i uses kRandomBits[i % 5]): the
// default, the extremes 1 and 64, and two in between.
constexpr int kRandomBits[] = {32, 1, 64, 7, 23};
constexpr int kMaxReports = 10;  // mismatches reported per (format, rounding)

double scale() {
  const char* s = std::getenv("NUMEQ_SWEEP_SCALE");
  if (s == nullptr) return 1.0;
  const double v = std::atof(s);
  return v > 0 ? v : 1.0;
}
std::size_t scaled(std::size_t n) {
  return std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(n) * scale()));
}

unsigned thread_count() { return 2; }  // the CI machine has 2 cores

// A deterministic stream of 64-bit numbers for input generation (independent of numeq's streams:
// its own key).
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    state += numeq::splitmix64_gamma;
    return numeq::splitmix64_mix(state);
  }
};

struct Input {
  double x;            // the value (for fp32 inputs: the fp32 value widened)
  std::uint32_t f32;   // the fp32 pattern when from_fp32
  bool from_fp32;
};

void add_f32(std::vector<Input>& in, std::uint32_t bits) {
  in.push_back({static_cast<double>(std::bit_cast<float>(bits)), bits, true});
}
void add_f64(std::vector<Input>& in, double x) { in.push_back({x, 0, false}); }

// fp32 patterns within `k` ulps of the non-negative fp32 value v, both signs.
void add_f32_neighbours(std::vector<std::uint32_t>& out, double v, int k) {
  std::uint32_t c = 0;
  if (v > std::numeric_limits<float>::max()) {
    c = 0x7F800000u;  // beyond fp32: centre on +Inf, so its finite neighbours are the largest
  } else {
    const float f = static_cast<float>(v);
    if (static_cast<double>(f) != v) return;  // not an fp32 value: no neighbourhood in fp32
    c = std::bit_cast<std::uint32_t>(f);
  }
  for (int d = -k; d <= k; ++d) {
    const std::int64_t p = static_cast<std::int64_t>(c) + d;
    if (p < 0 || p > 0x7F800000) continue;  // stay on finite values and +Inf
    out.push_back(static_cast<std::uint32_t>(p));
    out.push_back(static_cast<std::uint32_t>(p) | 0x80000000u);
  }
}

// binary64 values within k ulps of v, both signs.
void add_f64_neighbours(std::vector<Input>& in, double v, int k) {
  double x = v;
  for (int i = 0; i < k; ++i) x = std::nextafter(x, -HUGE_VAL);
  for (int i = 0; i < 2 * k + 1; ++i) {
    add_f64(in, x);
    add_f64(in, -x);
    x = std::nextafter(x, HUGE_VAL);
  }
}

// Every non-negative finite value of f, sorted, then one "virtual" value above the maximum (the
// next value at an unbounded exponent): midpoints with it are the overflow thresholds.
std::vector<double> values_and_next(const Format& f) {
  const Spec spec(f);
  std::vector<double> v;
  if (f.bits() <= 20) {
    for (std::uint64_t i = 0; i < (std::uint64_t{1} << f.bits()); ++i) {
      const double d = numeq_oracle::decode_oracle(spec, i << f.storage_shift);
      if (std::isfinite(d) && !std::signbit(d)) v.push_back(d);
    }
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  v.push_back(std::ldexp(static_cast<double>(spec.max_n + 1), spec.max_qe));
  return v;
}

// Points where the expected result changes: the values, the midpoints, and, for the DAZ and
// E8M0 cases, the fp32 subnormal boundary and a few values below the smallest subnormal.
std::vector<double> critical_points(const Format& f) {
  const std::vector<double> v = values_and_next(f);
  std::vector<double> p = v;
  for (std::size_t i = 0; i + 1 < v.size(); ++i) p.push_back((v[i] + v[i + 1]) / 2);
  const double smallest = numeq::min_subnormal(f);
  for (double d : {smallest / 2, smallest / 4, smallest * 0.75, 0x1p-126, 0x1p-149, 0x1p-127,
                   0x1p-128, 1.0})
    p.push_back(d);
  return p;
}

void add_specials(std::vector<Input>& in, const Format& f) {
  const double inf = HUGE_VAL;
  const double qnan = std::numeric_limits<double>::quiet_NaN();
  for (double x : {0.0, -0.0, inf, -inf, qnan, -qnan, std::numeric_limits<double>::denorm_min(),
                   -std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max(),
                   -std::numeric_limits<double>::max()})
    add_f64(in, x);
  // A signalling double NaN and NaNs with payloads: numeq emits its canonical NaN.
  for (std::uint64_t b : {0x7FF0000000000001ull, 0xFFF4000000000000ull, 0x7FFFFFFFFFFFFFFFull})
    add_f64(in, std::bit_cast<double>(b));
  for (std::uint32_t b : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                          0xFFC00000u, 0x7F800001u, 0xFFBFFFFFu, 0x00000001u, 0x807FFFFFu,
                          0x00800000u, 0x7F7FFFFFu})
    add_f32(in, b);
  // Binary64 subnormal / normal boundary (DAZ for double inputs).
  add_f64_neighbours(in, std::numeric_limits<double>::min(), 4);
  // Overflow thresholds published in FACTS.md s1, and this format's own ones, with neighbours.
  const Spec spec(f);
  const double next = std::ldexp(static_cast<double>(spec.max_n + 1), spec.max_qe);
  for (double t : {448.0, 464.0, 465.0, 240.0, 248.0, 57344.0, 61440.0, 65504.0, 65520.0,
                   spec.max_finite, (spec.max_finite + next) / 2, next})
    add_f64_neighbours(in, t, 4);
  add_f64(in, 464 + 0x1p-20);
  add_f64(in, -431.99999999999994);
}

std::vector<Input> build_inputs(const Format& f, std::uint64_t seed) {
  std::vector<Input> in;
  const Spec spec(f);
  Rng rng{seed};
  add_specials(in, f);
  if (f.name == "fp64") {
    // Binary64 inputs are exact in fp64: only the subnormal policies and specials can act.
    // Walk the subnormal/normal boundary and the bottom and top of the range.
    for (std::uint64_t b = 0; b < 4096; ++b) {
      for (std::uint64_t base : {0x0010000000000000ull - 2048, 0ull, 0x7FEFFFFFFFFFF000ull}) {
        add_f64(in, std::bit_cast<double>(base + b));
        add_f64(in, -std::bit_cast<double>(base + b));
      }
    }
    for (std::size_t i = 0; i < scaled(1u << 16); ++i) add_f64(in, std::bit_cast<double>(rng.next()));
    return in;
  }
  if (f.name == "fp32") {
    // Doubles within 4 double-ulps of random fp32 values and of the midpoints to their successor.
    const std::size_t n = scaled(1u << 18);
    for (std::size_t i = 0; i < n; ++i) {
      const auto b = static_cast<std::uint32_t>(rng.next() % 0x7F800000u);
      const double v = std::bit_cast<float>(b);
      const double w = std::bit_cast<float>(b + 1);  // next fp32 value (or +Inf)
      add_f64_neighbours(in, v, 4);
      if (std::isfinite(w)) add_f64_neighbours(in, (v + w) / 2, 4);
      else add_f64_neighbours(in, v + (v - static_cast<double>(std::bit_cast<float>(b - 1))) / 2, 4);
    }
  } else {
    std::vector<std::uint32_t> patterns;
    const std::vector<double> points = critical_points(f);
    for (double p : points) add_f32_neighbours(patterns, p, 4);
    std::sort(patterns.begin(), patterns.end());
    patterns.erase(std::unique(patterns.begin(), patterns.end()), patterns.end());
    for (std::uint32_t b : patterns) add_f32(in, b);
    // Binary64 neighbourhoods of the same points (cheap for formats of 16 bits or fewer).
    if (f.bits() <= 16)
      for (double p : points) add_f64_neighbours(in, p, 4);
  }
  // Random fp32 patterns. A NaN into a format without NaN throws; a few of those suffice.
  int nans = 0;
  const std::size_t n32 = scaled(1u << 22);
  for (std::size_t i = 0; i < n32; ++i) {
    const auto b = static_cast<std::uint32_t>(rng.next());
    if (std::isnan(std::bit_cast<float>(b)) && !spec.has_nan() && ++nans > 16) continue;
    add_f32(in, b);
  }
  // Random doubles: half raw bit patterns, half spread over the target's range (the exponent
  // uniform from below the smallest subnormal to above the overflow threshold).
  const std::size_t n64 = scaled(1u << 19);
  const int lo = spec.emin - spec.m - 3;
  const int hi = spec.max_lead() + 2;
  for (std::size_t i = 0; i < n64; ++i) {
    add_f64(in, std::bit_cast<double>(rng.next()));
    const std::uint64_t r = rng.next();
    const int e = lo + static_cast<int>(r % static_cast<std::uint64_t>(hi - lo + 1));
    const double mant = 1.0 + std::ldexp(static_cast<double>(rng.next() >> 12), -52);
    add_f64(in, ((r >> 63) != 0 ? -1.0 : 1.0) * std::ldexp(mant, e));
  }
  return in;
}

// Decodes numeq's output bits without numeq: a table of decode_oracle for narrow formats, the
// hardware's own reading for fp32 / tf32 / fp64 (test_format checks those agree with MPFR).
class FastDecoder {
 public:
  explicit FastDecoder(const Format& f) : f_(f) {
    if (f.storage_bits <= 16) {
      const Spec spec(f);
      table_.resize(std::size_t{1} << f.bits());
      for (std::uint64_t i = 0; i < table_.size(); ++i)
        table_[i] = numeq_oracle::decode_oracle(spec, i);
    }
  }
  double operator()(std::uint64_t bits) const {
    if (!table_.empty()) return table_[bits];
    if (f_.storage_bits == 32) return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
    return std::bit_cast<double>(bits);
  }

 private:
  const Format& f_;
  std::vector<double> table_;
};

std::string describe_cast(const Cast& c) {
  std::ostringstream s;
  s << c.format.name << " " << numeq::to_string(c.rounding) << " overflow="
    << numeq::to_string(c.overflow) << " subnormals=" << numeq::to_string(c.subnormals);
  if (c.rounding == Rounding::stochastic) s << " seed=" << c.seed << " random_bits=" << c.random_bits;
  return s.str();
}

struct Mismatches {
  std::mutex mu;
  std::atomic<std::uint64_t> count{0};
  std::vector<std::string> reports;
  void add(const std::string& r) {
    if (count.fetch_add(1) >= kMaxReports) return;
    std::lock_guard<std::mutex> lock(mu);
    reports.push_back(r);
  }
};

// Runs one (format, rounding) over all inputs on `thread_count()` threads; returns comparisons.
std::uint64_t run_mode(const Format& f, Rounding mode, const std::vector<Input>& inputs,
                       const FastDecoder& decode, std::uint64_t seed, Mismatches& bad) {
  const Spec spec(f);
  const std::uint64_t key = numeq::random_stream_key(seed);
  const std::uint64_t mask = spec.pattern_mask();
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> comparisons{0};
  constexpr std::size_t kChunk = 1 << 14;

  auto worker = [&] {
    RoundOracle oracle(f);
    std::uint64_t local = 0;
    Cast cast;
    cast.format = f;
    cast.rounding = mode;
    cast.seed = seed;
    for (;;) {
      const std::size_t begin = next.fetch_add(kChunk);
      if (begin >= inputs.size()) break;
      const std::size_t end = std::min(inputs.size(), begin + kChunk);
      for (std::size_t i = begin; i < end; ++i) {
        const Input& in = inputs[i];
        const int R = kRandomBits[i % 5];
        const std::uint64_t random = mode == Rounding::stochastic ? numeq::random_bits_at(key, i) : 0;
        const Rounded r = oracle.round(in.x, mode, random, R);
        const bool input_subnormal =
            in.from_fp32 ? std::fpclassify(std::bit_cast<float>(in.f32)) == FP_SUBNORMAL
                         : std::fpclassify(in.x) == FP_SUBNORMAL;
        cast.random_bits = R;
        for (Overflow ov : kOverflows) {
          for (Subnormals sub : kSubnormals) {
            cast.overflow = ov;
            cast.subnormals = sub;
            const Expected want = oracle.finish(r, ov, sub, input_subnormal);
            std::uint64_t bits = 0;
            bool threw = false;
            try {
              bits = in.from_fp32 ? numeq::convert(in.f32, numeq::formats::fp32, cast, i)
                                  : numeq::encode(in.x, cast, i);
            } catch (const numeq::error&) {
              threw = true;
            }
            ++local;
            bool ok = true;
            double got = 0;
            if (want.throws || threw) {
              ok = want.throws == threw;
            } else if ((bits & ~mask) != 0) {
              ok = false;
            } else {
              got = decode(bits);
              if (std::isnan(want.value))
                ok = bits == f.nan_bits(std::signbit(want.value)) << f.storage_shift;
              else
                ok = numeq_oracle::same_value(got, want.value);
            }
            if (!ok) {
              std::ostringstream s;
              s << describe_cast(cast) << ": input "
                << (in.from_fp32 ? "fp32 0x" : "double ") << std::hex
                << (in.from_fp32 ? std::uint64_t{in.f32} : std::bit_cast<std::uint64_t>(in.x))
                << std::dec << " = " << numeq_oracle::describe(in.x) << " index " << i
                << ": expected "
                << (want.throws ? std::string("numeq::error") : numeq_oracle::describe(want.value))
                << ", got "
                << (threw ? std::string("numeq::error")
                          : numeq_oracle::describe(got) + " bits 0x" + [&] {
                              std::ostringstream h;
                              h << std::hex << bits;
                              return h.str();
                            }());
              bad.add(s.str());
            }
          }
        }
      }
    }
    comparisons += local;
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < thread_count(); ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return comparisons.load();
}

class Sweep : public ::testing::TestWithParam<const char*> {};

const char* const kSweptFormats[] = {"fp64", "fp32", "tf32", "bf16", "fp16", "e4m3fn", "e4m3",
                                     "e4m3fnuz", "e5m2", "e5m2fnuz", "e8m0fnu", "e3m2fn",
                                     "e2m3fn", "e2m1fn"};

TEST_P(Sweep, MatchesMpfrOracle) {
  const Format& f = numeq::format_by_name(GetParam());
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t seed = 0x5EED0000u + static_cast<std::uint64_t>(f.bits()) * 131 +
                             static_cast<std::uint64_t>(f.bias);
  const std::vector<Input> inputs = build_inputs(f, seed * 7919);
  const FastDecoder decode(f);
  std::uint64_t total = 0;
  for (Rounding mode : kModes) {
    Mismatches bad;
    total += run_mode(f, mode, inputs, decode, seed, bad);
    for (const std::string& r : bad.reports) ADD_FAILURE() << r;
    if (bad.count > kMaxReports)
      ADD_FAILURE() << f.name << " " << numeq::to_string(mode) << ": " << bad.count
                    << " mismatches in all (first " << kMaxReports << " shown)";
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[sweep] " << f.name << ": " << inputs.size() << " inputs, " << total
            << " comparisons, " << seconds << " s\n";
  RecordProperty("comparisons", std::to_string(total));
}

INSTANTIATE_TEST_SUITE_P(AllFloatingFormats, Sweep, ::testing::ValuesIn(kSweptFormats),
                         [](const auto& p) { return std::string(p.param); });

// Every floating format is in the sweep (a format added to the table must be added there too).
TEST(Sweep, CoversEveryFloatingFormat) {
  for (const Format* f : numeq::all_formats()) {
    if (f->is_integer()) continue;
    const bool listed = std::any_of(std::begin(kSweptFormats), std::end(kSweptFormats),
                                    [&](const char* n) { return f->name == n; });
    EXPECT_TRUE(listed) << f->name << " is not swept";
  }
}

// The oracle itself against hand-derivable cases from FACTS.md s1 (OFP8 s5.2), so a broken
// oracle cannot make the sweep vacuous.
TEST(Oracle, AgreesWithPublishedRules) {
  Cast c;
  c.format = numeq::formats::e4m3fn;
  EXPECT_EQ(numeq_oracle::round_oracle(464, c).value, 448);  // tie to even stays below
  EXPECT_TRUE(std::isnan(numeq_oracle::round_oracle(464 + 0x1p-20, c).value));
  c.overflow = Overflow::saturate;
  EXPECT_EQ(numeq_oracle::round_oracle(1e9, c).value, 448);
  c.format = numeq::formats::e5m2;
  c.overflow = Overflow::ieee;
  EXPECT_EQ(numeq_oracle::round_oracle(61440, c).value, HUGE_VAL);
  EXPECT_EQ(numeq_oracle::round_oracle(std::nextafter(61440.0, 0.0), c).value, 57344);
  c.rounding = Rounding::toward_zero;
  EXPECT_EQ(numeq_oracle::round_oracle(1e9, c).value, 57344);
  c.rounding = Rounding::upward;
  EXPECT_EQ(numeq_oracle::round_oracle(-1e9, c).value, -57344);
  EXPECT_EQ(numeq_oracle::round_oracle(1e9, c).value, HUGE_VAL);
  c.format = numeq::formats::fp16;
  c.rounding = Rounding::nearest_even;
  EXPECT_EQ(numeq_oracle::round_oracle(65520, c).value, HUGE_VAL);
  EXPECT_EQ(numeq_oracle::round_oracle(std::nextafter(65520.0, 0.0), c).value, 65504);
  EXPECT_EQ(numeq_oracle::round_oracle(0x1p-25, c).value, 0);           // tie to even zero
  EXPECT_EQ(numeq_oracle::round_oracle(0x1.8p-25, c).value, 0x1p-24);   // above the tie
  c.subnormals = Subnormals::flush_outputs;
  EXPECT_EQ(numeq_oracle::round_oracle(0x1p-15, c).value, 0);
  c.format = numeq::formats::e4m3fnuz;
  c.subnormals = Subnormals::keep;
  EXPECT_TRUE(std::isnan(numeq_oracle::round_oracle(248, c).value));
  EXPECT_FALSE(std::signbit(numeq_oracle::round_oracle(-0.0, c).value));
  c.format = numeq::formats::e8m0fnu;
  EXPECT_EQ(numeq_oracle::round_oracle(1.5, c).value, 2);  // p = 1: ties go up
  EXPECT_EQ(numeq_oracle::round_oracle(1e-300, c).value, 0x1p-127);
  EXPECT_TRUE(std::isnan(numeq_oracle::round_oracle(0.0, c).value));
  EXPECT_TRUE(std::isnan(numeq_oracle::round_oracle(-1.0, c).value));
  c.format = numeq::formats::e2m1fn;
  EXPECT_TRUE(numeq_oracle::round_oracle(std::nan(""), c).throws);
  EXPECT_EQ(numeq_oracle::round_oracle(HUGE_VAL, c).value, 6);
  c.rounding = Rounding::odd;
  EXPECT_EQ(numeq_oracle::round_oracle(2.25, c).value, 3);  // truncation 2 is even: move to 3
  EXPECT_EQ(numeq_oracle::round_oracle(3.25, c).value, 3);
}

}  // namespace
