#include "numeq/formats/array.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>

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

// The element loop of cast_into, for one input width, one output width and one stochastic choice.
template <class In, class OutBits, bool Stochastic>
void cast_range(const BitsView& v, bool contiguous, const Cast& cast_in, double* values,
                OutBits* bits, std::size_t begin, std::size_t end,
                std::atomic<std::size_t>& first_invalid) {
  // Local copies: the stores below cannot alias them, so they stay in registers.
  const Cast cast = cast_in;
  const Format source = *v.format;
  const std::uint64_t key = Stochastic ? random_stream_key(cast.seed) : 0;
  std::size_t invalid = static_cast<std::size_t>(-1);
  for_each_offset(v, contiguous, begin, end, [&](std::size_t i, std::ptrdiff_t offset) {
    const std::uint64_t random = Stochastic ? random_bits_at(key, i) : 0;
    const std::uint64_t encoded = encode_bits(source, load<In>(v.data, offset), cast, random);
    if (encoded == invalid_encoding) [[unlikely]] {
      invalid = std::min(invalid, i);
      return;
    }
    if (bits != nullptr) bits[i] = static_cast<OutBits>(encoded);
    if (values != nullptr) values[i] = decode_bits(cast.format, encoded);
  });
  if (invalid != static_cast<std::size_t>(-1)) {
    std::size_t current = first_invalid.load();
    while (invalid < current && !first_invalid.compare_exchange_weak(current, invalid)) {
    }
  }
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
  std::atomic<std::size_t> first_invalid{static_cast<std::size_t>(-1)};
  with_width(in.element_bytes, [&]<class In>() {
    with_width(cast.format.storage_bits / 8, [&]<class OutBits>() {
      auto* bits = static_cast<OutBits*>(bits_out);
      parallel_for(n, [&](std::size_t begin, std::size_t end) {
        if (cast.rounding == Rounding::stochastic)
          cast_range<In, OutBits, true>(in, contiguous, cast, values_out, bits, begin, end, first_invalid);
        else
          cast_range<In, OutBits, false>(in, contiguous, cast, values_out, bits, begin, end, first_invalid);
      });
    });
  });
  if (first_invalid.load() != static_cast<std::size_t>(-1))
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
