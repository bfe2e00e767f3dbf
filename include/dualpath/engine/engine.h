// Engine: one prefill (PE) or decode (DE) engine process of the end-to-end system (DualPath §4.1,
// docs/e2e.md, docs/engine.md).
//
// An Engine owns, for its whole life: a transfer::TransferEngine listening on its compute address
// with one registered region of `buffer_bytes` (the engine's buffers and "HBM": host memory here;
// with `pool_path`, an owner-bound root of the node's shared-memory pool, destroyed at exit and
// reclaimed by the pool's recovery sweep if the engine is killed),
// an EnginePeer gRPC server on the same address, a storage::BlockStore at its node's store root,
// the reference model (built from the spec the scheduler hands out at registration), and the
// role's pipeline threads:
//   - PE: a loader stage (allocate the receive area, StartDecode to the DE, read PE-side hit
//     blocks) that runs ahead of a compute stage (layerwise prefill, KV puts to the DE,
//     PrefillDone), bounded by buffer memory, so storage reads overlap compute;
//   - DE: StartDecode allocates the DE buffer; a reader stage reads DE-side hit blocks and pushes
//     them layer by layer to the PE; a decode stage runs teacher-forced decode steps, writes every
//     new full block behind to storage and reports the result to the scheduler.
// Run() registers with the scheduler and runs the fetch loop until the scheduler says shutdown
// (or Stop() is called); every request that fails (dead peer, timeout, no room) is reported with
// ok=false so the scheduler re-submits it; nothing waits without a deadline.
//
// Thread safety: Create, Run and the destructor from one owning thread; Stop and info() from any
// thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dualpath/common/clock.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/control/client.h"
#include "dualpath/control/v1/scheduler.pb.h"
#include "dualpath/engine/scheduler_link.h"
#include "dualpath/sched/batch.h"
#include "dualpath/storage/faults.h"

namespace dualpath::metrics {
class Registry;
}  // namespace dualpath::metrics

