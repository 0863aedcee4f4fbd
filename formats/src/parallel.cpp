#include "numeq/formats/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace numeq {
namespace {

std::atomic<int> configured_threads{0};

int default_threads() {
  if (const char* env = std::getenv("NUMEQ_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  // Asked once: glibc reads /sys/devices/system/cpu/online on every call, which a small call
  // (a 4x8x4 matmul) would otherwise pay each time.
  static const int hardware = [] {
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
  }();
  return hardware;
}

}  // namespace

int num_threads() {
  const int n = configured_threads.load();
  return n > 0 ? n : default_threads();
}

void set_num_threads(int n) { configured_threads.store(n > 0 ? n : 0); }

void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& body,
                  std::size_t serial_below) {
  if (n == 0) return;
  if (n < serial_below) {
    body(0, n);
    return;
  }
  const std::size_t threads =
      std::min<std::size_t>(static_cast<std::size_t>(num_threads()), (n + serial_below - 1) /
                                                                         std::max<std::size_t>(serial_below, 1));
  if (threads <= 1 || n < serial_below) {
    if (n > 0) body(0, n);
    return;
  }
  // Contiguous slices of equal size: which thread computes an element never changes its value.
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  const std::size_t chunk = (n + threads - 1) / threads;
  auto run = [&](std::size_t begin, std::size_t end) {
    try {
      body(begin, end);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  // A thread that cannot start (std::system_error: no memory for its stack under a ulimit, a
  // process thread limit) is no error: its slice, and every later one, runs on this thread.
  // The slices are the same either way, so the results are too.
  std::size_t started = 1;  // slices 1 .. started-1 run on workers
  for (; started < threads; ++started) {
    const std::size_t begin = std::min(n, started * chunk);
    const std::size_t end = std::min(n, begin + chunk);
    if (begin >= end) continue;
    try {
      workers.emplace_back(run, begin, end);
    } catch (const std::system_error&) {
      break;
    }
  }
  run(0, std::min(n, chunk));
  for (std::size_t t = started; t < threads; ++t) {
    const std::size_t begin = std::min(n, t * chunk);
    const std::size_t end = std::min(n, begin + chunk);
    if (begin < end) run(begin, end);
  }
  for (auto& w : workers) w.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace numeq
