// Watchdog: the deadline of one blocking operation on a gRPC stream. A stream's context deadline
// covers the whole stream, which for a lease keep-alive or a watch lives as long as the process;
// the sync API has no per-Read deadline. So a caller arms the watchdog around a Write + Read and
// the watchdog's thread cancels the context (grpc::ClientContext::TryCancel, which makes the
// blocked Read return false) if the answer is late.
//
// Thread safety: Arm and Disarm are called by the stream's one user thread; the watchdog's own
// thread only calls TryCancel, which gRPC allows from any thread. The context must outlive the
// armed period (Disarm before destroying it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "dualpath/common/clock.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace dualpath::coord {

class Watchdog {
 public:
  Watchdog();
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Cancels `ctx` if Disarm is not called within `timeout`.
  void Arm(grpc::ClientContext* ctx, Nanos timeout);
  // Returns true if the watchdog fired (cancelled the context) since Arm.
  bool Disarm();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  grpc::ClientContext* ctx_ = nullptr;  // armed when not null
  std::chrono::steady_clock::time_point deadline_;
  bool fired_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dualpath::coord
