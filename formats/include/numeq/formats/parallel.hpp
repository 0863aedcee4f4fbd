#pragma once
// Splitting element-wise work across threads. Every numeq kernel computes element i from
// (inputs, i) alone, so results never depend on the thread count; these helpers only decide how
// many threads share the index range.

#include <cstddef>
#include <functional>

namespace numeq {

// Threads numeq uses for large arrays. Default: NUMEQ_NUM_THREADS if set, else the hardware
// concurrency. set_num_threads(0) restores the default.
int num_threads();
void set_num_threads(int n);

// Calls body(begin, end) over disjoint chunks covering [0, n), on up to num_threads() threads.
// Arrays below `serial_below` elements run on the calling thread. Exceptions thrown by body
// are rethrown on the calling thread (the first one wins).
void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& body,
                  std::size_t serial_below = std::size_t{1} << 16);

}  // namespace numeq
