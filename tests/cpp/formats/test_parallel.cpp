// numeq::parallel_for and the thread-count setting. The oracle is bookkeeping: a counter per index
// (every index of [0, n) visited exactly once, none outside), the set of threads seen, and the
// exceptions that come back.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <chrono>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "numeq/numeq.hpp"

namespace {

class ParallelTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("NUMEQ_NUM_THREADS"); }
  void TearDown() override {
    unsetenv("NUMEQ_NUM_THREADS");
    numeq::set_num_threads(0);
  }
};

struct Coverage {
  std::vector<std::atomic<int>> hits;
  std::atomic<int> out_of_range{0};
  std::atomic<int> calls{0};
  std::atomic<int> empty_calls{0};
  std::mutex mutex;
  std::set<std::thread::id> threads;
  explicit Coverage(std::size_t n) : hits(n) {}
};

// Runs parallel_for(n, ..., serial_below) and records what the body saw.
std::unique_ptr<Coverage> cover(std::size_t n, std::size_t serial_below) {
  auto c = std::make_unique<Coverage>(n);
  numeq::parallel_for(
      n,
      [&](std::size_t begin, std::size_t end) {
        ++c->calls;
        if (begin >= end) ++c->empty_calls;
        if (end > n || begin > end) {
          ++c->out_of_range;
          return;
        }
        for (std::size_t i = begin; i < end; ++i) c->hits[i].fetch_add(1);
        const std::lock_guard<std::mutex> lock(c->mutex);
        c->threads.insert(std::this_thread::get_id());
      },
      serial_below);
  return c;
}

void expect_exactly_once(const Coverage& c, std::size_t n) {
  EXPECT_EQ(c.out_of_range.load(), 0);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (c.hits[i].load() != 1) ++wrong;
  EXPECT_EQ(wrong, 0u) << "indices not visited exactly once";
}

TEST_F(ParallelTest, CoversTheRangeExactlyOnce) {
  std::vector<std::size_t> sizes;
  for (std::size_t n = 0; n <= 70; ++n) sizes.push_back(n);
  for (std::size_t n : {97u, 100u, 127u, 128u, 129u, 1000u, 4095u, 65535u, 65536u, 65537u, 300001u})
    sizes.push_back(n);
  for (int threads : {1, 2, 3, 4, 7, 16, 64}) {
    numeq::set_num_threads(threads);
    for (std::size_t serial_below : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{1} << 16}) {
      for (std::size_t n : sizes) {
        SCOPED_TRACE("threads " + std::to_string(threads) + " n " + std::to_string(n) +
                     " serial_below " + std::to_string(serial_below));
        const auto c = cover(n, serial_below);
        expect_exactly_once(*c, n);
        EXPECT_EQ(c->empty_calls.load(), 0) << "body called with an empty range";
        // Never more threads than configured, nor more than the chunks allow.
        EXPECT_LE(c->threads.size(), static_cast<std::size_t>(threads));
        EXPECT_LE(c->calls.load(), threads);
        if (n > 0) {
          EXPECT_GE(c->calls.load(), 1);
        } else {
          EXPECT_EQ(c->calls.load(), 0);
        }
      }
    }
  }
}

TEST_F(ParallelTest, SmallRangesRunOnTheCallingThread) {
  numeq::set_num_threads(8);
  for (std::size_t n : {1u, 10u, 1000u, 65535u}) {
    const auto c = cover(n, std::size_t{1} << 16);
    expect_exactly_once(*c, n);
    EXPECT_EQ(c->calls.load(), 1);
    ASSERT_EQ(c->threads.size(), 1u);
    EXPECT_EQ(*c->threads.begin(), std::this_thread::get_id());
  }
}

