#pragma once
// The inputs' format check of the catalogue's operations (private to cases/).

#include <cstddef>

#include "numeq/formats/cast.hpp"

namespace numeq::cases::detail {

// The first element of x[0, n) that rounding to nearest into f changes (x != round(x)), among
// those `skip` does not excuse; n when none. first_not_value finds the candidates (on threads, a
// branch-free block test first): an element it passes is a value of f, which every rounding
// keeps. Each candidate is then decided by the rounding itself, so the criterion is exactly
// "rounds to itself" (-0 into a format with a single zero passes).
template <class Skip>
std::size_t first_changed_by_rounding(const double* x, std::size_t n, const Format& f, const Skip& skip) {
  const Cast nearest{f};
  for (std::size_t from = 0; from < n;) {
    const std::size_t i = from + first_not_value(x + from, n - from, f);
    if (i >= n) return n;
    if (!skip(x[i]) && round_to_format(x[i], nearest) != x[i]) return i;
    from = i + 1;
  }
  return n;
}

}  // namespace numeq::cases::detail
