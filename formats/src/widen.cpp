#include "numeq/formats/widen.hpp"

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/parallel.hpp"

namespace numeq {

ElementType ElementType::patterns(const Format& f) {
  if (f.is_integer())
    throw error("format: '" + std::string(f.name) + "' is an integer format; its arrays are integers (ElementType::integers)");
  return ElementType{&f, f.storage_bits / 8, f.is_signed};
}

ElementType ElementType::integers(int bytes, bool is_signed) {
  if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8)
    throw error("bytes: integers are 1, 2, 4 or 8 bytes wide, got " + std::to_string(bytes));
  return ElementType{nullptr, bytes, is_signed};
}

namespace {

// Elements widened and checked together: a block stays in L1 between its passes.
constexpr std::size_t block = 4096;

// A pattern's flags in a table.
constexpr std::uint8_t stray_bits = 1;  // not a pattern of the format
constexpr std::uint8_t not_in_check = 2;  // its value is not one of the checked format

// The tables of a 1- or 2-byte element type: every pattern's value (floating formats; integers
// convert directly) and, against one checked format, its flags.
struct Table {
  std::shared_ptr<const std::vector<double>> values;  // null for integers
  std::vector<std::uint8_t> flags;                    // empty: no pattern has a flag
};

// The value of pattern p of a 1- or 2-byte type (stray patterns: 0, never read as a value).
double pattern_value(const ElementType& type, std::uint64_t p) {
  if (type.format == nullptr) {
    if (type.is_signed && (p >> (8 * type.bytes - 1)) != 0)
      return static_cast<double>(static_cast<std::int64_t>(p) - (std::int64_t{1} << (8 * type.bytes)));
    return static_cast<double>(p);
  }
  return (p & ~pattern_mask(*type.format)) != 0 ? 0.0 : decode_pattern(*type.format, p);
}

std::shared_ptr<const std::vector<double>> build_values(const ElementType& type) {
  if (type.format == nullptr) return nullptr;
  auto values = std::make_shared<std::vector<double>>(std::size_t{1} << (8 * type.bytes));
  for (std::size_t p = 0; p < values->size(); ++p) (*values)[p] = pattern_value(type, p);
  return values;
}

Table build_table(const ElementType& type, const Format* check, std::shared_ptr<const std::vector<double>> values) {
  Table t{std::move(values), {}};
  const std::size_t patterns = std::size_t{1} << (8 * type.bytes);
  const std::uint64_t stray = type.format == nullptr ? 0 : ~pattern_mask(*type.format) & (patterns - 1);
  if (stray == 0 && check == nullptr) return t;
  t.flags.assign(patterns, 0);
  if (check == nullptr) {
    for (std::size_t p = 0; p < patterns; ++p) t.flags[p] = (p & stray) != 0 ? stray_bits : 0;
    return t;
  }
  const ValueTest test(*check);
  for (std::size_t p = 0; p < patterns; ++p)
    t.flags[p] = (p & stray) != 0 ? stray_bits : (test(pattern_value(type, p)) ? 0 : not_in_check);
  return t;
}

// Position of f among numeq's formats, or -1 (a format built by a caller: its tables are not kept).
int format_key(const Format& f) {
  const auto all = all_formats();
  for (std::size_t i = 0; i < all.size(); ++i)
    if (*all[i] == f) return static_cast<int>(i);
  return -1;
}

// The tables of a 1- or 2-byte type against `check`, built once per (type, check) of numeq's own
// formats: 2^16 flags and 2^16 values at most, which a 512^2 input amortises many times over.
std::shared_ptr<const Table> table_for(const ElementType& type, const Format* check) {
  const int source = type.format == nullptr ? 1000 + 2 * type.bytes + (type.is_signed ? 1 : 0) : format_key(*type.format);
  const int checked = check == nullptr ? 0 : format_key(*check) + 1;
  if (source < 0 || checked < 0) return std::make_shared<const Table>(build_table(type, check, build_values(type)));
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<const std::vector<double>>> values;
  static std::map<std::pair<int, int>, std::shared_ptr<const Table>> tables;
  const std::lock_guard<std::mutex> lock(mutex);
  auto& table = tables[{source, checked}];
  if (!table) {
    auto& v = values[source];
    if (!v && type.format != nullptr) v = build_values(type);
    table = std::make_shared<const Table>(build_table(type, check, v));
  }
  return table;
}

// The first of each kind over all threads.
struct Firsts {
  std::atomic<std::size_t> not_value, not_exact, not_pattern;
  explicit Firsts(std::size_t n) : not_value(n), not_exact(n), not_pattern(n) {}
};

void record_first(std::atomic<std::size_t>& first, std::size_t index) {
  std::size_t current = first.load();
  while (index < current && !first.compare_exchange_weak(current, index)) {
  }
}

template <class T>
T load_at(const void* data, std::size_t i) {
  T value;
  std::memcpy(&value, static_cast<const char*>(data) + i * sizeof(T), sizeof(T));
  return value;
}

// 1- and 2-byte elements: values by table (formats) or conversion (integers), flags by table.
template <class T>
void widen_small(const T* src, double* out, const ElementType& type, const Table& table, std::size_t begin,
                 std::size_t end, Firsts& firsts) {
  using Signed = std::make_signed_t<T>;
  const double* values = table.values ? table.values->data() : nullptr;
  const std::uint8_t* flags = table.flags.empty() ? nullptr : table.flags.data();
  bool found_value = false, found_pattern = false;
  for (std::size_t b = begin; b < end; b += block) {
    const std::size_t e = std::min(end, b + block);
    if (out != nullptr) {
      if (values != nullptr) {
        for (std::size_t i = b; i < e; ++i) out[i] = values[src[i]];
      } else if (type.is_signed) {
        for (std::size_t i = b; i < e; ++i) out[i] = static_cast<double>(static_cast<Signed>(src[i]));
      } else {
        for (std::size_t i = b; i < e; ++i) out[i] = static_cast<double>(src[i]);
      }
    }
    if (flags == nullptr) continue;
    std::uint8_t any = 0;
    for (std::size_t i = b; i < e; ++i) any |= flags[src[i]];
    if (any == 0) [[likely]] continue;
    for (std::size_t i = b; i < e; ++i) {
      const std::uint8_t f = flags[src[i]];
      if ((f & stray_bits) != 0 && !found_pattern) {
        record_first(firsts.not_pattern, i);
        found_pattern = true;
      }
      if ((f & not_in_check) != 0 && !found_value) {
        record_first(firsts.not_value, i);
        found_value = true;
      }
    }
  }
}

// Whether float64 holds the 64-bit integer whose magnitude is u: its significant bits span at
// most 53 (what numpy's round trip int64 -> float64 -> int64 accepts).
inline bool exact_magnitude(std::uint64_t u) {
  return u <= (std::uint64_t{1} << 53) || (u >> std::countr_zero(u)) < (std::uint64_t{1} << 53);
}

// Elements of 4 and 8 bytes: a block converted into dst, then checked there (first_not_value,
// the check every in_fmt goes through); float and double are checked in place.
void widen_wide(const void* data, double* out, const ElementType& type, const Format* check, std::size_t begin,
                std::size_t end, Firsts& firsts) {
  const Format* f = type.format;
  const bool is_fp32 = f != nullptr && *f == formats::fp32, is_fp64 = f != nullptr && *f == formats::fp64;
  const bool in_place = is_fp32 || is_fp64;
  std::vector<double> scratch(out == nullptr && check != nullptr && !in_place ? block : 0);
  bool found_value = false, found_exact = false, found_pattern = false;
  for (std::size_t b = begin; b < end; b += block) {
    const std::size_t e = std::min(end, b + block), len = e - b;
    double* const dst = out != nullptr ? out + b : scratch.data();
    const bool convert = out != nullptr || !scratch.empty();
    if (is_fp32) {
      const float* x = static_cast<const float*>(data) + b;
      if (convert)
        for (std::size_t k = 0; k < len; ++k) dst[k] = static_cast<double>(x[k]);  // exact
      if (check != nullptr && !found_value)
        if (const std::size_t k = first_not_value(x, len, *check); k < len) {
          record_first(firsts.not_value, b + k);
          found_value = true;
        }
      continue;
    }
    if (is_fp64) {
      const double* x = static_cast<const double*>(data) + b;
      if (convert) std::memcpy(dst, x, len * sizeof(double));
      if (check != nullptr && !found_value)
        if (const std::size_t k = first_not_value(x, len, *check); k < len) {
          record_first(firsts.not_value, b + k);
          found_value = true;
        }
      continue;
    }
    if (f != nullptr) {  // patterns of another 4- or 8-byte format (tf32): decoded one by one
      const std::uint64_t mask = pattern_mask(*f);
      for (std::size_t k = 0; k < len; ++k) {
        const std::uint64_t p = type.bytes == 4 ? load_at<std::uint32_t>(data, b + k) : load_at<std::uint64_t>(data, b + k);
        if ((p & ~mask) != 0) {
          if (!found_pattern) record_first(firsts.not_pattern, b + k);
          found_pattern = true;
          dst[k] = 0.0;
        } else {
          dst[k] = decode_pattern(*f, p);
        }
      }
    } else if (type.bytes == 4) {
      if (type.is_signed) {
        const auto* x = static_cast<const std::int32_t*>(data) + b;
        for (std::size_t k = 0; k < len; ++k) dst[k] = static_cast<double>(x[k]);
      } else {
        const auto* x = static_cast<const std::uint32_t*>(data) + b;
        for (std::size_t k = 0; k < len; ++k) dst[k] = static_cast<double>(x[k]);
      }
    } else {
      // 64-bit integers: converted, and their magnitudes tested against 2^53 (exactness asked
      // only of the few beyond it).
      const auto* x = static_cast<const std::uint64_t*>(data) + b;
      bool beyond = false;
      if (type.is_signed) {
        for (std::size_t k = 0; k < len; ++k) {
          const auto v = static_cast<std::int64_t>(x[k]);
          dst[k] = static_cast<double>(v);
          const std::uint64_t u = v < 0 ? std::uint64_t{0} - x[k] : x[k];
          beyond |= u > (std::uint64_t{1} << 53);
        }
      } else {
        for (std::size_t k = 0; k < len; ++k) {
          dst[k] = static_cast<double>(x[k]);
          beyond |= x[k] > (std::uint64_t{1} << 53);
        }
      }
      if (beyond && !found_exact)
        for (std::size_t k = 0; k < len; ++k) {
          const auto v = static_cast<std::int64_t>(x[k]);
          const std::uint64_t u = type.is_signed && v < 0 ? std::uint64_t{0} - x[k] : x[k];
          if (!exact_magnitude(u)) {
            record_first(firsts.not_exact, b + k);
            found_exact = true;
            break;
          }
        }
    }
    if (check != nullptr && !found_value)
      if (const std::size_t k = first_not_value(dst, len, *check); k < len) {
        record_first(firsts.not_value, b + k);
        found_value = true;
      }
  }
}

}  // namespace

