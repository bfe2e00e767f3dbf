#include "coord/watchdog.h"

#include <grpcpp/client_context.h>

namespace dualpath::coord {

Watchdog::Watchdog() : thread_([this] { Loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::Arm(grpc::ClientContext* ctx, Nanos timeout) {
  {
    std::lock_guard lock(mu_);
    ctx_ = ctx;
    deadline_ = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout);
    fired_ = false;
  }
  cv_.notify_all();
}

bool Watchdog::Disarm() {
  std::lock_guard lock(mu_);
  ctx_ = nullptr;
  return fired_;
}

void Watchdog::Loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (ctx_ == nullptr) {
      cv_.wait(lock);
      continue;
    }
    if (std::chrono::steady_clock::now() >= deadline_) {
      // Still armed past the deadline: the answer is late. TryCancel under the lock, so that
      // Disarm (and the context's destruction after it) cannot race with it.
      ctx_->TryCancel();
      fired_ = true;
      ctx_ = nullptr;
      continue;
    }
    cv_.wait_until(lock, deadline_);
  }
}

}  // namespace dualpath::coord
