// The data-driven probabilistic bound (bound.hpp, "Probabilistic bounds that follow the data").
//
// ---- Why a second walk
// bound.cpp's walk gives every term a weight that depends on the plan and K only, so its bound
// is sum_k w_k |t_k|: it must assume every partial sum is as large as sum |t_k| and every
// alignment loses a whole grid step. For mixed-sign data sum |t_k| is about sqrt(K) times the
// partial sums a device actually holds, and a tensor core's truncations (fused alignment,
// toward-zero step outputs) are one-signed per term but of either sign across terms: the
// deterministic treatment of an fp8 GEMM at K = 1024 is about 1000x above what the hardware
// loses. This walk reads the data of the element it bounds.
//
// ---- Exact error decomposition
// Every rounding r of the plan rounds the computed value v_r of its operands: fl(v_r) = v_r + e_r.
// By induction over the plan, the computed value of a node is the exact sum of the terms below it
// plus the e_r of the roundings below it, so the value before the output cast is
//     v = s + sum_r e_r        (s the exact sum of the terms, and of c)
// exactly: no products of (1 + delta) (Higham 2002, s3.1 gives the same for recursive sums).
// Order the e_r as the device commits them (within a fused step: the alignment cuts, then the
// step's rounding) and let F_r be everything known after e_r (the data included).
//
// ---- Per rounding: a mean and a bounded zero-mean rest
// Write e_r = beta_r + eps_r with beta_r = E(e_r | F_{r-1}); the eps_r are martingale
// differences by construction. What the model assumes is what is known of beta_r:
//   (N) round to nearest (and stochastic rounding): beta_r = 0 (Higham and Mary 2019, s2, model
//       M; for stochastic rounding Connolly, Higham and Mary, SIAM J. Sci. Comput. 43(1) A566,
//       2021, Lemma 5.2 proves it from independent random bits). |e_r| <= rho |v_r| + eta, so
//       eps_r lies in an interval of width 2 h_r, h_r = rho V_r + eta, with |v_r| <= V_r below.
//   (T) an alignment cut of a fused step (fused.hpp step 4; truncation toward zero at the grid
//       g_s = 2^(E_s - F) of step s): the cut product t_i loses e_i = -sign(t_i) theta_i g_s,
//       theta_i in [0, 1). Not zero-mean: one-signed per term. The model's assumption (in the
//       spirit of Higham and Mary's mean independence, and of their 2020 analysis of data with
//       a mean, SIAM J. Sci. Comput. 42(5) A3427): given the past, every product the reduction
//       cuts has the same conditional mean mu in [0, 1] of theta: the distribution of the lost
//       low bits depends neither on the product's sign nor on the step that cuts it. (Uniformly
//       distributed lost bits give mu = 1/2 less 2^-(bits lost)/2; sign-symmetric data leave mu
//       independent of the sign, which is what the bound needs.) The means then add to
//           -mu sum_s g_s sigma_s,   sigma_s = sum over the products step s cuts of sign(t_i),
//       of size at most |sum_s g_lo,s sure_s| + sum_s (g_hi,s - g_lo,s)|sure_s| +
//       sum_s g_hi,s max(maybe+_s, maybe-_s), read from the data: which products are cut and
//       their signs. g_s lies in [g_lo,s, g_hi,s] (below); a product is surely cut (not a multiple
//       of g_lo: its lowest set bit lies below), surely kept (a multiple of g_hi), or possibly cut
//       (counted with either sign; sure_s sums the signs of the surely cut). The per-step form
//       sum_s g_hi,s |sigma_s| (which needs mu common within a step only) is also computed and
//       the smaller taken. Each rest eps_i = -sign(t_i)(theta_i - mu) g_s lies in an interval of
//       width g_s <= g_hi,s: h_i = g_hi,s / 2.
//   (D) every other rounding (toward zero, upward, downward, odd: the fused steps' outputs into
//       e8m13 or fp32, directed accumulators), a cut of the accumulator c, the subnormal and
//       flush terms: no assumption; |e_r| <= rho V_r + eta goes into a deterministic part.
// Azuma-Hoeffding (Hoeffding, JASA 58, 1963, Thm 2 and s5 for martingales; Azuma, Tohoku Math.
// J. 19, 1967): when eps_r lies in an interval [A_r, A_r + 2 h_r] with A_r known at r - 1 and
// h_r a constant, P(|sum eps_r| >= lambda sqrt(sum h_r^2)) <= 2 exp(-lambda^2 / 2). The h_r used
// below are constants given the data (upper bounds from deterministic magnitudes), so, per
// element, with probability at least 1 - 2 exp(-lambda^2 / 2):
//     |v - s| <= (T) means' bound + sum_(D) (rho V + eta) + lambda sqrt(sum h_r^2).
// One martingale per element: no union bound over terms. Not min(that, sum of the rests' ranges),
// though it is smaller where an element has two or three inexact roundings: the probabilistic
// tier judges outputs that no modelled order computes (a kernel's own K tiling), whose inexact
// roundings are others than the model's; the square-root form leaves them room, the sum of the
// model's few ranges does not (examples/kernel-test's tiled kernel judged against cuda_core.fp32
// fell outside it on 8 of 3072 elements).
//
// ---- Magnitudes: V_r and the grid
// Each computed value is tracked as (S, A, D): S the exact value of its terms in binary64 (their
// sum has error at most n 2^-52 A, A = sum |t|, n the additions), D a deterministic bound on the
// computed value's distance to the exact one (the sum of the |e_r| bounds below it). So
// |v_r| <= V_r = |S| + n 2^-52 A + D and |v_r| >= |S| - n 2^-52 A - D. A fused step's E is the
// largest exponent of its terms as read by the step (fused.hpp: `encoded` exponents, zeros at
// fp32 emin under ZeroTerms::fp32_emin, exponent_floor): the products' exponents are read from
// the data exactly; c's lies between the exponents of its two magnitude bounds. That gives E in
// [E_lo, E_hi] and g in [g_lo, g_hi].
//
// D grows like the deterministic bound, and for long mixed-sign reductions it blurs E (and so g)
// by several binades. A second and third pass use, in place of D, the smaller of D and
//     B = (means and deterministic parts committed so far) + 2 lambda sqrt(V*),
// V* the previous pass's sum h_r^2 (the means of a value's own roundings are a sub-sum: at most
// twice the largest prefix of the signed sum plus the spread, or the per-step form). Why this still holds: let tau be the first rounding after
// which some computed value's error exceeds what the pass assumed. Up to tau every range h_r and
// every mean bound of the pass is valid, so the martingale stopped at tau has increments within
// its h_r, and the pass's sum h_r^2 is a constant V <= V* given the data (a pass is kept only
// then). Azuma-Hoeffding in maximal form (Freedman, Ann. Probab. 3(1), 1975, or Doob's maximal
// inequality on exp(theta M)) gives P(max_s |M_{s and tau}| >= lambda sqrt(V)) <= 2 exp(-lambda^2/2).
// Off that event every partial sum of the rests is below lambda sqrt(V), every sub-sum (the rests
// of one chunk: a difference of two partial sums) below 2 lambda sqrt(V*), so no value's error
// exceeds its assumption: tau never comes, and the final bound with lambda sqrt(V) holds.
//
// Exact roundings: every value carries a grid (a power of two it is a multiple of: a product's
// lowest set bit, a computed value's ulp at its smallest possible magnitude, a fused step's
// aligned sum g_lo or its terms' grids). A sum of multiples of G with |sum| < 2^p G (p the
// format's significand bits) is a value of the format, and rounding it commits no error: h_r = 0.
// Without it, fp8 and bf16 products added into fp32 (most of which are exact) would count a
// full rounding each.
//
// ---- Input casts
// The plan's input casts (tf32 truncation of fp32 operands) are applied to the data here, so
// their contribution sum_k (a'_k b'_k - a_k b_k) is computed, not bounded (the data determine
// it: no model); the walk then runs on the cast operands.
//
// ---- Scope
// Node kinds: sequential, chunked, permute, split (parallel and serial) and fused (truncating
// alignment, `encoded` exponents), c first or last, FMA products. Other plans (lanes, trees,
// decompose, explicit trees, rounded products, an `initial` value) keep bound.cpp's
// probabilistic walk only. The bound is
// evaluated in O(K) per element without blocking (about 10x the time of the deterministic
// bound's matmul).

