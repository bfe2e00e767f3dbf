// TransferEngine: setup, registration, peers and the control thread. The data path (progress
// thread) is in progress.cc.
#include <dirent.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <ucs/sys/string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "dualpath/common/log.h"
#include "engine_impl.h"
#include "peer_auth.h"
#include "socket_tos.h"

namespace dualpath::transfer {
namespace {

uint64_t RandomEngineId() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  v ^= static_cast<uint64_t>(getpid()) << 16;
  v ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return v == 0 ? 1 : v;
}

// RDMA devices (InfiniBand, RoCE) appear under /sys/class/infiniband.
bool HaveInfiniband() {
  DIR* d = opendir("/sys/class/infiniband");
  if (d == nullptr) {
    return false;
  }
  bool any = false;
  while (dirent* e = readdir(d)) {
    any |= e->d_name[0] != '.';
  }
  closedir(d);
  return any;
}

int Tos(const ClassConfig& c) { return c.dscp < 0 ? -1 : TosForDscp(c.dscp); }

// Whether UCX will consider its tcp transport: the engine's list, else UCX_TLS, else UCX's
// default (all transports). Setting a tcp key when tcp is excluded would make UCX warn about an
// unused key.
bool UsesTcp(const std::string& engine_tls) {
  std::string tls = engine_tls;
  if (tls.empty()) {
    const char* env = std::getenv("UCX_TLS");
    tls = env != nullptr ? env : "";
  }
  if (tls.empty() || tls == "all") {
    return true;
  }
  return tls[0] != '^' && tls.find("tcp") != std::string::npos;
}

// UCX 1.13's defaults for UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE (`ucx_info -c`).
constexpr uint64_t kUcxDefaultTcpTxSeg = 8 * 1024;
constexpr uint64_t kUcxDefaultTcpRxSeg = 64 * 1024;

// One segment size as UCX will apply it: the environment's UCX_TCP_<key> (UCX's memory units:
// "72k", "1m", bytes), else `configured` (what InitClass sets), else UCX's default.
Result<uint64_t> TcpSegmentInUse(const char* key, uint64_t configured, uint64_t ucx_default) {
  const std::string var = fmt::format("UCX_TCP_{}", key);
  if (const char* env = std::getenv(var.c_str()); env != nullptr) {
    size_t bytes = 0;
    if (ucs_str_to_memunits(env, &bytes) != UCS_OK) {
      return InvalidArgument(fmt::format("{}={}: not a size", var, env));
    }
    return static_cast<uint64_t>(bytes);
  }
  return configured != 0 ? configured : ucx_default;
}

}  // namespace

Status CheckTcpSegments(uint64_t my_tx, uint64_t my_rx, uint64_t peer_tx, uint64_t peer_rx,
                        std::string_view peer) {
  if (my_tx == 0 || peer_tx == 0) {
    return Status::Ok();  // one side does not use tcp: no tcp lane between them
  }
  if (peer_tx > my_rx) {
    return FailedPrecondition(fmt::format(
        "peer {} sends UCX tcp segments of {} bytes, larger than this process receives ({} "
        "bytes): UCX would abort this process on the first one; raise this side's "
        "UCX_TCP_RX_SEG_SIZE (EngineConfig::tcp_rx_seg_size) or lower the peer's "
        "UCX_TCP_TX_SEG_SIZE",
        peer, peer_tx, my_rx));
  }
  if (my_tx > peer_rx) {
    return FailedPrecondition(fmt::format(
        "this process sends UCX tcp segments of {} bytes, larger than peer {} receives ({} "
        "bytes): UCX would abort the peer on the first one; lower this side's "
        "UCX_TCP_TX_SEG_SIZE (EngineConfig::tcp_seg_size) or raise the peer's "
        "UCX_TCP_RX_SEG_SIZE",
        my_tx, peer, peer_rx));
  }
  return Status::Ok();
}

Status UcsStatus(ucs_status_t st, std::string_view what) {
  if (st == UCS_OK) {
    return Status::Ok();
  }
  return Status(Code::kTransferUcxError, fmt::format("{}: {}", what, ucs_status_string(st)));
}

