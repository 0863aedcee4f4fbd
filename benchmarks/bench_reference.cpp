// Exact matmul speed, in one process: numeq::reference::matmul (exact, rounded once to fp32)
// against a float64 BLAS dgemm of the same inputs (the speed of light: fast, not exact) and a
// naive MPFR dot-product loop (exact, slow), on square bf16 and e4m3fn inputs.
//
//   numeq_bench_reference [--sizes 256,512,1024] [--json FILE]
//
// numeq runs on numeq::num_threads() threads (NUMEQ_NUM_THREADS, else the hardware concurrency);
// the naive loop shares its sampled elements out over the same threads, so the naive/numeq ratio
// compares like with like. dgemm, standalone and inside numeq, runs on the BLAS's own threads
// (OPENBLAS_NUM_THREADS for OpenBLAS).
//
// Exit status: 0 when every sampled element of the naive MPFR result, rounded to fp32, equals
// numeq's (missed speed targets are reported, not fatal: timings vary between machines); 1 on a
// mismatch; 2 on bad arguments.

#include <mpfr.h>

#include <xtensor/xarray.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/rounding.hpp"
#include "numeq/references/exact.hpp"

// The Fortran BLAS interface, which every BLAS exports (numpy's float64 matmul ends in this same
// call on OpenBLAS).
extern "C" void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
                       const double* beta, double* c, const int* ldc);

// OpenBLAS's thread count and build description. Weak, so that the benchmark still links against
// a BLAS without them (they are then null and the report says "unknown").
extern "C" [[gnu::weak]] int openblas_get_num_threads();
extern "C" [[gnu::weak]] char* openblas_get_config();

