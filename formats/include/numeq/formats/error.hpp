#pragma once
// numeq::error: the one exception type numeq throws for bad input. It derives from
// std::invalid_argument so callers that only know the standard library still catch it, and the
// Python bindings translate it to ValueError (TypeError for numeq::type_error).

#include <stdexcept>
#include <string>

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

}  // namespace numeq
