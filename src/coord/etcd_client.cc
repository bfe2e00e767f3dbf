#include "dualpath/coord/etcd_client.h"

#include <fmt/format.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "coord/watchdog.h"
#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_status.h"
#include "dualpath/common/log.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace dualpath::coord {
namespace pb = etcdserverpb;

namespace {

// Keys in messages: printable ASCII as is, anything else as \xNN (keys are byte strings).
std::string Printable(std::string_view key) {
  std::string out;
  for (unsigned char c : key) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

KeyValue FromPb(const mvccpb::KeyValue& kv) {
  return KeyValue{kv.key(),          kv.value(),   kv.create_revision(),
                  kv.mod_revision(), kv.version(), kv.lease()};
}

// Checks one "host:port" endpoint; the message names it and what is wrong.
Status CheckEndpoint(std::string_view ep) {
  if (ep.empty()) return InvalidArgument("etcd endpoints: empty endpoint in the list");
  if (ep.starts_with("unix:")) {
    if (ep.size() == 5) return InvalidArgument("etcd endpoint 'unix:' has no path");
    return Status::Ok();
  }
  const size_t colon = ep.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return InvalidArgument(fmt::format("etcd endpoint '{}': expected host:port or unix:PATH", ep));
  }
  const std::string_view port = ep.substr(colon + 1);
  int value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value < 1 || value > 65535) {
    return InvalidArgument(
        fmt::format("etcd endpoint '{}': port '{}' is not a number in 1..65535", ep, port));
  }
  return Status::Ok();
}

std::chrono::system_clock::time_point DeadlineIn(Nanos timeout) {
  return std::chrono::system_clock::now() + std::chrono::nanoseconds(timeout);
}

}  // namespace

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

// One etcd member: its channel and the three service stubs we use.
struct Endpoint {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Watch::Stub> watch;
};

struct EtcdClient::Impl {
  EtcdOptions options;
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  // The endpoint that answered last: calls and new streams start there.
  std::atomic<size_t> current{0};

  Endpoint& Current() { return *endpoints[current.load() % endpoints.size()]; }

  // A stream on `ep` broke: the next call or stream tries the following endpoint first.
  void Failed(const Endpoint& ep) {
    for (size_t i = 0; i < endpoints.size(); ++i) {
      if (endpoints[i].get() == &ep) {
        size_t expected = i;
        current.compare_exchange_strong(expected, (i + 1) % endpoints.size());
        return;
      }
    }
  }

