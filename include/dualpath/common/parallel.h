// ParallelFor: runs fn(i) once for each i in [0, n) on up to `threads` threads, the calling thread
// included (each takes the next index left), and returns when every call has returned. For batches
// of memory copies (KVStore's pool, the store client's same-host tier files): one thread copies and
// checksums at a few GB/s, below a node's memory bandwidth.
//
// Threads are started per call (tens of microseconds), so callers use it only for batches that
// take milliseconds. fn must be safe to call concurrently for distinct i.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace dualpath {

// How many threads a ParallelFor of memory copies should use: `wanted`, but no more than 1 + the
// CPUs that are idle now. A helper thread on a CPU that is busy with other work gains nothing
// (the CPUs are shared anyway) and costs a wait: ParallelFor returns only when every thread has
// finished its current index, and a helper the scheduler preempts mid-copy holds the caller up
// for a whole scheduling period. On the shared 2-core development VM at a load average of 25,
// 64 x 1 MiB pool gets ran at 0.91x with two copy threads against one (0.84x at 256 KiB;
// issue 27). OpenMP's dynamic thread count (OMP_DYNAMIC) follows the same rule.
// Reads /proc/loadavg (the instantaneous count of runnable threads, this one included) and the
// online CPUs; where either cannot be read, `wanted`. Thread-safe.
size_t ThreadsForIdleCpus(size_t wanted);

// The rule of ThreadsForIdleCpus for given counts: at least 1, at most `wanted`.
size_t ThreadsForIdleCpus(size_t wanted, size_t cpus, size_t runnable);

template <typename Fn>
void ParallelFor(size_t n, size_t threads, Fn&& fn) {
  threads = std::min(threads, n);
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) {
      fn(i);
    }
    return;
  }
  // Each thread takes the next index until none is left, instead of a fixed share: on a machine
  // whose cores are busy with other work a started thread may not run for a scheduler slice
  // (milliseconds), and with fixed shares the caller then finished its own and waited for that
  // thread's whole share. Here the threads that run do the work; one that starts late finds less
  // or nothing left (issue 27: the store's 1 MiB same-host gets varied 0.66-1.32x between runs).
  std::atomic<size_t> next{0};
  auto drain = [&] {
    for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(i);
    }
  };
  std::vector<std::jthread> workers;
  workers.reserve(threads - 1);
  for (size_t t = 1; t < threads; ++t) {
    workers.emplace_back(drain);
  }
  drain();
}  // the jthreads join here

}  // namespace dualpath
