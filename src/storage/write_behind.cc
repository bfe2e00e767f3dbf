#include "dualpath/storage/write_behind.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/common/log.h"

namespace dualpath::storage {

WriteBehind::WriteBehind(BlockStore& store, const WriteBehindOptions& options)
    : store_(store), options_(options), writers_(std::max(1u, options.writers)) {
  for (size_t i = 0; i < writers_; ++i) workers_.emplace_back([this] { Run(); });
}

WriteBehind::~WriteBehind() { Close(); }

Status WriteBehind::Reserve(const kv::BlockHash& hash, uint64_t bytes,
                            std::unique_lock<std::mutex>& lock) {
  while (true) {
    if (closing_) {
      return Status(Code::kStorageClosed, "write-behind queue closed");
    }
    if (pending_.contains(hash)) {
      return AlreadyExists("queued");
    }
    if (reserved_bytes_ + bytes <= options_.max_queued_bytes) {
      reserved_bytes_ += bytes;
      pending_.insert(hash);
      return Status::Ok();
    }
    if (!options_.block_when_full) {
      ++stats_.rejected;
      return Status(Code::kStorageQueueFull,
                    "write-behind queue full: " + std::to_string(reserved_bytes_) + " of " +
                        std::to_string(options_.max_queued_bytes) + " bytes queued");
    }
    space_cv_.wait(lock);
  }
}

Status WriteBehind::Submit(const kv::BlockHash& hash, const kv::BlockShape& shape,
                           std::span<const std::byte> payload) {
  const uint64_t bytes = kv::BlockFileSize(payload.size());
  if (bytes > options_.max_queued_bytes) {
    return InvalidArgument("block file of " + std::to_string(bytes) +
                           " bytes exceeds the write-behind queue (" +
                           std::to_string(options_.max_queued_bytes) + " bytes)");
  }
  {
    std::unique_lock lock(mu_);
    Status reserved = Reserve(hash, bytes, lock);
    if (reserved.code() == Code::kAlreadyExists) {
      ++stats_.duplicates;
      return Status::Ok();
    }
    RETURN_IF_ERROR(reserved);
  }
  // Encode outside the lock: one copy and one checksum pass over the payload, on the caller's
  // thread, so the worker only does I/O.
  Result<EncodedBlock> block = store_.Encode(hash, shape, payload);
  std::lock_guard lock(mu_);
  if (!block.ok() || closing_) {
    // Closed while we encoded: the worker may already be gone, so the block must not be queued.
    reserved_bytes_ -= bytes;
    pending_.erase(hash);
    space_cv_.notify_all();
    return block.ok() ? Status(Code::kStorageClosed, "write-behind queue closed") : block.status();
  }
  queue_.push_back(std::move(*block));
  ++enqueued_seq_;
  ++stats_.submitted;
  work_cv_.notify_one();
  return Status::Ok();
}

void WriteBehind::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) {
      return;  // closing and drained (Close flushes before it sets closing_)
    }
    // This worker's share of the queue (at least one block, at most max_batch), so the other
    // workers' round trips overlap this batch's.
    const size_t share = std::clamp<size_t>((queue_.size() + writers_ - 1) / writers_, 1,
                                            std::max<size_t>(options_.max_batch, 1));
    std::vector<EncodedBlock> batch;
    while (!queue_.empty() && batch.size() < share) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    const uint64_t begin = dequeued_seq_;
    dequeued_seq_ += batch.size();
    lock.unlock();
    std::vector<Status> results = store_.WriteBatch(batch);
    if (options_.after_write) options_.after_write(batch, results);
    lock.lock();
    for (size_t i = 0; i < batch.size(); ++i) {
      reserved_bytes_ -= batch[i].file_bytes;
      pending_.erase(batch[i].hash);
      if (results[i].ok()) {
        ++stats_.written;
      } else {
        ++stats_.failed;
        last_error_ = results[i];
        log::Debug("storage: write-behind failed: {}", results[i].ToString());
      }
    }
    // Batches end out of order: the watermark moves only over a contiguous run of finished ones.
    finished_ahead_[begin] = begin + batch.size();
    for (auto it = finished_ahead_.begin();
         it != finished_ahead_.end() && it->first == finished_seq_;
         it = finished_ahead_.erase(it)) {
      finished_seq_ = it->second;
    }
    space_cv_.notify_all();
    if (options_.on_space) {
      // Unlocked: the callback takes its owner's lock, and that owner calls Submit under none of
      // its own locks, so no lock order between the two objects exists to get wrong.
      lock.unlock();
      options_.on_space();
      lock.lock();
    }
  }
}

void WriteBehind::Flush() { FlushTo(accepted()); }

uint64_t WriteBehind::accepted() const {
  std::lock_guard lock(mu_);
  return enqueued_seq_;
}

uint64_t WriteBehind::finished() const {
  std::lock_guard lock(mu_);
  return finished_seq_;
}

void WriteBehind::FlushTo(uint64_t seq) {
  std::unique_lock lock(mu_);
  space_cv_.wait(lock, [&] { return finished_seq_ >= seq; });
}

void WriteBehind::Close() {
  Flush();
  {
    std::lock_guard lock(mu_);
    if (closing_) {
      return;
    }
    closing_ = true;
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  for (std::thread& w : workers_) {
    if (w.joinable()) w.join();
  }
}

WriteBehindStats WriteBehind::stats() const {
  std::lock_guard lock(mu_);
  WriteBehindStats s = stats_;
  s.queued_bytes = reserved_bytes_;
  s.queued_blocks = pending_.size();
  return s;
}

Status WriteBehind::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

}  // namespace dualpath::storage