  // One unary call: `fn(endpoint, ctx)` with a fresh context and deadline per attempt. Calls wait
  // for the channel to connect within their deadline (wait_for_ready, as etcd's own Go client
  // does): a fail-fast call on a channel in backoff after etcd restarted fails at once without
  // reconnecting, for seconds. A deadline passed on an endpoint that never connected reads as
  // kUnavailable ("not reachable"), one passed on a connected endpoint as kTimeout. Either moves
  // on to the next endpoint, once around the list; any other error is final. So a call that timed
  // out may still have been applied by etcd (the compare-and-set helpers are safe to repeat: a
  // second try sees the first one's result in TxnResult::current).
  template <typename Fn>
  Status Unary(std::string_view what, std::string_view key, Fn fn) {
    const size_t n = endpoints.size();
    const size_t first = current.load();
    Status last;
    for (size_t i = 0; i < n; ++i) {
      const size_t idx = (first + i) % n;
      Endpoint& ep = *endpoints[idx];
      grpc::ClientContext ctx;
      ctx.set_deadline(DeadlineIn(options.rpc_timeout));
      ctx.set_wait_for_ready(true);
      const grpc::Status s = fn(ep, &ctx);
      if (s.ok()) {
        current.store(idx);
        return Status::Ok();
      }
      const std::string call = fmt::format("etcd {}{}{} at {}", what, key.empty() ? "" : " ",
                                           Printable(key), ep.address);
      if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
          ep.channel->GetState(false) != GRPC_CHANNEL_READY) {
        last = Unavailable(
            fmt::format("{}: not reachable within {:.1f} s", call, ToSeconds(options.rpc_timeout)));
        continue;
      }
      last = FromGrpc(s, call);
      // etcd answers a lease it does not know with NOT_FOUND ("requested lease not found").
      if (s.error_code() == grpc::StatusCode::NOT_FOUND &&
          s.error_message().find("lease not found") != std::string::npos) {
        return Status(Code::kCoordLeaseLost, last.message());
      }
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
          s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        return last;
      }
    }
    return last;
  }

  Result<TxnResult> Txn(std::string_view what, std::string_view key, const pb::TxnRequest& req) {
    pb::TxnResponse resp;
    RETURN_IF_ERROR(Unary(what, key, [&](Endpoint& ep, grpc::ClientContext* ctx) {
      return ep.kv->Txn(ctx, req, &resp);
    }));
    TxnResult out;
    out.succeeded = resp.succeeded();
    out.revision = resp.header().revision();
    // The failure branch of our helpers is one range read of the key.
    if (!out.succeeded && resp.responses_size() == 1 && resp.responses(0).has_response_range()) {
      const auto& range = resp.responses(0).response_range();
      if (range.kvs_size() > 0) out.current = FromPb(range.kvs(0));
    }
    return out;
  }
};

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::Connect(const EtcdOptions& options) {
  if (options.rpc_timeout <= 0) {
    return InvalidArgument("etcd rpc_timeout must be > 0");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  std::vector<std::string> addresses;
  std::string_view rest = options.endpoints;
  if (rest.empty()) return InvalidArgument("etcd endpoints: empty (expected host:port,...)");
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view ep = rest.substr(0, comma);
    while (!ep.empty() && ep.front() == ' ') ep.remove_prefix(1);
    while (!ep.empty() && ep.back() == ' ') ep.remove_suffix(1);
    RETURN_IF_ERROR(CheckEndpoint(ep));
    addresses.emplace_back(ep);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (addresses.size() > 1 &&
      std::any_of(addresses.begin(), addresses.end(),
                  [](const std::string& a) { return a.starts_with("unix:"); })) {
    return InvalidArgument(fmt::format("etcd endpoints '{}': a unix: endpoint must be the only one",
                                       options.endpoints));
  }
  for (const std::string& address : addresses) {
    auto ep = std::make_unique<Endpoint>();
    ep->address = address;
    grpc::ChannelArguments args = DefaultChannelArgs();
    // HTTP/2 pings while a call (a watch, a keep-alive stream) is open, so that an etcd that
    // vanished without closing the connection (a host gone, a partition) breaks the stream within
    // ~15 s instead of the kernel's TCP timeout. etcd accepts pings every 5 s or slower
    // (--grpc-keepalive-min-time).
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    ep->channel =
        grpc::CreateCustomChannel(address, GrpcChannelCredentials(options.tls, address), args);
    ep->kv = pb::KV::NewStub(ep->channel);
    ep->lease = pb::Lease::NewStub(ep->channel);
    ep->watch = pb::Watch::NewStub(ep->channel);
    impl->endpoints.push_back(std::move(ep));
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

const EtcdOptions& EtcdClient::options() const { return impl_->options; }

Status EtcdClient::WaitForReady(Nanos timeout) {
  const Nanos start = SteadyClock::Default().Now();
  Status last;
  while (true) {
    // A read of a key nobody writes: answered by any live member.
    auto r = Get("/dualpath/.ready-probe");
    if (r.ok()) return Status::Ok();
    last = r.status();
    if (SteadyClock::Default().Now() - start >= timeout) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a retry pause, not a sync
  }
  return Unavailable(fmt::format("etcd at {} not ready within {:.1f} s: {}",
                                 impl_->options.endpoints, ToSeconds(timeout), last.message()));
}

Result<int64_t> EtcdClient::Put(std::string_view key, std::string_view value, LeaseId lease) {
  pb::PutRequest req;
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  req.set_lease(lease);
  pb::PutResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Put", key, [&](Endpoint& ep, grpc::ClientContext* ctx) {
    return ep.kv->Put(ctx, req, &resp);
  }));
  return resp.header().revision();
}

Result<std::optional<KeyValue>> EtcdClient::Get(std::string_view key) {
  pb::RangeRequest req;
  req.set_key(std::string(key));
  pb::RangeResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Get", key, [&](Endpoint& ep, grpc::ClientContext* ctx) {
    return ep.kv->Range(ctx, req, &resp);
  }));
  if (resp.kvs_size() == 0) return std::optional<KeyValue>();
  return std::optional<KeyValue>(FromPb(resp.kvs(0)));
}