#include "bound_probabilistic.hpp"

#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <optional>

#include "bound_rounder.hpp"
#include "round_value.hpp"
#include "numeq/core/fused.hpp"

namespace numeq::core::detail {

namespace {

// An item a node reduces: a term (its index) or the value of another program node.
struct Item {
  bool term = true;
  std::size_t index = 0;
};

// sequential and fused reduce their items; cast rounds its one item into `cast` (a parallel
// split's partial passing through its `through` cast); serial_split runs its items (each a part's
// inner reduction) in order, each starting from the previous part's value rounded into `cast`.
enum class ProgKind : std::uint8_t { sequential, fused, cast, serial_split };

struct ProgNode {
  ProgKind kind = ProgKind::sequential;
  Cast cast;                  // sequential: the accumulate cast; fused: the step's output; cast and
                              // serial_split: the split's `through`
  Rounder rounding;           // rounder(cast), once per node: commit() runs for every rounding
  bool start_from_zero = false;
  FusedStep step;
  std::vector<Item> items;
};

// A computed value: exact value S of its terms (binary64), A = sum |t|, n additions behind S,
// D: a deterministic bound on |computed - exact|.
// grid: a power of two the computed value is known to be a multiple of (0: nothing known).
struct Value {
  double S = 0, A = 0, n = 0, D = 0;
  double grid = 0;
};

double slack(const Value& v) { return (v.n + 2) * 0x1p-52 * v.A; }

// One element's walk: its data, and what the roundings committed so far add up to.
struct Run {
  const double* t;       // the products a'_k b'_k
  const int* exponent;   // fused steps: each product's exponent as read (INT_MIN: takes no part)
  const int* low;        // each non-zero product's lowest set bit
  double mean = 0;         // sum over steps of each step's (T) mean bound (bounds any sub-sum)
  double mean_signed = 0;  // (T) with one mean mu for the whole reduction: sum g_lo sure
  double mean_spread = 0;  //   ... and what g's and the possibly cut products' spread adds
  double mean_signed_abs = 0, mean_steps = 0;  // for mean_signed's own rounding
  double mean_signed_max = 0;  // the largest |mean_signed| so far (a prefix)
  double det = 0;    // (D) contributions
  double var = 0;    // sum h_r^2
  // On the event the bound is stated for, every partial sum of the zero-mean rests stays below
  // this (2 lambda sqrt(V*), see "Magnitudes"); +Inf in the first pass.
  double zero_mean_partial = kInf;
  // committed_hi(*this), kept: refresh() after changing any field it reads (the means, det,
  // zero_mean_partial). commit() reads it at every rounding, and most walks change none of them
  // between two roundings.
  double committed = kInf;
  void refresh();
};

// What a computed value's error is known to be below: its deterministic D, or, on the event the
// bound is stated for, every mean and deterministic part committed so far plus the zero-mean
// partial sums' bound (the value's own error is a sub-sum of what has been committed).
// committed_hi(run) is that bound on everything committed, error_hi a value's: the smaller of
// the two (commit() reads committed_hi once per rounding and keeps it where the rounding leaves it).
double committed_hi(const Run& run) {
  // The means committed below a value: a sub-sum of the steps' means, so at most run.mean, or
  // (one mean for the reduction) a difference of two prefixes of mean_signed plus the spread.
  const double slack = (run.mean_steps + 2) * 0x1p-52 * run.mean_signed_abs;
  const double mean = std::min(run.mean, up(2 * run.mean_signed_max + slack + run.mean_spread));
  return add_up(add_up(mean, run.det), run.zero_mean_partial);
}
void Run::refresh() { committed = committed_hi(*this); }
double error_hi(const Value& v, const Run& run) { return std::min(v.D, run.committed); }
double magnitude_hi(const Value& v, const Run& run) { return up(std::fabs(v.S) + slack(v) + error_hi(v, run)); }
double magnitude_lo(const Value& v, const Run& run) { return std::fabs(v.S) - slack(v) - error_hi(v, run); }

// The grid of a value of cast's format with magnitude at least lo: ulp(lo), or the subnormal
// spacing; 0 for formats without subnormals (nothing claimed).
double format_grid(const Cast& cast, double lo) {
  const Format& f = cast.format;
  if (f.is_integer()) return 1;
  if (!f.has_zero) return 0;
  const int e = lo > 0 ? std::max(std::ilogb(lo), f.emin()) : f.emin();
  return pow2(e - f.mantissa_bits);
}

// Whether the exact value v of a computed sum (a multiple of v.grid, |v| <= hi, its
// magnitude_hi) is a value of cast's format that every rounding mode keeps as it is:
// |v| < 2^(m+1) grid with grid on the format's subnormal grid, no flushing, below the largest
// finite value.
bool representable(const Value& v, double hi, const Cast& cast, const Rounder& r) {
  const Format& f = cast.format;
  if (f.is_integer() || !f.has_zero || cast.flushes_inputs() || cast.flushes_outputs()) return false;
  if (!(v.grid >= pow2(f.emin() - f.mantissa_bits))) return false;
  return hi < v.grid * pow2(f.mantissa_bits + 1) && hi <= r.max;
}

// Whether a cast's rounding errors are zero-mean under the model (N).
bool zero_mean(const Cast& c) {
  return c.rounding == Rounding::nearest_even || c.rounding == Rounding::nearest_away ||
         c.rounding == Rounding::stochastic;
}

// The exponent of the lowest set bit of a non-zero finite double.
int lowest_bit(double x) {
  // By its bits (frexp and ldexp were a tenth of the walk): biased exponent E, fraction bits.
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(x) & ~(std::uint64_t{1} << 63);
  const int E = static_cast<int>(bits >> 52);
  const std::uint64_t fraction = bits & ((std::uint64_t{1} << 52) - 1);
  if (E == 0) return -1074 + std::countr_zero(fraction);                     // subnormal
  return E - 1075 + std::countr_zero(fraction | (std::uint64_t{1} << 52));  // normal
}

// A fused step's exponent of an operand as `encoded` reads it (fused.hpp): subnormals at emin,
// zeros at -126 under ZeroTerms::fp32_emin (nullopt: zeros do not take part).
std::optional<int> encoded_exponent(double x, const Format& f, bool zeros_at_emin) {
  if (x == 0) return zeros_at_emin ? std::optional<int>(zero_operand_exponent) : std::nullopt;
  return std::max(std::ilogb(x), f.emin());
}

}  // namespace

struct DataWalk::Program {
  std::vector<ProgNode> nodes;
  std::size_t root = 0;
  bool supported = false;
  bool c_last = false, with_init = false;
  std::size_t K = 0;
  Cast outer;
  Rounder outer_rounding;
  std::optional<Cast> input_a, input_b;
  std::optional<FusedStep> fused_step;  // the fused nodes' operand formats and zero reading

