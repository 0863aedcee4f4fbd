// Softmax, log-softmax, layernorm and rmsnorm under a platform (normalization.hpp): the emulated
// values and their running error bounds (tracked.hpp) in one pass per row.

#include "numeq/cases/normalization.hpp"

#include <algorithm>
#include <bit>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "numeq/core/bound.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/direct_memo.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/shape.hpp"
#include "moments.hpp"
#include "tracked.hpp"

namespace numeq::cases {

namespace {

using detail::kInf;
using detail::kNaN;
using detail::Tracked;
using reference::Function;

// What every operation needs from the platform: the compute cast, its sum plan and the
// function models of the steps it takes.
struct Machine {
  detail::Compute compute;
  core::Plan sum;
  detail::FunctionStep exp, log, rsqrt;
};

Machine machine(const core::Platform& platform, const Format& compute) {
  Machine m;
  m.compute = detail::compute_cast(compute);
  const std::string name(compute.name);
  m.sum = core::plan_for(platform, core::Operation::sum, name, name);
  m.exp = detail::function_step(platform, Function::exp, m.compute);
  m.log = detail::function_step(platform, Function::log, m.compute);
  m.rsqrt = detail::function_step(platform, Function::rsqrt, m.compute);
  return m;
}

// The rows of x along an axis: row r = (o, i) holds elements (o n + j) inner + i, j < n.
struct Rows {
  std::size_t outer = 1, n = 1, inner = 1;
  std::size_t count() const { return outer * inner; }
  std::size_t at(std::size_t row, std::size_t j) const {
    const std::size_t o = row / inner, i = row % inner;
    return (o * n + j) * inner + i;
  }
};

Rows rows_along(const xt::xarray<double>& x, std::size_t axis) {
  Rows r;
  for (std::size_t d = 0; d < x.dimension(); ++d) {
    if (d < axis) r.outer *= x.shape()[d];
    else if (d == axis) r.n = x.shape()[d];
    else r.inner *= x.shape()[d];
  }
  return r;
}

// Row `row` of x (in) read into xs as compute inputs; whether all its elements are finite.
bool read_row(const double* in, const Rows& rows, std::size_t row, const detail::Compute& C, std::vector<Tracked>& xs) {
  bool finite = true;
  for (std::size_t j = 0; j < rows.n; ++j) {
    const double v = in[rows.at(row, j)];
    finite = finite && std::isfinite(v);
    xs[j] = detail::input(v, C);
  }
  return finite;
}

// The output cast with what each element's rounding and bound need, worked out once.
struct Output {
  explicit Output(const Cast& c) : cast(c), fast(c), bound(c) {}
  const Cast& cast;
  FastRound fast;
  core::OutputCastBound bound;
};

// What a pass over the rows reads and writes: x's elements, the result's values and bounds, and
// the output cast.
struct RowIo {
  RowIo(const xt::xarray<double>& x, Emulation& result, const Cast& out)
      : in(x.data()), values(result.values.data()), bounds(result.bound.data()), output(out) {}
  const double* in;
  double* values;
  double* bounds;
  Output output;
};

// The value and bound of element `index` after the output cast.
[[gnu::always_inline]] inline void emit(const Tracked& y, const RowIo& io, std::size_t index, bool finite_inputs) {
  const Output& out = io.output;
  double v;
  if (!out.fast(y.value, v)) v = round_to_format_by_kernel(y.value, out.cast, index);
  io.values[index] = v;
  if (!finite_inputs) io.bounds[index] = kNaN;
  else if (std::isnan(v) || !std::isfinite(y.value) || !std::isfinite(y.bound)) io.bounds[index] = kInf;
  else io.bounds[index] = out.bound(v, y.bound);
}

Emulation shaped_like(const xt::xarray<double>& x) {
  Emulation e;
  e.values = xt::xarray<double>::from_shape(x.shape());
  e.bound = xt::xarray<double>::from_shape(x.shape());
  return e;
}

// detail::apply(step, a) remembered per argument (value and bound bits) for one step.
class ApplyMemo {
 public:
  Tracked operator()(const detail::FunctionStep& step, Tracked a) {
    const auto v = std::bit_cast<std::uint64_t>(a.value), b = std::bit_cast<std::uint64_t>(a.bound);
    return memo_.get({v, b}, v ^ (b * 0xff51afd7ed558ccdu), [&] { return detail::apply(step, a); });
  }

