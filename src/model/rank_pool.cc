#include "dualpath/model/rank_pool.h"

#include "dualpath/common/check.h"

namespace dualpath::model {

RankPool::RankPool(uint32_t ranks) : ranks_(ranks) {
  DUALPATH_CHECK(ranks >= 1, "RankPool: ranks must be >= 1");
  workers_.reserve(ranks - 1);
  for (uint32_t r = 1; r < ranks; ++r) workers_.emplace_back([this, r] { Worker(r); });
}

RankPool::~RankPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void RankPool::Run(const std::function<void(uint32_t)>& fn) {
  if (ranks_ > 1) {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    pending_ = ranks_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  fn(0);
  if (ranks_ > 1) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    fn_ = nullptr;
  }
}

void RankPool::Worker(uint32_t rank) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(uint32_t)>* fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    (*fn)(rank);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
      if (pending_ != 0) continue;
    }
    done_cv_.notify_one();
  }
}

}  // namespace dualpath::model
