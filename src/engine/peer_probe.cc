#include "engine/peer_probe.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "dualpath/common/log.h"

namespace dualpath::engine {

// One ping: its context and messages live until gRPC has called back.
struct PeerProber::Call {
  grpc::ClientContext ctx;
  v1::PingRequest request;
  v1::PingReply reply;
  std::shared_ptr<v1::EnginePeer::Stub> stub;  // keeps the channel while the call runs
};

PeerProber::PeerProber(PeerDirectory& peers, Options options)
    : peers_(peers),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : SteadyClock::Default()) {
  thread_ = std::thread([this] { Loop(); });
}

PeerProber::~PeerProber() { Stop(); }

void PeerProber::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::unique_lock<std::mutex> lock(mu_);
  for (auto& [_, t] : targets_) {
    if (t.call != nullptr) t.call->ctx.TryCancel();
  }
  // Every ping's callback runs exactly once (gRPC's promise); after a cancel, promptly.
  cv_.wait(lock, [this] { return outstanding_ == 0; });
}

void PeerProber::SetPeers(
    const google::protobuf::RepeatedPtrField<control::v1::PeerEngine>& peers) {
  std::lock_guard<std::mutex> lock(mu_);
  const Nanos now = clock_.Now();
  std::map<uint32_t, Target> next;
  for (const control::v1::PeerEngine& p : peers) {
    auto it = targets_.find(p.engine_id());
    if (it != targets_.end() && it->second.peer.peer_addr() == p.peer_addr() &&
        it->second.peer.name() == p.name()) {
      it->second.peer = p;  // the transfer address may have been filled in
      next.emplace(p.engine_id(), std::move(it->second));
      continue;
    }
    Target t;
    t.peer = p;
    t.generation = next_generation_++;
    t.since = now;
    next.emplace(p.engine_id(), std::move(t));
  }
  // A ping in flight to a forgotten (or re-addressed) peer still answers: OnAnswer ignores it by
  // its generation; only its count matters.
  targets_ = std::move(next);
  cv_.notify_all();
}

Nanos PeerProber::SilentLocked(const Target& t, Nanos now) const {
  return now - std::max(t.since, t.last_ok);
}

void PeerProber::AddReach(control::v1::EngineReport* report) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Nanos now = clock_.Now();
  for (const auto& [id, t] : targets_) {
    control::v1::PeerReach* r = report->add_reach();
    r->set_engine_id(id);
    r->set_ok_age_ms(t.last_ok < 0 ? -1 : (now - t.last_ok) / kNanosPerMilli);
    r->set_probing_ms((now - t.since) / kNanosPerMilli);
  }
}

void PeerProber::SetCutOff(const google::protobuf::RepeatedField<uint32_t>& cut_off,
                           uint32_t self_id) {
  std::lock_guard<std::mutex> lock(mu_);
  self_cut_off_ = std::find(cut_off.begin(), cut_off.end(), self_id) != cut_off.end();
  bool changed = false;
  for (auto& [id, t] : targets_) {
    const bool c = std::find(cut_off.begin(), cut_off.end(), id) != cut_off.end();
    changed |= c != t.cut_off;
    t.cut_off = c;
  }
  if (changed || self_cut_off_) {
    wake_ = true;  // the loop acts on a new verdict at once
    cv_.notify_all();
  }
}

bool PeerProber::Gone(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [_, t] : targets_) {
    if (t.peer.name() == name) return t.gone;
  }
  return false;
}

bool PeerProber::HostGone(const std::string& host) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [_, t] : targets_) {
    if (t.gone && t.peer.peer_addr().rfind(host + ":", 0) == 0) return true;
  }
  return false;
}

bool PeerProber::Released(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [_, t] : targets_) {
    if (t.peer.name() == name) return t.released;
  }
  return false;
}

Status PeerProber::CheckReachable(const std::string& name, std::string_view role) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [_, t] : targets_) {
    if (t.peer.name() != name || !t.gone) continue;
    return Status(Code::kEnginePeerFailed,
                  fmt::format("{} engine {} unreachable over the compute network (no probe "
                              "answered for {:.3f} s; {} cut off by the scheduler)",
                              role, name, ToSeconds(SilentLocked(t, clock_.Now())),
                              self_cut_off_ ? "this engine" : "it"));
  }
  return Status::Ok();
}

void PeerProber::Send(uint32_t engine_id, uint64_t generation, const control::v1::PeerEngine& peer,
                      const std::shared_ptr<Call>& call) {
  call->stub = peers_.Stub(peer.peer_addr());
  call->request.set_from(options_.self);
  call->ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::nanoseconds(2 * options_.interval));
  call->stub->async()->Ping(&call->ctx, &call->request, &call->reply,
                            [this, call, engine_id, generation](grpc::Status s) {
                              OnAnswer(engine_id, generation, s.ok());
                            });
}