Result<std::unique_ptr<TransferEngine>> TransferEngine::Create(const EngineConfig& config,
                                                               Clock& clock) {
  for (const ClassConfig& c : config.classes) {
    RETURN_IF_ERROR(ValidateClassConfig(c));
  }
  if (config.peer_timeout <= 0) {
    return InvalidArgument("peer_timeout must be positive");
  }
  auto engine = std::make_unique<EngineImpl>(config, clock);
  RETURN_IF_ERROR(engine->Start());
  return std::unique_ptr<TransferEngine>(std::move(engine));
}

EngineImpl::EngineImpl(const EngineConfig& config, Clock& clock)
    : config_(config),
      clock_(clock),
      engine_id_(RandomEngineId()),
      low_budget_(config.low_inflight_bytes) {}

Status EngineImpl::InitClass(int c) {
  const ClassConfig& cc = config_.classes[c];
  ucp_config_t* cfg = nullptr;
  RETURN_IF_ERROR(UcsStatus(ucp_config_read(nullptr, nullptr, &cfg), "ucp_config_read"));
  ClassConfig effective = cc;
  if (!HaveInfiniband()) {
    // UCX warns about every configured key no transport consumed; IB_SL/IB_TRAFFIC_CLASS only
    // mean something where an InfiniBand or RoCE device exists.
    effective.ib_sl = -1;
    effective.ib_traffic_class = -1;
  }
  for (const auto& [key, value] : UcxConfigFor(effective, config_.ucx_tls)) {
    ucs_status_t st = ucp_config_modify(cfg, key.c_str(), value.c_str());
    if (st != UCS_OK) {
      ucp_config_release(cfg);
      return UcsStatus(st, fmt::format("ucp_config_modify {}={}", key, value));
    }
  }
  // Transport options go in without their table's prefix: UCX rejected "TCP_TX_SEG_SIZE" here
  // ("invalid configurations" at worker creation) and applies "TX_SEG_SIZE", a field only the
  // tcp transport has in UCX 1.13.
  if (UsesTcp(config_.ucx_tls)) {
    // Receive segments at least as large as sent ones (EngineConfig::tcp_rx_seg_size); each
    // size 0 keeps UCX's default.
    const uint64_t rx = std::max(config_.tcp_seg_size, config_.tcp_rx_seg_size);
    for (const auto& [key, bytes] :
         {std::pair<const char*, uint64_t>{"TX_SEG_SIZE", config_.tcp_seg_size},
          std::pair<const char*, uint64_t>{"RX_SEG_SIZE", rx}}) {
      if (bytes == 0 || std::getenv(fmt::format("UCX_TCP_{}", key).c_str()) != nullptr) {
        continue;  // UCX's default, or the operator's explicit setting, which wins
      }
      const std::string seg = std::to_string(bytes);
      ucs_status_t st = ucp_config_modify(cfg, key, seg.c_str());
      if (st != UCS_OK) {
        ucp_config_release(cfg);
        return UcsStatus(st, fmt::format("ucp_config_modify {}={}", key, seg));
      }
    }
  }
  ucp_params_t params{};
  params.field_mask =
      UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.name = c == 0 ? "dualpath-high" : "dualpath-low";
  ucs_status_t st = ucp_init(&params, cfg, &ctx_[c]);
  ucp_config_release(cfg);
  RETURN_IF_ERROR(UcsStatus(st, "ucp_init"));

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // SERIALIZED, not SINGLE: the worker is created here and driven by the progress thread, and
  // with post_on_submit a submitting thread may post while holding progress_mu_. UCX adds no
  // locking in this mode (that is MULTI); the engine's mutex provides the one-at-a-time rule.
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  {
    // The tcp transport creates its listening socket here: mark it with the class's DSCP so
    // connections accepted on it inherit the mark.
    ScopedSocketTos tos(Tos(cc));
    RETURN_IF_ERROR(UcsStatus(ucp_worker_create(ctx_[c], &wp, &worker_[c]), "ucp_worker_create"));
  }
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  RETURN_IF_ERROR(
      UcsStatus(ucp_worker_get_address(worker_[c], &addr, &len), "ucp_worker_get_address"));
  worker_addr_[c].assign(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(worker_[c], addr);

  ucp_am_handler_param_t am{};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  am.id = kNoticeAmId;
  am.arg = this;
  am.cb = [](void* arg, const void* header, size_t header_length, void* data, size_t length,
             const ucp_am_recv_param_t* param) -> ucs_status_t {
    // Notices are sent eagerly (UCP_AM_SEND_FLAG_EAGER), so the payload is here in full and valid
    // for this call; a rendezvous descriptor (only a foreign sender could cause one) or an
    // oversized payload is dropped rather than fetched.
    const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (header_length == sizeof(NoticeHeader) && !rndv && length <= kMaxNoticePayload) {
      NoticeHeader h;
      std::memcpy(&h, header, sizeof h);
      static_cast<EngineImpl*>(arg)->OnNotice(
          h, std::string_view(static_cast<const char*>(data), data != nullptr ? length : 0));
    }
    return UCS_OK;
  };
  RETURN_IF_ERROR(
      UcsStatus(ucp_worker_set_am_recv_handler(worker_[c], &am), "ucp_worker_set_am_recv_handler"));

  int efd = -1;
  RETURN_IF_ERROR(UcsStatus(ucp_worker_get_efd(worker_[c], &efd), "ucp_worker_get_efd"));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = static_cast<uint32_t>(c);
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, efd, &ev) != 0) {
    return IoError("epoll_ctl worker efd", errno);
  }
  return Status::Ok();
}

