// Reductions over several axes and numpy's layout-dependent order (numpy_reduction.hpp).
//
// numpy_reduction follows numpy 2.4's iterator step by step; the functions it mirrors are named
// in the comments (numpy/_core/src/multiarray/nditer_constr.c unless said otherwise).

#include "numeq/core/numpy_reduction.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "numeq/formats/error.hpp"

namespace numeq::core {

std::vector<std::size_t> normalise_axes(const std::vector<std::ptrdiff_t>& axes, std::size_t ndim,
                                        std::string_view parameter) {
  const auto dims = static_cast<std::ptrdiff_t>(ndim);
  std::vector<std::size_t> out;
  for (const std::ptrdiff_t a : axes) {
    if (a < -dims || a >= dims)
      throw numeq::error(std::string(parameter) + ": " + std::to_string(a) + " is out of range for an array of " +
                         std::to_string(ndim) + " dimension" + (ndim == 1 ? "" : "s") +
                         (ndim == 0 ? " (it has no axis)" : " (valid: " + std::to_string(-dims) + " to " +
                                                                std::to_string(dims - 1) + ")"));
    const auto d = static_cast<std::size_t>(a < 0 ? a + dims : a);
    if (std::find(out.begin(), out.end(), d) != out.end())
      throw numeq::error(std::string(parameter) + ": axis " + std::to_string(d) + " is given more than once");
    out.push_back(d);
  }
  return out;
}

xt::xarray<double> gather_reduced(const xt::xarray<double>& x, const std::vector<std::size_t>& reduced) {
  const std::size_t ndim = x.dimension();
  const std::vector<std::size_t> shape(x.shape().begin(), x.shape().end());
  for (std::size_t i = 0; i < reduced.size(); ++i)
    if (reduced[i] >= ndim || std::find(reduced.begin(), reduced.begin() + static_cast<std::ptrdiff_t>(i), reduced[i]) !=
                                  reduced.begin() + static_cast<std::ptrdiff_t>(i))
      throw numeq::error("axis: the reduced axes must be distinct axes of x");
  std::vector<std::size_t> cstride(ndim, 1);
  for (std::size_t d = ndim; d-- > 1;) cstride[d - 1] = cstride[d] * shape[d];
  std::vector<std::size_t> kept;
  for (std::size_t d = 0; d < ndim; ++d)
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
  // Offsets (C order) of the terms of one element and of each element's first term.
  const auto offsets = [&](const std::vector<std::size_t>& axes) {
    std::vector<std::size_t> off{0};
    for (const std::size_t d : axes) {
      std::vector<std::size_t> next;
      next.reserve(off.size() * shape[d]);
      for (const std::size_t o : off)
        for (std::size_t i = 0; i < shape[d]; ++i) next.push_back(o + i * cstride[d]);
      off.swap(next);
    }
    return off;
  };
  const std::vector<std::size_t> terms = offsets(reduced), elements = offsets(kept);
  std::vector<std::size_t> out_shape;
  for (const std::size_t d : kept) out_shape.push_back(shape[d]);
  out_shape.push_back(terms.size());
  xt::xarray<double> out = xt::xarray<double>::from_shape(out_shape);
  const double* src = x.data();
  double* dst = out.data();
  for (const std::size_t e : elements)
    for (const std::size_t t : terms) *dst++ = src[e + t];
  return out;
}

namespace {

Cast nearest(const Format& f) { return Cast{f, Rounding::nearest_even}; }

// One axis of numpy's iterator (after merging: several array axes): its length and the input's
// and the output's stride.
struct IterAxis {
  std::size_t shape = 1;
  std::ptrdiff_t in = 0, out = 0;
};

// How each output element's terms (in iteration order) are cut into inner-loop calls: `sweep`
// consecutive terms at a time (the sweeps are equal), each sweep into runs of `run` terms (the
// last run of a sweep shorter); elementwise: every term is its own call.
struct Runs {
  bool elementwise = false;
  std::size_t sweep = 1, run = 1;
};

// npyiter_find_buffering_setup (numpy 2.4) for the reduction's two operands (0: the output,
// 1: the input), on the merged axes, the innermost being a reduced one; then the calls that
// npyiter_copy_to_buffers and the buffered iternext functions (nditer_templ.c.src) make.
Runs buffered_runs(const std::vector<IterAxis>& dims, bool cast, std::size_t bufsize) {
  const auto maximum = static_cast<double>(bufsize);
  const bool cast_op[2] = {false, cast};
  const bool reduce_op[2] = {true, false};  // the output is the reduction operand
  int single[2] = {1, 1};                   // how many axes each operand walks with one stride
  std::size_t op_outer_reduce[2] = {0, 0};
  int cost = 1 + (cast ? 1 : 0);
  std::size_t outer_reduce_dim = 0;
  double size = static_cast<double>(dims[0].shape);
  std::size_t best_dim = 0;
  int best_cost = cost;
  double best_size = size, best_core = 1;
  const auto stride = [&](std::size_t d, int op) { return op == 0 ? dims[d].out : dims[d].in; };
  for (std::size_t idim = 1; idim < dims.size(); ++idim) {
    if (outer_reduce_dim != 0) break;
    if (size >= maximum && cost > 1) break;  // NPY_ITER_GROWINNER is set: only buffering limits
    for (int op = 0; op < 2; ++op) {
      const std::ptrdiff_t prev = stride(idim - 1, op), cur = stride(idim, op);
      if (single[op] == static_cast<int>(idim)) {
        if (prev * static_cast<std::ptrdiff_t>(dims[idim - 1].shape) == cur) {
          ++single[op];
          continue;
        }
        if (!cast_op[op]) ++cost;
      }
      if (reduce_op[op] && (cur == 0 || prev == 0)) {
        op_outer_reduce[op] = idim;
        outer_reduce_dim = idim;
      }
    }
    const double core = size;
    size *= static_cast<double>(dims[idim].shape);
    const double buffer = (size > maximum && cost > 1) ? maximum : size;
    if (static_cast<double>(cost) * best_size <= static_cast<double>(best_cost) * buffer) {
      best_cost = cost;
      best_core = core;
      best_size = size;
      best_dim = idim;
    }
  }
  const bool using_reduce = outer_reduce_dim != 0 && best_dim == outer_reduce_dim;
  bool must_buffer = false;
  for (int op = 0; op < 2; ++op) {
    bool buffered = cast_op[op];
    bool is_reduce = false;
    if (!using_reduce) is_reduce = false;
    else if (op_outer_reduce[op] == best_dim) is_reduce = true;
    else if (single[op] == static_cast<int>(best_dim) && !buffered) is_reduce = true;
    else if (stride(outer_reduce_dim, op) == 0 && single[op] <= static_cast<int>(best_dim)) is_reduce = true;
    if (!(single[op] + (is_reduce ? 1 : 0) > static_cast<int>(best_dim))) buffered = true;
    must_buffer = must_buffer || buffered;
  }
  const auto core = static_cast<std::size_t>(best_core);
  if (using_reduce) return Runs{false, core, core};  // every call: the core (reduced axes only)
  std::size_t buffer = static_cast<std::size_t>(best_size);
  if (must_buffer && maximum < best_size) buffer = core * (bufsize / core);
  // Calls walk the axis best_dim (and the axes inside it, all reduced) up to its end.
  const std::size_t sweep = core * dims[best_dim].shape;
  return Runs{false, sweep, std::min(buffer, sweep)};
}

// The plan of one output element's n terms cut as `runs`; `acc` the pairwise sums' arithmetic,
// `out` the output's (fp16: each call stores half(float(out) + float sum), loops.c.src HALF_add).
PlanNode runs_plan(std::size_t n, const Runs& runs, const Cast& acc, const Cast& out) {
  const Arithmetic a{acc}, o{out};
  const bool same = acc == out;
  // out = out(acc(out + partial)) for each of `count` partials (or terms) in order.
  const auto chain = [&](std::size_t count) {
    return same ? sequential(o, true) : split(count, SplitMode::serial, out, sequential(a));
  };
  if (n == 0) return sequential(o, true);
  if (runs.elementwise) return chain(n);
  const PlanNode pw = pairwise(128, 8, lanes(8, a), a);  // loops_utils.h.src, pairwise_sum
  const std::size_t sweep = std::min(runs.sweep, n), run = std::min(runs.run, sweep);
  const std::size_t sweeps = n / sweep;
  const std::size_t runs_per_sweep = (sweep + run - 1) / run;
  if (runs_per_sweep == 1) {
    if (sweeps == 1) {
      return same ? pw : split(1, SplitMode::serial, out, pw);
    }
    return chunked(sweep, pw, chain(sweeps));
  }
  PlanNode within = chunked(run, pw, chain(runs_per_sweep));
  if (sweeps == 1) return within;
  // Sweeps cut into unequal runs: the running value passes from sweep to sweep as init.
  return split(sweeps, SplitMode::serial, out, std::move(within));
}

}  // namespace

ReductionOrder numpy_reduction(const std::vector<std::size_t>& shape, const std::vector<std::ptrdiff_t>& strides,
                               const std::vector<std::ptrdiff_t>& axes, const Format& in, const Format& compute,
                               bool buffered, std::size_t bufsize) {
  if (strides.size() != shape.size())
    throw numeq::error("strides: " + std::to_string(strides.size()) + " strides for " + std::to_string(shape.size()) +
                       " dimensions");
  if (!(compute == formats::fp16 || compute == formats::fp32 || compute == formats::fp64))
    throw numeq::error("compute: numpy sums in fp16, fp32 or fp64 (float16, float32, float64); got " +
                       std::string(compute.name));
  if (in.is_integer()) throw numeq::error("in_fmt: numpy's float sum takes floating-point values; got " + std::string(in.name));
  if (bufsize == 0) throw numeq::error("bufsize: expected a positive buffer size (numpy's default is 8192)");
  const std::size_t ndim = shape.size();
  const std::vector<std::size_t> reduced = normalise_axes(axes, ndim, "axis");
  const auto is_reduced = [&](std::size_t d) { return std::find(reduced.begin(), reduced.end(), d) != reduced.end(); };
  std::size_t n = 1;
  bool empty = false;
  for (std::size_t d = 0; d < ndim; ++d) {
    if (is_reduced(d)) n *= shape[d];
    empty = empty || shape[d] == 0;
  }
  const bool cast = buffered || !(in == compute);

  // npyiter_fill_axisdata: iterator axis i is array axis ndim-1-i; a length-1 axis has stride 0.
  std::vector<std::size_t> perm(ndim);
  for (std::size_t i = 0; i < ndim; ++i) perm[i] = ndim - 1 - i;
  const auto in_stride = [&](std::size_t d) { return shape[d] == 1 ? std::ptrdiff_t{0} : strides[d]; };
  // npyiter_find_best_axis_ordering: stable insertion sort, smallest |stride| innermost; an
  // operand with stride 0 on either axis does not vote (the output, allocated later, never does).
  for (std::size_t i0 = 1; i0 < ndim; ++i0) {
    const std::size_t j0 = perm[i0];
    const std::ptrdiff_t s0 = in_stride(j0);
    std::size_t ipos = i0;
    for (std::size_t i1 = i0; i1-- > 0;) {
      const std::ptrdiff_t s1 = in_stride(perm[i1]);
      if (s0 == 0 || s1 == 0) continue;  // ambiguous: look further
      if (std::abs(s1) <= std::abs(s0)) break;
      ipos = i1;
    }
    if (ipos != i0) {
      perm.erase(perm.begin() + static_cast<std::ptrdiff_t>(i0));
      perm.insert(perm.begin() + static_cast<std::ptrdiff_t>(ipos), j0);
    }
  }
  ReductionOrder result;
  for (std::size_t i = ndim; i-- > 0;)
    if (is_reduced(perm[i])) result.axes.push_back(perm[i]);

  // npyiter_new_temp_array: the output is allocated contiguous in iteration order; its stride is
  // 0 on reduced and length-1 axes. Then npyiter_coalesce_axes merges neighbours.
  std::vector<IterAxis> dims;
  std::ptrdiff_t run = 1;
  for (const std::size_t d : perm) {
    IterAxis a{shape[d], in_stride(d), (is_reduced(d) || shape[d] == 1) ? 0 : run};
    if (!is_reduced(d)) run *= static_cast<std::ptrdiff_t>(shape[d]);
    if (!dims.empty()) {
      IterAxis& c = dims.back();
      const auto merges = [&](std::ptrdiff_t s0, std::ptrdiff_t s1) {
        return (c.shape == 1 && s0 == 0) || (a.shape == 1 && s1 == 0) ||
               s0 * static_cast<std::ptrdiff_t>(c.shape) == s1;
      };
      if (merges(c.in, a.in) && merges(c.out, a.out)) {
        c.shape *= a.shape;
        if (c.in == 0) c.in = a.in;
        if (c.out == 0) c.out = a.out;
        continue;
      }
    }
    dims.push_back(a);
  }
  if (dims.empty()) dims.push_back(IterAxis{});  // a 0-d array: one element

  Runs runs;
  if (empty || n == 0) runs = Runs{false, std::max<std::size_t>(n, 1), std::max<std::size_t>(n, 1)};
  else if (dims[0].out != 0) runs.elementwise = true;  // the innermost axis is kept: one term per call
  else runs = buffered_runs(dims, cast, bufsize);

  const Cast out = nearest(compute);
  const Cast acc = compute == formats::fp16 ? nearest(formats::fp32) : out;  // HALF_pairwise_sum: float
  Plan& plan = result.plan;
  plan.name = "numpy sum " + std::string(compute.name) + " (" +
              (runs.elementwise ? std::string("elementwise") :
                                  "runs of " + std::to_string(runs.run) + " in sweeps of " + std::to_string(runs.sweep)) +
              ")";
  const bool widening = in.mantissa_bits <= compute.mantissa_bits && in.exponent_bits <= compute.exponent_bits;
  if (!widening) plan.input_a = out;  // the buffer's cast rounds each input (round to nearest even)
  plan.reduction = runs_plan(n, runs, acc, out);
  // The output starts at add's identity +0 (get_initial_from_ufunc), so a sum of -0s is +0. It is
  // added in the plan's outer arithmetic (plan.hpp, outer_cast): acc, which holds every value of out,
  // so 0 + v is exact and only a zero's sign can change.
  plan.initial = 0.0;
  plan.output = out;
  return result;
}

}  // namespace numeq::core