namespace {

using Clock = std::chrono::steady_clock;

// Timings are the best of at least this many runs, repeated until timed_seconds_per_measurement
// is spent: sub-millisecond runs (dgemm at n = 256) need many runs for a stable minimum.
constexpr int numeq_repetitions = 3;
constexpr int dgemm_repetitions = 5;
constexpr double timed_seconds_per_measurement = 0.2;
constexpr int max_repetitions = 1000;
// Wall time the naive loop is given per case; it always runs at least naive_minimum_rows rows.
constexpr double naive_seconds_per_case = 0.5;
constexpr std::size_t naive_minimum_rows = 2;
constexpr double naive_target_speedup = 100.0;

struct InputFormat {
  const numeq::Format& format;
  double allowed_ratio_to_dgemm;  // the target: numeq at most this many times dgemm's time
};

const InputFormat input_formats[] = {
    {numeq::formats::bf16, 10.0},
    {numeq::formats::e4m3fn, 5.0},
};

const numeq::Cast fp32_nearest_even{numeq::formats::fp32, numeq::Rounding::nearest_even};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

template <class Work>
double best_seconds(int min_repetitions, Work&& work) {
  double best = std::numeric_limits<double>::infinity();
  const Clock::time_point first_start = Clock::now();
  for (int r = 0; r < max_repetitions && (r < min_repetitions || seconds_since(first_start) < timed_seconds_per_measurement);
       ++r) {
    const Clock::time_point start = Clock::now();
    work();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

// An n x n matrix of standard normal draws rounded into `format` by numeq's own cast, so every
// entry is exactly a value of the format. The same seed gives the same draws for every format.
xt::xarray<double> random_matrix(std::size_t n, std::uint64_t seed, const numeq::Format& format) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> standard_normal(0.0, 1.0);
  // Saturating keeps e4m3fn entries finite whatever the draw: it has no Inf, and under IEEE
  // overflow anything from 464 up would become NaN.
  const numeq::Cast into_format{format, numeq::Rounding::nearest_even, numeq::Overflow::saturate};
  xt::xarray<double> m = xt::xarray<double>::from_shape({n, n});
  for (double& x : m) {
    x = numeq::round_to_format(standard_normal(engine), into_format);
    if (!std::isfinite(x)) throw std::runtime_error("random_matrix: a non-finite input was generated");
  }
  return m;
}

// Row-major C = A B for n x n matrices. Fortran BLAS reads column-major storage, where a
// row-major matrix is its transpose, so it is asked for C^T = B^T A^T: b is passed first.
void float64_matmul(const double* a, const double* b, double* c, std::size_t n) {
  const int size = static_cast<int>(n);
  const double one = 1.0, zero = 0.0;
  dgemm_("N", "N", &size, &size, &size, &one, b, &size, a, &size, &zero, c, &size);
}

// Bits an MPFR number needs to hold, exactly, every partial sum of `terms` products of two values
// of `format`, whatever those values are. Every such product is an integer multiple of the square
// of the smallest subnormal, 2^(2 (emin - mantissa_bits)), and below 2^(2 top) in magnitude
// (every finite value is below 2^top); a sum of `terms` of them is a multiple of the same unit
// below 2^(2 top + ceil(log2 terms)). For K = 1024 that is 2*128 + 10 + 2*133 = 532 bits for bf16
// (products span 2^-266 to 2^256, so 256 bits would be exact only for inputs of a narrow range,
// such as these normal draws, not for every bf16 input) and 2*9 + 10 + 2*9 = 46 bits for e4m3fn.
// Giving the naive loop only what the format needs keeps its time, and so the naive/numeq ratio,
// as low as an exact naive loop can have it.
mpfr_prec_t exact_dot_precision(const numeq::Format& format, std::size_t terms) {
  const int lowest_exponent = format.emin() - format.mantissa_bits;
  const int top = std::ilogb(numeq::decode(format.max_finite_magnitude(), format)) + 1;
  const int carry_bits = static_cast<int>(std::bit_width(std::max<std::size_t>(terms, 1) - 1));
  return 2 * top + carry_bits - 2 * lowest_exponent;
}

// A fixed-size array of initialised mpfr_t, cleared on destruction.
class MpfrArray {
 public:
  MpfrArray(std::size_t count, mpfr_prec_t bits) : count_(count), values_(new mpfr_t[count]) {
    for (std::size_t i = 0; i < count_; ++i) mpfr_init2(values_[i], bits);
  }
  ~MpfrArray() {
    for (std::size_t i = 0; i < count_; ++i) mpfr_clear(values_[i]);
  }
  MpfrArray(const MpfrArray&) = delete;
  MpfrArray& operator=(const MpfrArray&) = delete;
  mpfr_ptr operator[](std::size_t i) { return values_[i]; }
  mpfr_srcptr operator[](std::size_t i) const { return values_[i]; }

 private:
  std::size_t count_;
  std::unique_ptr<mpfr_t[]> values_;
};

struct NaiveResult {
  double seconds = 0;             // time spent on the sampled elements
  std::size_t rows = 0;           // whole rows of the result sampled
  std::size_t elements = 0;
  std::size_t fp32_mismatches = 0;  // against numeq's fp32 result
  std::size_t dgemm_inexact = 0;    // dgemm's double differs from the exact value rounded to double
  mpfr_prec_t accumulator_bits = 0;
};

// The naive exact reference: per output element an MPFR accumulator wide enough to be exact,
// mpfr_mul and mpfr_add over K, then the value as a double (mpfr_get_d). Whole rows are timed
// until naive_seconds_per_case is spent. Each sampled element is also rounded straight from the
// accumulator to fp32 (mpfr_get_flt; rounding the double instead would round twice) and compared
// bit for bit with numeq's result.
NaiveResult naive_mpfr(const xt::xarray<double>& a, const xt::xarray<double>& b, const numeq::Format& format,
                       const xt::xarray<double>& numeq_result, const std::vector<double>& dgemm_result) {
  const std::size_t n = a.shape()[0];
  NaiveResult result;
  result.accumulator_bits = exact_dot_precision(format, n);
  const mpfr_prec_t input_bits = format.precision();    // holds any value of the format exactly
  const mpfr_prec_t product_bits = 2 * input_bits;      // holds any product of two of them exactly
  // Inputs are converted once and untimed: over a whole matrix that is O(n^2) work against the
  // loop's O(n^3), while a sample of a few rows would still have to convert all of b.
  MpfrArray b_columns(n * n, input_bits);  // column j of b at [j n, (j + 1) n)
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t k = 0; k < n; ++k) mpfr_set_d(b_columns[j * n + k], b(k, j), MPFR_RNDN);
  MpfrArray a_row(n, input_bits);
  std::vector<double> naive_double(n);
  std::vector<float> naive_fp32(n);

  while (result.rows < n && (result.rows < naive_minimum_rows || result.seconds < naive_seconds_per_case)) {
    const std::size_t row = result.rows;
    for (std::size_t k = 0; k < n; ++k) mpfr_set_d(a_row[k], a(row, k), MPFR_RNDN);
    const Clock::time_point start = Clock::now();
    numeq::parallel_for(
        n,
        [&](std::size_t begin, std::size_t end) {
          mpfr_t accumulator, product;
          mpfr_init2(accumulator, result.accumulator_bits);
          mpfr_init2(product, product_bits);
          for (std::size_t j = begin; j < end; ++j) {
            mpfr_set_zero(accumulator, 1);
            for (std::size_t k = 0; k < n; ++k) {
              mpfr_mul(product, a_row[k], b_columns[j * n + k], MPFR_RNDN);  // exact: product_bits suffice
              mpfr_add(accumulator, accumulator, product, MPFR_RNDN);       // exact: accumulator_bits suffice
            }
            naive_double[j] = mpfr_get_d(accumulator, MPFR_RNDN);
            naive_fp32[j] = mpfr_get_flt(accumulator, MPFR_RNDN);
          }
          mpfr_clear(product);
          mpfr_clear(accumulator);
        },
        1);
    result.seconds += seconds_since(start);
    for (std::size_t j = 0; j < n; ++j) {
      const auto numeq_bits = std::bit_cast<std::uint32_t>(static_cast<float>(numeq_result(row, j)));
      if (std::bit_cast<std::uint32_t>(naive_fp32[j]) != numeq_bits) {
        if (result.fp32_mismatches < 5)
          std::fprintf(stderr, "MISMATCH %s n=%zu element (%zu, %zu): naive MPFR %a, numeq %a\n",
                       std::string(format.name).c_str(), n, row, j, static_cast<double>(naive_fp32[j]),
                       numeq_result(row, j));
        ++result.fp32_mismatches;
      }
      if (naive_double[j] != dgemm_result[row * n + j]) ++result.dgemm_inexact;
    }
    ++result.rows;
    result.elements += n;
  }
  return result;
}

struct CaseResult {
  std::string format;
  std::size_t size = 0;
  double numeq_seconds = 0;
  double dgemm_seconds = 0;
  double naive_seconds_extrapolated = 0;
  double allowed_ratio_to_dgemm = 0;
  NaiveResult naive;

