#pragma once
// How the Python process's allocator keeps memory numeq freed (heap.cpp).

namespace numeq_bindings {

// Called once when numeq._core loads. Every numeq call allocates and frees arrays the size of
// its inputs (widened inputs, packed panels, results); glibc's malloc by default returns freed
// memory above a few MiB to the system (and every block of 32 MiB or more, which it maps on its
// own), and serves each later large request with fresh pages, so every call paid one page fault
// per 4 KiB it touched again: a 512^3 matmul emulation about 1,300 faults, a third of its time
// (on two threads they contend for the process's page-table lock), a softmax check of
// 1024 x 4096 about 74,000. This keeps freed memory for reuse: large blocks come from the heap
// instead of mmap, and up to 512 MiB of freed heap stays with the process. Skipped when the user
// set glibc's own malloc tunables (MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_,
// MALLOC_MMAP_MAX_, GLIBC_TUNABLES) or NUMEQ_SYSTEM_MALLOC=1; a no-op where the C library is not
// glibc.
void keep_freed_memory();

}  // namespace numeq_bindings
