#pragma once
// The references' view of the long accumulator (numeq::LongAccumulator, formats/exact.hpp, the
// one exact accumulator): its exact value handed to MPFR, for the functions that continue from an
// exact sum in arbitrary precision.

#include <mpfr.h>

#include "numeq/formats/exact.hpp"

namespace numeq {

// The exact value of `sum` into `out`, whose precision is raised as needed (exact for finite
// values; NaN and the infinities as they are; an exact zero +0, or -0 if every term was -0).
void to_mpfr(const LongAccumulator& sum, mpfr_ptr out);

}  // namespace numeq
