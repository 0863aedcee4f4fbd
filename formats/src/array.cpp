#include "numeq/formats/array.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <sstream>
#include <type_traits>
#include <utility>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/round_and_pack.hpp"
#include "memo_cast.hpp"
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
  // Large contiguous fp32 arrays into narrow formats: the memoised kernel (memo_cast.hpp), every
  // rounding mode. Smaller ones would spend more on building the table than on casting.
  if (contiguous && in.element_bytes == 4 && memo::eligible(*in.format, cast) && n >= memo::entries(cast) / 4) {
    const std::shared_ptr<const memo::MemoTable> table = memo::table_for(cast);
    const memo::Isa isa = memo::current_isa();
    const auto* data = static_cast<const std::uint32_t*>(in.data);
    parallel_for(n, [&](std::size_t begin, std::size_t end) {
      memo::cast_range(*table, cast, isa, data, bits_out, values_out, begin, end);
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