TEST_F(ParallelTest, LargeRangesUseSeveralThreads) {
  // With 4 threads configured and 4 * 2^16 elements, the work is split into chunks run on more
  // than one thread (numeq's array casts are documented as multi-threaded), at most 4. (Counting
  // threads, not timing anything.)
  // Each slice takes a few milliseconds, so the workers are awake before the caller could take
  // every slice itself (slices go to whichever thread asks first).
  numeq::set_num_threads(4);
  const std::size_t n = 4 * (std::size_t{1} << 16);
  std::mutex mutex;
  std::set<std::thread::id> seen;
  std::vector<std::atomic<int>> hits(n);
  numeq::parallel_for(
      n,
      [&](std::size_t begin, std::size_t end) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        for (std::size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        const std::lock_guard<std::mutex> lock(mutex);
        seen.insert(std::this_thread::get_id());
      },
      std::size_t{1} << 16);
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_GE(seen.size(), 2u);
  EXPECT_LE(seen.size(), 4u);
  const auto c = cover(n, std::size_t{1} << 16);
  expect_exactly_once(*c, n);
  EXPECT_LE(c->threads.size(), 4u);  // spinning workers may take every slice before the caller asks
  // One thread: a single call on the caller, however large the range.
  numeq::set_num_threads(1);
  const auto one = cover(n, 1);
  expect_exactly_once(*one, n);
  EXPECT_EQ(one->calls.load(), 1);
  EXPECT_EQ(*one->threads.begin(), std::this_thread::get_id());
}

TEST_F(ParallelTest, ExceptionsReachTheCaller) {
  for (int threads : {1, 2, 3, 7}) {
    numeq::set_num_threads(threads);
    SCOPED_TRACE("threads " + std::to_string(threads));
    const std::size_t n = 1000;
    // One chunk throws: the exception, with its type and message, comes back on the caller.
    try {
      numeq::parallel_for(
          n,
          [&](std::size_t begin, std::size_t end) {
            if (begin <= 777 && 777 < end) throw numeq::error("boom at 777");
          },
          1);
      ADD_FAILURE() << "no exception";
    } catch (const numeq::error& e) {
      EXPECT_STREQ(e.what(), "boom at 777");
    }
    // Every chunk throws: exactly one of them comes back, and it is one that was thrown.
    try {
      numeq::parallel_for(
          n, [&](std::size_t begin, std::size_t) { throw std::runtime_error(std::to_string(begin)); }, 1);
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      const std::size_t begin = std::stoul(e.what());
      EXPECT_LT(begin, n);
    }
    // Serial path too.
    EXPECT_THROW(numeq::parallel_for(10, [](std::size_t, std::size_t) { throw std::logic_error("x"); }),
                 std::logic_error);
    // The pool is usable afterwards.
    const auto c = cover(n, 1);
    expect_exactly_once(*c, n);
  }
}

TEST_F(ParallelTest, ThreadCountSetting) {
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  const int default_threads = hardware > 0 ? hardware : 1;
  numeq::set_num_threads(0);
  EXPECT_EQ(numeq::num_threads(), default_threads);
  for (int n : {1, 2, 3, 7, 64}) {
    numeq::set_num_threads(n);
    EXPECT_EQ(numeq::num_threads(), n);
  }
  numeq::set_num_threads(0);  // restores the default
  EXPECT_EQ(numeq::num_threads(), default_threads);
  numeq::set_num_threads(5);
  numeq::set_num_threads(-3);  // a negative count also means "default"
  EXPECT_EQ(numeq::num_threads(), default_threads);
}

TEST_F(ParallelTest, EnvironmentSetsTheDefault) {
  setenv("NUMEQ_NUM_THREADS", "3", 1);
  numeq::set_num_threads(0);
  EXPECT_EQ(numeq::num_threads(), 3);
  numeq::set_num_threads(6);  // an explicit setting wins over the environment
  EXPECT_EQ(numeq::num_threads(), 6);
  numeq::set_num_threads(0);
  EXPECT_EQ(numeq::num_threads(), 3);
  // Unusable values fall back to the hardware count.
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  const int default_threads = hardware > 0 ? hardware : 1;
  for (const char* bad : {"0", "-2", "many", ""}) {
    setenv("NUMEQ_NUM_THREADS", bad, 1);
    EXPECT_EQ(numeq::num_threads(), default_threads) << "NUMEQ_NUM_THREADS='" << bad << "'";
  }
}

TEST_F(ParallelTest, ConfiguredThreadsAreUsedWithoutAnEnvironment) {
  // The threads seen by the body never exceed the setting, for a range that could use more.
  for (int threads : {2, 3, 5}) {
    numeq::set_num_threads(threads);
    const auto c = cover(100000, 1);
    expect_exactly_once(*c, 100000);
    EXPECT_LE(c->calls.load(), threads);
    EXPECT_LE(c->threads.size(), static_cast<std::size_t>(threads));
  }
}