 private:
  DirectMemo<std::pair<std::uint64_t, std::uint64_t>, Tracked> memo_;
};

// ---- softmax and log-softmax --------------------------------------------------------------

Emulation softmax_family(const xt::xarray<double>& x, std::ptrdiff_t axis, const core::Platform& platform,
                         const Cast& out, const SoftmaxOptions& options, bool log) {
  validate(out, "out");
  const Rows rows = rows_along(x, axis_index(axis, x.shape()));
  const Machine mc = machine(platform, options.compute);
  const bool online = options.variant == SoftmaxVariant::online;
  if (online && options.block == 0) throw numeq::error("block: must be positive for the online variant");
  if (log && options.reciprocal)
    throw numeq::error("reciprocal: log_softmax subtracts log(sum); it has no reciprocal to take");
  if (online && rows.n % options.block != 0)
    throw numeq::error("block: " + std::to_string(options.block) + " does not divide the axis length " +
                       std::to_string(rows.n));
  const std::size_t block = online ? options.block : rows.n;
  const detail::Compute& C = mc.compute;
  Emulation result = shaped_like(x);
  if (rows.n == 0) return result;
  const core::ReductionWeights w_block = core::reduction_weights(mc.sum, block, false);
  const RowIo io(x, result, out);
  parallel_for(
      rows.count(),
      [&](std::size_t begin, std::size_t end) {
        std::vector<Tracked> xs(rows.n), e(rows.n);
        // exp of the same argument (value and bound) gives the same result: rows of narrow
        // inputs repeat their differences x_j - m many times, within and across rows.
        ApplyMemo memo;
        for (std::size_t row = begin; row < end; ++row) {
          const bool finite = read_row(io.in, rows, row, C, xs);
          // Softmax is invariant under shifting every x_j by one constant, so the shifts (the
          // maxima) are exact constants here: the exact counterpart subtracts the same numbers.
          double m = 0;  // plain: no shift
          Tracked s;     // sum_j e^{x_j - m} as computed, with its bound
          if (options.variant == SoftmaxVariant::plain || options.variant == SoftmaxVariant::max_subtracted) {
            if (options.variant == SoftmaxVariant::max_subtracted) {
              m = -kInf;
              for (const Tracked& t : xs) m = std::max(m, t.value);
            }
            for (std::size_t j = 0; j < rows.n; ++j)
              e[j] = memo(mc.exp, m == 0 ? xs[j] : detail::sub(xs[j], detail::exact(m), C));
            s = detail::reduce(e, mc.sum, w_block);
          } else {
            // Online normaliser (Milakov and Gimelshein, arXiv:1805.02867, Algorithm 3, by blocks
            // as flash attention runs it).
            for (std::size_t b = 0; b < rows.n; b += block) {
              double mb = -kInf;
              for (std::size_t j = b; j < b + block; ++j) mb = std::max(mb, xs[j].value);
              for (std::size_t j = b; j < b + block; ++j) e[j] = detail::apply(mc.exp, detail::sub(xs[j], detail::exact(mb), C));
              const Tracked sb = detail::reduce(std::span<const Tracked>(e).subspan(b, block), mc.sum, w_block);
              if (b == 0) {
                s = sb;
                m = mb;
                continue;
              }
              const double m_new = std::max(m, mb);
              const Tracked f = detail::apply(mc.exp, detail::sub(detail::exact(m), detail::exact(m_new), C));
              const Tracked g = detail::apply(mc.exp, detail::sub(detail::exact(mb), detail::exact(m_new), C));
              s = detail::add(detail::mul(s, f, C), detail::mul(sb, g, C), C);
              m = m_new;
            }
            // The numerators against the final maximum, recomputed (as the kernel's second pass does).
            for (std::size_t j = 0; j < rows.n; ++j) e[j] = detail::apply(mc.exp, detail::sub(xs[j], detail::exact(m), C));
          }
          if (!log) {
            const Tracked r = options.reciprocal ? detail::div(detail::exact(1.0), s, C) : Tracked{};
            for (std::size_t j = 0; j < rows.n; ++j) {
              const std::size_t index = rows.at(row, j);
              emit(options.reciprocal ? detail::mul(e[j], r, C) : detail::div(e[j], s, C), io, index, finite);
              // softmax lies in [0, 1]: no output is farther than max(v, 1 - v) from it.
              const double v = io.values[index];
              if (finite && v >= 0 && v <= 1) io.bounds[index] = std::min(io.bounds[index], std::max(v, 1 - v));
            }
          } else {
            // log_softmax(x)_i = (x_i - m) - log(sum_j e^{x_j - m}) (Blanchard, Higham, Higham 2021).
            const Tracked l = detail::apply(mc.log, s);
            for (std::size_t j = 0; j < rows.n; ++j) {
              const Tracked d = m == 0 ? xs[j] : detail::sub(xs[j], detail::exact(m), C);
              emit(detail::sub(d, l, C), io, rows.at(row, j), finite);
            }
          }
        }
      },
      2);
  return result;
}

// ---- layernorm and rmsnorm ----------------------------------------------------------------

void check_norm_parameters(const xt::xarray<double>& x, const reference::NormParameters& p) {
  if (x.dimension() == 0) throw numeq::error("x: needs at least one dimension (the normalised axis)");
  const std::size_t n = x.shape().back();
  if (!std::isfinite(p.eps) || p.eps < 0) throw numeq::error("eps: must be finite and >= 0");
  for (const auto& [name, a] : {std::pair{"gamma", p.gamma}, std::pair{"beta", p.beta}}) {
    if (a == nullptr) continue;
    if (a->dimension() != 1 || a->shape()[0] != n)
      throw numeq::error(std::string(name) + ": expected shape {" + std::to_string(n) + "} (the last axis of x)");
  }
}

std::string assumption_of(const core::Platform& platform, const std::string& name) {
  for (const core::Assumption& a : platform.assumptions)
    if (a.name == name) return a.value;
  return {};
}

enum class Norm : std::uint8_t { layer, rms };

Emulation normalize(const xt::xarray<double>& x, const reference::NormParameters& parameters,
                    const core::Platform& platform, const Cast& out, const NormOptions& options, Norm kind) {
  validate(out, "out");
  check_norm_parameters(x, parameters);
  const Machine mc = machine(platform, options.compute);
  const Rows rows = rows_along(x, x.dimension() - 1);
  const detail::Compute& C = mc.compute;
  const LayernormVariant variant = kind == Norm::rms ? LayernormVariant::two_pass : options.variant;
  BnAggrMerge merge = BnAggrMerge::chan;
  if (variant == LayernormVariant::bn_stats) {
    const std::string name = assumption_of(platform, "bn_aggr_merge");
    if (name.empty())
      throw numeq::error("variant: bn_stats needs a platform with the bn_aggr_merge assumption (trainium.*); " +
                         platform.name + " has none");
    merge = bn_aggr_merge_by_name(name, "bn_aggr_merge");
  }
  Emulation result = shaped_like(x);
  if (rows.n == 0) return result;
  const core::ReductionWeights w = core::reduction_weights(mc.sum, rows.n, false);
  const Tracked eps = detail::input(parameters.eps, C);
  const RowIo io(x, result, out);
  parallel_for(
      rows.count(),
      [&](std::size_t begin, std::size_t end) {
        std::vector<Tracked> xs(rows.n), t(rows.n);
        for (std::size_t row = begin; row < end; ++row) {
          const bool finite = read_row(io.in, rows, row, C, xs);
          const Tracked n = detail::input(static_cast<double>(rows.n), C);
          Tracked mean = detail::exact(0), var;
          if (kind == Norm::rms) {
            for (std::size_t j = 0; j < rows.n; ++j) t[j] = detail::mul(xs[j], xs[j], C);
            var = detail::div(detail::reduce(t, mc.sum, w), n, C);  // the mean square
          } else if (variant == LayernormVariant::two_pass) {
            // Two-pass: n u + n^2 kappa^2 u^2 (Chan, Golub, LeVeque 1983); here its running form.
            mean = detail::div(detail::reduce(xs, mc.sum, w), n, C);
            for (std::size_t j = 0; j < rows.n; ++j) {
              const Tracked c = detail::sub(xs[j], mean, C);
              t[j] = detail::mul(c, c, C);
            }
            var = detail::div(detail::reduce(t, mc.sum, w), n, C);
          } else if (variant == LayernormVariant::welford) {
            const detail::Moments mo = detail::welford(xs, 0, rows.n, 1, C);
            mean = mo.mean;
            var = detail::div(mo.m2, n, C);
          } else {
            // bn_stats: free size at most 512 per instruction, even and odd elements apart.
            std::vector<detail::Moments> parts;
            for (std::size_t c = 0; c < rows.n; c += 512) {
              const std::size_t stop = std::min(rows.n, c + 512);
              for (std::size_t parity = 0; parity < 2 && c + parity < stop; ++parity)
                parts.push_back(detail::welford(xs, c + parity, stop, 2, C));
            }
            std::tie(mean, var) = detail::bn_aggregate(parts, merge, C);
          }
          const Tracked r = detail::apply(mc.rsqrt, detail::add(var, eps, C));
          for (std::size_t j = 0; j < rows.n; ++j) {
            bool ok = finite;
            Tracked y = detail::mul(kind == Norm::rms ? xs[j] : detail::sub(xs[j], mean, C), r, C);
            if (parameters.gamma != nullptr) {
              const double g = (*parameters.gamma)(j);
              ok = ok && std::isfinite(g);
              y = detail::mul(y, detail::input(g, C), C);
            }
            if (parameters.beta != nullptr) {
              const double b = (*parameters.beta)(j);
              ok = ok && std::isfinite(b);
              y = detail::add(y, detail::input(b, C), C);
            }
            emit(y, io, rows.at(row, j), ok);
          }
        }
      },
      2);
  return result;
}

}  // namespace

SoftmaxVariant softmax_variant_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<SoftmaxVariant>, name, parameter, "softmax variant");
}

LayernormVariant layernorm_variant_by_name(std::string_view name, std::string_view parameter) {
  return by_name(enum_names<LayernormVariant>, name, parameter, "layernorm variant");
}

Emulation softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, const core::Platform& platform, const Cast& out,
                  const SoftmaxOptions& options) {
  return softmax_family(x, axis, platform, out, options, false);
}

Emulation log_softmax(const xt::xarray<double>& x, std::ptrdiff_t axis, const core::Platform& platform,
                      const Cast& out, const SoftmaxOptions& options) {
  return softmax_family(x, axis, platform, out, options, true);
}

Emulation layernorm(const xt::xarray<double>& x, const reference::NormParameters& parameters,
                    const core::Platform& platform, const Cast& out, const NormOptions& options) {
  return normalize(x, parameters, platform, out, options, Norm::layer);
}

Emulation rmsnorm(const xt::xarray<double>& x, const reference::NormParameters& parameters,
                  const core::Platform& platform, const Cast& out, const NormOptions& options) {
  return normalize(x, parameters, platform, out, options, Norm::rms);
}

}  // namespace numeq::cases
