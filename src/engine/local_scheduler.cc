#include "engine/local_scheduler.h"

#include <vector>

#include "dualpath/common/check.h"

namespace dualpath::engine {
namespace {

namespace v1c = control::v1;

constexpr char kHashAlgo[] = "sha256_cbor";
constexpr char kHashSeed[] = "0";

kv::BlockHasher MakeHasher(uint32_t block_tokens) {
  Result<kv::BlockHasher> h =
      kv::BlockHasher::Create(kv::HashAlgo::kSha256Cbor, kHashSeed, block_tokens);
  DUALPATH_CHECK(h.ok(), h.status().ToString());
  return std::move(h).value();
}

class LocalLink final : public SchedulerLink {
 public:
  explicit LocalLink(LocalScheduler& s) : s_(s) {}
  Result<v1c::RegisterEngineReply> Register(const v1c::RegisterEngineRequest& r) override {
    return s_.Register(r);
  }
  Result<v1c::FetchReply> Fetch(const v1c::FetchRequest& r) override { return s_.Fetch(r); }
  Status ReportResult(const v1c::RequestResult& r) override { return s_.ReportResult(r); }

 private:
  LocalScheduler& s_;
};

}  // namespace

LocalScheduler::LocalScheduler(std::string model_spec, uint32_t block_tokens)
    : model_spec_(std::move(model_spec)),
      block_tokens_(block_tokens),
      hasher_(MakeHasher(block_tokens)) {}

std::unique_ptr<SchedulerLink> LocalScheduler::Link() { return std::make_unique<LocalLink>(*this); }

Result<v1c::RegisterEngineReply> LocalScheduler::Register(const v1c::RegisterEngineRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t id = next_id_++;
  infos_[id] = req.engine();
  v1c::RegisterEngineReply r;
  r.set_engine_id(id);
  r.set_group_id(id);
  r.set_system("dualpath");
  r.set_model_spec(model_spec_);
  r.set_block_tokens(block_tokens_);
  r.set_heartbeat_s(1);
  r.set_hash_algo(kHashAlgo);
  r.set_hash_seed(kHashSeed);
  r.set_service_epoch(epoch_);
  cv_.notify_all();  // WaitRegistered
  return r;
}

Result<v1c::FetchReply> LocalScheduler::Fetch(const v1c::FetchRequest& req) {
  std::unique_lock<std::mutex> lock(mu_);
  if (infos_.count(req.group_id()) == 0) {
    return NotFound("fetch: unknown group_id " + std::to_string(req.group_id()));
  }
  cv_.wait_for(lock, std::chrono::milliseconds(req.wait_ms()),
               [&] { return shutdown_ || !queues_[req.group_id()].empty(); });
  v1c::FetchReply reply;
  reply.set_shutdown(shutdown_);
  for (auto& a : queues_[req.group_id()]) {
    *reply.add_prefill() = a;
  }
  queues_[req.group_id()].clear();
  return reply;
}

Status LocalScheduler::ReportResult(const v1c::RequestResult& r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    results_[r.request_id()] = r;
  }
  cv_.notify_all();
  return Status::Ok();
}

v1c::Assignment LocalScheduler::MakeAssignment(uint32_t pe, uint32_t de,
                                               const v1c::RequestSpec& spec, v1c::ReadSide side,
                                               int64_t hit, int64_t prefill_read) {
  v1c::Assignment a;
  *a.mutable_request() = spec;
  a.set_prefill_engine(pe);
  a.set_decode_engine(de);
  {
    std::lock_guard<std::mutex> lock(mu_);
    *a.mutable_prefill() = infos_.at(pe);
    *a.mutable_decode() = infos_.at(de);
  }
  a.set_side(side);
  a.set_hit_tokens(hit);
  a.set_prefill_read_tokens(prefill_read);
  a.set_decode_read_tokens(hit - prefill_read);
  std::vector<kv::BlockHash> hashes;
  hasher_.HashBlocks({spec.prompt().data(), static_cast<size_t>(spec.prompt_size())}, &hashes);
  a.set_prompt_block_hashes(reinterpret_cast<const char*>(hashes.data()),
                            hashes.size() * sizeof(kv::BlockHash));
  return a;
}

void LocalScheduler::Assign(uint32_t pe, uint32_t de, const v1c::RequestSpec& spec,
                            v1c::ReadSide side, int64_t hit, int64_t prefill_read) {
  AssignRaw(pe, MakeAssignment(pe, de, spec, side, hit, prefill_read));
}

void LocalScheduler::AssignRaw(uint32_t pe, v1c::Assignment a) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[pe].push_back(std::move(a));
  }
  cv_.notify_all();
}

std::optional<v1c::RequestResult> LocalScheduler::Wait(uint64_t id,
                                                       std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return results_.count(id) != 0; })) {
    return std::nullopt;
  }
  return results_[id];
}

void LocalScheduler::Restart() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    infos_.clear();
    queues_.clear();
    ++epoch_;
  }
  cv_.notify_all();
}

std::optional<uint32_t> LocalScheduler::WaitRegistered(const std::string& name,
                                                       std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<uint32_t> id;
  cv_.wait_for(lock, timeout, [&] {
    for (const auto& [i, info] : infos_) {
      if (info.name() == name) id = i;
    }
    return id.has_value();
  });
  return id;
}

void LocalScheduler::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
}

}  // namespace dualpath::engine
