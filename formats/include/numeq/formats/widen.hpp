#pragma once
// Reading the numbers of an array as float64 values, whatever element type they arrive in:
// float and double, bit patterns of numeq's 8- and 16-bit formats (numpy's float16, ml_dtypes'
// bfloat16 and fp8 / fp6 / fp4 arrays) and integers of 1 to 8 bytes. One multi-threaded pass over
// contiguous memory that can check, in the same pass, that every value is a value of a format
// (the `in_fmt` check of every array a user says holds that format).

#include <algorithm>
#include <cstddef>

#include "numeq/formats/format.hpp"

namespace numeq {

// An element type: bit patterns of a floating format (float and double arrays hold fp32 and fp64
// patterns; a format's patterns fill format.storage_bits), or integers of `bytes` bytes, two's
// complement when signed.
struct ElementType {
  const Format* format = nullptr;  // null: integers
  int bytes = 8;                   // 1, 2, 4 or 8
  bool is_signed = true;           // integers only

  static ElementType patterns(const Format& f);  // throws numeq::error for an integer format
  static ElementType integers(int bytes, bool is_signed);
};

// What widen found, each the first element (C order) of its kind, or n where there is none.
struct WidenReport {
  std::size_t not_value;    // not a value of the checked format (numeq::is_value)
  std::size_t not_exact;    // an integer float64 does not hold (64-bit, beyond 2^53 with low bits)
  std::size_t not_pattern;  // bits set outside its format's pattern (6- and 4-bit formats in bytes)

  std::size_t first() const { return std::min({not_value, not_exact, not_pattern}); }
};

// The n contiguous elements at `data` (of element type `type`) as doubles into out[0..n) (null:
// none written, only checked), each checked to be a value of `check` (null: not checked). Bit
// patterns are decoded by numeq's own decode (decode_pattern; 1- and 2-byte formats through a
// table of it built once); element i of out depends on element i of data alone, so threads never
// change a result. Where the report is not clean, out's contents are unspecified.
WidenReport widen(const void* data, std::size_t n, const ElementType& type, double* out,
                  const Format* check = nullptr);

}  // namespace numeq
