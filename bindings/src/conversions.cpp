#include "conversions.hpp"

#include "numeq/formats/format.hpp"

namespace numeq_bindings {

numeq::Cast make_cast(const std::string& fmt, const std::string& rounding, const std::string& overflow,
                      const std::string& subnormals, std::uint64_t seed, int random_bits) {
  numeq::Cast c;
  c.format = numeq::format_by_name(fmt, "fmt");
  c.rounding = numeq::rounding_by_name(rounding);
  c.overflow = numeq::overflow_by_name(overflow);
  c.subnormals = numeq::subnormals_by_name(subnormals);
  c.seed = seed;
  c.random_bits = random_bits;
  numeq::validate(c, "fmt");
  return c;
}

}  // namespace numeq_bindings