Result<RangeResult> EtcdClient::Range(std::string_view prefix) {
  if (prefix.empty()) return InvalidArgument("etcd Range: empty prefix (would read every key)");
  pb::RangeRequest req;
  req.set_key(std::string(prefix));
  req.set_range_end(PrefixRangeEnd(prefix));
  pb::RangeResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Range", prefix, [&](Endpoint& ep, grpc::ClientContext* ctx) {
    return ep.kv->Range(ctx, req, &resp);
  }));
  RangeResult out;
  out.revision = resp.header().revision();
  out.kvs.reserve(resp.kvs_size());
  for (const auto& kv : resp.kvs()) out.kvs.push_back(FromPb(kv));
  return out;
}

Result<int64_t> EtcdClient::Delete(std::string_view key) {
  pb::DeleteRangeRequest req;
  req.set_key(std::string(key));
  pb::DeleteRangeResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Delete", key, [&](Endpoint& ep, grpc::ClientContext* ctx) {
    return ep.kv->DeleteRange(ctx, req, &resp);
  }));
  return resp.deleted();
}

Result<int64_t> EtcdClient::DeletePrefix(std::string_view prefix) {
  if (prefix.empty()) return InvalidArgument("etcd DeletePrefix: empty prefix (every key)");
  pb::DeleteRangeRequest req;
  req.set_key(std::string(prefix));
  req.set_range_end(PrefixRangeEnd(prefix));
  pb::DeleteRangeResponse resp;
  RETURN_IF_ERROR(impl_->Unary("DeletePrefix", prefix, [&](Endpoint& ep, grpc::ClientContext* ctx) {
    return ep.kv->DeleteRange(ctx, req, &resp);
  }));
  return resp.deleted();
}

namespace {

// The failure branch every helper shares: read the key as it is now.
void AddFailureRead(pb::TxnRequest* req, std::string_view key) {
  req->add_failure()->mutable_request_range()->set_key(std::string(key));
}

void AddPut(pb::TxnRequest* req, std::string_view key, std::string_view value, LeaseId lease) {
  auto* put = req->add_success()->mutable_request_put();
  put->set_key(std::string(key));
  put->set_value(std::string(value));
  put->set_lease(lease);
}

}  // namespace

Result<TxnResult> EtcdClient::PutIfAbsent(std::string_view key, std::string_view value,
                                          LeaseId lease) {
  pb::TxnRequest req;
  auto* cmp = req.add_compare();
  cmp->set_key(std::string(key));
  cmp->set_target(pb::Compare::CREATE);
  cmp->set_result(pb::Compare::EQUAL);
  cmp->set_create_revision(0);  // the key does not exist
  AddPut(&req, key, value, lease);
  AddFailureRead(&req, key);
  return impl_->Txn("Txn(put if absent)", key, req);
}

Result<TxnResult> EtcdClient::PutIfModRevision(std::string_view key, int64_t mod_revision,
                                               std::string_view value, LeaseId lease) {
  if (mod_revision < 0) {
    return InvalidArgument(
        fmt::format("etcd PutIfModRevision {}: mod_revision {} < 0", Printable(key), mod_revision));
  }
  pb::TxnRequest req;
  auto* cmp = req.add_compare();
  cmp->set_key(std::string(key));
  cmp->set_target(pb::Compare::MOD);
  cmp->set_result(pb::Compare::EQUAL);
  cmp->set_mod_revision(mod_revision);  // an absent key compares as mod_revision 0
  AddPut(&req, key, value, lease);
  AddFailureRead(&req, key);
  return impl_->Txn("Txn(put if mod_revision)", key, req);
}

Result<TxnResult> EtcdClient::DeleteIfModRevision(std::string_view key, int64_t mod_revision) {
  if (mod_revision <= 0) {
    return InvalidArgument(fmt::format("etcd DeleteIfModRevision {}: mod_revision {} <= 0",
                                       Printable(key), mod_revision));
  }
  pb::TxnRequest req;
  auto* cmp = req.add_compare();
  cmp->set_key(std::string(key));
  cmp->set_target(pb::Compare::MOD);
  cmp->set_result(pb::Compare::EQUAL);
  cmp->set_mod_revision(mod_revision);
  req.add_success()->mutable_request_delete_range()->set_key(std::string(key));
  AddFailureRead(&req, key);
  return impl_->Txn("Txn(delete if mod_revision)", key, req);
}

Status EtcdClient::Compact(int64_t revision) {
  if (revision <= 0)
    return InvalidArgument(fmt::format("etcd Compact: revision {} <= 0", revision));
  pb::CompactionRequest req;
  req.set_revision(revision);
  pb::CompactionResponse resp;
  return impl_->Unary(
      "Compact", fmt::format("{}", revision),
      [&](Endpoint& ep, grpc::ClientContext* ctx) { return ep.kv->Compact(ctx, req, &resp); });
}

