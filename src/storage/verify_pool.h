// VerifyPool: a few threads that verify block files (header and payload checksums) off the
// io_uring submission thread. One core hashes ~5-10 GB/s of cold memory; a 400 Gbit/s storage NIC
// delivers 50 GB/s, so verification must be able to use more than the submitting thread. It also
// keeps the submission loop short, so the device queue is refilled promptly.
//
// Thread safety: Post may be called from any thread. The destructor runs queued tasks, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dualpath::storage::internal {

class VerifyPool {
 public:
  explicit VerifyPool(unsigned threads);
  ~VerifyPool();
  VerifyPool(const VerifyPool&) = delete;
  VerifyPool& operator=(const VerifyPool&) = delete;

  void Post(std::function<void()> task);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace dualpath::storage::internal
