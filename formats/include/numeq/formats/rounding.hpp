#pragma once
// Rounding, overflow and subnormal policies, and Cast: the value that says how a number enters a
// format. Modes are passed in, never global (as in Berkeley SoftFloat's explicit-mode routines).

#include <cstdint>
#include <string>
#include <string_view>

#include "numeq/formats/format.hpp"
#include "numeq/formats/names.hpp"

namespace numeq {

enum class Rounding : std::uint8_t {
  nearest_even,  // IEEE roundTiesToEven. With one significand bit (E8M0) both neighbours are
                 // odd; ties then go away from zero, as MPFR (precision 1) and ml_dtypes do.
  nearest_away,  // IEEE roundTiesToAway
  toward_zero,   // IEEE roundTowardZero
  upward,        // IEEE roundTowardPositive
  downward,      // IEEE roundTowardNegative
  odd,           // round to odd: truncate, then set the last bit if inexact (Boldo-Melquiond);
                 // overflow gives the largest finite value, as truncation does
  stochastic,    // round away with probability = discarded fraction, from counter-based bits
};

enum class Overflow : std::uint8_t {
  ieee,      // Inf; NaN where the format has NaN but no Inf; directed modes per IEEE 754 s7.4
  saturate,  // +-max finite, also for +-Inf inputs (OFP8 s5.2 saturating mode)
};

enum class Subnormals : std::uint8_t {
  keep,
  flush_outputs,  // FTZ: a result below the smallest normal (after rounding) becomes signed zero
  flush_inputs,   // DAZ: an input below its own format's smallest normal is read as signed zero
  flush_both,     // FTZ and DAZ together (CUDA --ftz=true, x86 FTZ|DAZ)
};

inline constexpr int default_random_bits = 32;

// Format + rounding + overflow + subnormals (+ the stochastic-rounding key).
struct Cast {
  Format format = formats::fp32;
  Rounding rounding = Rounding::nearest_even;
  Overflow overflow = Overflow::ieee;
  Subnormals subnormals = Subnormals::keep;
  std::uint64_t seed = 0;                   // stochastic rounding: generator key
  int random_bits = default_random_bits;    // stochastic rounding: bits per draw, 1..64

  constexpr bool flushes_inputs() const {
    return subnormals == Subnormals::flush_inputs || subnormals == Subnormals::flush_both;
  }
  constexpr bool flushes_outputs() const {
    return subnormals == Subnormals::flush_outputs || subnormals == Subnormals::flush_both;
  }
  constexpr bool operator==(const Cast&) const = default;
};

// Names, as used by Python and the CLI. Parsers throw numeq::error naming `parameter` and listing
// the valid choices.
Rounding rounding_by_name(std::string_view name, std::string_view parameter = "rounding");
Overflow overflow_by_name(std::string_view name, std::string_view parameter = "overflow");
Subnormals subnormals_by_name(std::string_view name, std::string_view parameter = "subnormals");
std::string rounding_names();
std::string overflow_names();
std::string subnormals_names();

// Checks a Cast before use: a floating target format, random_bits in 1..64. Throws numeq::error.
void validate(const Cast& cast, std::string_view parameter = "fmt");

}  // namespace numeq
