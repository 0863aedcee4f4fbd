#pragma once
// Certified composite operations: softmax, log-softmax, layernorm, rmsnorm and scaled dot-product
// attention, every output element correctly rounded into an output Cast (every rounding mode,
// stochastic included, overflow and subnormal policies).
//
// Definitions (real arithmetic on the exact input values, rounded once per output element):
//   softmax(x)_i     = e^{x_i} / sum_j e^{x_j}                       along `axis`
//   log_softmax(x)_i = x_i - log(sum_j e^{x_j})                      along `axis`
//   layernorm(x)_i   = (x_i - mean) / sqrt(var + eps) * gamma_i + beta_i   over the last axis,
//                      mean = sum_j x_j / n, var = sum_j (x_j - mean)^2 / n (biased, as PyTorch)
//   rmsnorm(x)_i     = x_i / sqrt(sum_j x_j^2 / n + eps) * gamma_i + beta_i  over the last axis
//   attention(q, k, v)[i, c] = sum_j p_ij v[j, c],  p_ij = softmax_j(scale * q_i . k_j + mask_ij)
//                      over the keys j that take part (below); scale defaults to 1/sqrt(d), the
//                      real number, d = q.shape[-1].
// gamma and beta are optional (1 and 0). eps is a double >= 0, used exactly as given.
//
// Method: Ziv's loop over MPFR interval enclosures (mpfr_value.hpp, functions.hpp). Every row's
// exact parts are computed exactly first: x_j - x_ref for softmax (x_ref an entry of the row),
// n x_i - sum x and n sum x^2 - (sum x)^2 + n^2 eps for layernorm (the scaled forms
// (n x_i - S) / sqrt(n Q - S^2 + n^2 eps) keep every operand a dyadic number), the dot products
// q_i . k_j for attention. Only the transcendental steps (exp, log, sqrt, the 1/sqrt(d) scale)
// carry interval width. An element is decided when both ends of its enclosure round alike; the
// precision starts at out precision + 32 (+ random_bits) and doubles up to 2^16 bits, beyond which
// numeq::error("... could not certify ...") is thrown, never an uncertified result.
//
// Why the loop ends: a result that is exactly representable (or exactly a rounding boundary)
// must come out of the enclosure as a point. softmax is rational only when every finite entry of
// the row is equal (Lindemann-Weierstrass: e^{a_1}, ..., e^{a_m} for distinct algebraic a_i are
// linearly independent over the algebraic numbers), and then every exponent is an exact 0, so
// the enclosure is the point 1/n. log_softmax is rational only for a row with one finite entry
// (result 0). layernorm/rmsnorm are algebraic: sqrt of the exact dyadic radicand is either exact
// at a high enough precision or irrational, so an exact result is reached as a point. attention
// is rational exactly when, grouping the taking-part keys by equal score, every group has the
// same mean of v[:, c] (again Lindemann-Weierstrass). It is computed as the top-scoring group's
// exact mean mu plus sum_g e^{delta_g} T_g / (c_top S) with exact coefficients T_g that vanish for
// every group whose mean is mu: a rational result comes out as the point mu, and a result a hair
// from mu (scores far apart) carries a correction of the right sign, however small.
//
// Special values (the mathematical definition where it gives one, NaN where it does not):
//   softmax, log_softmax: a NaN or +Inf in a row makes the whole row NaN (Inf/Inf). -Inf entries
//     take no part: their softmax is +0, their log_softmax -Inf. A row of only -Inf is NaN.
//   layernorm, rmsnorm: a NaN or infinite x in a row makes the row NaN. A zero radicand (a constant
//     row with eps = 0 for layernorm, an all-zero row with eps = 0 for rmsnorm) gives NaN (0/0).
//     gamma_i, beta_i: NaN gives NaN; infinite gamma_i gives +-Inf (NaN where the normalised value
//     is exactly 0); infinite beta_i gives beta_i (NaN against an opposite infinite product).
//   attention: keys excluded by the causal mask (key j > query i, the top-left alignment of
//     PyTorch's is_causal) or by a -Inf mask entry take no part: neither k_j nor v_j is read. A row
//     whose taking-part scores include NaN or +Inf (NaN or Inf in q_i, in such a k_j, or NaN/+Inf
//     in the mask) is NaN. A row with no taking-part key is NaN. NaN in a taking-part v[j, c]
//     gives NaN in column c; infinite v[j, c] give that infinity (NaN when both signs meet).
//   Exact zero results have the signs round-to-nearest arithmetic gives them: +0 from a
//   difference of equal values (layernorm's x_i - mean, attention's mean of values summing to 0),
//   the product sign for rmsnorm's x_i * gamma_i (-0 for x_i = -0, gamma positive), a zero sum
//   with beta_i is -0 only when both zeros are -0, and attention's sum of p_ij v[j, c] is -0 only
//   when every taking-part v[j, c] is -0.
//
// Element i (C order) of a result rounded stochastically uses the draw
// random_bits_at(random_stream_key(out.seed), i), as casts do. Rows run on numeq::parallel_for
// threads; results do not depend on the thread count. A NaN result into a format without NaN
// throws numeq::error naming the first such element (C order). out must be a floating format.

