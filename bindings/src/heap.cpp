#include "heap.hpp"

#include <cstdlib>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace numeq_bindings {

void keep_freed_memory() {
#if defined(__GLIBC__)
  for (const char* name : {"NUMEQ_SYSTEM_MALLOC", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return;
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX,
  // mallopt(3)); setting it also stops glibc's dynamic adjustment, which is what would otherwise
  // lower the trim threshold again.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

}  // namespace numeq_bindings