  // Returns the node id, or nullopt when a node kind is outside the analysis.
  std::optional<std::size_t> compile(const PlanNode& n, const std::vector<Item>& items) {
    switch (n.kind) {
      case NodeKind::sequential: {
        if (n.arithmetic.product != ProductMode::fma) return std::nullopt;
        ProgNode p;
        p.kind = ProgKind::sequential;
        p.cast = n.arithmetic.accumulate;
        p.rounding = rounder(p.cast);
        p.start_from_zero = n.start_from_zero;
        p.items = items;
        nodes.push_back(std::move(p));
        return nodes.size() - 1;
      }
      case NodeKind::fused: {
        const FusedStep& s = n.fused;
        if (s.alignment != Alignment::truncate || s.max_exponent != MaxExponent::encoded) return std::nullopt;
        for (const Item& it : items)
          if (!it.term) return std::nullopt;
        // The products' exponents are read once per element (pre_cast), for one reading.
        if (fused_step && (fused_step->a_format != s.a_format || fused_step->b_format != s.b_format ||
                           fused_step->zeros != s.zeros))
          return std::nullopt;
        fused_step = s;
        ProgNode p;
        p.kind = ProgKind::fused;
        p.cast = s.output;
        p.rounding = rounder(p.cast);
        p.step = s;
        p.items = items;
        nodes.push_back(std::move(p));
        return nodes.size() - 1;
      }
      case NodeKind::chunked: {
        const std::size_t size = std::max<std::size_t>(1, n.chunk);
        std::vector<Item> partials;
        for (std::size_t b = 0; b < items.size(); b += size) {
          const std::vector<Item> part(items.begin() + static_cast<std::ptrdiff_t>(b),
                                       items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), b + size)));
          const std::optional<std::size_t> id = compile(n.children[0], part);
          if (!id) return std::nullopt;
          partials.push_back(Item{false, *id});
        }
        return compile(n.children[1], partials);
      }
      case NodeKind::split: {
        // K cut as the evaluator cuts it (plan.hpp's split_starts).
        const std::vector<std::size_t> start = split_starts(items.size(), n.parts);
        if (start.size() < 2 || n.children.empty()) return std::nullopt;
        std::vector<Item> partials;
        for (std::size_t q = 0; q + 1 < start.size(); ++q) {
          const std::vector<Item> part(items.begin() + static_cast<std::ptrdiff_t>(start[q]),
                                       items.begin() + static_cast<std::ptrdiff_t>(start[q + 1]));
          const std::optional<std::size_t> id = compile(n.children[0], part);
          if (!id) return std::nullopt;
          if (n.split_mode == SplitMode::serial) {
            partials.push_back(Item{false, *id});
            continue;
          }
          ProgNode c;  // the partial through `through`
          c.kind = ProgKind::cast;
          c.cast = n.through;
          c.rounding = rounder(c.cast);
          c.items = {Item{false, *id}};
          nodes.push_back(std::move(c));
          partials.push_back(Item{false, nodes.size() - 1});
        }
        if (n.split_mode == SplitMode::serial) {
          ProgNode p;
          p.kind = ProgKind::serial_split;
          p.cast = n.through;
          p.rounding = rounder(p.cast);
          p.items = std::move(partials);
          nodes.push_back(std::move(p));
          return nodes.size() - 1;
        }
        if (n.children.size() < 2) return std::nullopt;
        return compile(n.children[1], partials);
      }
      case NodeKind::permute: {
        std::vector<Item> mapped;
        mapped.reserve(items.size());
        const std::size_t size = std::max<std::size_t>(1, n.block);
        for (std::size_t block = 0; block < items.size(); block += size) {
          const std::size_t len = std::min(size, items.size() - block);
          for (const std::size_t i : n.order)
            if (i < len) mapped.push_back(items[block + i]);
        }
        if (mapped.size() != items.size()) return std::nullopt;
        return compile(n.children[0], mapped);
      }
      default: return std::nullopt;
    }
  }

  // ---- per element ----

  // One rounding of v into cast (an addition of `operands` values, or one value when 1).
  // An exact rounding (the sum is a value of the format, read from the operands' grids) commits
  // no error and is skipped.
  static void commit(Value& v, const Cast& cast, const Rounder& r, std::size_t operands, Run& run) {
    if (r.exact) return;
    // magnitude_hi and magnitude_lo below, with what was committed read once (the walk's
    // innermost step: each reading is a chain of dependent roundings upward).
    const double committed = run.committed, s_abs = std::fabs(v.S), s_slack = slack(v);
    const double V = up(s_abs + s_slack + std::min(v.D, committed));
    if (representable(v, V, cast, r)) return;
    const double eta = operands == 1 ? eta_value(r) : eta_add(r, operands);
    double h = add_up(mul_up(r.rho, V), eta);
    // Sharper where nothing flushes: |e| <= ulp(V)/2 (nearest) or < ulp(V) (the others), the
    // ulp at V's binade, the subnormal spacing below it (Higham 2002, s2.1).
    const Format& f = cast.format;
    if (!cast.flushes_inputs() && !cast.flushes_outputs() && f.has_zero && V < kInf) {
      const int e = V > 0 ? std::max(std::ilogb(V), f.emin()) : f.emin();
      const double ulp = pow2(e - f.mantissa_bits);
      h = std::min(h, r.random ? ulp / 2 : ulp);
    }
    const bool to_var = zero_mean(cast);
    if (to_var) {
      run.var = add_up(run.var, mul_up(h, h));  // not part of committed_hi
    } else {
      run.det = add_up(run.det, h);
      run.refresh();
    }
    v.D = add_up(v.D, h);
    v.grid = format_grid(cast, s_abs - s_slack - std::min(v.D, run.committed));
  }

  static Value merge(const Value& x, const Value& y) {
    return Value{x.S + y.S, x.A + y.A, x.n + y.n + 1, add_up(x.D, y.D), std::min(x.grid, y.grid)};
  }
  static Value term(double t) {
    return Value{t, std::fabs(t), 0, 0, t == 0 ? kInf : pow2(lowest_bit(t))};
  }

  Value item_value(const Item& it, Run& run) const {
    if (it.term) {
      const double t = run.t[it.index];
      return Value{t, std::fabs(t), 0, 0, t == 0 ? kInf : pow2(run.low[it.index])};
    }
    return eval(it.index, nullptr, run);
  }

  Value eval(std::size_t id, const Value* init, Run& run) const {
    const ProgNode& p = nodes[id];
    if (p.kind == ProgKind::fused) return fused(p, init, run);
    if (p.kind == ProgKind::cast) {
      Value v = item_value(p.items[0], run);
      commit(v, p.cast, p.rounding, 1, run);
      return v;
    }
    if (p.kind == ProgKind::serial_split) {
      // acc = through(inner(part, init = acc)) per part (CUTLASS serial split-K, plan.hpp); a
      // split has at least one part (split_starts).
      Value acc;
      const Value* in = init;
      for (const Item& it : p.items) {
        acc = eval(it.index, in, run);
        commit(acc, p.cast, p.rounding, 1, run);
        in = &acc;
      }
      return acc;
    }
    Value acc;
    bool have = false;
    if (init) {
      acc = *init;
      have = true;
    } else if (p.start_from_zero) {
      acc.grid = kInf;  // +0
      have = true;
    }
    for (const Item& it : p.items) {
      const Value x = item_value(it, run);
      if (!have) {
        acc = x;  // the first value rounded into the accumulator
        commit(acc, p.cast, p.rounding, 1, run);
        have = true;
        continue;
      }
      acc = merge(acc, x);
      commit(acc, p.cast, p.rounding, 2, run);
    }
    return acc;
  }

  Value fused(const ProgNode& p, const Value* init, Run& run) const {
    const FusedStep& s = p.step;
    const std::size_t n_items = p.items.size(), step = static_cast<std::size_t>(std::max(1, s.n));
    const bool zeros = s.zeros == ZeroTerms::fp32_emin;
    const int F = s.fraction_bits;
    Value acc;
    bool has_c = init != nullptr;
    if (init) acc = *init;
    const std::size_t steps = std::max<std::size_t>(1, (n_items + step - 1) / step);
    for (std::size_t st = 0; st < steps; ++st) {
      const std::size_t k0 = st * step, k1 = std::min(n_items, k0 + step);
      // E's range: products exactly, c from its magnitude range.
      int e_hi = INT_MIN, e_lo = INT_MIN;
      for (std::size_t q = k0; q < k1; ++q) {
        const std::size_t k = p.items[q].index;
        const int e = run.exponent[k];
        e_hi = std::max(e_hi, e);
        e_lo = std::max(e_lo, e);
      }
      const int c_bits = st > 0 ? std::min(s.output.format.mantissa_bits, s.c_format.mantissa_bits)
                                : s.c_format.mantissa_bits;
      double c_hi = 0, c_lo = 0;
      if (has_c) {
        c_hi = magnitude_hi(acc, run);
        c_lo = magnitude_lo(acc, run);
        if (c_hi > 0) e_hi = std::max(e_hi, std::max(std::ilogb(c_hi), s.c_format.emin()));
        if (c_lo > 0) e_lo = std::max(e_lo, std::max(std::ilogb(c_lo), s.c_format.emin()));
        if (c_lo <= 0 && zeros) {
          e_hi = std::max(e_hi, zero_operand_exponent);
          e_lo = std::max(e_lo, zero_operand_exponent);  // a zero c reads -126, a non-zero one at least its emin >= -126
        }
      }
      if (s.exponent_floor != no_exponent_floor) {
        e_hi = std::max(e_hi, s.exponent_floor);
        e_lo = std::max(e_lo, s.exponent_floor);
      }
      Value sum = has_c ? acc : Value{};
      double cut_d = 0;
      // The aligned sum's grid: every aligned term is a multiple of it.
      const double g_lo = e_lo != INT_MIN ? pow2(e_lo - F) : 0;
      double grid = kInf;
      if (e_hi != INT_MIN) {
        const double g_hi = pow2(e_hi - F);
        long sure = 0, maybe_pos = 0, maybe_neg = 0, cut = 0;
        int kept_low = INT_MAX;  // the lowest set bit of the products kept whole
        for (std::size_t q = k0; q < k1; ++q) {
          const double t = run.t[p.items[q].index];
          if (t == 0) continue;
          const int low = run.low[p.items[q].index];
          if (low >= e_hi - F) {  // a multiple of g_hi: kept whole
            kept_low = std::min(kept_low, low);
            continue;
          }
          grid = std::min(grid, g_lo);  // cut to a multiple of g, or kept (a multiple of 2^low >= g_lo)
          ++cut;
          if (e_lo != INT_MIN && low < e_lo - F) {
            sure += t > 0 ? 1 : -1;
          } else {
            (t > 0 ? maybe_pos : maybe_neg) += 1;
          }
        }
        // (T): the step's mean and its zero-mean rest. The mean is -mu g sum_{cut} sign(t_i),
        // g in [g_lo, g_hi] and sum_{cut} sign in [sure - maybe_neg, sure + maybe_pos]:
        // g_lo sure (signed, summed over the steps) + (g_hi - g_lo)|sure| + g_hi max(maybe).
        const double count = static_cast<double>(std::max(std::labs(sure + maybe_pos), std::labs(sure - maybe_neg)));
        run.mean = add_up(run.mean, mul_up(count, g_hi));
        run.mean_signed += g_lo * static_cast<double>(sure);  // each exact; the sum rounds: slack below
        run.mean_signed_abs += std::fabs(g_lo * static_cast<double>(sure));
        run.mean_steps += 1;
        run.mean_signed_max = std::max(run.mean_signed_max, std::fabs(run.mean_signed));
        run.mean_spread = add_up(run.mean_spread, add_up(mul_up(g_hi - g_lo, static_cast<double>(std::labs(sure))),
                                                         mul_up(g_hi, static_cast<double>(std::max(maybe_pos, maybe_neg)))));
        run.refresh();
        run.var = add_up(run.var, mul_up(static_cast<double>(cut), mul_up(g_hi / 2, g_hi / 2)));
        cut_d = mul_up(static_cast<double>(cut), g_hi);
        if (kept_low != INT_MAX) grid = std::min(grid, pow2(kept_low));
        // (D): c cut when its lowest possible bit lies below the grid.
        if (has_c) {
          const bool kept = acc.grid >= g_hi ||
                            (c_lo > 0 && std::max(std::ilogb(c_lo), s.c_format.emin()) - c_bits >= e_hi - F);
          if (!kept) {
            run.det = add_up(run.det, g_hi);
            run.refresh();
            cut_d = add_up(cut_d, g_hi);
          }
          grid = std::min(grid, kept ? std::max(acc.grid, g_hi) : g_lo);
        }
      }
      for (std::size_t q = k0; q < k1; ++q) {
        const double t = run.t[p.items[q].index];
        sum.S += t;
        sum.A += std::fabs(t);
        sum.n += 1;
      }
      sum.D = add_up(sum.D, cut_d);
      sum.grid = grid;
      // Every aligned term is a multiple of g >= g_lo, and so is their sum: commit() finds the
      // step's rounding exact when the sum is short enough for the output format.
      commit(sum, p.cast, p.rounding, 1, run);  // p.cast is s.output
      acc = sum;
      has_c = true;
    }
    return acc;
  }
};

