// RankPool: the R ranks of one engine (threads standing in for the R GPUs of an engine with
// data-parallel attention, DualPath §6.2). A forward batch spans every rank: the projections and
// the MLP run once over all rows, and each sequence's attention runs on the rank it was placed on
// (RefModel::ForwardLayerBatch with a pool). As with DP attention in front of a shared FFN / expert
// stage, a layer goes on only when the slowest rank's attention is done, so unequal attention
// times are idle bubbles on the other ranks; RankPool::Run is that barrier.
//
// Rank 0 is the calling thread; ranks 1 .. R-1 are threads of the pool that sleep between Runs.
//
// Thread safety: Run is called from one thread at a time (the engine's compute thread); ranks()
// from any thread. The destructor must not race a Run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dualpath::model {

class RankPool {
 public:
  // ranks >= 1 (checked: abort on a caller bug; the CLI validates --ranks first).
  explicit RankPool(uint32_t ranks);
  ~RankPool();
  RankPool(const RankPool&) = delete;
  RankPool& operator=(const RankPool&) = delete;

  uint32_t ranks() const { return ranks_; }

  // Calls fn(r) once for every rank r in [0, ranks()), each on its own thread (fn(0) on the
  // caller's), and returns when all have returned. Everything fn(r) wrote happens-before the
  // return.
  void Run(const std::function<void(uint32_t)>& fn);

 private:
  void Worker(uint32_t rank);

  const uint32_t ranks_;
  std::mutex mu_;
  std::condition_variable start_cv_;                   // workers: a new generation or stop
  std::condition_variable done_cv_;                    // Run: pending_ reached 0
  const std::function<void(uint32_t)>* fn_ = nullptr;  // guarded by mu_
  uint64_t generation_ = 0;                            // guarded by mu_
  uint32_t pending_ = 0;                               // guarded by mu_
  bool stop_ = false;                                  // guarded by mu_
  std::vector<std::thread> workers_;                   // ranks 1 .. R-1
};

}  // namespace dualpath::model
