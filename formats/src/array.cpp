#include "numeq/formats/array.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <type_traits>
#include <utility>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/round_and_pack.hpp"
#include "strided.hpp"

namespace numeq {

std::size_t BitsView::size() const {
  std::size_t n = 1;
  for (std::size_t s : shape) n *= s;
  return n;
}

using detail::for_each_offset;
using detail::is_contiguous;
using detail::load;
using detail::with_width;

namespace {

void check_view(const BitsView& v, std::string_view parameter) {
  if (v.shape.size() != v.strides.size())
    throw error(std::string(parameter) + ": shape and strides differ in length");
}

// Formats and rounding known only at run time: any source, any target.
struct RuntimeSpec {
  const Format* source_format;
  const Cast* runtime_cast;
  Format source() const { return *source_format; }
  Cast cast() const { return *runtime_cast; }
};

// Source, target and rounding fixed at compile time, so that the one generic kernel is compiled
// with the descriptor's fields as constants (no per-format code: the same templates, folded).
template <const Format* Source, const Format* Target, Rounding Mode>
struct FixedSpec {
  const Cast* runtime_cast;
  static constexpr Format source() { return *Source; }
  Cast cast() const {
    const Cast& c = *runtime_cast;
    return Cast{*Target, Mode, c.overflow, c.subnormals, c.seed, c.random_bits};
  }
};

template <int Bytes>
using unsigned_of = std::conditional_t<Bytes == 1, std::uint8_t,
                    std::conditional_t<Bytes == 2, std::uint16_t,
                    std::conditional_t<Bytes == 4, std::uint32_t, std::uint64_t>>>;

struct CastJob {
  const BitsView* view;
  bool contiguous;
  double* values;
  void* bits;
  std::atomic<std::size_t>* first_invalid;      // first NaN into a format without NaN
  std::atomic<std::size_t>* first_bad_pattern;  // first input with bits outside its pattern
};

constexpr std::size_t none = static_cast<std::size_t>(-1);

void record_first(std::atomic<std::size_t>& first, std::size_t index) {
  std::size_t current = first.load();
  while (index < current && !first.compare_exchange_weak(current, index)) {
  }
}

// The element loop of cast_into.
template <class In, class OutBits, class Spec>
void cast_range(const CastJob& job, const Spec& spec, std::size_t begin, std::size_t end) {
  // Local copies: the stores below cannot alias them, so they stay in registers (or fold away).
  const Format source = spec.source();
  const Cast cast = spec.cast();
  const bool stochastic = cast.rounding == Rounding::stochastic;
  const std::uint64_t key = random_stream_key(cast.seed);
  const BitsView& v = *job.view;
  double* const values = job.values;
  OutBits* const bits = static_cast<OutBits*>(job.bits);
  // All ones for fp32/fp64 sources (the check folds away); 6-bit or tf32 patterns may carry
  // stray bits in their containers.
  const std::uint64_t stray = ~pattern_mask(source) & (sizeof(In) == 8 ? ~0ull : (1ull << (8 * sizeof(In))) - 1);
  std::size_t invalid = none;
  std::size_t bad_pattern = none;
  for_each_offset(v, job.contiguous, begin, end, [&](std::size_t i, std::ptrdiff_t offset) NUMEQ_LAMBDA_INLINE {
    const std::uint64_t random = stochastic ? random_bits_at(key, i) : 0;
    const std::uint64_t raw = load<In>(v.data, offset);
    if ((raw & stray) != 0) [[unlikely]] {
      bad_pattern = std::min(bad_pattern, i);
      return;
    }
    const std::uint64_t encoded = encode_bits(source, raw, cast, random);
    if (encoded == invalid_encoding) [[unlikely]] {
      invalid = std::min(invalid, i);
      return;
    }
    if (bits != nullptr) bits[i] = static_cast<OutBits>(encoded);
    if (values != nullptr) values[i] = decode_bits(cast.format, encoded);
  });
  if (invalid != none) record_first(*job.first_invalid, invalid);
  if (bad_pattern != none) record_first(*job.first_bad_pattern, bad_pattern);
}

using FixedKernel = void (*)(const CastJob&, const Cast&, std::size_t, std::size_t);

constexpr std::size_t floating_formats = 14;  // formats::all[0..13]; integers follow
constexpr std::size_t rounding_modes = 7;
static_assert(formats::all[floating_formats - 1]->kind == FormatKind::floating &&
              formats::all[floating_formats]->kind == FormatKind::integer);
static_assert(static_cast<std::size_t>(Rounding::stochastic) == rounding_modes - 1);

template <const Format* Source, std::size_t Target, std::size_t Mode>
void fixed_kernel(const CastJob& job, const Cast& cast, std::size_t begin, std::size_t end) {
  constexpr const Format* target = formats::all[Target];
  using In = unsigned_of<Source->storage_bits / 8>;
  using Out = unsigned_of<target->storage_bits / 8>;
  cast_range<In, Out>(job, FixedSpec<Source, target, static_cast<Rounding>(Mode)>{&cast}, begin, end);
}

template <const Format* Source, std::size_t... I>
constexpr std::array<FixedKernel, sizeof...(I)> fixed_table(std::index_sequence<I...>) {
  return {&fixed_kernel<Source, I / rounding_modes, I % rounding_modes>...};
}

// float and double arrays are what casts usually see: their kernels are specialised.
constexpr auto from_fp32 = fixed_table<&formats::fp32>(std::make_index_sequence<floating_formats * rounding_modes>{});
constexpr auto from_fp64 = fixed_table<&formats::fp64>(std::make_index_sequence<floating_formats * rounding_modes>{});

FixedKernel fixed_kernel_for(const Format& source, const Cast& cast) {
  std::size_t target = 0;
  while (target < floating_formats && !(*formats::all[target] == cast.format)) ++target;
  if (target == floating_formats) return nullptr;
  const std::size_t slot = target * rounding_modes + static_cast<std::size_t>(cast.rounding);
  if (source == formats::fp32) return from_fp32[slot];
  if (source == formats::fp64) return from_fp64[slot];
  return nullptr;
}
// ---- memoised casts from fp32 into narrow formats ----
//
// The kernel's result for an fp32 input x into a format with m <= 7 mantissa bits depends only on
// the sign, exponent and top m mantissa bits of x (its top 9 + m bits) and on where the other
// 23 - m bits lie against the half-unit: zero, below half, exactly half, above half. For normal
// results that is exactly the (half, sticky) pair round_and_pack reads. For results below the
// format's normal range the rounding point is higher up, inside the top bits, and the low bits
// only feed the sticky bit (zero or not). The point never falls below bit 23 - m as long as the
// format's smallest normal exponent is >= fp32's (-126): an fp32 subnormal's bits are then
// rounded at the same place as a normal's. So for every non-stochastic cast the kernel's answers
// for the 2^(9 + m) x 4 classes, computed once by the kernel itself from one representative of
// each class, give every fp32 input's answer: a table of at most 2^18 patterns, looked up with a
// few branch-free integer operations instead of the kernel's unpack / round / pack branches.
// Formats without NaN are excluded (a NaN input has no answer there, only an error), and so is
// E8M0 (emin -127). tests/cpp/formats/test_array.cpp compares this path with the kernel on every
// class and on random inputs; the opt-in exhaustive test covers all 2^32 inputs.
struct MemoTable {
  Cast cast;
  int low_bits = 0;                     // 23 - m: the mantissa bits below the kept ones
  std::vector<std::uint16_t> patterns;  // by class: (top 9 + m bits) * 4 + position of the rest
  std::vector<double> values;           // by pattern: its value (decode_bits)
};

bool memo_eligible(const Format& source, const Cast& cast) {
  const Format& f = cast.format;
  return source == formats::fp32 && f.kind == FormatKind::floating && f.mantissa_bits <= 7 &&
         f.storage_bits <= 16 && f.has_nan() && f.emin() >= formats::fp32.emin() &&
         cast.rounding != Rounding::stochastic;
}

std::size_t memo_entries(const Cast& cast) { return std::size_t{1} << (9 + cast.format.mantissa_bits + 2); }

std::shared_ptr<const MemoTable> memo_table(const Cast& cast) {
  static std::mutex mutex;
  static std::vector<std::shared_ptr<const MemoTable>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& t : cache)
    if (t->cast.format == cast.format && t->cast.rounding == cast.rounding && t->cast.overflow == cast.overflow &&
        t->cast.subnormals == cast.subnormals)
      return t;
  auto table = std::make_shared<MemoTable>();
  table->cast = cast;
  table->low_bits = 23 - cast.format.mantissa_bits;
  const std::uint32_t half = std::uint32_t{1} << (table->low_bits - 1);
  const std::uint32_t representative[4] = {0, 1, half, half + 1};
  const std::size_t entries = memo_entries(cast);
  table->patterns.resize(entries);
  for (std::size_t key = 0; key < entries; ++key) {
    const std::uint32_t x = (static_cast<std::uint32_t>(key >> 2) << table->low_bits) | representative[key & 3];
    // Every format admitted has NaN, so no class answers invalid_encoding.
    table->patterns[key] = static_cast<std::uint16_t>(encode_bits(formats::fp32, x, cast, 0));
  }
  table->values.resize(std::size_t{1} << cast.format.storage_bits);
  for (std::size_t bits = 0; bits < table->values.size(); ++bits)
    table->values[bits] = decode_bits(cast.format, bits);
  // A handful of casts are used in practice; the bound only guards against unbounded growth.
  if (cache.size() >= 64) cache.erase(cache.begin());
  cache.push_back(table);
  return table;
}

template <class Out>
[[gnu::always_inline]] inline void memo_range(const std::uint32_t* in, Out* bits, double* values,
                                              const MemoTable& table, std::size_t begin, std::size_t end) {
  const int low_bits = table.low_bits;
  const std::uint32_t low_mask = (std::uint32_t{1} << low_bits) - 1;
  const std::uint32_t half = std::uint32_t{1} << (low_bits - 1);
  const std::uint16_t* patterns = table.patterns.data();
  const double* decoded = table.values.data();
  for (std::size_t i = begin; i < end; ++i) {
    const std::uint32_t x = in[i];
    const std::uint32_t low = x & low_mask;
    // 0: zero, 1: below half, 2: exactly half, 3: above half.
    const std::uint32_t position = static_cast<std::uint32_t>(low != 0) + static_cast<std::uint32_t>(low >= half) +
                                   static_cast<std::uint32_t>(low > half);
    const std::uint16_t pattern = patterns[((x >> low_bits) << 2) | position];
    if (bits != nullptr) bits[i] = static_cast<Out>(pattern);
    if (values != nullptr) values[i] = decoded[pattern];
  }
}

[[gnu::target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")]] void memo_range_8(const std::uint32_t* in, std::uint8_t* bits,
    double* values, const MemoTable& table, std::size_t begin, std::size_t end) {
  memo_range(in, bits, values, table, begin, end);
}
[[gnu::target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")]] void memo_range_16(const std::uint32_t* in, std::uint16_t* bits,
    double* values, const MemoTable& table, std::size_t begin, std::size_t end) {
  memo_range(in, bits, values, table, begin, end);
}

}  // namespace

void cast_into(const BitsView& in, const Cast& cast, double* values_out, void* bits_out,
               std::string_view parameter) {
  validate(cast);
  check_view(in, parameter);
  if (in.format->is_integer())
    throw type_error(std::string(parameter) + ": holds integer format '" +
                     std::string(in.format->name) + "' values; decode them to floats first");
  const std::size_t n = in.size();
  const bool contiguous = is_contiguous(in);
  std::atomic<std::size_t> first_invalid{none};
  std::atomic<std::size_t> first_bad_pattern{none};
  const CastJob job{&in, contiguous, values_out, bits_out, &first_invalid, &first_bad_pattern};
  // Large contiguous fp32 arrays into narrow formats: the memoised kernel (above). Smaller ones
  // would spend more on building the table than on casting.
  if (contiguous && in.element_bytes == 4 && memo_eligible(*in.format, cast) && n >= memo_entries(cast) / 4) {
    const std::shared_ptr<const MemoTable> table = memo_table(cast);
    const auto* data = static_cast<const std::uint32_t*>(in.data);
    parallel_for(n, [&](std::size_t begin, std::size_t end) {
      if (cast.format.storage_bits <= 8)
        memo_range_8(data, static_cast<std::uint8_t*>(bits_out), values_out, *table, begin, end);
      else
        memo_range_16(data, static_cast<std::uint16_t*>(bits_out), values_out, *table, begin, end);
    });
    return;
  }
  if (const FixedKernel kernel = fixed_kernel_for(*in.format, cast);
      kernel != nullptr && in.element_bytes * 8 == in.format->storage_bits) {
    parallel_for(n, [&](std::size_t begin, std::size_t end) { kernel(job, cast, begin, end); });
  } else {
    with_width(in.element_bytes, [&]<class In>() {
      with_width(cast.format.storage_bits / 8, [&]<class OutBits>() {
        const RuntimeSpec spec{in.format, &cast};
        parallel_for(n, [&](std::size_t begin, std::size_t end) {
          cast_range<In, OutBits>(job, spec, begin, end);
        });
      });
    });
  }
  if (first_bad_pattern.load() != none) {
    std::ostringstream message;
    message << parameter << ": element " << first_bad_pattern.load() << " (C order) is not a bit pattern of "
            << in.format->name << " (only bits 0x" << std::hex << pattern_mask(*in.format) << " may be set)";
    throw error(message.str());
  }
  if (first_invalid.load() != none)
    throw error(std::string(parameter) + ": element " + std::to_string(first_invalid.load()) +
                " (C order) is NaN, which format " + std::string(cast.format.name) +
                " cannot hold: it has no NaN encoding (OCP MX FP6/FP4 hold finite values only)");
}

void decode_into(const BitsView& in, double* out, std::string_view parameter) {
  check_view(in, parameter);
  const Format f = *in.format;
  const std::uint64_t mask = pattern_mask(f);
  const bool contiguous = is_contiguous(in);
  std::atomic<std::size_t> first_invalid{static_cast<std::size_t>(-1)};
  with_width(in.element_bytes, [&]<class In>() {
    parallel_for(in.size(), [&](std::size_t begin, std::size_t end) {
      std::size_t invalid = static_cast<std::size_t>(-1);
      for_each_offset(in, contiguous, begin, end, [&](std::size_t i, std::ptrdiff_t offset) {
        const std::uint64_t bits = load<In>(in.data, offset);
        if ((bits & ~mask) != 0) [[unlikely]] {
          invalid = std::min(invalid, i);
          return;
        }
        out[i] = decode_pattern(f, bits);
      });
      std::size_t current = first_invalid.load();
      while (invalid < current && !first_invalid.compare_exchange_weak(current, invalid)) {
      }
    });
  });
  if (first_invalid.load() != static_cast<std::size_t>(-1)) {
    std::ostringstream message;
    message << parameter << ": element " << first_invalid.load()
            << " (C order) is not a bit pattern of " << f.name << " (only bits 0x" << std::hex
            << mask << " may be set)";
    throw error(message.str());
  }
}

}  // namespace numeq