namespace dualpath::engine {

// The largest EnginePeer request (docs/engine.md "Message limits"): a StartDecode whose Assignment
// carries a RequestSpec at its bound (control::kMaxSchedulerRequestBytes covers it) and the
// prompt's block hashes, 32 bytes per block, at most control::kMaxRequestTokens blocks (one token
// per block, the smallest --block-tokens). The EnginePeer server refuses a larger request with
// RESOURCE_EXHAUSTED before parsing it (common/grpc_server.h).
inline constexpr int64_t kMaxPeerRequestBytes =
    control::kMaxSchedulerRequestBytes + 32 * static_cast<int64_t>(control::kMaxRequestTokens) +
    (int64_t{1} << 20);

class KvStoreLink;

enum class Role { kPrefill, kDecode };

// How a decode engine's decode thread shares its steps among requests (docs/engine.md "Decode
// batching"). kContinuous: every step advances each active request by one token in one forward
// batch; requests join at step boundaries and leave when done. kSerial: one request decodes until
// it finishes before the next starts (the engine before issue 28, kept to compare against).
enum class DecodeBatching { kContinuous, kSerial };
// How KV moves between a PE and its DE (issue 29, docs/engine.md "KV substrate"): one-sided UCX
// puts over the compute link, or objects in the rack pool (engine/rack_link.h) with only notices
// on the compute link.
enum class KvSubstrate { kUcx, kRackPool };
std::string_view KvSubstrateName(KvSubstrate s);  // "ucx" | "rack-pool"
Result<KvSubstrate> ParseKvSubstrate(std::string_view name);

// How a prefill engine's compute thread forms forward passes (docs/engine.md "Prefill batching").
// kBatched: each forward batch packs the chunks of every request whose hit KV is in place with
// sched::PackRanks (§6.2: compute quota, chunked prefill, chunks placed on the engine's ranks);
// kSerial: one request's whole prompt per forward pass (the engine before issue 28).
enum class PrefillBatching { kBatched, kSerial };

struct EngineOptions {
  Role role = Role::kPrefill;
  std::string name;  // unique engine name, e.g. "p0.0"
  std::string node;  // node name, e.g. "p0" (engines of a node share its storage NIC)
  std::string listen_ip = "127.0.0.1";   // compute address: EnginePeer gRPC + transfer engine
  uint16_t peer_port = 0;                // 0: any free port
  uint16_t transfer_port = 0;            // 0: any free port
  std::string store_root;                // the node's store mount
  std::string store_subdir;              // optional subdirectory (one per system and run)
  uint64_t buffer_bytes = 256ull << 20;  // the registered region: buffers + "HBM"
  // The node's shared-memory pool (docs/pool.md). Set: the buffer region is one owner-bound root
  // of that pool, pool::EngineRootName(name), reclaimed by the pool if the engine dies; the pool is
  // created with pool_bytes of data (0: 4 x buffer_bytes) if absent. Empty: process memory.
  std::string pool_path;
  uint64_t pool_bytes = 0;
  int64_t hbm_tokens = 0;        // 0: whatever fits in buffer_bytes
  std::string ucx_tls = "tcp";   // UCX_TLS of the transfer engine
  unsigned read_depth = 8;       // io_uring reads in flight per reader stage
  uint32_t fetch_wait_ms = 200;  // long-poll bound of one Fetch
  DecodeBatching decode_batching = DecodeBatching::kContinuous;  // decode engines only
  // Decode engines, continuous batching: the most requests in one decode step (vLLM's
  // max_num_seqs; `--max-decode-batch`); ready requests beyond it wait, first come first served,
  // for a request to finish. 0: bounded only by the buffer memory. Serial decoding is a batch of
  // one (docs/engine.md "Decode batching": on the CPU reference model a step's cost grows with
  // its batch, so an unbounded batch shares the engine among every request of a burst).
  uint32_t max_decode_batch = 0;
  // Decode engines: bytes of block files the write-behind may hold queued or in flight (at least
  // one block file). Blocks it refuses when full wait in their requests' buffers, never in the
  // decode step loop (docs/engine.md "Decode batching").
  uint64_t write_behind_bytes = 64ull << 20;
  // Decode engines: when a finished request's result goes to the scheduler. false (the default,
  // `--result-after-write off`): at once, as a serving engine answers its user; the blocks it
  // queued for write-behind are written beside the next requests, and a turn that arrives before
  // they are published finds them missing and recomputes them (a miss, never wrong KV). true: only
  // after every block it queued is written and published, so the agent's next turn hits them all
  // (deterministic hits, which tests of hit accounting need; on a busy storage link this wait
  // is on every agent's critical path: docs/engine.md "When a result is reported").
  bool result_after_write = false;
  // Decode engines, with result_after_write false: a result still waits for its blocks when it
  // queued at least this many new ones (`--result-wait-blocks`; 0, the default: never). A cold
  // turn queues its whole prompt (a 1.5K-token context: 24 blocks of 64 tokens), which an agent's
  // next turn that comes at once would recompute from scratch, while a steady agentic turn queues
  // 0-1 (docs/engine.md "When a result is reported").
  uint32_t result_wait_blocks = 0;
  // Prefill engines (docs/engine.md "Prefill batching"): how forward batches are formed, the
  // engine's data-parallel attention ranks (threads standing in for its GPUs), how chunks are
  // placed on them, and each rank's compute quota (predicted attention time of one layer).
  // `ranks` is the decode engine's too: with continuous batching each request decodes on one rank
  // (DecodeRankFor) and a step's attention runs on all of them at once (docs/engine.md "Decode
  // batching").
  PrefillBatching prefill_batching = PrefillBatching::kSerial;
  uint32_t ranks = 1;
  sched::RankPlacement rank_placement = sched::RankPlacement::kPacked;
  Nanos compute_quota = 300 * kNanosPerMilli;
  // The §6.2 time model PackRanks plans with: true fits it to the ranks' measured attention times
  // as batches run (sched::AttentionFit), starting from the reference model's fixed one; false
  // keeps the fixed one. And the smallest chunk a request is cut to when a rank's room is less
  // than its remainder (smaller: ranks fill closer to the level).
  bool calibrate_attention = true;
  int64_t min_chunk_tokens = 8;
  // Written at exit (JSON: forward batch sizes and per-rank attention balance), when set.
  std::string batch_stats_path;
  // The KV substrate (both engines of a request must use the same one: StartDecode carries it and
  // the DE refuses a mismatch). kRackPool needs rack_pool_path: the rack's shared region (it must
  // exist), attached as node rack_node (the non-coherent model's node id, < the region's nodes).
  KvSubstrate kv_substrate = KvSubstrate::kUcx;
  std::string rack_pool_path;
  uint32_t rack_node = 0;
  // With kRackPool: the region is also the rack-wide prefix cache (engine/rack_link.h): hit blocks
  // are looked up there before storage and new full blocks published there as well as written
  // behind. false: the region carries the PE<->DE KV only (`--rack-prefix-cache off`).
  bool rack_prefix_cache = true;
  // Written at exit (JSON: KV payload bytes this engine put over the compute link, bytes it
  // wrote into and read from the rack pool), when set.
  std::string kv_stats_path;
  // PE: how many requests the loader may have loaded (or be loading) beyond the one computing.
  // The default keeps loading as long as buffer memory lasts; 0 turns the overlap of storage
  // reads and compute off (a baseline for benchmarks: load, compute, load, compute...).
  uint32_t prefetch_requests = 1u << 30;
  Nanos request_timeout = 60 * kNanosPerSecond;  // any single wait of one request
  Nanos peer_timeout = 5 * kNanosPerSecond;      // transfer engine: silent peer is dead
  storage::StorageFaults* faults = nullptr;      // tests only; not owned
  // Where the engine registers its metrics (docs/metrics.md); not owned, must outlive the
  // engine. Null: counted into a registry of the engine's own that nobody scrapes.
  metrics::Registry* metrics = nullptr;
  // Transport security (docs/cli.md "Security"): the EnginePeer listener's and the peer clients'
  // TLS (dualpath/common/grpc_tls.h: certificate + key, CA for mutual TLS), and the cluster's
  // transfer token (dualpath/transfer/token.h) the transfer engine's handshake checks. Without a
  // certificate or without a token the engine refuses to start unless tls.insecure is set
  // (plaintext EnginePeer, the empty transfer token).
  GrpcTls tls;
  std::string transfer_token;
  // The distributed KV store (issue 16, docs/store.md "In the system"). With kv_store_etcd set, a
  // hit block the node's own tier does not hold is read from the store (same node's DRAM tier,
  // then another node's over the compute network) and verified like a file read, and every block
  // the write-behind persists is also put into the store. Empty: the store is not used (the
  // default; nothing changes).
  std::string kv_store_etcd;     // etcd endpoints, HOST:PORT[,...]
  std::string kv_store_cluster;  // the store cluster's name
  GrpcTls kv_store_tls;          // towards the store's etcd and masters (grpc_tls.h rules)
  uint32_t kv_store_node = 0;    // the store node beside this engine (preferred for puts)
  std::string kv_store_host;     // host name that store nodes on this node advertise ("": node)
  // Where the store nodes on this host keep their tier files (their --shm-dir): a same-host
  // node's file is mapped only at its path there (docs/formats/store_tier_file.md).
  std::string kv_store_shm_dir = "/dev/shm";
  // Written at exit (JSON: the store link's counters), when set.
  std::string kv_store_stats_path;
  // Tests only: a link to use instead of connecting through kv_store_etcd; not owned, must
  // outlive the engine.
  KvStoreLink* kv_store_link = nullptr;
};

class Engine {
 public:
  // Starts the transfer engine and the EnginePeer server, registers with the scheduler (which
  // hands out the model and block size), opens the store, builds the model and starts the role's
  // threads. Errors name what failed (bad options: kInvalidArgument).
  static Result<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                std::unique_ptr<SchedulerLink> scheduler);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The fetch loop: returns OK when the scheduler says shutdown or Stop() was called, an error if
  // the scheduler stayed unreachable for request_timeout.
  Status Run();
  // Makes Run return and fails every request in flight. Idempotent.
  void Stop();

  // As registered (ports resolved, engine id from the scheduler).
  const control::v1::EngineInfo& info() const;
  uint32_t engine_id() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dualpath::engine
