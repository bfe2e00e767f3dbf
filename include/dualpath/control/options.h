// Configuration of the scheduler service (DualPath §6.1 behind gRPC): which system it schedules
// for (basic, dualpath, oracle), the model and block size it hashes prompts with, where it probes
// storage for hits, which engines it waits for, and its liveness heartbeat.
//
// The service starts scheduling once every expected engine has registered: either a named list
// (`p0.0:prefill:p0,d0.0:decode:d0`, engine ids = list positions) or a count per role (engine ids
// in registration order). Each engine is its own sched group (and its own sched "node", so the
// sched invariant "all engines of a node are in one group" holds even with two engines on one
// physical node; they report the same read queue).
//
// Ownership: plain values. Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/sched/cluster.h"
#include "dualpath/sched/routing.h"
#include "dualpath/sched/system.h"

namespace dualpath::metrics {
class Registry;
}  // namespace dualpath::metrics

namespace dualpath::control {

// The system the service schedules for: one of sched::kServiceSystems (basic, dualpath, oracle),
// parsed by sched::ParseSystem(name, sched::kServiceSystems). Names, the scheduler preset and the
// Oracle rule are dualpath/sched/system.h's.
using sched::SystemKind;

struct ExpectedEngine {
  std::string name;  // e.g. "p0.0"
  sched::Role role = sched::Role::kPrefill;
  std::string node;  // e.g. "p0"
};

// Parses "NAME:ROLE:NODE[,NAME:ROLE:NODE...]" with ROLE prefill|decode. kInvalidArgument naming
// the bad entry (empty field, unknown role, duplicate name).
Result<std::vector<ExpectedEngine>> ParseEngineList(std::string_view text);

// ServiceOptions::store_subdir split at commas (empty parts dropped).
std::vector<std::string> SplitStoreSubdirs(std::string_view subdirs);

// Input ranges (docs/control.md "Input ranges"), checked by ServiceOptions::Validate.
inline constexpr double kMinHeartbeatS = 0.01;  // below, liveness checks spin
inline constexpr double kMaxHeartbeatS = 3600;  // a dead engine is noticed within 3 hours
inline constexpr uint32_t kMaxAttempts = 100;   // each attempt re-runs a whole request
inline constexpr uint64_t kMaxEngines = 4096;   // expected engines per role
inline constexpr uint64_t kMaxThresholdTokens = 1ull << 40;  // sched thresholds (tokens)

struct ServiceOptions {
  SystemKind system = SystemKind::kDualPath;
  // model::RefModelConfig spec ("layers=8,q_heads=4,..."); gives vocab and the KV geometry whose
  // fingerprint names the store directory.
  std::string model_spec;
  uint32_t block_tokens = 64;
  // Hits are probed in <store_root>/<store_subdir> (BlockStore layout). Empty store_root: no
  // probing, every request has hit_tokens 0.
  std::string store_root;
  // One directory, or several comma-separated (node-local tiers, `cluster run --local-tiers`: a
  // block counts as stored when any of them holds it; docs/store.md "In the system").
  std::string store_subdir;
  // The distributed KV store the hit probe also asks (StoreClient::Exists on the leader master):
  // etcd endpoints and the store cluster's name. Empty: no store. kv_store_tls: the transport
  // security towards its etcd and masters (grpc_tls.h; `--kv-store-tls-*`).
  std::string kv_store_etcd;
  std::string kv_store_cluster;
  GrpcTls kv_store_tls;
  // Prompt block hashing (kv::BlockHasher), announced to engines at registration.
  std::string hash_algo = "sha256_cbor";
  std::string hash_seed = "0";
  // Probe hits where `dualpath.KVStore` (the vLLM connector's persistent tier) keeps this
  // namespace: <store_root>/<store_subdir>/<kv::NamespaceFingerprint(store_namespace)>/, instead
  // of the model geometry's directory that dualpath's engines use. Empty: the engines' layout.
  std::string store_namespace;
  // Placement mode (`--placement`): the instances do not fetch work (vLLM behind dualpath's
  // proxy); a proxy registers them, reports their load (ReportEngines) and asks Place for each
  // request. Scheduling runs over whichever instances are live (expect_prefill / expect_decode
  // are upper bounds), all prefill instances in one sched group so that §6.1's PE categories
  // choose among all of them; Fetch is refused; a failed or orphaned request is not retried
  // (the proxy answers its client with the error).
  bool placement = false;

  // Expected engines: a named list, or counts per role (used when the list is empty).
  std::vector<ExpectedEngine> engines;
  int expect_prefill = 0;
  int expect_decode = 0;

  // An engine that has not fetched for 3 x heartbeat (and is not waiting in a Fetch) is dead.
  double heartbeat_s = 1.0;
  // A request whose attempt fails (ok=false result, or its engine died) is re-submitted until it
  // has been tried this many times, then forwarded as failed.
  uint32_t max_attempts = 3;

  // sched thresholds (tokens); 0 keeps the sched defaults. See docs/sched.md.
  int64_t short_read_queue_tokens = 0;
  int64_t unfinished_token_limit = 0;
  bool split_reads = false;
  // Which prefill engine takes an agent's turn (sched/routing.h; `--routing`): the system's own
  // choice (dualpath, the default), or a fixed engine per turn, round-robin ((agent + turn) mod P)
  // or sticky (agent mod P), over the prefill engines in engine id order (the --engines list's
  // order; registration order with --expect-prefill). A first attempt only: a retry, a dead
  // fixed engine or one whose reported buffer cannot hold the prompt gets the normal choice.
  sched::Routing routing = sched::Routing::kDualPath;

  // The liveness clock (not owned; default SteadyClock). Long-poll timeouts are real time.
  const Clock* clock = nullptr;
  // Where the service registers its metrics (docs/metrics.md); not owned, must outlive the
  // service. Null: no metrics.
  metrics::Registry* metrics = nullptr;

  // kInvalidArgument naming the field.
  Status Validate() const;
  int expected_engines() const {
    return engines.empty() ? expect_prefill + expect_decode : static_cast<int>(engines.size());
  }
};

}  // namespace dualpath::control