Status EngineImpl::Start() {
  bool any_dscp = false;
  for (const ClassConfig& c : config_.classes) {
    any_dscp |= c.dscp >= 0;
  }
  if (any_dscp && !SocketInterposerActive()) {
    log::Warn(
        "transfer: socket() interposition is not active in this executable (link without "
        "--export-dynamic-symbol=socket?); UCX tcp sockets will not carry DSCP marks");
  }
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  control_wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epfd_ < 0 || wakefd_ < 0 || control_wakefd_ < 0) {
    return IoError("epoll/eventfd", errno);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = 1000;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev) != 0) {
    return IoError("epoll_ctl eventfd", errno);
  }
  // UCX objects are created here, before the progress thread exists; std::thread's start is the
  // hand-off that makes them the progress thread's.
  // A transport list of shared-memory transports only has no transport with peer failure
  // detection in UCX 1.13; skip PEER mode up front instead of failing the first endpoint.
  if (!config_.ucx_tls.empty()) {
    bool shm_only = true;
    std::string tls = config_.ucx_tls + ",";
    for (size_t pos = 0, next; (next = tls.find(',', pos)) != std::string::npos; pos = next + 1) {
      std::string t = tls.substr(pos, next - pos);
      if (t != "posix" && t != "sysv" && t != "cma" && t != "self" && t != "sm" && t != "shm" &&
          t != "knem" && t != "xpmem") {
        shm_only = false;
      }
    }
    no_peer_failure_.fill(shm_only);
  }
  if (UsesTcp(config_.ucx_tls)) {
    // What InitClass sets, or the operator's environment, or UCX's defaults.
    ASSIGN_OR_RETURN(const uint64_t tx,
                     TcpSegmentInUse("TX_SEG_SIZE", config_.tcp_seg_size, kUcxDefaultTcpTxSeg));
    ASSIGN_OR_RETURN(
        const uint64_t rx,
        TcpSegmentInUse("RX_SEG_SIZE", std::max(config_.tcp_seg_size, config_.tcp_rx_seg_size),
                        kUcxDefaultTcpRxSeg));
    tcp_tx_seg_ = tx;
    tcp_rx_seg_ = rx;
  }
  for (int c = 0; c < kNumClasses; ++c) {
    RETURN_IF_ERROR(InitClass(c).WithContext(fmt::format("class {}", c == 0 ? "high" : "low")));
  }
  progress_ = std::thread([this] { ProgressLoop(); });
  control_ = std::thread([this] { ControlLoop(); });
  return Status::Ok();
}

EngineImpl::~EngineImpl() {
  stop_control_ = true;
  if (control_.joinable()) {
    uint64_t one = 1;
    (void)!write(control_wakefd_, &one, sizeof one);
    control_.join();
  }
  if (progress_.joinable()) {
    RunOnProgress([this] { Shutdown(); });
    progress_.join();
  }
  for (auto& [_, r] : local_regions_) {
    UnmapRegion(r);
  }
  for (int c = 0; c < kNumClasses; ++c) {
    if (worker_[c] != nullptr) {
      ucp_worker_destroy(worker_[c]);
    }
    if (ctx_[c] != nullptr) {
      ucp_cleanup(ctx_[c]);
    }
  }
  // Batches whose user callback already ran (peer killed) but whose UCX requests never came back.
  for (InflightBatch* b : inflight_) {
    delete b;
  }
  inflight_.clear();
  polled_in_flight_ = 0;
  for (int fd : {epfd_, wakefd_, control_wakefd_}) {
    if (fd >= 0) {
      ::close(fd);
    }
  }
}