// The threads are kept between calls (a pool): after the first call the process's thread count
// (the entries of /proc/self/task) no longer changes, call after call.
TEST_F(ParallelTest, WorkersAreKeptBetweenCalls) {
  const auto tasks = [] {
    std::size_t count = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++count;
    return count;
  };
  numeq::set_num_threads(3);
  expect_exactly_once(*cover(300000, 1), 300000);
  const std::size_t before = tasks();
  for (int round = 0; round < 20; ++round) expect_exactly_once(*cover(300000, 1), 300000);
  EXPECT_EQ(tasks(), before) << "threads were started or ended between calls";
}

// A parallel_for inside a body runs on the thread that calls it, and still covers its range.
TEST_F(ParallelTest, NestedCallsRunOnTheirThread) {
  numeq::set_num_threads(4);
  const std::size_t outer = 8, inner = 50000;
  std::vector<std::atomic<int>> hits(outer * inner);
  std::atomic<int> foreign{0};
  numeq::parallel_for(
      outer,
      [&](std::size_t begin, std::size_t end) {
        for (std::size_t o = begin; o < end; ++o) {
          const auto me = std::this_thread::get_id();
          numeq::parallel_for(
              inner,
              [&](std::size_t b, std::size_t e) {
                if (std::this_thread::get_id() != me) ++foreign;
                for (std::size_t i = b; i < e; ++i) hits[o * inner + i].fetch_add(1);
              },
              1);
        }
      },
      1);
  std::size_t wrong = 0;
  for (auto& h : hits)
    if (h.load() != 1) ++wrong;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(foreign.load(), 0);
}

// Callers on several threads at once (Python threads with the GIL released): every call covers
// its range exactly once, whichever of them gets the pool.
TEST_F(ParallelTest, ConcurrentCallersEachCoverTheirRange) {
  numeq::set_num_threads(3);
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        const std::size_t n = 20000 + 37 * static_cast<std::size_t>(round);
        const auto c = cover(n, 1);
        for (std::size_t i = 0; i < n; ++i)
          if (c->hits[i].load() != 1) {
            ++failures;
            break;
          }
      }
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(failures.load(), 0);
}

// A child made by fork() after the pool has started has none of its threads: parallel_for there
// must still finish (not wait for workers that do not exist) and cover the range.
TEST_F(ParallelTest, ForkedChildRunsWithItsOwnThreads) {
  numeq::set_num_threads(4);
  expect_exactly_once(*cover(100000, 1), 100000);  // the parent's pool is running
  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    alarm(60);  // a hang ends the child with SIGALRM, which the parent reports
    for (int round = 0; round < 5; ++round) {
      const auto c = cover(100000, 1);
      for (std::size_t i = 0; i < 100000; ++i)
        if (c->hits[i].load() != 1) _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A thread that cannot start (std::thread throws std::system_error) must not end the process
// (std::terminate): parallel_for runs the slices it could not hand out on the calling thread.
// The oracle: in a child process whose address space is capped a little above what it already
// uses (a thread's stack is a fresh 8 MiB mapping, so only the first few of 256 threads can
// start), every index is still visited exactly once and the child exits normally.
TEST_F(ParallelTest, ThreadsThatCannotStartLeaveTheirSlicesToTheCaller) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: no RLIMIT_AS fits under it";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: no RLIMIT_AS fits under it";
#endif
#endif
  constexpr std::size_t n = std::size_t{1} << 20;
  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    numeq::set_num_threads(256);
    auto c = std::make_unique<Coverage>(n);
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    if (pages <= 0) _exit(3);
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{48} << 20);
    const rlimit limit{cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(4);
    numeq::parallel_for(
        n,
        [&](std::size_t begin, std::size_t end) {
          for (std::size_t i = begin; i < end; ++i) c->hits[i].fetch_add(1);
          c->calls.fetch_add(1);
        },
        1);
    for (std::size_t i = 0; i < n; ++i)
      if (c->hits[i].load() != 1) _exit(1);
    _exit(c->calls.load() == 256 ? 0 : 2);  // 256 slices of 4096, each run once, wherever
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << "): a failed thread start ended the process";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: an index not visited exactly once; 2: slices missing or repeated; "
                                       "3, 4: the child could not set its limit";
}

}  // namespace
