#pragma once
// Reductions over several axes, and the order numpy's add.reduce (np.sum, np.add.reduce, the sum
// inside np.mean) gives the terms of an array with a given memory layout.
//
// A plan reduces one run of terms. A reduction over axes of an n-d array is brought to that form
// by gather_reduced: the kept axes first (in their order), the reduced axes flattened into one
// last axis in a stated order, the first of them outermost. Any platform then sums the last axis
// with its plan (numeq::core::sum(gathered, -1, plan), and its bound with sum_bound on the same
// arguments). Platforms without a layout model take the reduced axes in C order (ascending).
//
// numpy's order depends on the layout (numpy/_core/src/umath/reduction.c, PyUFunc_ReduceWrapper;
// numpy/_core/src/multiarray/nditer_constr.c and nditer_api.c; numpy 2.3 and later, whose buffer
// setup npyiter_find_buffering_setup replaced the older one; checked against numpy 2.4):
//   * the output starts at the identity +0 (legacy_array_method.c, get_initial_from_ufunc) and
//     every inner-loop call does out = out + (its terms);
//   * the iterator orders the axes by the input's absolute strides, smallest innermost (a stable
//     insertion sort, npyiter_find_best_axis_ordering; the allocated output has stride 0 on the
//     reduced axes and does not vote; negative strides are not flipped: NPY_ITER_DONT_NEGATE_STRIDES),
//     then merges neighbouring axes that address memory as one (npyiter_coalesce_axes);
//   * when the innermost merged axis is a kept one, each call adds one term to each of a row of
//     outputs (loops_arithm_fp.dispatch.c.src, the non-reduce branch): per output element a
//     sequential chain from +0 in iteration order;
//   * when it is a reduced one, each call adds the pairwise sum of a run of terms to one output
//     (loops_utils.h.src, pairwise_sum: blocks of 128, 8 accumulators). The runs are the buffered
//     iterator's inner loops (npyiter_find_buffering_setup, npyiter_copy_to_buffers): a "core" of
//     the innermost axes and, when the input must be copied (a dtype cast, or axes that do not
//     merge), runs of at most bufsize = 8192 elements cut at multiples of the core;
//   * float16 (loops.c.src, HALF_add): the pairwise sum runs in float32 and each call stores
//     half(float(out) + pairwise), two roundings; the elementwise branch half(float(a) + float(b)).
// Reproduced bit for bit against numpy itself (tests/python/test_numpy_order.py).

#include <cstddef>
#include <string_view>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/core/plan.hpp"
#include "numeq/formats/format.hpp"

namespace numeq::core {

// Axes as given (negative ones count from the end) checked and made non-negative, in the order
// given; numeq::error naming `parameter` when one is out of range or repeated.
std::vector<std::size_t> normalise_axes(const std::vector<std::ptrdiff_t>& axes, std::size_t ndim,
                                        std::string_view parameter = "axis");

// x with its kept axes first (in order) and the axes `reduced` (distinct, in range) flattened into
// one last axis, reduced[0] outermost (slowest). With no reduced axis the last axis has length 1.
xt::xarray<double> gather_reduced(const xt::xarray<double>& x, const std::vector<std::size_t>& reduced);

struct ReductionOrder {
  std::vector<std::size_t> axes;  // the reduced axes, outermost first: the order of each element's terms
  Plan plan;                      // the plan over those terms (gather_reduced(x, axes), last axis)
};

// numpy's add.reduce of an array of `shape` and `strides` (numpy's byte strides, or any consistent
// unit: only their ratios matter) over `axes`, its values of format `in`, summed with
// dtype `compute` (np.sum(x, dtype=...); for np.mean of float16, fp32). `buffered`: numpy must
// copy the input through its buffer even without a dtype change (a misaligned or byte-swapped
// array); a change of format implies it. `bufsize`: np.getbufsize(), 8192 unless changed.
// Formats: fp16, fp32 and fp64 for compute; a narrower compute rounds the inputs first
// (plan.input_a), as numpy's buffer cast does.
ReductionOrder numpy_reduction(const std::vector<std::size_t>& shape, const std::vector<std::ptrdiff_t>& strides,
                               const std::vector<std::ptrdiff_t>& axes, const Format& in, const Format& compute,
                               bool buffered = false, std::size_t bufsize = 8192);

}  // namespace numeq::core
