#pragma once
// What the Op factories share (private to cases/): input checks, the matmul shape and
// broadcasting rules, the exactly rounded quotient. op.cpp, op_reduction.cpp and op_quantized.cpp
// use them.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "numeq/cases/op.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/shape.hpp"
#include "input_check.hpp"

namespace numeq::cases::op_detail {

using Array = xt::xarray<double>;

using Shared = std::shared_ptr<const Array>;

// Every element of x must be a value of fmt (or NaN): the operation's inputs are values of its
// input format, and the emulations read them as such.
inline void check_values(const Array& x, const Format& fmt, const char* parameter) {
  const std::size_t i =
      detail::first_changed_by_rounding(x.data(), x.size(), fmt, [](double v) { return std::isnan(v); });
  if (i < x.size())
    throw numeq::error(std::string(parameter) + ": element " + std::to_string(i) + " (C order) = " +
                       std::to_string(x.data()[i]) + " is not a value of in_fmt '" + std::string(fmt.name) +
                       "'; round the inputs first");
}

inline const Format& floating_format(std::string_view name, const char* parameter) {
  const Format& f = format_by_name(name, parameter);
  if (f.is_integer())
    throw numeq::error(std::string(parameter) + ": '" + std::string(name) +
                       "' is an integer format; this operation takes floating formats (" +
                       format_names(FormatKind::floating) + ")");
  return f;
}

// Round x to double by round-to-odd from its (hi + remainder sign) description, then once into
// the cast: correct for every deterministic rounding because binary64 carries at least two more
// bits than any format rounded into here (Boldo and Melquiond, IEEE TC 57(4), 2008).
inline double round_quotient(double q, double remainder, const Cast& cast) {
  if (remainder != 0 && std::isfinite(q)) {
    std::uint64_t bits;
    std::memcpy(&bits, &q, sizeof bits);
    if ((bits & 1u) == 0) q = std::nextafter(q, remainder > 0 ? std::numeric_limits<double>::infinity()
                                                              : -std::numeric_limits<double>::infinity());
  }
  return round_to_format(q, cast);
}

// (hi + lo) / n correctly rounded into cast, and the double nearest to it (for the exact value).
struct Quotient {
  double rounded;
  double nearest;
};
inline Quotient divide_exact(double hi, double lo, double n, const Cast& cast) {
  if (!std::isfinite(hi)) return {round_to_format(hi / n, cast), hi / n};
  const double q = (hi + lo) / n;  // hi + lo == hi when |lo| <= ulp(hi)/2 (a double-double)
  // remainder of the exact division: hi + lo - q n, its sign settles the odd rounding.
  const double r = std::fma(-q, n, hi) + lo;
  return {round_quotient(q, r, cast), q};
}

// The result shape of a[..., M, K] @ b[..., K, N]: the batch axes broadcast as numpy does.
inline std::vector<std::size_t> matmul_shape(const Array& a, const Array& b) {
  const auto batch = broadcast_shape(std::vector<std::size_t>(a.shape().begin(), a.shape().end() - 2),
                                     std::vector<std::size_t>(b.shape().begin(), b.shape().end() - 2));
  if (!batch)
    throw numeq::error("b: batch dimensions of a " + shape_text(a) + " and b " + shape_text(b) + " do not broadcast");
  std::vector<std::size_t> shape = *batch;
  shape.push_back(a.shape()[a.dimension() - 2]);
  shape.push_back(b.shape().back());
  return shape;
}

inline void check_broadcast(const Array& c, const std::vector<std::size_t>& result, const char* parameter) {
  if (!broadcasts_to(c.shape(), result))
    throw numeq::error(std::string(parameter) + ": shape " + shape_text(c) + " does not broadcast to the result " +
                       shape_text(result));
}

// MPFR-certified operations: the exact value is known to binary64 (correctly rounded), so it
// travels as hi with lo = 0 and a relative error of at most 2^-53.
inline reference::ExactValues certified(Array hi) {
  reference::ExactValues r{std::move(hi), {}};
  r.lo = xt::zeros<double>(r.hi.shape());
  return r;
}

}  // namespace numeq::cases::op_detail
