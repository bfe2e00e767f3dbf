#include "storage/verify_pool.h"

namespace dualpath::storage::internal {

VerifyPool::VerifyPool(unsigned threads) {
  for (unsigned t = 0; t < threads; ++t) {
    threads_.emplace_back([this] { Loop(); });
  }
}

VerifyPool::~VerifyPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    t.join();
  }
}

void VerifyPool::Post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void VerifyPool::Loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) {
      return;  // stopping and drained
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace dualpath::storage::internal