DataWalk::DataWalk(const Plan& plan, std::size_t K, bool with_init) : program_(std::make_unique<Program>()) {
  Program& pr = *program_;
  pr.with_init = with_init;
  pr.K = K;
  pr.c_last = with_init && plan.c_placement == CPlacement::last;
  pr.outer = outer_cast(plan);
  pr.outer_rounding = rounder(pr.outer);
  pr.input_a = plan.input_a;
  pr.input_b = plan.input_b;
  if (plan.initial || K == 0) return;
  std::vector<Item> items(K);
  for (std::size_t k = 0; k < K; ++k) items[k] = Item{true, k};
  const std::optional<std::size_t> root = pr.compile(plan.reduction, items);
  if (!root) return;
  pr.root = *root;
  pr.supported = true;
}

DataWalk::~DataWalk() = default;

bool DataWalk::supported() const { return program_->supported; }

static std::vector<double> cast_values(const double* x, std::size_t n, const std::optional<Cast>& cast) {
  std::vector<double> out(x, x + n);
  if (cast)
    for (double& v : out) v = round_value(v, *cast);
  return out;
}
std::vector<double> DataWalk::cast_a(const double* x, std::size_t n) const { return cast_values(x, n, program_->input_a); }
std::vector<double> DataWalk::cast_b(const double* x, std::size_t n) const { return cast_values(x, n, program_->input_b); }

