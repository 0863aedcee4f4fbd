#pragma once
// The fast path of the certified functions (functions.hpp): an enclosure of f(x) in plain double
// arithmetic with an error bound proven from the algorithm (fast_functions.cpp gives each proof),
// rounded through numeq's one kernel at both ends. When both ends give the same pattern that is
// the correctly rounded result (Ziv's rounding test: every numeq rounding mode is monotone);
// otherwise functions.cpp falls back to the MPFR loop. This is the CORE-MATH approach (a fast
// evaluation with a rigorous error bound, an accurate slow path only when the rounding test
// fails: Sibidanov, Zimmermann, Glondu, "The CORE-MATH project", ARITH 2022).

#include <cstddef>
#include <cstdint>
#include <optional>

#include "numeq/formats/rounding.hpp"
#include "numeq/references/functions.hpp"

namespace numeq::reference::fast {

// The true value lies in [lo, hi]; an open end excludes its endpoint (the true value is strictly
// inside), which lets an enclosure that ends on a representable number (1 for tanh, x for silu)
// still round like a value a hair inside it. Infinite ends are always open (f(x) is finite for
// finite x in the domain).
struct Enclosure {
  double lo = 0;
  double hi = 0;
  bool lo_open = false;
  bool hi_open = false;
};

// An enclosure of f(x) for a finite x in f's domain (special values are handled before), or
// nullopt where the fast path has none (reciprocal of |x| outside [2^-1020, 2^1020]; an exp
// whose scaled result overflows a double, within an ulp of ln(DBL_MAX)).
std::optional<Enclosure> enclose(Function f, double x);

// e^x[i] into y[i] for n arguments, each in [-700, 700] (vectorised; the composite operations'
// weights): |y - e^x| <= kExpManyError |y|, every result normal (e^-700 > 2^-1011). The bound is
// exp_approx's 64 u doubled, as every fast enclosure's (fast_functions.cpp, kMargin).
inline constexpr double kExpManyError = 128 * 0x1p-53;
void exp_many(const double* x, std::size_t n, double* y);

// Whether the fast path can be used for `out` at all: a signed format and an effective precision
// (significand bits, plus the random bits stochastic rounding looks at) that a double enclosure
// of relative width ~2^-43 can usually decide.
bool suits(const Cast& out);

// Ziv's test: the pattern both ends of e round to through numeq's kernel, or nullopt when they
// differ.
std::optional<std::uint64_t> round_enclosure(const Enclosure& e, const Cast& out, std::uint64_t random);

}  // namespace numeq::reference::fast
