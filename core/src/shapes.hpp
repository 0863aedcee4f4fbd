#pragma once
// Shapes for error messages and numpy broadcasting, shared by the evaluator and the bound walker
// (private to core/): both must accept and reject exactly the same arguments.

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/formats/error.hpp"

namespace numeq::core::detail {

// "(2, 3)", "(4,)" as numpy prints shapes.
inline std::string shape_text(const xt::svector<std::size_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  out += s.size() == 1 ? ",)" : ")";
  return out;
}
inline std::string shape_text(const std::vector<std::size_t>& s) {
  return shape_text(xt::svector<std::size_t>(s.begin(), s.end()));
}

// numpy's broadcast of two shapes; numeq::error(what) when they do not broadcast.
inline std::vector<std::size_t> broadcast_shape(const std::vector<std::size_t>& x, const std::vector<std::size_t>& y,
                                                const std::string& what) {
  std::vector<std::size_t> out(std::max(x.size(), y.size()), 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t dx = i < x.size() ? x[x.size() - 1 - i] : 1;
    const std::size_t dy = i < y.size() ? y[y.size() - 1 - i] : 1;
    if (dx != dy && dx != 1 && dy != 1) throw numeq::error(what);
    out[out.size() - 1 - i] = dx == 1 ? dy : dx;
  }
  return out;
}

// For each matrix t of a batched matmul's result (batch axes `batch`, C order), the matrix of a
// (batch axes batch_a) and of b (batch_b) it reads, as numpy broadcasts batch axes.
struct BatchOperands {
  std::vector<std::size_t> a_of, b_of;
};
inline BatchOperands batch_operands(const std::vector<std::size_t>& batch, const std::vector<std::size_t>& batch_a,
                                    const std::vector<std::size_t>& batch_b) {
  std::size_t matrices = 1;
  for (std::size_t d : batch) matrices *= d;
  BatchOperands r{std::vector<std::size_t>(matrices, 0), std::vector<std::size_t>(matrices, 0)};
  for (std::size_t t = 0; t < matrices; ++t) {
    std::size_t rest = t, ia = 0, ib = 0, stride_a = 1, stride_b = 1;
    for (std::size_t d = batch.size(); d-- > 0;) {
      const std::size_t idx = rest % batch[d];
      rest /= batch[d];
      const std::ptrdiff_t da = static_cast<std::ptrdiff_t>(d) - static_cast<std::ptrdiff_t>(batch.size() - batch_a.size());
      const std::ptrdiff_t db = static_cast<std::ptrdiff_t>(d) - static_cast<std::ptrdiff_t>(batch.size() - batch_b.size());
      if (da >= 0) {
        const std::size_t len = batch_a[static_cast<std::size_t>(da)];
        ia += (len == 1 ? 0 : idx) * stride_a;
        stride_a *= len;
      }
      if (db >= 0) {
        const std::size_t len = batch_b[static_cast<std::size_t>(db)];
        ib += (len == 1 ? 0 : idx) * stride_b;
        stride_b *= len;
      }
    }
    r.a_of[t] = ia;
    r.b_of[t] = ib;
  }
  return r;
}

}  // namespace numeq::core::detail
