#include "dualpath/engine/engine.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "dualpath/common/file.h"
#include "dualpath/common/grpc_server.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/log.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/pool/pool.h"
#include "dualpath/storage/layout.h"
#include "engine/context.h"
#include "engine/decode.h"
#include "engine/notice.h"
#include "engine/peer_service.h"
#include "engine/pool_buffer.h"
#include "engine/prefill.h"
#include "engine/rack_link.h"

namespace dualpath::engine {

namespace v1c = control::v1;

// Hashing of block names when the service does not say (docs/e2e.md): the blocks the DE writes
// must be keyed exactly as the service's Submit probes them, so the reply's algo/seed win.
inline constexpr std::string_view kDefaultHashAlgo = "sha256_cbor";
inline constexpr std::string_view kDefaultHashSeed = "0";

struct Engine::Impl {
  Context ctx;
  std::unique_ptr<SchedulerLink> scheduler;
  // Declared before the transfer engine: the pool memory must outlive its registration.
  std::unique_ptr<PoolBuffer> pool_buffer;
  std::unique_ptr<RackLink> rack;  // --kv-substrate rack-pool: the rack region
  std::unique_ptr<transfer::TransferEngine> transfer;
  std::unique_ptr<KvArena> arena;
  std::unique_ptr<PeerDirectory> peers;
  // After peers (it uses the directory); stopped first in Stop().
  std::unique_ptr<PeerProber> prober;
  uint64_t peers_version = 0;  // FetchReply.peers_version the prober has; Run()'s thread only
  PeerService service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<storage::BlockStore> store;
  // Before the stages: the decoder's write-behind puts into it until the decoder stops.
  std::unique_ptr<KvStoreLink> own_kv_store;
  std::unique_ptr<Prefiller> prefiller;
  std::unique_ptr<Decoder> decoder;
  // After everything its callbacks read; reset first in ~Impl (unregistered before the stages go).
  metrics::Registry own_registry;
  std::unique_ptr<EngineMetrics> metrics;
  uint32_t group_id = 0;
  v1c::RegisterEngineReply registration;  // the first one: a re-registration must match it
  int64_t capacity_tokens = 0;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopped = false;  // guarded by stop_mu

