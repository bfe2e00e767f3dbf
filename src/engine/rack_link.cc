#include "engine/rack_link.h"

#include <fmt/format.h>

#include <cstring>

#include "dualpath/common/log.h"
#include "dualpath/kv/copy_verify.h"

namespace dualpath::engine {

namespace {

constexpr char kKeyTag[8] = {'r', 'a', 'c', 'k', 'k', 'v', '0', '1'};

template <typename T>
void Put(std::array<uint8_t, 32>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(v));
}

// The checksum seed of an object: its key's fields, so an object read under another name (a
// stale attempt's) fails the check even if its bytes are intact.
uint64_t SeedOf(const RackObjectId& id) {
  return id.request_id * 0x9E3779B97F4A7C15ull ^ (uint64_t{id.attempt} << 40) ^
         (uint64_t{id.layer} << 20) ^ (uint64_t{id.pe_xfer_id} << 8) ^ id.de_xfer_id ^
         (uint64_t{static_cast<uint8_t>(id.direction)} << 60);
}

// The one rule for an object's checksum over its ranges, on both sides: each range's XXH3
// (kv::CopyAndChecksum, seeded with the object and the range's index) folded in order.
class Sum {
 public:
  explicit Sum(uint64_t seed) : seed_(seed), sum_(seed) {}
  void Add(const std::byte* src, std::byte* dst, uint64_t n) {
    const uint64_t h = kv::CopyAndChecksum(src, dst, n, seed_ + index_++);
    sum_ = (sum_ ^ h) * 0x100000001B3ull;
  }
  uint64_t value() const { return sum_; }

 private:
  uint64_t seed_;
  uint64_t sum_;
  uint64_t index_ = 0;
};

uint64_t TotalBytes(std::span<const RackRange> ranges) {
  uint64_t n = 0;
  for (const RackRange& r : ranges) n += r.bytes;
  return n;
}

}  // namespace

kv::BlockHash RackObjectId::Key() const {
  kv::BlockHash h;
  std::memcpy(h.bytes.data(), kKeyTag, sizeof(kKeyTag));
  Put(h.bytes, 8, request_id);
  Put(h.bytes, 16, attempt);
  Put(h.bytes, 20, pe_xfer_id);  // xfer ids have 24 bits: 3 bytes each would do; 4 keep it plain
  Put(h.bytes, 24, de_xfer_id);
  Put(h.bytes, 28, static_cast<uint16_t>(layer));
  Put(h.bytes, 30, static_cast<uint8_t>(direction));
  return h;
}

RackLink::RackLink(std::string path, std::unique_ptr<pool::Pool> pool)
    : path_(std::move(path)), pool_(std::move(pool)) {}

RackLink::~RackLink() {
  // Pins of objects never released (the engine stopped mid-request) go with the attachment: the
  // pool drops a closed process's pins, and the objects become evictable.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, pin] : pins_) {
    (void)pool_->Unpin(pin);
  }
}

Result<std::unique_ptr<RackLink>> RackLink::Open(const std::string& path, uint32_t node,
                                                 Nanos lock_timeout) {
  pool::OpenOptions o;
  o.node = node;
  o.lock_timeout = lock_timeout;
  Result<std::unique_ptr<pool::Pool>> p = pool::Pool::Open(path, o);
  if (!p.ok()) return p.status().WithContext("rack pool " + path);
  return std::unique_ptr<RackLink>(new RackLink(path, std::move(p).value()));
}

pool::MemoryModel RackLink::model() const { return pool_->geometry().model; }

Status RackLink::Write(const RackObjectId& id, std::span<const RackRange> src) {
  const kv::BlockHash key = id.Key();
  const uint64_t total = TotalBytes(src);
  Result<pool::WriteHandle> w = pool_->Reserve(key, total);
  if (!w.ok() && w.status().code() == Code::kAlreadyExists) {
    // Only a dead attempt can have left an object under a live request's name (xfer ids are
    // unique among live requests): drop it and write ours.
    (void)pool_->Delete(key);
    w = pool_->Reserve(key, total);
  }
  if (!w.ok()) {
    ++errors_;
    return w.status().WithContext(
        fmt::format("rack pool {}: reserve {} bytes for request {} layer {}", path_, total,
                    id.request_id, id.layer));
  }
  Sum sum(SeedOf(id));
  uint64_t at = 0;
  for (const RackRange& r : src) {
    sum.Add(r.data, w->data + at, r.bytes);  // streaming stores: never dirty in this CPU's cache
    at += r.bytes;
  }
  // The READY flip is the visibility boundary; the payload is written back before it.
  if (Status s = pool_->Publish(*w, sum.value()); !s.ok()) {
    ++errors_;
    (void)pool_->Abort(*w);
    return s.WithContext(
        fmt::format("rack pool {}: publish request {} layer {}", path_, id.request_id, id.layer));
  }
  // Pinned until the consumer has it, so eviction cannot take it in between. (Between Publish and
  // Pin it is an ordinary READY entry: evicted there, the Pin fails and so does the request.)
  Result<pool::PinnedBlock> pin = pool_->Pin(key);
  if (!pin.ok()) {
    ++errors_;
    (void)pool_->Delete(key);
    return pin.status().WithContext(
        fmt::format("rack pool {}: pin request {} layer {}", path_, id.request_id, id.layer));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = pins_.emplace(key, *pin);
    if (!inserted) {
      // Cannot happen (the key is ours alone); keep one pin record per key if it does.
      (void)pool_->Unpin(*pin);
    }
  }
  written_bytes_ += total;
  ++objects_written_;
  return Status::Ok();
}