Status EngineImpl::MapRegion(void* addr, uint64_t length, LocalRegion* region) {
  // The low class first: when it allocates, the other contexts register its pages.
  for (int c : {ClassIndex(TrafficClass::kLow), ClassIndex(TrafficClass::kHigh)}) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = addr;
    mp.length = length;
    if (addr == nullptr) {
      mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
      mp.flags = UCP_MEM_MAP_ALLOCATE;
    }
    RETURN_IF_ERROR(UcsStatus(ucp_mem_map(ctx_[c], &mp, &region->memh[c]), "ucp_mem_map"));
    if (addr == nullptr) {
      ucp_mem_attr_t attr{};
      attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
      RETURN_IF_ERROR(UcsStatus(ucp_mem_query(region->memh[c], &attr), "ucp_mem_query"));
      addr = attr.address;
      region->allocated = true;
      region->range.addr = reinterpret_cast<uint64_t>(addr);
    }
    void* buf = nullptr;
    size_t len = 0;
    RETURN_IF_ERROR(
        UcsStatus(ucp_rkey_pack(ctx_[c], region->memh[c], &buf, &len), "ucp_rkey_pack"));
    region->rkey[c].assign(static_cast<const char*>(buf), len);
    ucp_rkey_buffer_release(buf);
  }
  return Status::Ok();
}

void EngineImpl::UnmapRegion(const LocalRegion& region) {
  // High first: the low context's mapping may own (and free) the pages.
  for (int c : {ClassIndex(TrafficClass::kHigh), ClassIndex(TrafficClass::kLow)}) {
    if (region.memh[c] != nullptr) {
      ucp_mem_unmap(ctx_[c], region.memh[c]);
    }
  }
}

Result<RegionId> EngineImpl::AddRegion(void* addr, uint64_t length, void** out_addr) {
  if (length == 0) {
    return InvalidArgument("region of zero length");
  }
  RegionId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = RegionId(next_region_++);
    if (addr != nullptr) {
      // Reserve the range first, so two concurrent registrations cannot both succeed.
      RETURN_IF_ERROR(
          local_index_.Insert(RegionRange{id, reinterpret_cast<uint64_t>(addr), length}));
    }
  }
  LocalRegion region{.range = RegionRange{id, reinterpret_cast<uint64_t>(addr), length}};
  Status st = CallOnProgress<Status>([&] { return MapRegion(addr, length, &region); });
  std::lock_guard<std::mutex> lock(mu_);
  if (st.ok() && addr == nullptr) {
    st = local_index_.Insert(region.range);
  }
  if (!st.ok()) {
    if (addr != nullptr) {
      local_index_.Erase(id);
    }
    RunOnProgress([this, region] { UnmapRegion(region); });
    return st;
  }
  local_regions_.emplace(id.value(), region);
  ++local_generation_;
  *out_addr = reinterpret_cast<void*>(region.range.addr);
  return id;
}

Result<RegionId> EngineImpl::RegisterRegion(void* addr, uint64_t length) {
  if (addr == nullptr) {
    return InvalidArgument("RegisterRegion: null address");
  }
  void* out = nullptr;
  ASSIGN_OR_RETURN(RegionId id, AddRegion(addr, length, &out));
  BroadcastRegions();
  return id;
}

Result<std::pair<RegionId, void*>> EngineImpl::AllocateRegion(uint64_t length) {
  void* out = nullptr;
  ASSIGN_OR_RETURN(RegionId id, AddRegion(nullptr, length, &out));
  BroadcastRegions();
  return std::make_pair(id, out);
}

Status EngineImpl::DeregisterRegion(RegionId id) {
  LocalRegion region;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = local_regions_.find(id.value());
    if (it == local_regions_.end()) {
      return NotFound(fmt::format("region {} is not registered", id.value()));
    }
    region = it->second;
    local_regions_.erase(it);
    local_index_.Erase(id);
    ++local_generation_;
  }
  BroadcastRegions();
  CallOnProgress<int>([&] {
    UnmapRegion(region);
    return 0;
  });
  return Status::Ok();
}

std::vector<RegionAdvert> EngineImpl::AdvertsLocked() {
  std::vector<RegionAdvert> out;
  for (const auto& [_, r] : local_regions_) {
    out.push_back(RegionAdvert{r.range.id, r.range.addr, r.range.length, r.rkey});
  }
  return out;
}