  Status Start();
  Status StartServers();
  Status RegisterAndBuild();
  Status Reregister();
  v1c::EngineReport Report() const;
  void Stop();
  void WriteKvStoreStats() const;
  void WriteBatchStats() const;
  void WriteKvStats() const;
  ~Impl() {
    Stop();
    metrics.reset();  // no scrape reads the stages, store or arena from here on
    // The transfer engine completes its outstanding batches (failing them) while it is destroyed,
    // and their callbacks reach into the stages: destroy it while the stages still exist.
    transfer.reset();
    prefiller.reset();
    decoder.reset();
    rack.reset();  // after the stages: their objects' pins go with the attachment
    // Nothing refers to the buffer any more: give the pool root back (clean exit).
    arena.reset();
    pool_buffer.reset();
  }
};

Status Engine::Impl::StartServers() {
  const EngineOptions& o = ctx.options;
  transfer::EngineConfig tc;
  tc.ucx_tls = o.ucx_tls;
  tc.peer_timeout = o.peer_timeout;
  tc.token = o.transfer_token;
  ASSIGN_OR_RETURN(transfer, transfer::TransferEngine::Create(tc));
  if (o.kv_substrate == KvSubstrate::kRackPool) {
    // The cluster made the region (and runs its lock manager); an engine never creates it.
    ASSIGN_OR_RETURN(rack, RackLink::Open(o.rack_pool_path, o.rack_node));
    ctx.rack = rack.get();
    if (o.rack_prefix_cache) ctx.rack_cache = rack.get();
    log::Info("engine {}: KV substrate rack-pool {} ({}, node {}, prefix cache {})", o.name,
              o.rack_pool_path, pool::MemoryModelName(rack->model()), o.rack_node,
              o.rack_prefix_cache ? "on" : "off");
  }
  // One registered region for every buffer of the engine: areas allocated from it never need
  // another registration or a remote-key exchange.
  std::byte* base = nullptr;
  if (!o.pool_path.empty()) {
    // The node's pool: a crash leaves a root the pool reclaims, not memory nobody can free.
    ASSIGN_OR_RETURN(
        pool_buffer,
        PoolBuffer::Attach(o.pool_path, o.pool_bytes > 0 ? o.pool_bytes : 4 * o.buffer_bytes,
                           pool::EngineRootName(o.name), o.buffer_bytes));
    Result<transfer::RegionId> id = transfer->RegisterRegion(pool_buffer->data(), o.buffer_bytes);
    if (!id.ok()) {
      return id.status().WithContext(
          fmt::format("register {} MiB of pool buffer", o.buffer_bytes >> 20));
    }
    base = pool_buffer->data();
    log::Info("engine {}: buffer is root {} of pool {} ({} MiB)", o.name, pool_buffer->root_name(),
              o.pool_path, o.buffer_bytes >> 20);
  } else {
    Result<std::pair<transfer::RegionId, void*>> region = transfer->AllocateRegion(o.buffer_bytes);
    if (!region.ok()) {
      return region.status().WithContext(
          fmt::format("allocate {} MiB of engine buffer", o.buffer_bytes >> 20));
    }
    base = static_cast<std::byte*>(region->second);
  }
  arena = std::make_unique<KvArena>(base, o.buffer_bytes, o.hbm_tokens);
  peers = std::make_unique<PeerDirectory>(*transfer, o.tls);
  Result<std::string> taddr = transfer->Listen(fmt::format("{}:{}", o.listen_ip, o.transfer_port));
  if (!taddr.ok()) {
    return taddr.status().WithContext("transfer engine listen");
  }
  ctx.info.set_transfer_addr(*taddr);

  service.SetPrefill(o.role == Role::kPrefill);
  ASSIGN_OR_RETURN(GrpcServerStart started,
                   StartPeerServer(service, fmt::format("{}:{}", o.listen_ip, o.peer_port), o.tls));
  server = std::move(started.server);
  const int port = started.port;
  ctx.info.set_peer_addr(fmt::format("{}:{}", o.listen_ip, port));
  return Status::Ok();
}

Status Engine::Impl::RegisterAndBuild() {
  const EngineOptions& o = ctx.options;
  ctx.info.set_name(o.name);
  ctx.info.set_node(o.node);
  ctx.info.set_role(o.role == Role::kPrefill ? v1c::ROLE_PREFILL : v1c::ROLE_DECODE);
  // The model (and so the bytes per token) is known only after registering: without an explicit
  // --hbm-tokens the engine registers 0 ("undeclared") and its Fetch reports carry the real free
  // tokens from then on.
  ctx.info.set_hbm_tokens(o.hbm_tokens);
  v1c::RegisterEngineRequest req;
  *req.mutable_engine() = ctx.info;
  ASSIGN_OR_RETURN(v1c::RegisterEngineReply reply, scheduler->Register(req));
  ctx.engine_id = reply.engine_id();
  group_id = reply.group_id();
  registration = reply;

  Result<model::RefModelConfig> mc = model::RefModelConfig::Parse(reply.model_spec());
  if (!mc.ok()) {
    return mc.status().WithContext("model spec from the scheduler");
  }
  if (mc->layers >= kMaxLayers) {
    return InvalidArgument(
        fmt::format("model has {} layers; the engine handles < {}", mc->layers, kMaxLayers));
  }
  if (reply.block_tokens() == 0) {
    return InvalidArgument("scheduler gave block_tokens 0");
  }
  ASSIGN_OR_RETURN(ctx.model, model::RefModel::Create(*mc));
  ctx.layers = mc->layers;
  ctx.bpt = mc->KvBytesPerTokenPerLayer();
  ctx.block_tokens = reply.block_tokens();
  const kv::ModelGeometry geometry = mc->Geometry();
  ctx.shape = kv::BlockShape::For(geometry, ctx.block_tokens);
  if (o.role == Role::kDecode && o.write_behind_bytes < storage::BlockStore::FileBytes(ctx.shape)) {
    // Every block would be refused as larger than the queue (a miss on every later turn).
    return InvalidArgument(
        fmt::format("write-behind queue of {} bytes is below one block file ({} bytes)",
                    o.write_behind_bytes, storage::BlockStore::FileBytes(ctx.shape)));
  }
  // The service's hashing: prompts arrive hashed (Assignment.prompt_block_hashes); this hasher
  // checks each carried chain's first hash and extends chains over generated tokens.
  Result<kv::HashAlgo> algo = kv::ParseHashAlgo(
      reply.hash_algo().empty() ? kDefaultHashAlgo : std::string_view(reply.hash_algo()));
  if (!algo.ok()) {
    return algo.status().WithContext("hash algorithm from the scheduler");
  }
  ASSIGN_OR_RETURN(
      kv::BlockHasher hasher,
      kv::BlockHasher::Create(
          *algo, reply.hash_seed().empty() ? kDefaultHashSeed : std::string_view(reply.hash_seed()),
          ctx.block_tokens));
  ctx.hasher = std::make_unique<kv::BlockHasher>(std::move(hasher));

  // Probes of the other role over the compute network (docs/engine.md "Failures"): twice per
  // heartbeat, unreachable after the service's 3 heartbeats without an answer. Before the store
  // link, which asks it which hosts to skip.
  const double heartbeat_s = reply.heartbeat_s() > 0 ? reply.heartbeat_s() : 1.0;
  prober = std::make_unique<PeerProber>(
      *peers, PeerProber::Options{.self = o.name,
                                  .interval = FromSeconds(heartbeat_s / 2),
                                  .window = FromSeconds(3 * heartbeat_s)});
  ctx.prober = prober.get();

  storage::StoreOptions so;
  so.root = o.store_subdir.empty() ? o.store_root : o.store_root + "/" + o.store_subdir;
  so.model_fingerprint = kv::ModelFingerprint(geometry);
  so.queue_depth = o.read_depth;
  so.faults = o.faults;
  ASSIGN_OR_RETURN(store, storage::BlockStore::Open(so));
  if (o.kv_store_link != nullptr) {
    ctx.kv_store = o.kv_store_link;
  } else if (!o.kv_store_etcd.empty()) {
    StoreLinkOptions lo;
    lo.etcd = o.kv_store_etcd;
    lo.cluster = o.kv_store_cluster;
    lo.node_id = o.kv_store_node;
    lo.host = o.kv_store_host.empty() ? o.node : o.kv_store_host;
    lo.shm_dir = o.kv_store_shm_dir;
    lo.ucx_tls = o.ucx_tls;
    lo.transfer_token = o.transfer_token;
    lo.tls = o.kv_store_tls;
    lo.model_fingerprint = so.model_fingerprint;
    // The store nodes and a leader master on a host this engine has let go of (partitioned)
    // are skipped: a read of them is a miss at once, not after a connect, a transfer timeout or
    // a master call's deadline.
    lo.skip_addr = [p = prober.get()](const std::string& addr) {
      const size_t colon = addr.rfind(':');
      return colon != std::string::npos && p->HostGone(addr.substr(0, colon));
    };
    Result<std::unique_ptr<KvStoreLink>> link = MakeStoreLink(lo);
    if (!link.ok()) return link.status().WithContext("engine: kv store client");
    own_kv_store = std::move(link).value();
    ctx.kv_store = own_kv_store.get();
    log::Info("engine {}: kv store cluster {} via etcd {} (node {}, host {})", o.name, lo.cluster,
              lo.etcd, lo.node_id, lo.host);
  }

  metrics = std::make_unique<EngineMetrics>(
      o.metrics != nullptr ? *o.metrics : own_registry,
      EngineMetrics::Labels{reply.system(), o.name, o.node,
                            o.role == Role::kPrefill ? "prefill" : "decode"});
  ctx.metrics = metrics.get();
  ctx.store = store.get();
  ctx.transfer = transfer.get();
  ctx.arena = arena.get();
  ctx.peers = peers.get();
  ctx.scheduler = scheduler.get();
  // What fits in the buffer, lowered by --hbm-tokens (a limit, never a promise beyond the buffer).
  capacity_tokens = static_cast<int64_t>(arena->capacity() / ctx.TokenBytes());
  if (o.hbm_tokens > 0) capacity_tokens = std::min(capacity_tokens, o.hbm_tokens);
  if (o.role == Role::kPrefill) {
    prefiller = std::make_unique<Prefiller>(ctx);
  } else {
    decoder = std::make_unique<Decoder>(ctx);
  }
  transfer->SetNoticeHandler([this](transfer::PeerId, uint64_t tag, std::string_view) {
    Notice n = DecodeNotice(tag);
    if (prefiller != nullptr) {
      prefiller->OnNotice(n);
    } else if (decoder != nullptr) {
      decoder->OnNotice(n);
    }
  });
  service.SetDecoder(decoder.get());
  std::function<storage::WriteBehindStats()> write_behind;
  if (decoder != nullptr) write_behind = [d = decoder.get()] { return d->write_behind_stats(); };
  metrics->AddCallbacks(
      *store, [this] { return Report(); }, std::move(write_behind), ctx.rack_cache);
  log::Info("engine {} ({}) registered as {} group {}: peer {} transfer {} store {} model {}",
            o.name, o.role == Role::kPrefill ? "prefill" : "decode", ctx.engine_id, group_id,
            ctx.info.peer_addr(), ctx.info.transfer_addr(), store->model_dir(), reply.model_spec());
  return Status::Ok();
}

// The service forgot this engine: it restarted (a new process knows no registrations) or declared
// the engine dead. Registering again with the same EngineInfo rejoins it; the engine's state
// (model, store, buffers, peers) stays, so the service must still describe the same run. Work of
// the old registration that is still in flight finishes and its results are refused or dropped as
// stale by the service; the requests themselves were re-submitted (by the service for a dead
// engine, by the replayer for a restarted service).
Status Engine::Impl::Reregister() {
  v1c::RegisterEngineRequest req;
  *req.mutable_engine() = ctx.info;
  ASSIGN_OR_RETURN(v1c::RegisterEngineReply reply, scheduler->Register(req));
  const v1c::RegisterEngineReply& was = registration;
  if (reply.model_spec() != was.model_spec() || reply.block_tokens() != was.block_tokens() ||
      reply.hash_algo() != was.hash_algo() || reply.hash_seed() != was.hash_seed() ||
      reply.system() != was.system()) {
    return InvalidArgument(fmt::format(
        "the scheduler now runs another configuration (system {}, model {}, block_tokens {}, "
        "hash {} seed {}) than this engine registered with (system {}, model {}, block_tokens {}, "
        "hash {} seed {})",
        reply.system(), reply.model_spec(), reply.block_tokens(), reply.hash_algo(),
        reply.hash_seed(), was.system(), was.model_spec(), was.block_tokens(), was.hash_algo(),
        was.hash_seed()));
  }
  log::Warn("engine {}: registered again (scheduler epoch {:x} -> {:x}): id {} -> {}",
            ctx.options.name, registration.service_epoch(), reply.service_epoch(), ctx.engine_id,
            reply.engine_id());
  // Run()'s thread is the only reader of both (Report(), Fetch).
  ctx.engine_id = reply.engine_id();
  group_id = reply.group_id();
  registration.set_service_epoch(reply.service_epoch());
  peers_version = 0;  // the service's engine ids may have changed: ask for the list again
  return Status::Ok();
}

Status Engine::Impl::Start() {
  const EngineOptions& o = ctx.options;
  if (o.name.empty()) {
    return InvalidArgument("engine name is empty");
  }
  if (o.store_root.empty()) {
    return InvalidArgument("store root is empty");
  }
  if (!o.store_subdir.empty()) {
    // One directory below the root: no "..", no '/' (docs/storage.md "Modes and names").
    RETURN_IF_ERROR(storage::CheckPathComponent(o.store_subdir, "store subdir"));
  }
  if (o.buffer_bytes < (1u << 20)) {
    return InvalidArgument(fmt::format("buffer of {} bytes is below 1 MiB", o.buffer_bytes));
  }
  if (o.kv_substrate == KvSubstrate::kRackPool && o.rack_pool_path.empty()) {
    return InvalidArgument("engine: --kv-substrate rack-pool needs --rack-pool PATH");
  }
  if (o.read_depth == 0 || o.read_depth > 1024) {
    return InvalidArgument(fmt::format("read depth {} not in [1, 1024]", o.read_depth));
  }
  // Checked before anything starts: the EnginePeer listener's TLS (the one rule of grpc_tls.h,
  // applied again when it binds) and the transfer token.
  RETURN_IF_ERROR(
      GrpcServerCredentials(o.tls, "EnginePeer", fmt::format("{}:{}", o.listen_ip, o.peer_port))
          .status());
  if (o.transfer_token.empty() && !o.tls.insecure) {
    return InvalidArgument(
        "engine: the transfer engine needs the cluster's token (--transfer-token-file), or "
        "--insecure");
  }
  RETURN_IF_ERROR(StartServers());
  return RegisterAndBuild();
}

v1c::EngineReport Engine::Impl::Report() const {
  v1c::EngineReport r;
  r.set_engine_id(ctx.engine_id);
  int64_t queued_reads = 0;
  if (prefiller != nullptr) {
    r.set_unfinished_requests(prefiller->unfinished_requests());
    r.set_unfinished_tokens(prefiller->unfinished_tokens());
    queued_reads = prefiller->queued_read_tokens();
  } else if (decoder != nullptr) {
    r.set_unfinished_requests(decoder->unfinished_requests());
    r.set_unfinished_tokens(decoder->unfinished_tokens());
    queued_reads = decoder->queued_read_tokens();
  }
  // The node's read queue: reads in the store plus reads this engine holds queued before them.
  r.set_read_queue_tokens(static_cast<int64_t>(store->read_queue().Snapshot().tokens) +
                          queued_reads);
  r.set_hbm_free_tokens(std::max<int64_t>(0, capacity_tokens - arena->used_tokens()));
  r.set_capacity_tokens(capacity_tokens);
  if (prober != nullptr) prober->AddReach(&r);
  return r;
}

void Engine::Impl::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    if (stopped) {
      return;
    }
    stopped = true;
  }
  stop_cv.notify_all();
  ctx.stopping.store(true);
  if (prober != nullptr) {
    prober->Stop();  // no new pings; every one in flight answered
  }
  if (arena != nullptr) {
    arena->Cancel();
  }
  service.Close();
  if (server != nullptr) {
    // In-flight handlers finish (they fail fast: the arena is cancelled); new calls are refused.
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  if (prefiller != nullptr) {
    prefiller->Stop();
  }
  if (decoder != nullptr) {
    decoder->Stop();
  }
  WriteKvStoreStats();
  WriteBatchStats();
  WriteKvStats();
}