  double numeq_over_dgemm() const { return numeq_seconds / dgemm_seconds; }
  double naive_over_numeq() const { return naive_seconds_extrapolated / numeq_seconds; }
  bool dgemm_target_met() const { return numeq_over_dgemm() <= allowed_ratio_to_dgemm; }
  bool naive_target_met() const { return naive_over_numeq() >= naive_target_speedup; }
};

CaseResult run_case(const InputFormat& input, std::size_t n) {
  CaseResult r;
  r.format = std::string(input.format.name);
  r.size = n;
  r.allowed_ratio_to_dgemm = input.allowed_ratio_to_dgemm;
  // Seeds depend on the size only: both formats round the same draws.
  const xt::xarray<double> a = random_matrix(n, 2 * n, input.format);
  const xt::xarray<double> b = random_matrix(n, 2 * n + 1, input.format);

  xt::xarray<double> numeq_result;
  r.numeq_seconds = best_seconds(numeq_repetitions, [&] {
    numeq_result = numeq::reference::matmul(a, b, fp32_nearest_even);
  });
  std::vector<double> dgemm_result(n * n);
  r.dgemm_seconds = best_seconds(dgemm_repetitions, [&] {
    float64_matmul(a.data(), b.data(), dgemm_result.data(), n);
  });
  r.naive = naive_mpfr(a, b, input.format, numeq_result, dgemm_result);
  r.naive_seconds_extrapolated =
      r.naive.seconds / static_cast<double>(r.naive.elements) * static_cast<double>(n * n);
  return r;
}

struct Settings {
  std::vector<std::size_t> sizes{256, 512, 1024};
  std::string json_path;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr,
               "numeq_bench_reference: %s\n"
               "usage: numeq_bench_reference [--sizes 256,512,1024] [--json FILE]\n",
               message.c_str());
  std::exit(2);
}

