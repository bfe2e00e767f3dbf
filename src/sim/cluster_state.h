// The simulator's view of engine load, shared by the simulator (which updates it) and the
// scheduling policy (which reads it to place requests). Mirrors what DualPath §6.1 engines report
// when fetching: unfinished requests, unfinished tokens, and the node's disk read queue.
//
// Thread safety: none (owned by one simulation).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "sim/storage_nic.h"

namespace dualpath::sim {

struct PeState {
  uint32_t node = 0;    // index into ClusterState::nics (prefill nodes first)
  uint32_t group = 0;   // prefill EP group
  uint64_t tokens = 0;  // unfinished tokens (prompt tokens of assigned, unfinished requests)
  uint32_t requests = 0;
  std::deque<uint32_t> ready;  // requests whose KV is in a buffer, FIFO (§6.2)
};

struct DeState {
  uint32_t node = 0;
  uint32_t group = 0;  // decode EP group
  uint64_t tokens = 0;
  uint32_t requests = 0;
  double hbm_free = 0;  // bytes not reserved by assigned requests
  // Running decode batch sums (requests in decode).
  uint32_t batch = 0;
  double flops = 0;
  double kv_bytes = 0;
};

struct ClusterState {
  uint32_t prefill_nodes = 0;
  uint32_t decode_nodes = 0;
  uint32_t gpus_per_node = 0;
  double kv_bytes_per_token = 0;
  std::vector<PeState> pes;  // node-major: pes[n * gpus_per_node + g]
  std::vector<DeState> des;
  std::vector<StorageNic> nics;  // prefill nodes, then decode nodes

  uint32_t DeNode(uint32_t decode_node) const { return prefill_nodes + decode_node; }
  double ReadQueueTokens(uint32_t nic, double now) const {
    return nics[nic].PendingBytes(now) / kv_bytes_per_token;
  }
};

}  // namespace dualpath::sim
