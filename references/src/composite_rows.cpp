// The row driver of the composite operations (composite_rows.hpp).

#include "composite_rows.hpp"

#include <bit>

namespace numeq::reference::rows {

// Runs row_fn(row, begin) over every row on parallel_for threads, gathers patterns into values
// and reports the first NaN-into-no-NaN element.
xt::xarray<double> run_rows(const std::vector<std::size_t>& shape, std::size_t rows, const Cast& out,
                            const char* what, double within,
                            const std::function<void(std::size_t, const RowOutput&)>& row_fn,
                            double* radius) {
  validate(out, "out");
  xt::xarray<double> result = xt::empty<double>(shape);
  const std::size_t n = result.size();
  std::vector<std::uint64_t> bits(n, 0);
  const RowOutput row{out, random_stream_key(out.seed), out.rounding == Rounding::stochastic, bits.data(), within, radius};
  // Each row costs microseconds to milliseconds (MPFR), so even a few rows pay for threads.
  parallel_for(
      rows,
      [&](std::size_t begin, std::size_t end) {
        for (std::size_t r = begin; r < end; ++r) row_fn(r, row);
      },
      2);
  double* values = result.data();
  for (std::size_t i = 0; i < n; ++i) {
    if (bits[i] == invalid_encoding)
      throw numeq::error(std::string("out: element ") + std::to_string(i) + " (C order) of " + what +
                         " is NaN, which format " + std::string(out.format.name) +
                         " cannot hold: it has no NaN encoding");
    // An enclosed result is binary64: its patterns are the doubles' own bits.
    values[i] = within > 0 ? std::bit_cast<double>(bits[i]) : decode_bits(out.format, bits[i]);
  }
  return result;
}

}  // namespace numeq::reference::rows
