#include "coord/lease_keeper.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "dualpath/common/log.h"

namespace dualpath::coord {

LeaseKeeper::LeaseKeeper(EtcdClient* client, Lease lease, Nanos granted_at, Callbacks callbacks)
    : client_(client), lease_(lease), granted_at_(granted_at), callbacks_(std::move(callbacks)) {
  thread_ = std::thread([this] { Loop(); });
}

LeaseKeeper::~LeaseKeeper() { Stop(); }

void LeaseKeeper::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // From a callback (the keeper's own thread) there is nothing to join: the loop returns after it.
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool LeaseKeeper::Pause(Nanos delay) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::nanoseconds(std::max<Nanos>(delay, 0)), [this] { return stop_; });
  return !stop_;
}

void LeaseKeeper::Loop() {
  const Clock& clock = SteadyClock::Default();
  const Nanos ttl = std::max<int64_t>(lease_.ttl_seconds, 1) * kNanosPerSecond;
  const Nanos interval = ttl / 3;
  const Nanos retry = std::min<Nanos>(interval, 500 * kNanosPerMilli);
  // When the last answered keep-alive (first: the grant) was sent. etcd restarted the lease's TTL
  // after that, so `confirmed + ttl` is no later than etcd's expiry of the lease.
  Nanos confirmed = granted_at_;
  std::unique_ptr<KeepAliveStream> stream;
  bool failing = false;
  Nanos delay = interval;
  while (Pause(delay)) {
    Status status;
    if (!stream || stream->broken()) {
      auto opened = client_->OpenKeepAlive();
      if (opened.ok()) {
        stream = std::move(opened).value();
      } else {
        status = opened.status();
      }
    }
    const Nanos sent = clock.Now();
    if (status.ok()) {
      // Never wait past the end of the TTL for an answer: by then the lease is to be given up.
      const Nanos until_expiry = confirmed + ttl - sent;
      auto ttl_left = stream->KeepAlive(
          lease_.id,
          std::clamp<Nanos>(until_expiry, 100 * kNanosPerMilli, client_->options().rpc_timeout));
      status = ttl_left.status();
    }
    if (status.ok()) {
      keepalives_.fetch_add(1);
      confirmed = sent;
      delay = interval;
      if (failing) {
        failing = false;
        log::Info("etcd lease {:x}: keep-alive answered again", lease_.id);
        if (callbacks_.on_recovered) callbacks_.on_recovered();
      }
      continue;
    }
    failures_.fetch_add(1);
    if (status.code() == Code::kCoordLeaseLost) {
      if (callbacks_.on_lost) callbacks_.on_lost(status);
      return;
    }
    if (clock.Now() - confirmed >= ttl) {
      if (callbacks_.on_lost) {
        callbacks_.on_lost(Status(
            Code::kCoordLeaseLost,
            fmt::format("etcd lease {:x}: no keep-alive answered for {:.1f} s (TTL {} s): {}",
                        lease_.id, ToSeconds(clock.Now() - confirmed), lease_.ttl_seconds,
                        status.message())));
      }
      return;
    }
    if (!failing) log::Warn("etcd lease {:x}: keep-alive failed: {}", lease_.id, status.ToString());
    failing = true;
    delay = retry;
  }
}

}  // namespace dualpath::coord
