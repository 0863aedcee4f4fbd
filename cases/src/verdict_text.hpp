#pragma once
// What the verdict, the port check and the variant search share: output equality as a device's
// output is judged (NaN matches any NaN, zeros by sign) and numbers as the messages write them.

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

namespace numeq::cases::detail {

inline bool same_value(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  return x == y && std::signbit(x) == std::signbit(y);
}

inline std::string number(double x, int precision = 17) {
  std::ostringstream s;
  s << std::setprecision(precision) << x;
  return s.str();
}

}  // namespace numeq::cases::detail