WidenReport widen(const void* data, std::size_t n, const ElementType& type, double* out, const Format* check) {
  if (type.bytes != 1 && type.bytes != 2 && type.bytes != 4 && type.bytes != 8)
    throw error("bytes: elements are 1, 2, 4 or 8 bytes wide, got " + std::to_string(type.bytes));
  if (type.format != nullptr && type.format->storage_bits != 8 * type.bytes)
    throw error("format: '" + std::string(type.format->name) + "' is stored in " +
                std::to_string(type.format->storage_bits) + " bits, not " + std::to_string(8 * type.bytes));
  Firsts firsts(n);
  if (type.bytes <= 2) {
    const std::shared_ptr<const Table> table = table_for(type, check);
    parallel_for(n, [&](std::size_t begin, std::size_t end) {
      if (type.bytes == 1)
        widen_small(static_cast<const std::uint8_t*>(data), out, type, *table, begin, end, firsts);
      else
        widen_small(static_cast<const std::uint16_t*>(data), out, type, *table, begin, end, firsts);
    });
  } else {
    parallel_for(n, [&](std::size_t begin, std::size_t end) { widen_wide(data, out, type, check, begin, end, firsts); });
  }
  return WidenReport{firsts.not_value.load(), firsts.not_exact.load(), firsts.not_pattern.load()};
}

}  // namespace numeq
