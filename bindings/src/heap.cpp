#include "heap.hpp"

#include <cstdlib>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace numeq_bindings {

void keep_freed_memory() {
#if defined(__GLIBC__)
  for (const char* name : {"NUMEQ_SYSTEM_MALLOC", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_",
                           "GLIBC_TUNABLES"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return;
  // Large blocks from the heap, not from mmap (which returns them to the system at free, however
  // large the trim threshold): a softmax check of 1024 x 4096 allocates arrays of 32 MiB, at
  // glibc's largest mmap threshold. A thread's arena falls back to mmap where its heap cannot grow
  // (glibc's sysmalloc), so nothing is refused.
  mallopt(M_MMAP_MAX, 0);
  // Freed memory stays with the process up to 512 MiB at the heap's top (setting this also stops
  // glibc's dynamic thresholds).
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

}  // namespace numeq_bindings
