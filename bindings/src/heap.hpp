#pragma once
// How the Python process's allocator keeps memory numeq freed (heap.cpp).

namespace numeq_bindings {

// Called once when numeq._core loads. Every numeq call allocates and frees arrays the size of
// its inputs (widened inputs, packed panels, results); glibc's malloc by default hands freed
// heap memory above a few MiB back to the system and serves each later large request with fresh
// pages, so every call paid one page fault per 4 KiB it touched again (a 512^3 matmul emulation:
// about 1,900 faults, a third of its time, and on two threads they contend for the process's
// page-table lock). This keeps freed memory for reuse: allocations up to 32 MiB come from the
// heap, and up to 256 MiB of freed heap stays with the process. Skipped when the user set glibc's
// own malloc tunables (MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_, GLIBC_TUNABLES) or
// NUMEQ_SYSTEM_MALLOC=1; a no-op where the C library is not glibc.
void keep_freed_memory();

}  // namespace numeq_bindings
