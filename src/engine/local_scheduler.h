// LocalScheduler: an in-process stand-in for the scheduler service, for the engine's unit tests
// and benchmarks. It registers engines (handing out a fixed model spec and block size), keeps a
// queue of Assignments per engine that the caller fills (the caller picks engines, read side and
// hit tokens: no sched logic here), long-polls them out through Fetch, and collects results. Like
// the service, it hashes each prompt (sha256_cbor, seed "0") into the assignment.
// Production engines talk to `dualpath control serve` through ConnectScheduler instead.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/engine/scheduler_link.h"
#include "dualpath/kv/hasher.h"

namespace dualpath::engine {

class LocalScheduler {
 public:
  // block_tokens in [1, kv::kMaxBlockSize] (checked).
  LocalScheduler(std::string model_spec, uint32_t block_tokens);

  // A SchedulerLink for one engine (the LocalScheduler must outlive it).
  std::unique_ptr<SchedulerLink> Link();

  // Queues an assignment for prefill engine `pe` with decode engine `de`.
  void Assign(uint32_t pe, uint32_t de, const control::v1::RequestSpec& spec,
              control::v1::ReadSide side, int64_t hit, int64_t prefill_read);
  // The assignment Assign queues (prompt hashed), and queueing one as it is (tests of malformed
  // assignments).
  control::v1::Assignment MakeAssignment(uint32_t pe, uint32_t de,
                                         const control::v1::RequestSpec& spec,
                                         control::v1::ReadSide side, int64_t hit,
                                         int64_t prefill_read);
  void AssignRaw(uint32_t pe, control::v1::Assignment a);
  // The result of request `id`, waiting up to `timeout`; nullopt if none arrived.
  std::optional<control::v1::RequestResult> Wait(uint64_t id, std::chrono::milliseconds timeout);
  // Every later Fetch says shutdown.
  void Shutdown();
  // Acts as a restarted service: forgets every registration and queued assignment (a Fetch of an
  // unknown group is kNotFound, as the service answers it) and takes a new epoch.
  void Restart();
  // Waits up to `timeout` until `name` is registered (again, after Restart); its engine id.
  std::optional<uint32_t> WaitRegistered(const std::string& name,
                                         std::chrono::milliseconds timeout);

  Result<control::v1::RegisterEngineReply> Register(const control::v1::RegisterEngineRequest& req);
  Result<control::v1::FetchReply> Fetch(const control::v1::FetchRequest& req);
  Status ReportResult(const control::v1::RequestResult& r);

 private:
  const std::string model_spec_;
  const uint32_t block_tokens_;
  const kv::BlockHasher hasher_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t next_id_ = 1;                                             // guarded by mu_
  std::map<uint32_t, control::v1::EngineInfo> infos_;                // guarded by mu_
  std::map<uint32_t, std::vector<control::v1::Assignment>> queues_;  // guarded by mu_
  std::map<uint64_t, control::v1::RequestResult> results_;           // guarded by mu_
  bool shutdown_ = false;                                            // guarded by mu_
  uint64_t epoch_ = 1;                                               // guarded by mu_
};

}  // namespace dualpath::engine