std::vector<std::size_t> parse_sizes(std::string_view text) {
  std::vector<std::size_t> sizes;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string item(text.substr(0, comma));
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    // dgemm takes int dimensions; 2^15 keeps n * n doubles and the naive sample sane too.
    if (item.empty() || *end != '\0' || value < 1 || value > (1L << 15))
      usage_error("--sizes: '" + item + "' is not a size from 1 to 32768 (expected e.g. --sizes 256,512)");
    sizes.push_back(static_cast<std::size_t>(value));
    if (comma == std::string_view::npos) return sizes;
    text.remove_prefix(comma + 1);
  }
}

Settings parse_arguments(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: numeq_bench_reference [--sizes 256,512,1024] [--json FILE]\n");
      std::exit(0);
    }
    if (arg != "--sizes" && arg != "--json") usage_error("unknown argument '" + std::string(arg) + "'");
    if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
    const std::string_view value = argv[++i];
    if (arg == "--sizes")
      s.sizes = parse_sizes(value);
    else
      s.json_path = std::string(value);
  }
  return s;
}

std::string numeq_threads_source() {
  const char* env = std::getenv("NUMEQ_NUM_THREADS");
  if (env != nullptr && std::atoi(env) > 0) return "NUMEQ_NUM_THREADS=" + std::string(env);
  return "hardware concurrency; set NUMEQ_NUM_THREADS to change";
}

int blas_threads() { return openblas_get_num_threads != nullptr ? openblas_get_num_threads() : 0; }

std::string blas_description() {
  if (openblas_get_config == nullptr) return "a BLAS other than OpenBLAS (threads unknown)";
  return std::string(openblas_get_config()) + ", " + std::to_string(blas_threads()) +
         " threads (OPENBLAS_NUM_THREADS)";
}

const char* pass_or_miss(bool met) { return met ? "PASS" : "MISS"; }

void print_table(const std::vector<CaseResult>& results) {
  std::printf("\n%-7s %5s %9s %9s %14s %11s %11s  %-17s %-17s %s\n", "format", "n", "numeq s", "dgemm s",
              "naive MPFR s*", "numeq/dgemm", "naive/numeq", "numeq/dgemm goal", "naive/numeq goal",
              "naive sample");
  for (const CaseResult& r : results) {
    const std::string sample = std::to_string(r.naive.rows) + " rows, " + std::to_string(r.naive.accumulator_bits) +
                               " bits, dgemm inexact " + std::to_string(r.naive.dgemm_inexact) + "/" +
                               std::to_string(r.naive.elements);
    std::printf("%-7s %5zu %9.4f %9.4f %13.1f* %11.2f %11.0f  <= %2.0fx   %s     >= %3.0fx  %s     %s\n",
                r.format.c_str(), r.size, r.numeq_seconds, r.dgemm_seconds, r.naive_seconds_extrapolated,
                r.numeq_over_dgemm(), r.naive_over_numeq(), r.allowed_ratio_to_dgemm,
                pass_or_miss(r.dgemm_target_met()), naive_target_speedup, pass_or_miss(r.naive_target_met()),
                sample.c_str());
  }
  std::printf(
      "\n* naive MPFR: timed on the sampled whole rows (on numeq's threads) and extrapolated to n x n.\n"
      "  bits: its accumulator precision, exact for any inputs of the format; dgemm inexact: sampled\n"
      "  elements where the float64 dgemm differs from the exact value rounded to float64.\n");
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;  // no control characters in these fields
    out += c;
  }
  return out + "\"";
}

std::string json_number(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", x);
  return buffer;
}

