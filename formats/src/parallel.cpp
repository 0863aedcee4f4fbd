#include "numeq/formats/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

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

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins while `waiting()` holds, for at most about 50 microseconds (the clock is read every 64
// pauses: reading it is a system-library call that would otherwise dominate the spin).
template <class Waiting>
void spin_while(const Waiting& waiting) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  for (unsigned i = 1; waiting(); ++i) {
    relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) return;
  }
}

// True on a thread while it runs a slice: a parallel_for inside a body runs on that thread
// alone (the pool's threads are all taken by the outer call).
thread_local bool inside_slice = false;

// Threads kept between calls. Starting threads on every call cost each check tens of
// microseconds per parallel_for, and every thread_local cache (MPFR's constants, the kernels'
// scratch) was rebuilt by each new thread. The workers wait for a job; a job is the same equal
// contiguous slices as before, handed out by an atomic counter to whichever participant (the
// caller, and up to slices - 1 workers) asks first.
class Pool {
 public:
  // Runs body over `slices` slices of `chunk` elements of [0, n). Returns false, having run
  // nothing, when another thread's job holds the pool (the caller then runs the range alone).
  bool run(std::size_t n, std::size_t chunk, std::size_t slices,
           const std::function<void(std::size_t, std::size_t)>& body) {
    std::unique_lock<std::mutex> busy(job_mutex_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    grow(slices - 1);
    Job job(body, n, chunk, slices, std::min(slices - 1, workers_.size()));
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    take_slices(job);
    // Most slices end within microseconds of the caller's own: spin a little before sleeping.
    spin_while([&] { return job.done.load(std::memory_order_acquire) != slices; });
    {
      // No worker joins after this; the job (on this stack) lives until every one that joined
      // has left it.
      std::unique_lock<std::mutex> lock(mutex_);
      job_ = nullptr;
      finished_.wait(lock, [&] { return job.done.load(std::memory_order_acquire) == slices && job.active == 0; });
    }
    if (job.failure) std::rethrow_exception(job.failure);
    return true;
  }

 private:
  struct Job {
    Job(const std::function<void(std::size_t, std::size_t)>& b, std::size_t n_, std::size_t chunk_, std::size_t slices_,
        std::size_t helpers_)
        : body(&b), n(n_), chunk(chunk_), slices(slices_), helpers(helpers_) {}
    const std::function<void(std::size_t, std::size_t)>* body;
    std::size_t n, chunk, slices;
    std::size_t helpers;     // workers that may join (set_num_threads may be below the pool's size)
    std::size_t joined = 0;  // workers that joined; with `active`, guarded by the pool's mutex_
    std::size_t active = 0;  // workers still inside take_slices
    std::atomic<std::size_t> next{0}, done{0};
    std::mutex failure_mutex;
    std::exception_ptr failure;
  };

  void grow(std::size_t wanted) {
    while (workers_.size() < wanted) {
      try {
        workers_.emplace_back([this] { work(); });
      } catch (const std::system_error&) {
        // A thread that cannot start (no memory for its stack under a ulimit, a process thread
        // limit) is no error: its slices go to the threads there are.
        return;
      }
    }
  }

  // Takes slices of `job` until none is left (the caller and each worker that joined).
  static void take_slices(Job& job) {
    inside_slice = true;
    for (;;) {
      const std::size_t s = job.next.fetch_add(1, std::memory_order_relaxed);
      if (s >= job.slices) break;
      const std::size_t begin = std::min(job.n, s * job.chunk), end = std::min(job.n, begin + job.chunk);
      try {
        if (begin < end) (*job.body)(begin, end);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(job.failure_mutex);
        if (!job.failure) job.failure = std::current_exception();
      }
      job.done.fetch_add(1, std::memory_order_acq_rel);
    }
    inside_slice = false;
  }

  void work() {
    std::uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      // The next job usually follows within microseconds (the passes of one check): spin
      // briefly before sleeping.
      spin_while([&] { return generation_.load(std::memory_order_acquire) == seen; });
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      seen = generation_.load(std::memory_order_acquire);
      Job* job = job_;
      if (job == nullptr || job->joined >= job->helpers) continue;
      ++job->joined;
      ++job->active;
      lock.unlock();
      take_slices(*job);
      lock.lock();
      if (--job->active == 0) finished_.notify_all();
    }
  }

  std::mutex job_mutex_;  // one job at a time
  std::mutex mutex_;      // job_, the joined/active counts, the condition variables
  std::condition_variable wake_, finished_;
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> generation_{0};
  Job* job_ = nullptr;
};

// The process's pool, made on first use and never destroyed: its threads wait for work until
// the process ends (joining them from a static destructor would race interpreter shutdown).
// A child made by fork() has none of the parent's threads: it starts a pool of its own (the
// parent's, whose mutexes may have been held at the fork, is left alone).
std::atomic<Pool*> the_pool{nullptr};

void forget_pool_in_child() { the_pool.store(nullptr); }

Pool& pool() {
  Pool* p = the_pool.load(std::memory_order_acquire);
  if (p != nullptr) return *p;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, &forget_pool_in_child); });
  static std::mutex making;
  const std::lock_guard<std::mutex> lock(making);
  p = the_pool.load(std::memory_order_acquire);
  if (p == nullptr) {
    p = new Pool;  // never deleted (see above)
    the_pool.store(p, std::memory_order_release);
  }
  return *p;
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
  if (n < serial_below || inside_slice) {
    body(0, n);
    return;
  }
  const std::size_t threads =
      std::min<std::size_t>(static_cast<std::size_t>(num_threads()), (n + serial_below - 1) /
                                                                         std::max<std::size_t>(serial_below, 1));
  if (threads <= 1) {
    body(0, n);
    return;
  }
  // Contiguous slices of equal size: which thread computes an element never changes its value.
  const std::size_t chunk = (n + threads - 1) / threads;
  const std::size_t slices = (n + chunk - 1) / chunk;
  if (!pool().run(n, chunk, slices, body)) body(0, n);  // the pool is busy with another thread's job
}

}  // namespace numeq
