#include "numeq/references/accumulator.hpp"

#include <gmp.h>

namespace numeq {

void to_mpfr(const LongAccumulator& sum, mpfr_ptr out) {
  if (sum.is_nan()) {
    mpfr_set_nan(out);
    return;
  }
  if (sum.is_infinite()) {
    mpfr_set_inf(out, sum.is_negative_infinity() ? -1 : 1);
    return;
  }
  if (sum.is_zero()) {
    mpfr_set_zero(out, sum.only_negative_zeros() ? -1 : 1);
    return;
  }
  const auto magnitude = sum.magnitude();
  mpz_t z;
  mpz_init(z);
  mpz_import(z, magnitude.size(), -1, sizeof(std::uint64_t), 0, 0, magnitude.data());
  const std::size_t bits = mpz_sizeinbase(z, 2);
  mpfr_set_prec(out, static_cast<mpfr_prec_t>(bits < 2 ? 2 : bits));
  mpfr_set_z_2exp(out, z, LongAccumulator::lsb_exponent, MPFR_RNDN);  // exact: the precision holds every bit
  if (sum.is_negative()) mpfr_neg(out, out, MPFR_RNDN);
  mpz_clear(z);
}

}  // namespace numeq