Status RackLink::Read(const RackObjectId& id, std::span<const RackRange> dst) {
  const kv::BlockHash key = id.Key();
  Result<pool::PinnedBlock> pin = pool_->Pin(key);
  if (!pin.ok()) {
    ++errors_;
    return pin.status().WithContext(
        fmt::format("rack pool {}: request {} layer {}", path_, id.request_id, id.layer));
  }
  const uint64_t total = TotalBytes(dst);
  Status result = Status::Ok();
  if (pin->size != total) {
    result =
        Status(Code::kCorruption,
               fmt::format("rack pool {}: request {} layer {} object has {} bytes, expected {}",
                           path_, id.request_id, id.layer, pin->size, total));
  } else {
    Sum sum(SeedOf(id));
    uint64_t at = 0;
    for (const RackRange& r : dst) {
      sum.Add(pin->data + at, r.data, r.bytes);
      at += r.bytes;
    }
    if (sum.value() != pin->user_tag) {
      result = Status(Code::kCorruption,
                      fmt::format("rack pool {}: request {} layer {} checksum {:016x}, published "
                                  "{:016x}",
                                  path_, id.request_id, id.layer, sum.value(), pin->user_tag));
    }
  }
  if (Status s = pool_->Unpin(*pin); !s.ok() && result.ok()) result = s;
  if (!result.ok()) {
    ++errors_;
    return result;
  }
  read_bytes_ += total;
  ++objects_read_;
  return Status::Ok();
}

void RackLink::Release(const RackObjectId& id) {
  const kv::BlockHash key = id.Key();
  pool::PinnedBlock pin;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pins_.find(key);
    if (it == pins_.end()) return;
    pin = it->second;
    pins_.erase(it);
  }
  if (Status s = pool_->Unpin(pin); !s.ok()) {
    log::Warn("rack pool {}: unpin request {} layer {}: {}", path_, id.request_id, id.layer,
              s.ToString());
  }
  if (Status s = pool_->Delete(key); !s.ok() && s.code() != Code::kNotFound) {
    // kPoolPinned: the consumer is still reading it (a failed request); LRU takes it later.
    log::Debug("rack pool {}: delete request {} layer {}: {}", path_, id.request_id, id.layer,
               s.ToString());
  }
}

Status RackLink::PublishBlock(const kv::BlockHash& hash, std::span<const std::byte> file) {
  // Pool::Put is Reserve -> copy -> Publish: invisible until the whole file is in (and, in the
  // non-coherent model, written back), so a reader never finds half a block.
  Status s = pool_->Put(hash, file);
  if (s.ok()) {
    ++prefix_published_;
    return s;
  }
  // Another engine published (or is publishing) the same block: the same key is the same bytes.
  if (s.code() == Code::kAlreadyExists) return Status::Ok();
  ++prefix_publish_errors_;
  return s.WithContext(fmt::format("rack pool {}: publish block {}", path_, hash.Hex()));
}

Status RackLink::ReadBlock(const kv::BlockHash& hash,
                           const std::function<Status(std::span<const std::byte>)>& use) {
  // The lock-free index probe first: a miss (the common case on a cold cache) then costs no
  // metadata lock (in the non-coherent model a round trip through the lock manager).
  if (!pool_->Contains(hash)) {
    ++prefix_misses_;
    return Status(Code::kNotFound, "not in the rack pool");
  }
  // Pinned while it is read: the LRU cannot evict it and no one can delete it under us.
  Result<pool::PinnedBlock> pin = pool_->Pin(hash);
  if (!pin.ok()) {
    ++prefix_misses_;  // evicted between the probe and the pin (or no pin record free)
    return pin.status();
  }
  Status verified = use(std::span<const std::byte>(pin->data, pin->size));
  const uint64_t size = pin->size;
  if (Status s = pool_->Unpin(*pin); !s.ok() && verified.ok()) verified = s;
  if (!verified.ok()) {
    ++prefix_corrupt_;
    // A damaged copy would be a miss for every later reader too: drop it (refused while another
    // reader pins it; then the LRU takes it) so a good copy can be published in its place.
    (void)pool_->Delete(hash);
    return verified.WithContext(fmt::format("rack pool {}: block {}", path_, hash.Hex()));
  }
  ++prefix_hits_;
  prefix_bytes_ += size;
  return Status::Ok();
}

RackLinkStats RackLink::Stats() const {
  return RackLinkStats{written_bytes_.load(),
                       read_bytes_.load(),
                       objects_written_.load(),
                       objects_read_.load(),
                       errors_.load(),
                       prefix_hits_.load(),
                       prefix_misses_.load(),
                       prefix_corrupt_.load(),
                       prefix_bytes_.load(),
                       prefix_published_.load(),
                       prefix_publish_errors_.load()};
}

}  // namespace dualpath::engine
