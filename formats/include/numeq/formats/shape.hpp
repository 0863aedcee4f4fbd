#pragma once
// Shapes as numpy treats them, one rule each: how a message writes a shape, what an axis argument
// means, and when two shapes broadcast. Every layer's shape checks and messages go through here.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "numeq/formats/error.hpp"

namespace numeq {

// A shape as numpy prints it, "(2, 3)", "(4,)", "()": the one way numeq's messages name a shape.
// Of an array (anything with shape()) or of a sized range of extents (std::vector, xt::svector).
template <class Shape>
std::string shape_text(const Shape& shape) {
  if constexpr (requires { shape.shape(); }) {
    return shape_text(shape.shape());
  } else {
    // Appended piece by piece: GCC 12 reports a false -Wrestrict for "literal" + std::string.
    std::string out = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i) out += ", ";
      out += std::to_string(shape[i]);
    }
    out += shape.size() == 1 ? ",)" : ")";
    return out;
  }
}

// numpy's `axis` (a negative one counts from the end) as an index into `shape`; numeq::error in the
// one wording otherwise: "axis: 2 is out of range for x of shape (2, 3) (valid: -2 .. 1)", or for
// a 0-d array "axis: x of shape () has no axis". `array` names the array in the message.
template <class Shape>
std::size_t axis_index(std::ptrdiff_t axis, const Shape& shape, std::string_view array = "x") {
  const auto rank = static_cast<std::ptrdiff_t>(shape.size());
  if (rank == 0) throw error("axis: " + std::string(array) + " of shape () has no axis");
  if (axis < -rank || axis >= rank)
    throw error("axis: " + std::to_string(axis) + " is out of range for " + std::string(array) + " of shape " +
                shape_text(shape) + " (valid: " + std::to_string(-rank) + " .. " + std::to_string(rank - 1) + ")");
  return static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
}

// numpy's broadcast of two shapes (trailing axes aligned; an extent of 1 stretches to the
// other's): the broadcast shape, or nothing when they do not broadcast. The caller words the
// error, so a shape that fits costs no message.
template <class X, class Y>
std::optional<std::vector<std::size_t>> broadcast_shape(const X& x, const Y& y) {
  const std::size_t nx = x.size(), ny = y.size();
  std::vector<std::size_t> out(std::max(nx, ny), 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t dx = i < nx ? x[nx - 1 - i] : 1;
    const std::size_t dy = i < ny ? y[ny - 1 - i] : 1;
    if (dx != dy && dx != 1 && dy != 1) return std::nullopt;
    out[out.size() - 1 - i] = dx == 1 ? dy : dx;
  }
  return out;
}

// Whether `from` broadcasts to `to` exactly (an addend c to a result): numpy's
// np.broadcast_to(c, result) succeeds.
template <class From, class To>
bool broadcasts_to(const From& from, const To& to) {
  const std::optional<std::vector<std::size_t>> b = broadcast_shape(from, to);
  return b && std::equal(b->begin(), b->end(), to.begin(), to.end());
}

}  // namespace numeq