#include <cstddef>
#include <optional>

#include <xtensor/xarray.hpp>

#include "numeq/formats/rounding.hpp"

namespace numeq::reference {

// Along `axis` (negative counts from the end); the result has x's shape.
xt::xarray<double> softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast& out);
xt::xarray<double> log_softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, const Cast& out);

// Enclosed results: the exact value known to within a relative error, for a check that measures
// errors against it (cases::Op: the verdict adds that error as slack), at a fraction of the cost
// of certifying every element's binary64 rounding. Each element is a double within
// relative_error x |exact| of the exact value (for exact values in binary64's normal range; below
// it, within what binary64 rounding gives, as for out = fp64): the correctly rounded binary64
// value where the fast enclosure's two ends round alike or the MPFR loop decides it, else the
// midpoint of a fast enclosure no wider than relative_error x its smaller end. relative_error: a
// power of two in [2^-53, 2^-20]; the fast enclosures are about 2^-42 wide, so 2^-40 lets nearly
// every element take the fast path. NUMEQ_FUNCTIONS=mpfr gives the binary64 values throughout.
struct Within {
  double relative_error;
};
xt::xarray<double> softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, Within within);
xt::xarray<double> log_softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, Within within);

// Optional affine parameters and eps of a normalisation over the last axis. gamma and beta, when
// given (not owned, may be null), have the shape {n} with n = x.shape()[-1].
struct NormParameters {
  const xt::xarray<double>* gamma = nullptr;
  const xt::xarray<double>* beta = nullptr;
  double eps = 0.0;  // >= 0 and finite
};

xt::xarray<double> layernorm(const xt::xarray<double>& x, const NormParameters& parameters, const Cast& out);
xt::xarray<double> rmsnorm(const xt::xarray<double>& x, const NormParameters& parameters, const Cast& out);
xt::xarray<double> layernorm(const xt::xarray<double>& x, const NormParameters& parameters, Within within);
xt::xarray<double> rmsnorm(const xt::xarray<double>& x, const NormParameters& parameters, Within within);

// Options of scaled dot-product attention. mask (not owned, may be null) is additive, of shape
// {B..., Lq, Lk} exactly (the Python layer broadcasts it and turns a boolean mask into 0 / -Inf).
struct AttentionParameters {
  std::optional<double> scale;  // nullopt: exactly 1/sqrt(d)
  bool causal = false;
  const xt::xarray<double>* mask = nullptr;
};

// q[B..., Lq, d], k[B..., Lk, d], v[B..., Lk, dv] with equal batch dimensions B... (the Python
// layer broadcasts them); the result is [B..., Lq, dv]. check_attention_shapes throws
// numeq::error naming the first argument whose shape does not fit (what attention checks first;
// an op built on these inputs checks it when built).
void check_attention_shapes(const xt::xarray<double>& q, const xt::xarray<double>& k, const xt::xarray<double>& v,
                            const xt::xarray<double>* mask);
xt::xarray<double> attention(const xt::xarray<double>& q, const xt::xarray<double>& k,
                             const xt::xarray<double>& v, const AttentionParameters& parameters,
                             const Cast& out);
// Only the given rows (flat over the batch and query dimensions, in C order: row r holds the
// elements [r dv, (r + 1) dv) of the full result), into shape {rows.size(), dv}: what a check
// needs where its enclosures leave a few elements' rounding open (cases::Op::reference_at).
// Stochastic rounding draws by the compact result's index, so callers use it for deterministic
// roundings.
xt::xarray<double> attention(const xt::xarray<double>& q, const xt::xarray<double>& k,
                             const xt::xarray<double>& v, const AttentionParameters& parameters,
                             const Cast& out, const std::vector<std::size_t>& rows);

// Attention's exact result as enclosures, for a check (cases::Op::exact_within): each element a
// double mid and a radius with |exact - mid| <= radius, the fast path's enclosure where it has a
// finite one (about 2^-46 |v| wide: its exp's width, e^x to 2^-47), else the correctly rounded
// binary64 value (radius: half its ulp); NaN and infinite results have radius 0. A relative
// enclosure (Within) would send every output near zero (weights of values of both signs that
// nearly cancel) to the MPFR loop; a radius holds there at no cost.
struct EnclosedValues {
  xt::xarray<double> mid;
  std::vector<double> radius;  // one per element of mid, C order
};
EnclosedValues attention_enclosed(const xt::xarray<double>& q, const xt::xarray<double>& k,
                                  const xt::xarray<double>& v, const AttentionParameters& parameters);

}  // namespace numeq::reference