// After the stages stopped: the KV substrate's counters (--kv-stats), for `cluster run`'s
// comparison of the compute link's KV bytes under ucx and rack-pool (issue 29 acceptance 2).
void Engine::Impl::WriteKvStats() const {
  if (ctx.options.kv_stats_path.empty() || ctx.metrics == nullptr) return;
  const RackLinkStats r = rack != nullptr ? rack->Stats() : RackLinkStats{};
  const Status written = WriteOutputFile(
      ctx.options.kv_stats_path,
      fmt::format("{{\"engine\":\"{}\",\"node\":\"{}\",\"kv_substrate\":\"{}\","
                  "\"compute_link_kv_bytes\":{},\"rack_pool_written_bytes\":{},"
                  "\"rack_pool_read_bytes\":{},\"rack_pool_objects_written\":{},"
                  "\"rack_pool_objects_read\":{},\"rack_pool_errors\":{},"
                  "\"rack_prefix_cache\":{},\"rack_prefix_hits\":{},\"rack_prefix_misses\":{},"
                  "\"rack_prefix_corrupt\":{},\"rack_prefix_bytes\":{},"
                  "\"rack_prefix_published\":{},\"rack_prefix_publish_errors\":{},"
                  "\"storage_read_bytes\":{}}}\n",
                  ctx.options.name, ctx.options.node, KvSubstrateName(ctx.options.kv_substrate),
                  ctx.metrics->TransferredBytes(), r.written_bytes, r.read_bytes, r.objects_written,
                  r.objects_read, r.errors, ctx.rack_cache != nullptr, r.prefix_hits,
                  r.prefix_misses, r.prefix_corrupt, r.prefix_bytes, r.prefix_published,
                  r.prefix_publish_errors, ctx.metrics->ReadBytes()),
      "--kv-stats");
  if (!written.ok()) log::Warn("engine: {}", written.ToString());
}