Hello EngineImpl::MakeHello(uint64_t* generation) {
  Hello h;
  h.engine_id = engine_id_;
  h.worker_addrs = worker_addr_;
  h.tcp_tx_seg = tcp_tx_seg_;
  h.tcp_rx_seg = tcp_rx_seg_;
  std::lock_guard<std::mutex> lock(mu_);
  h.regions = AdvertsLocked();
  *generation = local_generation_;
  return h;
}

void EngineImpl::BroadcastIfStale(uint64_t sent_generation) {
  // A region registered between a HELLO and the peer's insertion was not broadcast to it.
  bool stale = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stale = local_generation_ != sent_generation;
  }
  if (stale) {
    BroadcastRegions();
  }
}

void EngineImpl::BroadcastRegions() {
  std::vector<std::shared_ptr<PeerState>> peers;
  std::string msg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    msg = EncodeRegions(AdvertsLocked());
    for (const auto& [_, p] : peers_) {
      if (!p->dead) {
        peers.push_back(p);
      }
    }
  }
  for (const auto& p : peers) {
    // A failed send means the peer is going away; the control thread will see the EOF.
    (void)p->channel->Send(msg);
  }
}

Result<PeerId> EngineImpl::AddPeer(std::unique_ptr<ControlChannel> ch, const Hello& hello) {
  auto p = std::make_shared<PeerState>();
  p->engine_id = hello.engine_id;
  p->name = ch->PeerName();
  p->engine = this;
  p->channel = std::move(ch);
  auto table = std::make_shared<RemoteTable>();
  for (const RegionAdvert& a : hello.regions) {
    RETURN_IF_ERROR(table->index.Insert(RegionRange{a.id, a.addr, a.length})
                        .WithContext("peer " + p->name + " advertised"));
    table->adverts.emplace(a.id.value(), a);
  }
  p->table = std::move(table);
  {
    std::lock_guard<std::mutex> lock(mu_);
    p->id = PeerId(next_peer_++);
  }
  // Endpoints are created on the progress thread (the workers are single-threaded).
  Status st = CallOnProgress<Status>([&] { return CreateEndpoints(p, hello); });
  if (!st.ok()) {
    return st.WithContext("connect to " + p->name);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    peers_.emplace(p->id.value(), p);
    ++peers_ever_;
  }
  peers_cv_.notify_all();
  uint64_t one = 1;
  (void)!write(control_wakefd_, &one, sizeof one);
  log::Debug("transfer: peer {} ({}) connected", p->id.value(), p->name);
  return p->id;
}

Result<std::string> EngineImpl::Listen(const std::string& addr_port) {
  ASSIGN_OR_RETURN(std::unique_ptr<ControlListener> l,
                   TcpListen(addr_port, Tos(config_.classes[0])));
  std::string bound = l->Address();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (listener_ != nullptr) {
      return FailedPrecondition("engine is already listening on " + listener_->Address());
    }
    listener_ = std::move(l);
  }
  uint64_t one = 1;
  (void)!write(control_wakefd_, &one, sizeof one);
  return bound;
}

Result<PeerId> EngineImpl::Connect(const std::string& addr_port) {
  ASSIGN_OR_RETURN(std::unique_ptr<ControlChannel> ch,
                   TcpConnect(addr_port, Tos(config_.classes[0]), config_.peer_timeout));
  // Our HELLO (worker addresses, remote keys) goes only to a peer that proved the token.
  RETURN_IF_ERROR(AuthenticateConnector(*ch, config_.token, config_.peer_timeout));
  uint64_t sent_generation = 0;
  RETURN_IF_ERROR(ch->Send(EncodeHello(MakeHello(&sent_generation))));
  ASSIGN_OR_RETURN(std::string msg,
                   ReceiveWithin(*ch, config_.peer_timeout, "hello from " + addr_port));
  RETURN_IF_ERROR(RefusalIn(msg, addr_port));
  ASSIGN_OR_RETURN(Hello hello, DecodeHello(msg));
  // The acceptor checked our sizes against its own before answering; this side checks too, so an
  // acceptor that did not (or lied about its own) cannot make us send what would abort it.
  RETURN_IF_ERROR(
      CheckTcpSegments(tcp_tx_seg_, tcp_rx_seg_, hello.tcp_tx_seg, hello.tcp_rx_seg, addr_port));
  ASSIGN_OR_RETURN(PeerId id, AddPeer(std::move(ch), hello));
  BroadcastIfStale(sent_generation);
  return id;
}

