// ParallelFor: runs fn(i) for i in [0, n) split into contiguous ranges over up to `threads`
// threads, the calling thread included, and returns when every call has returned. For batches of
// memory copies (KVStore's pool, the store client's same-host tier files): one thread copies and
// checksums at a few GB/s, below a node's memory bandwidth.
//
// Threads are started per call (tens of microseconds), so callers use it only for batches that
// take milliseconds. fn must be safe to call concurrently for distinct i.
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace dualpath {

template <typename Fn>
void ParallelFor(size_t n, size_t threads, Fn&& fn) {
  threads = std::min(threads, n);
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) {
      fn(i);
    }
    return;
  }
  auto range = [&](size_t t) {
    for (size_t i = n * t / threads; i < n * (t + 1) / threads; ++i) {
      fn(i);
    }
  };
  std::vector<std::jthread> workers;
  workers.reserve(threads - 1);
  for (size_t t = 1; t < threads; ++t) {
    workers.emplace_back(range, t);
  }
  range(0);
}  // the jthreads join here

}  // namespace dualpath