// `file` is opened before the run, so that an unwritable path fails at once, not after it.
void write_json(std::FILE* file, const std::string& path, const std::vector<CaseResult>& results) {
  std::fprintf(file, "{\n  \"benchmark\": \"numeq_bench_reference\",\n  \"output\": \"fp32 nearest_even\",\n");
  std::fprintf(file, "  \"numeq_threads\": %d,\n  \"blas_threads\": %s,\n  \"blas\": %s,\n", numeq::num_threads(),
               blas_threads() > 0 ? std::to_string(blas_threads()).c_str() : "null",
               json_string(openblas_get_config ? openblas_get_config() : "unknown").c_str());
  std::fprintf(file, "  \"numeq_min_repetitions\": %d,\n  \"dgemm_min_repetitions\": %d,\n"
               "  \"seconds_per_measurement\": %s,\n  \"cases\": [",
               numeq_repetitions, dgemm_repetitions, json_number(timed_seconds_per_measurement).c_str());
  for (std::size_t i = 0; i < results.size(); ++i) {
    const CaseResult& r = results[i];
    std::fprintf(file,
                 "%s\n    {\"format\": %s, \"size\": %zu, \"numeq_seconds\": %s, \"dgemm_seconds\": %s, "
                 "\"naive_mpfr_seconds_extrapolated\": %s, \"numeq_over_dgemm\": %s, \"naive_over_numeq\": %s, "
                 "\"target_numeq_over_dgemm_at_most\": %s, \"numeq_over_dgemm_met\": %s, "
                 "\"target_naive_over_numeq_at_least\": %s, \"naive_over_numeq_met\": %s, "
                 "\"naive_sample_rows\": %zu, \"naive_sample_elements\": %zu, \"naive_sample_seconds\": %s, "
                 "\"naive_accumulator_bits\": %ld, \"naive_fp32_mismatches\": %zu, \"dgemm_inexact_in_sample\": %zu}",
                 i == 0 ? "" : ",", json_string(r.format).c_str(), r.size, json_number(r.numeq_seconds).c_str(),
                 json_number(r.dgemm_seconds).c_str(), json_number(r.naive_seconds_extrapolated).c_str(),
                 json_number(r.numeq_over_dgemm()).c_str(), json_number(r.naive_over_numeq()).c_str(),
                 json_number(r.allowed_ratio_to_dgemm).c_str(), r.dgemm_target_met() ? "true" : "false",
                 json_number(naive_target_speedup).c_str(), r.naive_target_met() ? "true" : "false", r.naive.rows,
                 r.naive.elements, json_number(r.naive.seconds).c_str(), static_cast<long>(r.naive.accumulator_bits),
                 r.naive.fp32_mismatches, r.naive.dgemm_inexact);
  }
  std::fprintf(file, "\n  ]\n}\n");
  if (std::fclose(file) != 0) throw std::runtime_error("--json: error writing '" + path + "'");
}

}  // namespace

int main(int argc, char** argv) {
  const Settings settings = parse_arguments(argc, argv);
  std::FILE* json_file = nullptr;
  if (!settings.json_path.empty() && (json_file = std::fopen(settings.json_path.c_str(), "w")) == nullptr)
    usage_error("--json: cannot open '" + settings.json_path + "' for writing");
  try {
    std::printf("numeq exact matmul (fp32 out, nearest even) vs float64 dgemm vs naive MPFR, MPFR %s\n",
                mpfr_get_version());
    std::printf("numeq threads: %d (%s)\nBLAS: %s\n", numeq::num_threads(), numeq_threads_source().c_str(),
                blas_description().c_str());
    std::printf("numeq: best of >= %d runs, dgemm: best of >= %d runs (each repeated for >= %.1f s); "
                "naive MPFR: whole rows for >= %.1f s\n",
                numeq_repetitions, dgemm_repetitions, timed_seconds_per_measurement, naive_seconds_per_case);
    std::fflush(stdout);
    std::vector<CaseResult> results;
    std::size_t mismatches = 0;
    for (const InputFormat& input : input_formats)
      for (const std::size_t n : settings.sizes) {
        results.push_back(run_case(input, n));
        mismatches += results.back().naive.fp32_mismatches;
      }
    print_table(results);
    if (json_file != nullptr) write_json(json_file, settings.json_path, results);
    if (mismatches != 0) {
      std::fprintf(stderr, "FAIL: %zu sampled elements differ between naive MPFR and numeq\n", mismatches);
      return 1;
    }
    std::printf("naive MPFR and numeq agree bit for bit on every sampled element\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "numeq_bench_reference: %s\n", e.what());
    return 1;
  }
}