Status EngineImpl::WaitForPeers(size_t n, Nanos timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  // The control plane waits on a real condition variable with a bound, not on the injected
  // clock: this is the caller's own blocking call, not a deadline on the data path.
  if (!peers_cv_.wait_for(lock, std::chrono::nanoseconds(timeout),
                          [&] { return peers_ever_ >= n; })) {
    return Timeout(fmt::format("{} of {} peers connected", peers_ever_, n));
  }
  return Status::Ok();
}

std::vector<PeerId> EngineImpl::Peers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PeerId> out;
  for (const auto& [_, p] : peers_) {
    if (!p->dead) {
      out.push_back(p->id);
    }
  }
  return out;
}

Status EngineImpl::Disconnect(PeerId peer, const std::string& why) {
  const std::string reason = "disconnected: " + why;
  std::vector<std::shared_ptr<PeerState>> victims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(peer.value());
    if (it == peers_.end()) {
      return NotFound(fmt::format("unknown peer {}", peer.value()));
    }
    // Already dead: its kill is under way or done (the peer timeout, a closed channel).
    if (it->second->MarkDeadLocked(reason)) victims.push_back(it->second);
  }
  KillNow(std::move(victims), reason);
  return Status::Ok();
}

int EngineImpl::DisconnectHost(const std::string& host, const std::string& why) {
  const std::string reason = "disconnected: " + why;
  const std::string prefix = host + ":";
  std::vector<std::shared_ptr<PeerState>> victims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [_, p] : peers_) {
      // The control channel's remote address: the peer's listener for a peer we connected to,
      // its ephemeral port for one that connected to us; the host is the same either way.
      if (p->name.rfind(prefix, 0) == 0 && p->MarkDeadLocked(reason)) victims.push_back(p);
    }
  }
  const int n = static_cast<int>(victims.size());
  KillNow(std::move(victims), reason);
  return n;
}

void EngineImpl::KillNow(std::vector<std::shared_ptr<PeerState>> victims,
                         const std::string& reason) {
  if (victims.empty()) return;
  // As a closed control channel is handled, but waited for: only the progress thread may touch
  // UCX (and it is the thread that lands incoming data), so once this returns the endpoints are
  // closed and nothing of these peers is written into our memory any more.
  CallOnProgress<int>([this, victims = std::move(victims), reason] {
    for (const std::shared_ptr<PeerState>& p : victims) KillPeer(*p, reason);
    return 0;
  });
}

Result<std::vector<RegionRange>> EngineImpl::RemoteRegions(PeerId peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(peer.value());
  if (it == peers_.end()) {
    return NotFound(fmt::format("unknown peer {}", peer.value()));
  }
  return it->second->table->index.All();
}

void EngineImpl::SetNoticeHandler(NoticeHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  notice_handler_shared_ = std::move(handler);
  notice_handler_changed_ = true;
  queued_ = true;
}

TransferEngine::Stats EngineImpl::GetStats() const {
  Stats s;
  s.batches_completed = batches_completed_.load();
  s.batches_failed = batches_failed_.load();
  s.ops_posted = ops_posted_.load();
  s.low_bytes_in_flight = low_in_flight_.load();
  s.low_bytes_in_flight_max = low_in_flight_max_.load();
  s.low_batches_deferred = low_deferred_.load();
  s.post_nanos = post_nanos_.load();
  s.descs_posted = descs_posted_.load();
  s.batches_posted_inline = posted_inline_.load();
  s.progress_sleeps = sleeps_.load(std::memory_order_relaxed);
  return s;
}

