// CPU dispatch (cpu_dispatch.hpp): the one place that reads the CPU's features and NUMEQ_ISA.

#include "numeq/formats/cpu_dispatch.hpp"

#include <cstdlib>
#include <string>

#include "numeq/formats/error.hpp"
#include "numeq/formats/names.hpp"

namespace numeq {

Isa detected_isa() {
  static const Isa isa = [] {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
      return Isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
    return Isa::portable;
  }();
  return isa;
}

Isa current_isa() {
  const Isa isa = detected_isa();
  const char* s = std::getenv("NUMEQ_ISA");
  if (s == nullptr || *s == '\0') return isa;
  const Isa wanted = by_name(enum_names<Isa>, s, "NUMEQ_ISA", "instruction set",
                             "(it can only lower what the CPU has, " + std::string(to_string(isa)) + " here)");
  return wanted < isa ? wanted : isa;
}

bool available(KernelChoice choice) {
  switch (choice) {
    case KernelChoice::avx2: return detected_isa() >= Isa::avx2;
    case KernelChoice::avx512: return detected_isa() >= Isa::avx512;
    case KernelChoice::automatic:
    case KernelChoice::none:
    case KernelChoice::portable: return true;
  }
  return false;
}

}  // namespace numeq
