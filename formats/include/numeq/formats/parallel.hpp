#pragma once
// Splitting element-wise work across threads. Every numeq kernel computes element i from
// (inputs, i) alone, so results never depend on the thread count; these helpers only decide how
// many threads share the index range.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

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

// body(begin, end, state) over parallel_for's slices, each with a fresh State{}; the states come
// back in slice order (ascending begin), so that a merge of them (counts, minima, index lists
// concatenated in order, a top-k under a total order) does not depend on the thread count.
template <class State, class Body>
std::vector<State> parallel_states(std::size_t n, const Body& body, std::size_t serial_below = std::size_t{1} << 16) {
  std::mutex mutex;
  std::vector<std::pair<std::size_t, State>> slices;
  parallel_for(n, [&](std::size_t begin, std::size_t end) {
    State state{};
    body(begin, end, state);
    const std::lock_guard<std::mutex> lock(mutex);
    slices.emplace_back(begin, std::move(state));
  }, serial_below);
  std::sort(slices.begin(), slices.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<State> states;
  states.reserve(slices.size());
  for (auto& s : slices) states.push_back(std::move(s.second));
  return states;
}

}  // namespace numeq
