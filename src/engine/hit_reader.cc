#include "engine/hit_reader.h"

#include <cstring>

#include "dualpath/common/check.h"
#include "dualpath/kv/block_file.h"

namespace dualpath::engine {

HitReader::HitReader(storage::BlockStore& store, const kv::BlockShape& shape, unsigned depth,
                     KvStoreLink* kv_store, RackLink* rack)
    : store_(store), kv_store_(kv_store), rack_(rack), shape_(shape) {
  size_t n = 3 * static_cast<size_t>(depth == 0 ? 1 : depth);
  uint64_t file_bytes = storage::BlockStore::FileBytes(shape);
  buffers_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    buffers_.emplace_back(file_bytes);
    free_.push_back(i);
  }
}

HitReadResult HitReader::Read(std::span<const kv::BlockHash> hashes, uint64_t first_block,
                              std::byte* area, uint64_t layer_stride) {
  const size_t n = hashes.size();
  std::vector<Status> status(n);
  std::vector<size_t> slot(n, SIZE_MAX);
  std::vector<uint64_t> bytes(n, 0);
  // The rack prefix cache first; the tier reads only what it lacked (`todo`, in block order).
  std::vector<bool> from_rack(n, false);
  std::vector<size_t> todo;
  todo.reserve(n);
  if (rack_ != nullptr) {
    ReadFromRack(hashes, first_block, area, layer_stride, status);
    for (size_t i = 0; i < n; ++i) from_rack[i] = status[i].ok();
  }
  for (size_t i = 0; i < n; ++i) {
    if (!from_rack[i]) todo.push_back(i);
  }
  auto source = [&](size_t k) {
    const size_t i = todo[k];
    size_t s;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // BlockStore promises at most 3 x depth requests between Source and Sink, so a buffer is
      // free; the wait only covers a Sink that is still returning its buffer on another thread.
      free_cv_.wait(lock, [&] { return !free_.empty(); });
      s = free_.back();
      free_.pop_back();
    }
    slot[i] = s;
    return storage::ReadRequest{hashes[i], buffers_[s].span(), shape_.tokens};
  };
  auto sink = [&](size_t k, storage::ReadResult&& r) {
    // Sinks run on the submitting thread or the store's verify thread, for distinct i: each
    // writes its own block's slice of the area and its own entries of the vectors.
    const size_t i = todo[k];
    status[i] = std::move(r.status);
    if (status[i].ok()) {
      if (r.block.payload.size() == shape_.FullBytes()) {
        Scatter(r.block.payload, first_block + i, area, layer_stride);
        bytes[i] = storage::BlockStore::FileBytes(shape_);
        if (rack_ != nullptr) {
          // Read-through: the verified file goes into the rack for the next reader (a block
          // another engine published meanwhile is fine; a full pool only costs a later miss).
          (void)rack_->PublishBlock(hashes[i], buffers_[slot[i]].span().first(bytes[i]));
        }
      } else {
        // A verified file of another shape (block size changed between runs): not ours.
        status[i] = Status(Code::kStorageMiss, "block payload has an unexpected size");
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(slot[i]);
    }
    free_cv_.notify_one();
  };
  if (!todo.empty()) store_.ReadStream(todo.size(), source, sink);

  std::vector<StoreHit> from_store(n, StoreHit::kMiss);
  if (kv_store_ != nullptr) {
    size_t first_failed = 0;
    while (first_failed < n && status[first_failed].ok()) ++first_failed;
    if (first_failed < n) {
      ReadFromStore(hashes, first_block, area, layer_stride, first_failed, status, from_store);
    }
  }

  HitReadResult out;
  for (size_t i = 0; i < n; ++i) {
    if (!status[i].ok()) {
      out.first_error = status[i];
      break;
    }
    ++out.loaded_blocks;
    out.bytes_read += bytes[i];
    out.rack_blocks += from_rack[i] ? 1 : 0;
    out.store_local += from_store[i] == StoreHit::kLocal ? 1 : 0;
    out.store_remote += from_store[i] == StoreHit::kRemote ? 1 : 0;
  }
  return out;
}

void HitReader::Scatter(std::span<const std::byte> payload, uint64_t block, std::byte* area,
                        uint64_t layer_stride) const {
  const uint64_t layer_bytes = shape_.LayerBytes();
  const uint64_t token0 = block * shape_.tokens;
  for (uint32_t l = 0; l < shape_.num_layers; ++l) {
    std::memcpy(area + l * layer_stride + token0 * shape_.bytes_per_token_per_layer,
                payload.data() + l * layer_bytes, layer_bytes);
  }
}

void HitReader::ReadFromRack(std::span<const kv::BlockHash> hashes, uint64_t first_block,
                             std::byte* area, uint64_t layer_stride, std::vector<Status>& status) {
  const uint64_t fingerprint = store_.options().model_fingerprint;
  for (size_t i = 0; i < hashes.size(); ++i) {
    // Verified in place while pinned (zero-copy: the region's bytes go straight to the area).
    status[i] = rack_->ReadBlock(hashes[i], [&](std::span<const std::byte> file) -> Status {
      Result<kv::DecodedBlockFile> d = kv::DecodeBlockFile(file, fingerprint, hashes[i]);
      if (!d.ok()) return d.status();
      if (d->payload.size() != shape_.FullBytes()) {
        return Status(Code::kStorageMiss, "rack block payload has an unexpected size");
      }
      Scatter(d->payload, first_block + i, area, layer_stride);
      return Status::Ok();
    });
  }
}

void HitReader::ReadFromStore(std::span<const kv::BlockHash> hashes, uint64_t first_block,
                              std::byte* area, uint64_t layer_stride, size_t from,
                              std::vector<Status>& status, std::vector<StoreHit>& source) {
  const size_t n = hashes.size();
  const uint64_t fingerprint = store_.options().model_fingerprint;
  // The reader's staging buffers are all free again (ReadStream has returned): one batch fills
  // them all. A batch with a miss ends the walk: everything after a miss is recomputed anyway.
  size_t i = from;
  while (i < n) {
    std::vector<size_t> index;
    std::vector<kv::BlockHash> want;
    std::vector<std::span<std::byte>> files;
    for (; i < n && index.size() < buffers_.size(); ++i) {
      if (status[i].ok()) continue;  // the own tier had it
      files.push_back(buffers_[index.size()].span());
      index.push_back(i);
      want.push_back(hashes[i]);
    }
    if (index.empty()) break;
    const std::vector<StoreHit> got = kv_store_->Get(want, files);
    bool miss = false;
    for (size_t k = 0; k < index.size(); ++k) {
      const size_t b = index[k];
      if (k >= got.size() || got[k] == StoreHit::kMiss) {
        miss = true;
        continue;
      }
      // The same verification as a file read: a stale, foreign or corrupt object is a miss.
      Result<kv::DecodedBlockFile> d = kv::DecodeBlockFile(files[k], fingerprint, hashes[b]);
      if (!d.ok() || d->payload.size() != shape_.FullBytes()) {
        kv_store_->OnRejected();
        status[b] = d.ok() ? Status(Code::kStorageMiss, "store object has an unexpected size")
                           : d.status().WithContext("kv store object");
        miss = true;
        continue;
      }
      Scatter(d->payload, first_block + b, area, layer_stride);
      status[b] = Status::Ok();
      source[b] = got[k];
    }
    if (miss) break;
  }
}

}  // namespace dualpath::engine
