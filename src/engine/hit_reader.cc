#include "engine/hit_reader.h"

#include <cstring>

#include "dualpath/common/check.h"

namespace dualpath::engine {

HitReader::HitReader(storage::BlockStore& store, const kv::BlockShape& shape, unsigned depth)
    : store_(store), shape_(shape) {
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
  const uint64_t layer_bytes = shape_.LayerBytes();
  const uint64_t bpt = shape_.bytes_per_token_per_layer;

  auto source = [&](size_t i) {
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
  auto sink = [&](size_t i, storage::ReadResult&& r) {
    // Sinks run on the submitting thread or the store's verify thread, for distinct i: each
    // writes its own block's slice of the area and its own entries of the vectors.
    status[i] = std::move(r.status);
    if (status[i].ok()) {
      if (r.block.payload.size() == shape_.FullBytes()) {
        uint64_t token0 = (first_block + i) * shape_.tokens;
        for (uint32_t l = 0; l < shape_.num_layers; ++l) {
          std::memcpy(area + l * layer_stride + token0 * bpt,
                      r.block.payload.data() + l * layer_bytes, layer_bytes);
        }
        bytes[i] = storage::BlockStore::FileBytes(shape_);
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
  store_.ReadStream(n, source, sink);

  HitReadResult out;
  for (size_t i = 0; i < n; ++i) {
    if (!status[i].ok()) {
      out.first_error = status[i];
      break;
    }
    ++out.loaded_blocks;
    out.bytes_read += bytes[i];
  }
  return out;
}

}  // namespace dualpath::engine