Result<Lease> EtcdClient::LeaseGrant(Nanos ttl) {
  if (ttl < kNanosPerSecond || ttl > 365LL * 24 * 3600 * kNanosPerSecond) {
    return InvalidArgument(
        fmt::format("etcd LeaseGrant: ttl {:.3f} s is outside 1 s .. 1 year", ToSeconds(ttl)));
  }
  pb::LeaseGrantRequest req;
  req.set_ttl((ttl + kNanosPerSecond - 1) / kNanosPerSecond);  // whole seconds, rounded up
  pb::LeaseGrantResponse resp;
  RETURN_IF_ERROR(impl_->Unary("LeaseGrant", "", [&](Endpoint& ep, grpc::ClientContext* ctx) {
    return ep.lease->LeaseGrant(ctx, req, &resp);
  }));
  if (!resp.error().empty()) {
    return Unavailable(fmt::format("etcd LeaseGrant: {}", resp.error()));
  }
  return Lease{resp.id(), resp.ttl()};
}

Status EtcdClient::LeaseRevoke(LeaseId lease) {
  pb::LeaseRevokeRequest req;
  req.set_id(lease);
  pb::LeaseRevokeResponse resp;
  return impl_->Unary("LeaseRevoke", fmt::format("{:x}", lease),
                      [&](Endpoint& ep, grpc::ClientContext* ctx) {
                        return ep.lease->LeaseRevoke(ctx, req, &resp);
                      });
}

Result<int64_t> EtcdClient::LeaseTimeToLive(LeaseId lease) {
  pb::LeaseTimeToLiveRequest req;
  req.set_id(lease);
  pb::LeaseTimeToLiveResponse resp;
  RETURN_IF_ERROR(impl_->Unary("LeaseTimeToLive", fmt::format("{:x}", lease),
                               [&](Endpoint& ep, grpc::ClientContext* ctx) {
                                 return ep.lease->LeaseTimeToLive(ctx, req, &resp);
                               }));
  // etcd answers an unknown lease with TTL -1.
  if (resp.ttl() <= 0) {
    return Status(Code::kCoordLeaseLost, fmt::format("etcd lease {:x} is not known", lease));
  }
  return resp.ttl();
}

// ---- LeaseKeepAlive stream ----

namespace {

class KeepAliveStreamImpl final : public KeepAliveStream {
 public:
  KeepAliveStreamImpl(EtcdClient::Impl* client, Endpoint* ep) : client_(client), ep_(ep) {
    ctx_.set_wait_for_ready(true);  // see Impl::Unary; the watchdog bounds the wait
  }

  ~KeepAliveStreamImpl() override {
    if (stream_ && !finished_) {
      ctx_.TryCancel();
      (void)stream_->Finish();
    }
  }

  Result<int64_t> KeepAlive(LeaseId lease, Nanos timeout) override {
    if (timeout <= 0) timeout = client_->options.rpc_timeout;
    const std::string what = fmt::format("etcd LeaseKeepAlive {:x} at {}", lease, ep_->address);
    if (broken_) return Unavailable(what + ": the stream broke earlier; open a new one");
    pb::LeaseKeepAliveRequest req;
    req.set_id(lease);
    pb::LeaseKeepAliveResponse resp;
    watchdog_.Arm(&ctx_, timeout);
    // The stream starts on the first keep-alive, under the watchdog: gRPC's sync stream
    // constructor sends the call's headers and, with wait_for_ready, blocks until the channel
    // connects, for as long as etcd is away.
    if (!stream_) stream_ = ep_->lease->LeaseKeepAlive(&ctx_);
    const bool ok = stream_->Write(req) && stream_->Read(&resp);
    const bool late = watchdog_.Disarm();
    if (!ok) {
      // The stream is over (Write or Read said so, or the watchdog cancelled it).
      broken_ = true;
      finished_ = true;
      client_->Failed(*ep_);
      const grpc::Status finished = stream_->Finish();
      if (late) {
        return Timeout(fmt::format("{}: no answer within {:.1f} s", what, ToSeconds(timeout)));
      }
      Status s = FromGrpc(finished, what);
      return s.ok() ? Unavailable(what + ": etcd closed the stream") : s;
    }
    // etcd answers an unknown (expired, revoked) lease with TTL 0.
    if (resp.ttl() <= 0) {
      return Status(Code::kCoordLeaseLost, what + ": etcd no longer knows the lease");
    }
    return resp.ttl();
  }

