#pragma once
// The test oracles' MPFR building blocks (shared by the function and composite oracles): an owning
// mpfr_t kept apart from numeq's own (the oracle shares no code with what it checks), and round
// to odd, which lets a later rounding of the oracle's value to any narrower format be correct.

#include <mpfr.h>

namespace numeq_oracle {

// An owning, move-only mpfr_t of an explicit precision.
struct MpfrVar {
  mpfr_t v;
  explicit MpfrVar(mpfr_prec_t p) { mpfr_init2(v, p); }
  ~MpfrVar() { mpfr_clear(v); }
  MpfrVar(const MpfrVar&) = delete;
  MpfrVar& operator=(const MpfrVar&) = delete;
  MpfrVar(MpfrVar&& o) noexcept {
    mpfr_init2(v, MPFR_PREC_MIN);
    mpfr_swap(v, o.v);
  }
};

// MpfrVar whose default precision is the including oracle's working precision.
template <mpfr_prec_t (*DefaultPrecision)()>
struct Big : MpfrVar {
  Big() : MpfrVar(DefaultPrecision()) {}
  explicit Big(mpfr_prec_t p) : MpfrVar(p) {}
};

inline void tiny_positive(mpfr_ptr b) {
  mpfr_set_zero(b, 1);
  mpfr_nextabove(b);  // the smallest positive MPFR number, 2^(emin - 1)
}
inline void force_positive(mpfr_ptr b) {  // b > 0 mathematically; MPFR's range may have lost it
  if (mpfr_zero_p(b)) tiny_positive(b);
}

// out (its own precision) = round-to-odd of op's exact value; op(dst, rnd) returns MPFR's ternary
// value.
template <class Op>
void to_odd(mpfr_ptr out, Op op) {
  MpfrVar t(mpfr_get_prec(out) - 1);
  const int ternary = op(t.v, MPFR_RNDZ);
  mpfr_set(out, t.v, MPFR_RNDN);  // exact: one more bit
  if (ternary == 0) return;
  if (mpfr_zero_p(out)) {  // underflow: RNDZ gave 0 below the true value (ternary < 0) or above
    tiny_positive(out);
    if (ternary > 0) mpfr_neg(out, out, MPFR_RNDN);
    return;
  }
  if (mpfr_signbit(out)) mpfr_nextbelow(out);  // sets the new last bit: odd, strictly inside
  else mpfr_nextabove(out);
}

}  // namespace numeq_oracle
