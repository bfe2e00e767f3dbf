// Context: what the PE and DE stages of one engine share (built once by Engine::Create, read-only
// afterwards except the atomics), and small helpers of the request protocol.
//
// Thread safety: every member is either immutable after construction or itself thread-safe
// (model, store, transfer engine, arena, peer directory, scheduler link, atomics).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dualpath/control/client.h"
#include "dualpath/control/v1/scheduler.pb.h"
#include "dualpath/engine/engine.h"
#include "dualpath/engine/scheduler_link.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/kv/layout.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/storage/block_store.h"
#include "dualpath/storage/write_behind.h"
#include "dualpath/transfer/engine.h"
#include "engine/engine_metrics.h"
#include "engine/kv_arena.h"
#include "engine/kv_store_link.h"
#include "engine/peer_probe.h"
#include "engine/peers.h"
#include "engine/rack_link.h"

namespace dualpath::engine {

struct Context {
  EngineOptions options;
  control::v1::EngineInfo info;
  uint32_t engine_id = 0;
  std::unique_ptr<model::RefModel> model;
  uint32_t layers = 0;
  uint64_t bpt = 0;  // KV bytes per token per layer
  uint32_t block_tokens = 0;
  kv::BlockShape shape;
  std::unique_ptr<kv::BlockHasher> hasher;
  storage::BlockStore* store = nullptr;
  KvStoreLink* kv_store = nullptr;  // the distributed KV store; null: not used
  transfer::TransferEngine* transfer = nullptr;
  KvArena* arena = nullptr;
  PeerDirectory* peers = nullptr;
  // The engine's probes of the other role over the compute network (peer_probe.h); null in
  // engines built without one (then nothing is ever unreachable by probe).
  PeerProber* prober = nullptr;
  SchedulerLink* scheduler = nullptr;
  // --kv-substrate rack-pool: the rack region KV goes through instead of UCX puts; null: UCX.
  RackLink* rack = nullptr;
  // The rack prefix cache (the same region, `--rack-prefix-cache on`, the default with rack-pool):
  // hit blocks are looked up there before storage, new blocks published there; null: off.
  RackLink* rack_cache = nullptr;
  EngineMetrics* metrics = nullptr;  // set before the stages start (never null then)
  std::atomic<bool> stopping{false};

  std::chrono::steady_clock::time_point Deadline() const {
    return std::chrono::steady_clock::now() + std::chrono::nanoseconds(options.request_timeout);
  }
  // gRPC deadlines take the system clock.
  std::chrono::system_clock::time_point RpcDeadline() const {
    return std::chrono::system_clock::now() +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(
               std::chrono::nanoseconds(options.request_timeout));
  }
  uint64_t TokenBytes() const { return uint64_t{layers} * bpt; }  // all layers of one token
  // Ok, or why `role` engine `name` cannot be worked with now: the prober found it unreachable
  // over the compute network (fail fast instead of waiting out a deadline).
  Status CheckPeer(const std::string& name, std::string_view role) const {
    return prober != nullptr ? prober->CheckReachable(name, role) : Status::Ok();
  }
};

// CLOCK_REALTIME in nanoseconds (the Timing fields of RequestResult).
int64_t RealtimeNs();

// Seconds since `t0` on the steady clock (latency metrics).
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A request's read plan, normalized from the Assignment: hit capped at prompt - 1 and rounded
// down to whole blocks, the PE's share [0, prefill_read) and the DE's share
// [prefill_read, prefill_read + decode_read), both whole blocks.
struct ReadPlan {
  int64_t prompt = 0;
  int64_t hit = 0;
  int64_t prefill_read = 0;
  int64_t decode_read = 0;
  bool none = false;  // READ_SIDE_NONE (Oracle): hit KV is zeros, nothing is read or moved

  // The DE reads a share and pushes it into the PE's area (DECODE and SPLIT sides).
  bool decode_path() const { return !none && decode_read > 0; }
};
ReadPlan MakeReadPlan(const control::v1::Assignment& a, uint32_t block_tokens);

// kInvalidArgument naming what is wrong with a request (empty prompt, gen_tokens 0, teacher too
// short, token id >= vocab) so bad input fails the request instead of the engine: the one request
// check, which the scheduler service runs on Submit too (dualpath/control/client.h).
using control::ValidateRequest;

// The prompt's block hashes the assignment carries (prompt_block_hashes: computed once by the
// scheduler service, so engines never hash the prompt), checked on receipt against this engine's
// hashing: exactly prompt_size / block_size hashes of 32 bytes, and the first one recomputed with
// `hasher` (one block hash: catches an algorithm, seed or block size that differs from the
// service's, which would read and write the wrong blocks). kInvalidArgument naming the request
// and the mismatch otherwise.
Result<std::vector<kv::BlockHash>> CarriedPromptHashes(const control::v1::Assignment& a,
                                                       const kv::BlockHasher& hasher);

// Blocks [first_block, first_block + n) of a prompt's hashes (a read plan's share; the plan keeps
// it inside the prompt's full blocks: checked).
std::span<const kv::BlockHash> HashRange(const std::vector<kv::BlockHash>& prompt_hashes,
                                         uint64_t first_block, uint64_t n);

// A failed RequestResult for `a` (the scheduler re-submits it).
control::v1::RequestResult FailedResult(const control::v1::Assignment& a, const Status& why);

}  // namespace dualpath::engine