void PeerProber::OnAnswer(uint32_t engine_id, uint64_t generation, bool ok) {
  std::string reached;  // a peer that became reachable: its name, for on_state
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = targets_.find(engine_id);
    if (it != targets_.end() && it->second.generation == generation) {
      Target& t = it->second;
      t.in_flight = false;
      t.call.reset();
      if (ok) {
        if (t.unreachable || t.last_ok < 0) reached = t.peer.name();
        t.last_ok = clock_.Now();
        if (t.unreachable) {
          t.unreachable = false;
          t.gone = false;
          t.released = false;
          log::Warn("engine {}: {} ({}) reachable again over the compute network", options_.self,
                    t.peer.name(), t.peer.peer_addr());
        }
      } else if (t.unreachable) {
        t.drop_stub = true;
      }
    }
  }
  if (!reached.empty() && options_.on_state) options_.on_state(reached, "reachable");
  // Last, and notified under the lock: once the count reaches 0 Stop() may return and the prober
  // be destroyed, so nothing of it is touched after the lock is released.
  std::lock_guard<std::mutex> lock(mu_);
  --outstanding_;
  cv_.notify_all();
}

void PeerProber::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const Nanos now = clock_.Now();
    struct Ping {
      uint32_t id;
      uint64_t generation;
      control::v1::PeerEngine peer;
      std::shared_ptr<Call> call;
    };
    std::vector<Ping> pings;
    std::vector<std::pair<uint64_t, control::v1::PeerEngine>> let_go;  // generation, peer
    std::vector<control::v1::PeerEngine> gone, fresh_channel;
    std::vector<std::string> lost;  // became unreachable here (for on_state)
    for (auto& [id, t] : targets_) {
      if (!t.unreachable && SilentLocked(t, now) > options_.window) {
        t.unreachable = true;
        lost.push_back(t.peer.name());
        log::Warn(
            "engine {}: {} ({}) unreachable over the compute network: no probe answered "
            "for {:.3f} s",
            options_.self, t.peer.name(), t.peer.peer_addr(), ToSeconds(SilentLocked(t, now)));
      }
      // Let go only with the scheduler's verdict: it has re-submitted the requests between us.
      if (t.unreachable && !t.gone && (t.cut_off || self_cut_off_)) {
        t.gone = true;
        let_go.emplace_back(t.generation, t.peer);
        log::Warn(
            "engine {}: letting go of {}: unreachable and {} cut off by the scheduler; "
            "cancelling its calls and disconnecting its transfer peers",
            options_.self, t.peer.name(), self_cut_off_ ? "this engine" : "it");
      }
      if (t.gone) gone.push_back(t.peer);
      if (t.drop_stub) {
        t.drop_stub = false;
        fresh_channel.push_back(t.peer);
      }
      if (!t.in_flight && now >= t.next) {
        t.in_flight = true;
        t.next = now + options_.interval;
        t.call = std::make_shared<Call>();
        ++outstanding_;
        pings.push_back({id, t.generation, t.peer, t.call});
      }
    }
    lock.unlock();
    // Outside the lock: Disconnect waits for the transfer engine, and a stub may answer a ping at
    // once, on this thread.
    for (const std::string& name : lost) {
      if (options_.on_state) options_.on_state(name, "unreachable");
    }
    for (const auto& [generation, p] : let_go) {
      const std::string why = fmt::format("{} unreachable over the compute network", p.name());
      peers_.Disconnect(p.transfer_addr(), why);  // returns once nothing of it can land here
      {
        std::lock_guard<std::mutex> relock(mu_);
        auto it = targets_.find(p.engine_id());
        if (it != targets_.end() && it->second.generation == generation && it->second.gone) {
          it->second.released = true;
        }
      }
      if (options_.on_state) options_.on_state(p.name(), "released");
    }
    for (const control::v1::PeerEngine& p : gone) {
      // Calls started since the last look too (a caller that checked just before the change).
      peers_.CancelCalls(p.peer_addr(), p.name() + " unreachable over the compute network");
    }
    for (const control::v1::PeerEngine& p : fresh_channel) peers_.DropStub(p.peer_addr());
    for (Ping& p : pings) Send(p.id, p.generation, p.peer, p.call);
    lock.lock();
    // A timed wait on the stop flag: the probe schedule is the interval (production code, not
    // test synchronization); a new verdict (SetCutOff) wakes it early.
    cv_.wait_for(lock, std::chrono::nanoseconds(options_.interval / 2),
                 [this] { return stop_ || wake_; });
    wake_ = false;
  }
}

}  // namespace dualpath::engine
