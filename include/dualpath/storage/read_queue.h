// ReadQueue: how much storage reading is waiting on one node, in bytes, tokens and blocks: the
// "disk read queue length" the DualPath scheduler (§6.1) compares across a PE and a DE to choose
// the read side.
//
// A read counts from the moment it is submitted to the store until its block completes (hit,
// miss or error), so the figure covers queued and in-flight reads. Each BlockStore owns one
// ReadQueue (one store per node); callers that hold reads back before submitting them may Add and
// Remove their own amounts too.
//
// Thread safety: all methods may be called from any thread (relaxed atomics: the figure is a
// scheduling hint, not a synchronization point; a snapshot's three fields may be from slightly
// different instants).
#pragma once

#include <atomic>
#include <cstdint>

#include "dualpath/common/check.h"

namespace dualpath::storage {

struct ReadQueueSnapshot {
  uint64_t bytes = 0;
  uint64_t tokens = 0;
  uint64_t blocks = 0;
};

class ReadQueue {
 public:
  void Add(uint64_t bytes, uint64_t tokens, uint64_t blocks = 1) {
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    tokens_.fetch_add(tokens, std::memory_order_relaxed);
    blocks_.fetch_add(blocks, std::memory_order_relaxed);
  }
  // Precondition (checked): the amounts were added before; an underflow means double accounting,
  // which would make the scheduler believe a node is idle.
  void Remove(uint64_t bytes, uint64_t tokens, uint64_t blocks = 1) {
    uint64_t old_bytes = bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    uint64_t old_tokens = tokens_.fetch_sub(tokens, std::memory_order_relaxed);
    uint64_t old_blocks = blocks_.fetch_sub(blocks, std::memory_order_relaxed);
    DUALPATH_CHECK(old_bytes >= bytes && old_tokens >= tokens && old_blocks >= blocks,
                   "storage read queue accounting underflow");
  }
  ReadQueueSnapshot Snapshot() const {
    return {bytes_.load(std::memory_order_relaxed), tokens_.load(std::memory_order_relaxed),
            blocks_.load(std::memory_order_relaxed)};
  }

 private:
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> tokens_{0};
  std::atomic<uint64_t> blocks_{0};
};

}  // namespace dualpath::storage