double DataWalk::pre_cast(const double* a, const double* b, std::size_t b_stride, const double* ac, const double* bc,
                          std::size_t bc_stride, const double* c, double lambda, Scratch& scratch) const {
  const Program& pr = *program_;
  const std::size_t K = pr.K;
  scratch.t.resize(K);
  scratch.low.resize(K);
  scratch.exponent.resize(pr.fused_step ? K : 0);
  // Products of the cast operands, and the input casts' own contribution sum_k (a'b' - ab),
  // computed. The walk reads the products' bits, so each must be exact in binary64 (it is for
  // every format a plan multiplies, fp32 included, unless it comes near binary64's underflow);
  // otherwise the element keeps the other bounds (+Inf here).
  const auto exact_product = [](double x, double y, double t) {
    if (t == 0) return x == 0 || y == 0;
    return std::isfinite(t) && std::fabs(t) >= 0x1p-960 && std::fma(x, y, -t) == 0;
  };
  double cast_diff = 0, cast_abs = 0;
  for (std::size_t k = 0; k < K; ++k) {
    const double x = ac[k], y = bc[k * bc_stride];
    const double t = x * y;
    if (!exact_product(x, y, t)) return kInf;
    scratch.t[k] = t;
    scratch.low[k] = t == 0 ? INT_MAX : lowest_bit(t);
    if (pr.fused_step) {
      const FusedStep& s = *pr.fused_step;
      const bool zeros = s.zeros == ZeroTerms::fp32_emin;
      const std::optional<int> ea = encoded_exponent(x, s.a_format, zeros);
      const std::optional<int> eb = encoded_exponent(y, s.b_format, zeros);
      scratch.exponent[k] = (ea && eb) ? *ea + *eb : INT_MIN;
    }
    if (pr.input_a || pr.input_b) {
      const double x0 = a[k], y0 = b[k * b_stride];
      const double t0 = x0 * y0;
      if (!exact_product(x0, y0, t0)) return kInf;
      const double d = t - t0;
      cast_diff += d;
      cast_abs += std::fabs(d);
    }
  }
  Value init;
  if (c) init = Program::term(*c);
  // One pass of the walk with the given bound on the zero-mean partial sums (see "Magnitudes").
  const auto pass = [&](double zero_mean_partial) {
    Run run{scratch.t.data(), scratch.exponent.data(), scratch.low.data()};
    run.zero_mean_partial = zero_mean_partial;
    run.refresh();
    Value v = pr.eval(pr.root, (c && !pr.c_last) ? &init : nullptr, run);
    if (c && pr.c_last) {
      v = Program::merge(v, init);
      Program::commit(v, pr.outer, pr.outer_rounding, 2, run);
    }
    return run;
  };
  // Pass 1: deterministic magnitudes; its sum h^2 is V_1. A later pass takes the event's
  // magnitudes with V* = the previous pass's sum h^2; it is kept when its own sum h^2 is at most
  // V* (then its ranges hold on its event: see "Magnitudes"), which the min(D, ...) in
  // error_hi makes the rule (magnitudes never above the previous pass's).
  Run run = pass(kInf);
  for (int i = 0; i < 2 && run.var > 0; ++i) {
    const Run next = pass(mul_up(2 * lambda, up(std::sqrt(run.var))));
    if (!(next.var <= run.var)) break;
    run = next;
  }
  // The input casts: |sum d_k| computed in binary64 (each d_k = t - t0 rounded once, K additions).
  const double input = add_up(std::fabs(cast_diff), mul_up(static_cast<double>(2 * K + 4) * 0x1p-52, cast_abs));
  const double signed_slack = mul_up((run.mean_steps + 2) * 0x1p-52, run.mean_signed_abs);
  const double mean = std::min(run.mean, add_up(add_up(std::fabs(run.mean_signed), signed_slack), run.mean_spread));
  double bound = add_up(add_up(mean, run.det), input);
  bound = add_up(bound, mul_up(lambda, up(std::sqrt(run.var))));
  // Every quantity above is non-negative and formed with at most a few K roundings upward or to
  // nearest; 2^-30 relative covers the nearest ones for K < 2^20 terms per element and beyond.
  return up(bound * (1 + 0x1p-30));
}

double data_walk_failure(double lambda) { return up(2 * std::exp(-lambda * lambda / 2) * (1 + 0x1p-40)); }

}  // namespace numeq::core::detail
