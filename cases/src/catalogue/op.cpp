// The Op factories (op.hpp): matmul, functions, softmax, the norms and attention, and Op's kept
// exact value and reference. The reductions (sum, mean, max, sum_of_squares) are in
// op_reduction.cpp, the quantised ones in op_quantized.cpp, the tolerance fit in tolerance.cpp.

#include "numeq/cases/op.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xbroadcast.hpp>

#include "numeq/cases/elementwise.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/references/composite.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"
#include "numeq/formats/fast_round.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/cpu_dispatch.hpp"
#include "numeq/formats/shape.hpp"
#include "input_check.hpp"
#include "op_common.hpp"

namespace numeq::cases {

using Array = xt::xarray<double>;

std::string signature_shape(const Array& x) {
  std::string s = "[";
  for (std::size_t d = 0; d < x.dimension(); ++d) {
    if (d) s += ',';
    s += std::to_string(x.shape()[d]);
  }
  s += ']';
  return s;
}

using namespace op_detail;

const reference::ExactValues& Op::exact_values() const {
  std::call_once(cache->exact_once, [this] { cache->exact = exact(); });
  return cache->exact;
}

std::shared_ptr<const Emulation> Op::emulation(const core::Platform& platform, const core::BoundOptions& options) const {
  // The key spells every input of emulate: the platform by name within one registry generation
  // (variants are part of the name), and the bound options bit for bit.
  const auto bits = [](double v) { return std::to_string(std::bit_cast<std::uint64_t>(v)); };
  const std::string key = platform.name + '\x1f' + std::to_string(core::platform_generation()) + '\x1f' +
                          std::to_string(static_cast<int>(options.kind)) + '\x1f' + bits(options.lambda) + '\x1f' +
                          bits(options.failure_probability);
  {
    const std::lock_guard<std::mutex> lock(cache->emulations_mutex);
    for (const auto& [k, e] : cache->emulations)
      if (k == key) return e;
  }
  auto e = std::make_shared<const Emulation>(emulate(platform, options));
  const std::lock_guard<std::mutex> lock(cache->emulations_mutex);
  constexpr std::size_t kKept = 6;
  if (cache->emulations.size() >= kKept) cache->emulations.erase(cache->emulations.begin());
  cache->emulations.emplace_back(key, e);
  return e;
}

const reference::ExactValues& Op::check_exact(double& relative_error) const {
  if (!exact_within) {
    relative_error = exact_relative_error;
    return exact_values();
  }
  std::call_once(cache->within_once, [this] { cache->within = exact_within(); });
  relative_error = exact_within_error;
  return cache->within;
}

const Array& Op::reference_values() const {
  std::call_once(cache->reference_once, [this] {
    if (reference_from_exact) {
      double relative_error = 0;  // reference_from_exact knows it (the op sets both)
      const reference::ExactValues& ex = check_exact(relative_error);
      Array r(ex.hi.shape());
      // Elements left open, in index order (per slice, slices merged in order).
      std::vector<std::size_t> open;
      for (std::vector<std::size_t>& part : parallel_states<std::vector<std::size_t>>(
               r.size(),
               [&](std::size_t begin, std::size_t end, std::vector<std::size_t>& left) {
                 for (std::size_t i = begin; i < end; ++i) {
                   const std::optional<double> v = reference_from_exact(
                       ex.hi.data()[i], ex.lo.data()[i], ex.radius.empty() ? 0.0 : ex.radius[i]);
                   if (v) r.data()[i] = *v;
                   else left.push_back(i);
                 }
               },
               1 << 14))
        open.insert(open.end(), part.begin(), part.end());
      // A few open elements take reference_at; many (or no reference_at) the whole reference.
      if (open.empty()) {
        cache->reference = std::move(r);
      } else if (reference_at && open.size() <= r.size() / 8) {
        const std::vector<double> values = reference_at(open);
        for (std::size_t n = 0; n < open.size(); ++n) r.data()[open[n]] = values[n];
        cache->reference = std::move(r);
      } else {
        cache->reference = reference();
      }
    } else {
      cache->reference = reference();
    }
  });
  return cache->reference;
}

// ---- matmul ----

Op matmul(const Array& a, const Array& b, const Array* c, std::string_view in_fmt, const Cast& out) {
  const Format& fin = floating_format(in_fmt, "in_fmt");
  floating_format(out.format.name, "out");
  if (a.dimension() < 2 || b.dimension() < 2)
    throw numeq::error("a, b: matmul needs arrays of at least 2 dimensions ([..., M, K] and [..., K, N]), got " +
                       shape_text(a) + " and " + shape_text(b));
  if (a.shape().back() != b.shape()[b.dimension() - 2])
    throw numeq::error("b: inner dimensions differ: a " + shape_text(a) + " has K=" + std::to_string(a.shape().back()) +
                       ", b " + shape_text(b) + " has K=" + std::to_string(b.shape()[b.dimension() - 2]));
  check_values(a, fin, "a");
  check_values(b, fin, "b");
  const auto sa = std::make_shared<const Array>(a), sb = std::make_shared<const Array>(b);
  const Shared sc = c ? std::make_shared<const Array>(*c) : nullptr;
  if (sc) check_broadcast(*sc, matmul_shape(a, b), "c");
  Op op;
  op.name = "matmul";
  op.reduction_length = a.shape().back();
  op.signature = "a" + signature_shape(a) + " " + std::string(in_fmt) + " @ b" + signature_shape(b) + " " + std::string(in_fmt) +
                 (sc ? " + c" + signature_shape(*sc) : "") + " -> " + std::string(out.format.name);
  op.out = out;
  const std::string fmt(in_fmt);
  op.exact = [sa, sb, sc] { return reference::matmul_exact(*sa, *sb, sc.get()); };
  op.reference = [sa, sb, sc, out] { return reference::matmul(*sa, *sb, out, sc.get()); };
  // The reference from the double-double exact value, rounded to odd into binary64 by the sign of
  // lo, then into out (round_quotient): correct where lo is nonzero exactly when the exact value
  // differs from hi (products of fp32-range inputs have no bits below 2^-298, so lo never
  // underflows; no bias c of another format), where out is narrower than binary64 by 2 bits or
  // more, and for roundings whose exact-zero sign hi already carries (all but downward). Only the
  // 16- and 32-bit output formats (each has a NaN for a NaN result).
  const bool from_exact = !sc && fin != formats::fp64 && out.format.mantissa_bits >= 7 && out.format.mantissa_bits <= 50 &&
                          out.subnormals == Subnormals::keep &&
                          (out.rounding == Rounding::nearest_even || out.rounding == Rounding::nearest_away ||
                           out.rounding == Rounding::toward_zero || out.rounding == Rounding::upward);
  if (from_exact)
    op.reference_from_exact = [out](double hi, double lo, double) { return round_quotient(hi, lo, out); };
  op.diagnose = [sa, sb, sc, fmt](const DiagnosisData& data) { return diagnose_matmul(*sa, *sb, sc.get(), fmt, data); };
  // The platform's plan for in_fmt, or for its fp8 twin where every operand value is one of both.
  const auto plan_of = [sa, sb, fmt, out](const core::Platform& platform) {
    const std::array<const double*, 2> data{sa->data(), sb->data()};
    const std::array<std::size_t, 2> sizes{sa->size(), sb->size()};
    return core::plan_for_values(platform, core::Operation::matmul, fmt, out.format.name, data, sizes);
  };
  op.values = [sa, sb, sc, plan_of](const core::Platform& platform) {
    return core::matmul(*sa, *sb, sc.get(), plan_of(platform));
  };
  op.emulate = [sa, sb, sc, plan_of](const core::Platform& platform, const core::BoundOptions& options) {
    const core::Plan plan = plan_of(platform);
    Emulation e;
    e.values = core::matmul(*sa, *sb, sc.get(), plan);
    e.bound = core::matmul_bound(*sa, *sb, sc.get(), plan, e.values, options);
    if (options.kind == core::BoundKind::probabilistic)
      e.failure_probability =
          core::reduction_weights(plan, sa->shape().back(), sc != nullptr, options).failure_probability;
    return e;
  };
  op.model_key = [plan_of](const core::Platform& platform) {
    core::Plan plan = plan_of(platform);
    plan.name.clear();  // it names the platform
    return core::to_json(plan, -1);
  };
  // A 2-D product: where one element's bound comes from, and the part of the op holding given elements.
  if (a.dimension() == 2 && b.dimension() == 2) {
    op.bound_sources = [sa, sb, sc, plan_of](const core::Platform& platform, std::size_t flat, double emulated) {
      const core::Plan plan = plan_of(platform);
      const std::size_t M = sa->shape()[0], K = sa->shape()[1], N = sb->shape()[1], i = flat / N, j = flat % N;
      std::optional<double> cij;
      if (sc) cij = Array(xt::broadcast(*sc, std::vector<std::size_t>{M, N}))(i, j);
      return dot_bound_shares(sa->data() + i * K, 1, sb->data() + j, static_cast<std::ptrdiff_t>(N), K,
                              cij ? &*cij : nullptr, plan, emulated);
    };
    const std::string fmt_name(in_fmt);
    // The rows of a and the columns of b that hold the elements (a block of failures costs its
    // block, not its whole rows), or the elements' own dot products where they are scattered:
    // the variant search and the probabilistic walk run on it.
    op.restrict_to = [sa, sb, sc, fmt_name, out](const std::vector<std::size_t>& elements) {
      const std::size_t M = sa->shape()[0], K = sa->shape()[1], N = sb->shape()[1];
      const auto unique_of = [&](auto index) {
        std::vector<std::size_t> v;
        for (const std::size_t e : elements) v.push_back(index(e));
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
        return v;
      };
      const std::vector<std::size_t> rows = unique_of([N](std::size_t e) { return e / N; });
      const std::vector<std::size_t> cols = unique_of([N](std::size_t e) { return e % N; });
      const std::size_t R = rows.size(), C = cols.size(), E = elements.size();
      // Scattered elements: each its own dot product, as a batch of [1, K] @ [K, 1] products
      // (where that is much less than their block and its copies stay small).
      if (4 * E <= R * C && E * K <= (std::size_t{1} << 22)) {
        Array ea(std::vector<std::size_t>{E, 1, K}), eb(std::vector<std::size_t>{E, K, 1});
        std::optional<Array> ec;
        if (sc) ec.emplace(std::vector<std::size_t>{E, 1, 1});
        const Array full_c = sc ? Array(xt::broadcast(*sc, std::vector<std::size_t>{M, N})) : Array();
        std::vector<std::size_t> where(E);
        for (std::size_t j = 0; j < E; ++j) {
          const std::size_t r = elements[j] / N, c = elements[j] % N;
          std::copy_n(sa->data() + r * K, K, ea.data() + j * K);
          for (std::size_t k = 0; k < K; ++k) eb.data()[j * K + k] = sb->data()[k * N + c];
          if (ec) ec->data()[j] = full_c.data()[elements[j]];
          where[j] = j;
        }
        return std::pair<Op, std::vector<std::size_t>>{matmul(ea, eb, ec ? &*ec : nullptr, fmt_name, out), where};
      }
      Array ra(std::vector<std::size_t>{R, K}), rb(std::vector<std::size_t>{K, C});
      for (std::size_t r = 0; r < R; ++r) std::copy_n(sa->data() + rows[r] * K, K, ra.data() + r * K);
      for (std::size_t k = 0; k < K; ++k)
        for (std::size_t c = 0; c < C; ++c) rb.data()[k * C + c] = sb->data()[k * N + cols[c]];
      std::optional<Array> rc;
      if (sc) {
        const Array full = xt::broadcast(*sc, std::vector<std::size_t>{M, N});
        rc.emplace(std::vector<std::size_t>{R, C});
        for (std::size_t r = 0; r < R; ++r)
          for (std::size_t c = 0; c < C; ++c) rc->data()[r * C + c] = full.data()[rows[r] * N + cols[c]];
      }
      std::vector<std::size_t> where;
      for (const std::size_t e : elements) {
        const std::size_t r = static_cast<std::size_t>(std::lower_bound(rows.begin(), rows.end(), e / N) - rows.begin());
        const std::size_t c = static_cast<std::size_t>(std::lower_bound(cols.begin(), cols.end(), e % N) - cols.begin());
        where.push_back(r * C + c);
      }
      return std::pair<Op, std::vector<std::size_t>>{matmul(ra, rb, rc ? &*rc : nullptr, fmt_name, out), where};
    };
  }
  return op;
}

// ---- functions, softmax, normalisations ----

namespace {

const Cast kBinary64{formats::fp64};
// How closely a check needs the exact value of a composite op (Op::exact_within): 2^-40 relative
// is far below any bound of an output of at most 24 significant bits (its own final rounding
// alone is 2^-25 relative), and wide enough for the fast enclosures (about 2^-42).
constexpr reference::Within kCheckWithin{0x1p-40};

// The reference from an exact value known to a relative error e (certified() above: the MPFR
// value rounded to nearest in binary64, e = 2^-53; an enclosure's midpoint, Op::exact_within) or
// within a radius r (ExactValues::radius): the exact value lies within e |exact| + r <= 2 e |hi| + r
// of hi, inside [hi - 2e|hi| - r, hi + 2e|hi| + r] widened by a neighbour on each side (the products and differences are rounded). Every
// deterministic rounding into out is monotone, so where both ends round to the same value the
// exact value rounds to it too; elsewhere (hi next to a rounding boundary of out, a zero whose
// sign the ends do not settle, a non-finite hi) nullopt, and the op's reference() rounds the
// exact value itself. Stochastic rounding and subnormal inputs read as zero (flush_inputs,
// flush_both) take reference() always.
std::function<std::optional<double>(double, double, double)> certified_reference(const Cast& out, double relative_error) {
  if (out.rounding == Rounding::stochastic || out.subnormals == Subnormals::flush_inputs ||
      out.subnormals == Subnormals::flush_both)
    return nullptr;
  // FastRound built once (it answers most ends), the kernel for the rest.
  return [out, relative_error, fast = FastRound(out)](double hi, double, double radius) -> std::optional<double> {
    if (!std::isfinite(hi)) return std::nullopt;
    const double reach = next_up(2 * relative_error * std::abs(hi) + radius);
    const auto rounded = [&](double x) {
      double r = 0;
      return fast(x, r) ? r : round_to_format_by_kernel(x, out, 0);
    };
    const double below = rounded(next_down(hi - reach));
    const double above = rounded(next_up(hi + reach));
    if (!(below == above && std::signbit(below) == std::signbit(above))) return std::nullopt;
    return below;
  };
}

}  // namespace

Op function(reference::Function f, const Array& x, std::string_view in_fmt, const Cast& out) {
  check_values(x, floating_format(in_fmt, "in_fmt"), "x");
  floating_format(out.format.name, "out");
  const auto sx = std::make_shared<const Array>(x);
  Op op;
  op.name = std::string(reference::function_name(f));
  op.signature = op.name + "(x" + signature_shape(x) + " " + std::string(in_fmt) + ") -> " + std::string(out.format.name);
  op.out = out;
  op.exact_relative_error = 0x1p-53;
  op.exact = [sx, f] { return certified(reference::evaluate(f, *sx, kBinary64)); };
  op.reference = [sx, f, out] { return reference::evaluate(f, *sx, out); };
  op.reference_from_exact = certified_reference(out, op.exact_relative_error);
  op.emulate = [sx, f, out](const core::Platform& platform, const core::BoundOptions&) {
    return cases::function(f, *sx, platform, out);
  };
  return op;
}

namespace {

// The rows (along the last axis; leading axes folded) of x that hold the given flat elements, as
// a [rows, n] array, and where each element lies in it: the part of a row-wise op (a softmax over
// the last axis, a normalisation) that the variant search and the probabilistic walk run on.
std::pair<Array, std::vector<std::size_t>> rows_holding(const Array& x, const std::vector<std::size_t>& elements) {
  const std::size_t n = x.shape().back();
  std::vector<std::size_t> rows;
  for (const std::size_t e : elements) rows.push_back(e / n);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  Array part(std::vector<std::size_t>{rows.size(), n});
  for (std::size_t r = 0; r < rows.size(); ++r) std::copy_n(x.data() + rows[r] * n, n, part.data() + r * n);
  std::vector<std::size_t> where;
  for (const std::size_t e : elements)
    where.push_back(static_cast<std::size_t>(std::lower_bound(rows.begin(), rows.end(), e / n) - rows.begin()) * n + e % n);
  return {std::move(part), std::move(where)};
}

}  // namespace

Op softmax(const Array& x, std::ptrdiff_t axis, std::string_view in_fmt, const Cast& out, const SoftmaxOptions& options,
           bool log) {
  check_values(x, floating_format(in_fmt, "in_fmt"), "x");
  floating_format(out.format.name, "out");
  if (x.dimension() == 0) throw numeq::error("x: softmax needs at least one dimension, got a 0-d array");
  const auto ax = static_cast<std::ptrdiff_t>(axis_index(axis, x.shape()));
  const auto sx = std::make_shared<const Array>(x);
  Op op;
  op.name = log ? "log_softmax" : "softmax";
  op.signature = op.name + "[" + std::string(to_string(options.variant)) +
                 (options.variant == SoftmaxVariant::online ? ", block " + std::to_string(options.block) : "") +
                 "](x" + signature_shape(x) + " " + std::string(in_fmt) + ", axis=" + std::to_string(ax) + ") in " +
                 std::string(options.compute.name) + " -> " + std::string(out.format.name);
  op.out = out;
  op.exact_relative_error = 0x1p-53;
  op.exact = [sx, ax, log] {
    return certified(log ? reference::log_softmax(*sx, ax, kBinary64) : reference::softmax(*sx, ax, kBinary64));
  };
  op.exact_within_error = kCheckWithin.relative_error;
  op.exact_within = [sx, ax, log] {
    return certified(log ? reference::log_softmax(*sx, ax, kCheckWithin) : reference::softmax(*sx, ax, kCheckWithin));
  };
  op.reference = [sx, ax, log, out] {
    return log ? reference::log_softmax(*sx, ax, out) : reference::softmax(*sx, ax, out);
  };
  op.reference_from_exact = certified_reference(out, op.exact_within_error);
  op.emulate = [sx, ax, log, out, options](const core::Platform& platform, const core::BoundOptions&) {
    return log ? cases::log_softmax(*sx, ax, platform, out, options) : cases::softmax(*sx, ax, platform, out, options);
  };
  op.diagnose = [sx, ax, log, options](const DiagnosisData& data) {
    return diagnose_softmax(*sx, ax, log, options, data);
  };
  if (ax + 1 == static_cast<std::ptrdiff_t>(x.dimension())) {  // rows along the last axis: independent
    const std::string fmt(in_fmt);
    // The few elements whose enclosure straddles a rounding boundary of out: their rows' reference,
    // not the whole one (a 1024 x 1024 bf16 softmax leaves about 3 open, which took 40 ms).
    op.reference_at = [sx, log, out](const std::vector<std::size_t>& elements) {
      const auto [part, where] = rows_holding(*sx, elements);
      const Array r = log ? reference::log_softmax(part, -1, out) : reference::softmax(part, -1, out);
      std::vector<double> values;
      values.reserve(where.size());
      for (const std::size_t w : where) values.push_back(r.data()[w]);
      return values;
    };
    op.restrict_to = [sx, fmt, out, options, log](const std::vector<std::size_t>& elements) {
      auto [part, where] = rows_holding(*sx, elements);
      return std::pair<Op, std::vector<std::size_t>>{softmax(part, -1, fmt, out, options, log), std::move(where)};
    };
  }
  return op;
}

namespace {

Op norm(bool centred, const Array& x, const Array* gamma, const Array* beta, double eps, std::string_view in_fmt,
        const Cast& out, const NormOptions& options) {
  check_values(x, floating_format(in_fmt, "in_fmt"), "x");
  floating_format(out.format.name, "out");
  if (x.dimension() == 0) throw numeq::error("x: a normalisation needs at least one dimension, got a 0-d array");
  const auto sx = std::make_shared<const Array>(x);
  const Shared sg = gamma ? std::make_shared<const Array>(*gamma) : nullptr;
  const Shared sb = beta ? std::make_shared<const Array>(*beta) : nullptr;
  // Checked when the op is built, so that a bad argument is reported where it was given.
  if (!(eps >= 0) || !std::isfinite(eps))
    throw numeq::error("eps: expected a finite value >= 0, got " + std::to_string(eps));
  for (const auto& [p, name] : {std::pair{sg.get(), "gamma"}, std::pair{sb.get(), "beta"}})
    if (p && (p->dimension() != 1 || p->shape()[0] != x.shape().back()))
      throw numeq::error(std::string(name) + ": expected shape [" + std::to_string(x.shape().back()) + "] (x's last axis), got " +
                         shape_text(*p));
  Op op;
  op.name = centred ? "layernorm" : "rmsnorm";
  op.signature = op.name + (centred ? "[" + std::string(to_string(options.variant)) + "]" : std::string()) + "(x" +
                 signature_shape(x) + " " + std::string(in_fmt) + (sg ? ", gamma" : "") + (sb ? ", beta" : "") +
                 ", eps=" + std::to_string(eps) + ") in " + std::string(options.compute.name) + " -> " +
                 std::string(out.format.name);
  op.out = out;
  op.exact_relative_error = 0x1p-53;
  const auto parameters = [sg, sb, eps] { return reference::NormParameters{sg.get(), sb.get(), eps}; };
  op.exact = [sx, centred, parameters] {
    return certified(centred ? reference::layernorm(*sx, parameters(), kBinary64) : reference::rmsnorm(*sx, parameters(), kBinary64));
  };
  op.exact_within_error = kCheckWithin.relative_error;
  op.exact_within = [sx, centred, parameters] {
    return certified(centred ? reference::layernorm(*sx, parameters(), kCheckWithin)
                             : reference::rmsnorm(*sx, parameters(), kCheckWithin));
  };
  op.reference = [sx, centred, parameters, out] {
    return centred ? reference::layernorm(*sx, parameters(), out) : reference::rmsnorm(*sx, parameters(), out);
  };
  op.reference_from_exact = certified_reference(out, op.exact_within_error);
  op.emulate = [sx, centred, parameters, out, options](const core::Platform& platform, const core::BoundOptions&) {
    return centred ? cases::layernorm(*sx, parameters(), platform, out, options)
                   : cases::rmsnorm(*sx, parameters(), platform, out, options);
  };
  op.diagnose = [sx, centred, parameters, options](const DiagnosisData& data) {
    return diagnose_norm(*sx, parameters(), centred, options, data);
  };
  // The elements whose enclosure straddles a rounding boundary of out: their rows' reference only.
  op.reference_at = [sx, centred, parameters, out](const std::vector<std::size_t>& elements) {
    const auto [part, where] = rows_holding(*sx, elements);  // each row normalised alone
    const Array r = centred ? reference::layernorm(part, parameters(), out) : reference::rmsnorm(part, parameters(), out);
    std::vector<double> values;
    values.reserve(where.size());
    for (const std::size_t w : where) values.push_back(r.data()[w]);
    return values;
  };
  const std::string fmt(in_fmt);
  op.restrict_to = [sx, sg, sb, eps, fmt, out, options, centred](const std::vector<std::size_t>& elements) {
    auto [part, where] = rows_holding(*sx, elements);  // each row normalised alone
    return std::pair<Op, std::vector<std::size_t>>{norm(centred, part, sg.get(), sb.get(), eps, fmt, out, options),
                                                   std::move(where)};
  };
  return op;
}

}  // namespace

Op layernorm(const Array& x, const Array* gamma, const Array* beta, double eps, std::string_view in_fmt, const Cast& out,
             const NormOptions& options) {
  return norm(true, x, gamma, beta, eps, in_fmt, out, options);
}

Op rmsnorm(const Array& x, const Array* gamma, const Array* beta, double eps, std::string_view in_fmt, const Cast& out,
           const NormOptions& options) {
  return norm(false, x, gamma, beta, eps, in_fmt, out, options);
}

// ---- attention ----

Op attention(const Array& q, const Array& k, const Array& v, const Array* mask, bool causal, std::optional<double> scale,
             std::string_view in_fmt, const Cast& out, const AttentionOptions& options) {
  const Format& fin = floating_format(in_fmt, "in_fmt");
  floating_format(out.format.name, "out");
  reference::check_attention_shapes(q, k, v, mask);  // now, not at the op's first use
  check_values(q, fin, "q");
  check_values(k, fin, "k");
  check_values(v, fin, "v");
  const auto sq = std::make_shared<const Array>(q), sk = std::make_shared<const Array>(k),
             sv = std::make_shared<const Array>(v);
  const Shared sm = mask ? std::make_shared<const Array>(*mask) : nullptr;
  const auto parameters = [sm, causal, scale] {
    reference::AttentionParameters p;
    p.scale = scale;
    p.causal = causal;
    p.mask = sm.get();
    return p;
  };
  Op op;
  op.name = "attention";
  op.signature = "attention[" + std::string(to_string(options.variant)) +
                 (options.variant == AttentionVariant::flash
                      ? " " + std::to_string(options.block_rows) + "x" + std::to_string(options.block_cols)
                      : std::string()) +
                 "](q" + signature_shape(q) + ", k" + signature_shape(k) + ", v" + signature_shape(v) + " " + std::string(in_fmt) +
                 (causal ? ", causal" : "") + (sm ? ", mask" : "") + ") -> " + std::string(out.format.name);
  op.out = out;
  op.exact_relative_error = 0x1p-53;
  op.exact = [sq, sk, sv, parameters] { return certified(reference::attention(*sq, *sk, *sv, parameters(), kBinary64)); };
  // A check measures against enclosures with radii (about 2^-46 of the values' scale, far below any
  // bound of an output of at most 24 significant bits); the radius is the check's slack.
  op.exact_within = [sq, sk, sv, parameters] {
    reference::EnclosedValues e = reference::attention_enclosed(*sq, *sk, *sv, parameters());
    reference::ExactValues r;
    r.lo = xt::zeros<double>(e.mid.shape());
    r.hi = std::move(e.mid);
    r.radius = std::move(e.radius);
    return r;
  };
  op.exact_within_error = 0;
  op.reference = [sq, sk, sv, parameters, out] { return reference::attention(*sq, *sk, *sv, parameters(), out); };
  op.reference_from_exact = certified_reference(out, 0);
  // The open elements' rows only (certified_reference is null for stochastic rounding, whose
  // draws follow the full result's indices).
  op.reference_at = [sq, sk, sv, parameters, out](const std::vector<std::size_t>& elements) {
    const std::size_t dv = sv->shape()[sv->dimension() - 1];
    std::vector<std::size_t> rows;
    for (const std::size_t e : elements)
      if (rows.empty() || rows.back() != e / dv) rows.push_back(e / dv);
    const Array part = reference::attention(*sq, *sk, *sv, parameters(), out, rows);
    std::vector<double> values;
    values.reserve(elements.size());
    std::size_t row = 0;
    for (const std::size_t e : elements) {
      while (rows[row] != e / dv) ++row;
      values.push_back(part.data()[row * dv + e % dv]);
    }
    return values;
  };
  const std::string fmt(in_fmt);
  op.emulate = [sq, sk, sv, parameters, fmt, out, options](const core::Platform& platform, const core::BoundOptions&) {
    return cases::attention(*sq, *sk, *sv, parameters(), platform, fmt, out, options);
  };
  op.diagnose = [sq, sk, sv, parameters](const DiagnosisData& data) {
    return diagnose_attention(*sq, *sk, *sv, parameters(), data);
  };
  return op;
}

}  // namespace numeq::cases