void EngineImpl::ControlLoop() {
  while (!stop_control_) {
    std::vector<pollfd> fds;
    std::vector<std::shared_ptr<PeerState>> polled;
    ControlListener* listener = nullptr;
    fds.push_back({control_wakefd_, POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Set once by Listen and never reset while this thread runs.
      listener = listener_.get();
      if (listener != nullptr) {
        fds.push_back({listener->PollFd(), POLLIN, 0});
      }
      for (const auto& [_, p] : peers_) {
        if (!p->dead) {
          fds.push_back({p->channel->PollFd(), POLLIN, 0});
          polled.push_back(p);
        }
      }
    }
    int rc = ::poll(fds.data(), fds.size(), -1);
    if (rc < 0) {
      continue;  // EINTR
    }
    if (fds[0].revents != 0) {
      uint64_t v = 0;
      (void)!read(control_wakefd_, &v, sizeof v);
    }
    size_t first_peer = listener != nullptr ? 2 : 1;
    if (listener != nullptr && fds[1].revents != 0) {
      Result<std::unique_ptr<ControlChannel>> ch = listener->Accept();
      if (ch.ok()) AcceptPeer(std::move(ch).value());
    }
    for (size_t i = first_peer; i < fds.size(); ++i) {
      if (fds[i].revents != 0) {
        HandleControlMessage(polled[i - first_peer]);
      }
    }
  }
}

void EngineImpl::AcceptPeer(std::unique_ptr<ControlChannel> c) {
  // Only a peer that proves the cluster's token gets this far; the refusal is logged here (the
  // peer got a REFUSED frame naming the reason).
  Status auth = AuthenticateAcceptor(*c, config_.token, config_.peer_timeout);
  if (!auth.ok()) {
    log::Warn("transfer: peer {} not admitted: {}", c->PeerName(), auth.ToString());
    return;
  }
  // The acceptor answers the connector's HELLO only after its own endpoints exist, so a
  // connector that returns from Connect() can use the peer at once.
  Result<std::string> msg = ReceiveWithin(*c, config_.peer_timeout, "hello from " + c->PeerName());
  Result<Hello> hello = msg.ok() ? DecodeHello(*msg) : Result<Hello>(msg.status());
  if (!hello.ok()) {
    log::Warn("transfer: rejected peer {}: {}", c->PeerName(), hello.status().ToString());
    return;
  }
  // Segments that one side would send larger than the other receives would abort the receiver
  // inside UCX: refuse, and tell the connector why (it reads kPermissionDenied "transfer peer
  // ADDR refused us: REASON" instead of waiting for a HELLO until its timeout).
  if (Status fits = CheckTcpSegments(tcp_tx_seg_, tcp_rx_seg_, hello->tcp_tx_seg, hello->tcp_rx_seg,
                                     c->PeerName());
      !fits.ok()) {
    log::Warn("transfer: peer {} not admitted: {}", c->PeerName(), fits.ToString());
    (void)c->Send(EncodeRefused(fmt::format(
        "your UCX tcp segments ({} bytes sent, {} received) do not fit this engine's ({} sent, {} "
        "received): UCX aborts a process that receives a segment larger than its "
        "UCX_TCP_RX_SEG_SIZE",
        hello->tcp_tx_seg, hello->tcp_rx_seg, tcp_tx_seg_, tcp_rx_seg_)));
    return;
  }
  ControlChannel* raw = c.get();
  uint64_t sent_generation = 0;
  Hello mine = MakeHello(&sent_generation);
  Result<PeerId> id = AddPeer(std::move(c), *hello);
  if (!id.ok()) {
    log::Warn("transfer: peer setup failed: {}", id.status().ToString());
  } else if (!raw->Send(EncodeHello(mine)).ok()) {
    log::Warn("transfer: peer {} went away during the handshake", id->value());
  } else {
    BroadcastIfStale(sent_generation);
  }
}

void EngineImpl::HandleControlMessage(const std::shared_ptr<PeerState>& p) {
  Result<std::string> msg = p->channel->Receive();
  Status st = msg.status();
  if (msg.ok()) {
    Result<std::vector<RegionAdvert>> regions = DecodeRegions(*msg);
    st = regions.status();
    if (regions.ok()) {
      auto table = std::make_shared<RemoteTable>();
      for (const RegionAdvert& a : *regions) {
        st = table->index.Insert(RegionRange{a.id, a.addr, a.length});
        if (!st.ok()) {
          break;
        }
        table->adverts.emplace(a.id.value(), a);
      }
      if (st.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        table->generation = p->table->generation + 1;
        p->table = std::move(table);
        return;
      }
    }
  }
  // EOF, a reset or a malformed message: the peer is gone or broken. Its endpoints are closed on
  // the progress thread and everything outstanding fails.
  std::string reason = "control channel: " + st.ToString();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!p->MarkDeadLocked(reason)) {
      return;
    }
  }
  RunOnProgress([this, p, reason] { KillPeer(*p, reason); });
}

}  // namespace dualpath::transfer