// After the stages stopped: the prefill engine's forward batches (--batch-stats).
void Engine::Impl::WriteBatchStats() const {
  if (ctx.options.batch_stats_path.empty() || prefiller == nullptr) return;
  const Status written = WriteOutputFile(ctx.options.batch_stats_path,
                                         ctx.metrics->PrefillBatchJson() + "\n", "--batch-stats");
  if (!written.ok()) log::Warn("engine: {}", written.ToString());
}

// After the stages stopped (the write-behind has flushed its puts).
void Engine::Impl::WriteKvStoreStats() const {
  if (ctx.kv_store == nullptr) return;
  const KvStoreStats s = ctx.kv_store->Stats();
  log::Info(
      "engine {}: kv store: hits_local={} hits_remote={} misses={} rejected={} puts_ok={} "
      "puts_failed={} puts_pending={}",
      ctx.options.name, s.hits_local, s.hits_remote, s.misses, s.rejected, s.puts_ok, s.puts_failed,
      s.puts_pending);
  if (ctx.options.kv_store_stats_path.empty()) return;
  // An output file like every other (common/file.h): written whole, never through a symlink.
  const Status written = WriteOutputFile(
      ctx.options.kv_store_stats_path,
      fmt::format("{{\"engine\":\"{}\",\"node\":\"{}\",\"hits_local\":{},\"hits_remote\":{},"
                  "\"misses\":{},\"rejected\":{},\"puts_ok\":{},\"puts_failed\":{},"
                  "\"puts_pending\":{}}}\n",
                  ctx.options.name, ctx.options.node, s.hits_local, s.hits_remote, s.misses,
                  s.rejected, s.puts_ok, s.puts_failed, s.puts_pending),
      "--kv-store-stats");
  if (!written.ok()) log::Warn("engine: {}", written.ToString());
}

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                               std::unique_ptr<SchedulerLink> scheduler) {
  auto impl = std::make_unique<Impl>();
  impl->ctx.options = options;
  impl->scheduler = std::move(scheduler);
  RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Status Engine::Run() {
  Impl& m = *impl_;
  std::chrono::steady_clock::time_point failing_since{};
  while (true) {
    {
      std::lock_guard<std::mutex> lock(m.stop_mu);
      if (m.stopped) {
        return Status::Ok();
      }
    }
    v1c::FetchRequest req;
    req.set_group_id(m.group_id);
    *req.add_reports() = m.Report();
    req.set_wait_ms(m.ctx.options.fetch_wait_ms);
    req.set_peers_version(m.peers_version);
    Result<v1c::FetchReply> reply = m.scheduler->Fetch(req);
    if (!reply.ok() && (reply.status().code() == Code::kNotFound ||
                        reply.status().code() == Code::kFailedPrecondition)) {
      // Unknown group (a restarted service) or declared dead: register again and go on.
      log::Warn("engine {}: {}; registering again", m.ctx.options.name, reply.status().ToString());
      Status again = m.Reregister();
      if (again.ok()) continue;
      // Not reachable (again): retried below like a failed Fetch; anything else ends the engine.
      if (again.code() != Code::kUnavailable && again.code() != Code::kTimeout) {
        return again.WithContext("register again");
      }
      reply = again;
    }
    if (!reply.ok()) {
      auto now = std::chrono::steady_clock::now();
      if (failing_since == std::chrono::steady_clock::time_point{}) {
        failing_since = now;
        log::Warn("engine {}: fetch failed: {}", m.ctx.options.name, reply.status().ToString());
      } else if (now - failing_since > std::chrono::nanoseconds(m.ctx.options.request_timeout)) {
        return reply.status().WithContext("scheduler unreachable");
      }
      // Back off a little (interruptibly) before the next try.
      std::unique_lock<std::mutex> lock(m.stop_mu);
      m.stop_cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return m.stopped; });
      continue;
    }
    failing_since = {};
    if (m.prober != nullptr) {
      if (reply->peers_version() != 0) {
        m.peers_version = reply->peers_version();
        m.prober->SetPeers(reply->peers());
      }
      m.prober->SetCutOff(reply->cut_off(), m.ctx.engine_id);
    }
    if (reply->shutdown()) {
      log::Info("engine {}: scheduler says shutdown", m.ctx.options.name);
      m.Stop();
      return Status::Ok();
    }
    for (const v1c::Assignment& a : reply->prefill()) {
      if (m.prefiller != nullptr) {
        m.prefiller->Enqueue(a);
      } else {
        log::Warn("engine {}: a decode engine got a prefill assignment (request {})",
                  m.ctx.options.name, a.request().request_id());
      }
    }
    // Decode assignments are bookkeeping: the PE's StartDecode carries everything the DE needs.
  }
}

void Engine::Stop() { impl_->Stop(); }

const v1c::EngineInfo& Engine::info() const { return impl_->ctx.info; }
uint32_t Engine::engine_id() const { return impl_->ctx.engine_id; }

}  // namespace dualpath::engine