  bool broken() const override { return broken_; }

 private:
  EtcdClient::Impl* client_;
  Endpoint* ep_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::LeaseKeepAliveRequest, pb::LeaseKeepAliveResponse>>
      stream_;
  Watchdog watchdog_;
  bool broken_ = false;
  bool finished_ = false;
};

}  // namespace

Result<std::unique_ptr<KeepAliveStream>> EtcdClient::OpenKeepAlive() {
  return std::unique_ptr<KeepAliveStream>(
      std::make_unique<KeepAliveStreamImpl>(impl_.get(), &impl_->Current()));
}

// ---- Watch ----

namespace {

class WatchImpl final : public Watch {
 public:
  WatchImpl(EtcdClient::Impl* client, std::string key, std::string range_end, WatchOptions options)
      : client_(client),
        key_(std::move(key)),
        range_end_(std::move(range_end)),
        options_(std::move(options)),
        next_revision_(options_.start_revision) {}

  ~WatchImpl() override {
    Cancel();
    if (stream_) (void)Finish(/*cancel=*/true);
  }

  // Opens the stream and waits for etcd to confirm the watch (the caller's thread), then starts
  // the reading thread.
  Status Start() {
    RETURN_IF_ERROR(Open());
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  void Cancel() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      if (ctx_) ctx_->TryCancel();
    }
    cv_.notify_all();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  }

  int64_t reconnects() const override { return reconnects_.load(); }

 private:
  using Stream = grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>;

  std::string What() const {
    return fmt::format("etcd Watch {} at {}", Printable(key_), ep_ ? ep_->address : "?");
  }

  // A new stream on the current endpoint and a create request from next_revision_; returns once
  // etcd confirmed it (within rpc_timeout) or refused it.
  Status Open() {
    {
      std::lock_guard lock(mu_);
      if (stop_) return Status(Code::kCancelled, What() + ": cancelled");
      ctx_ = std::make_unique<grpc::ClientContext>();
      ctx_->set_wait_for_ready(true);  // see Impl::Unary; the watchdog bounds the wait
      ep_ = &client_->Current();
    }
    // Armed before the stream starts: gRPC's sync stream constructor sends the call's headers
    // and, with wait_for_ready, blocks until the channel connects.
    watchdog_.Arm(ctx_.get(), client_->options.rpc_timeout);
    stream_ = ep_->watch->Watch(ctx_.get());
    pb::WatchRequest req;
    auto* create = req.mutable_create_request();
    create->set_key(key_);
    create->set_range_end(range_end_);
    create->set_start_revision(next_revision_);
    pb::WatchResponse resp;
    const bool ok = stream_->Write(req) && stream_->Read(&resp);
    const bool late = watchdog_.Disarm();
    if (!ok) {
      client_->Failed(*ep_);
      // The stream is over (Write or Read said so, or the watchdog cancelled it): Finish
      // reports why.
      const grpc::Status finished = Finish(/*cancel=*/false);
      Status s = late ? Timeout(fmt::format("{}: not confirmed within {:.1f} s", What(),
                                            ToSeconds(client_->options.rpc_timeout)))
                      : FromGrpc(finished, What());
      if (s.ok()) s = Unavailable(What() + ": the stream closed");
      return s;
    }
    if (resp.canceled() || !resp.created()) return Refused(resp);
    // A watch "from now" resumes after the revision etcd confirmed it at, so a reconnect does not
    // skip what changed in between.
    if (next_revision_ == 0) {
      next_revision_ = resp.header().revision() + 1;
    } else if (resp.header().revision() < next_revision_ - 1) {
      // Revisions never go back in one etcd's life: this one lost its data (a new cluster on the
      // same address). Waiting for revision next_revision_ would miss everything until then.
      (void)Finish(/*cancel=*/true);
      return Status(Code::kCoordCompacted,
                    fmt::format("{}: etcd's revision went back from {} to {} (it lost its data); "
                                "the watched history is gone",
                                What(), next_revision_ - 1, resp.header().revision()));
    }
    return Status::Ok();
  }

