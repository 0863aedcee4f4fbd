#pragma once
// numeq::error: the one exception type numeq throws for bad input. It derives from
// std::invalid_argument so callers that only know the standard library still catch it, and the
// Python bindings translate it to ValueError (TypeError for numeq::type_error).

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace numeq {

class error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A value of the wrong kind altogether (a non-numeric array, a float where bit patterns belong).
class type_error : public error {
 public:
  using error::error;
};

// A shape as numpy prints it, "(2, 3)", "(4,)", "()": the one way numeq's messages name a shape.
// Of an array (anything with shape()) or of a sized range of extents (std::vector, xt::svector).
template <class Shape>
std::string shape_text(const Shape& shape) {
  if constexpr (requires { shape.shape(); }) {
    return shape_text(shape.shape());
  } else {
    std::string out = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
    return out + (shape.size() == 1 ? ",)" : ")");
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

}  // namespace numeq