  // Ends the stream and returns its status; `cancel` first cancels a stream that may still be
  // open (otherwise Finish would wait for etcd to end it).
  grpc::Status Finish(bool cancel) {
    if (cancel) {
      std::lock_guard lock(mu_);
      if (ctx_) ctx_->TryCancel();
    }
    grpc::Status s = stream_->Finish();
    stream_.reset();
    return s;
  }

  Status Refused(const pb::WatchResponse& resp) {
    (void)Finish(/*cancel=*/true);
    if (resp.compact_revision() > 0) {
      return Status(Code::kCoordCompacted,
                    fmt::format("{}: revision {} was compacted (oldest kept: {})", What(),
                                next_revision_, resp.compact_revision()));
    }
    return Unavailable(
        fmt::format("{}: etcd cancelled the watch: {}", What(),
                    resp.cancel_reason().empty() ? "no reason given" : resp.cancel_reason()));
  }

  bool Stopping() {
    std::lock_guard lock(mu_);
    return stop_;
  }

  // Reads events until cancelled; a broken stream is re-created from next_revision_ with a
  // backoff (100 ms doubling to 1 s) while etcd is away.
  void Loop() {
    Nanos backoff = 100 * kNanosPerMilli;
    while (true) {
      pb::WatchResponse resp;
      while (stream_->Read(&resp)) {
        backoff = 100 * kNanosPerMilli;
        if (resp.canceled()) {
          Status s = Refused(resp);
          if (options_.on_error && !Stopping()) options_.on_error(s);
          return;
        }
        if (resp.events_size() == 0) continue;  // progress notification or a create answer
        std::vector<WatchEvent> events;
        events.reserve(resp.events_size());
        for (const auto& e : resp.events()) {
          events.push_back(
              WatchEvent{e.type() == mvccpb::Event::DELETE ? EventType::kDelete : EventType::kPut,
                         FromPb(e.kv())});
        }
        next_revision_ = events.back().kv.mod_revision + 1;
        if (options_.on_events) options_.on_events(events);
      }
      (void)Finish(/*cancel=*/false);  // Read returned false: the stream is over
      // Reconnect until it works, etcd refuses the watch for good, or we are cancelled.
      while (true) {
        {
          std::unique_lock lock(mu_);
          cv_.wait_for(lock, std::chrono::nanoseconds(backoff), [this] { return stop_; });
          if (stop_) return;
        }
        backoff = std::min<Nanos>(backoff * 2, kNanosPerSecond);
        Status s = Open();
        if (s.ok()) {
          reconnects_.fetch_add(1);
          break;
        }
        if (s.code() == Code::kCancelled) return;
        if (s.code() == Code::kCoordCompacted) {
          if (options_.on_error) options_.on_error(s);
          return;
        }
        if (stream_) (void)Finish(/*cancel=*/true);
      }
    }
  }

  EtcdClient::Impl* client_;
  const std::string key_;
  const std::string range_end_;
  const WatchOptions options_;
  int64_t next_revision_;  // the watch thread's (the caller's before Start)
  Endpoint* ep_ = nullptr;
  std::unique_ptr<Stream> stream_;
  Watchdog watchdog_;
  std::atomic<int64_t> reconnects_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<grpc::ClientContext> ctx_;  // replaced under mu_, so Cancel reaches the live one
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<Watch>> EtcdClient::WatchPrefix(std::string_view prefix,
                                                       WatchOptions options) {
  if (prefix.empty()) return InvalidArgument("etcd Watch: empty prefix (would watch every key)");
  if (options.start_revision < 0) {
    return InvalidArgument(fmt::format("etcd Watch {}: start_revision {} < 0", Printable(prefix),
                                       options.start_revision));
  }
  auto w = std::make_unique<WatchImpl>(impl_.get(), std::string(prefix), PrefixRangeEnd(prefix),
                                       std::move(options));
  RETURN_IF_ERROR(w->Start());
  return std::unique_ptr<Watch>(std::move(w));
}

Result<std::unique_ptr<Watch>> EtcdClient::WatchKey(std::string_view key, WatchOptions options) {
  if (key.empty()) return InvalidArgument("etcd Watch: empty key");
  if (options.start_revision < 0) {
    return InvalidArgument(fmt::format("etcd Watch {}: start_revision {} < 0", Printable(key),
                                       options.start_revision));
  }
  auto w =
      std::make_unique<WatchImpl>(impl_.get(), std::string(key), std::string(), std::move(options));
  RETURN_IF_ERROR(w->Start());
  return std::unique_ptr<Watch>(std::move(w));
}

}  // namespace dualpath::coord
