// Block files as read from a shared file system: any bytes, decoded by DecodeBlockFileHeader and
// DecodeBlockFile. The first input byte picks how far past the checksums the input gets: raw
// (checksums as given, so almost everything is kKvBadHeader), or with the header checksum, the
// payload checksum or both recomputed by the harness, so the fuzzer explores the field checks and
// the payload path behind them. Invariants: a decoded file's payload lies inside the input, its
// size is token_count * num_layers * bpt without overflow, and its checksum is the stated one.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dualpath/kv/block_file.h"
#include "fuzz_util.h"

using namespace dualpath;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::vector<std::byte> file(size - 1);
  if (!file.empty()) std::memcpy(file.data(), data + 1, file.size());

  kv::BlockFileHeader h{};
  const bool has_header = file.size() >= sizeof(h);
  if (has_header) std::memcpy(&h, file.data(), sizeof(h));
  if (has_header && (mode & 2) != 0 && h.payload_bytes <= file.size()) {
    const size_t start = std::min<size_t>(file.size(), kv::kBlockFileHeaderBytes);
    const size_t n = std::min<uint64_t>(file.size() - start, h.payload_bytes);
    h.payload_checksum = kv::BlockChecksum(std::span(file).subspan(start, n));
  }
  if (has_header && (mode & 1) != 0) {
    h.header_checksum = XXH3_64bits(&h, offsetof(kv::BlockFileHeader, header_checksum));
  }
  if (has_header) std::memcpy(file.data(), &h, sizeof(h));

  Result<kv::BlockFileMeta> meta = kv::DecodeBlockFileHeader(file);
  kv::BlockHash expected_hash;
  std::memcpy(expected_hash.bytes.data(), h.block_hash, sizeof(h.block_hash));
  // mode bit 2: expect what the header says (reaches the payload check); else another block.
  if ((mode & 4) == 0) expected_hash.bytes[0] ^= 1;
  Result<kv::DecodedBlockFile> d = kv::DecodeBlockFile(file, h.model_fingerprint, expected_hash);
  if (d.ok()) {
    if (!meta.ok()) fuzz::Broken("file decodes but its header alone does not");
    if (!(d->meta == *meta)) fuzz::Broken("header decoded two ways");
    const kv::BlockFileMeta& m = d->meta;
    uint64_t product = 0;
    if (__builtin_mul_overflow(uint64_t{m.token_count}, uint64_t{m.num_layers}, &product) ||
        __builtin_mul_overflow(product, m.bytes_per_token_per_layer, &product)) {
      fuzz::Broken("accepted a header whose payload size overflows");
    }
    if (product != d->payload.size()) fuzz::Broken("payload size != tokens * layers * bpt");
    if (d->payload.data() < file.data() ||
        d->payload.data() + d->payload.size() > file.data() + file.size()) {
      fuzz::Broken("payload outside the input");
    }
    if (kv::BlockChecksum(d->payload) != h.payload_checksum) {
      fuzz::Broken("accepted a payload whose checksum is not the stated one");
    }
    // Re-encoding what was decoded gives back the same header and payload bytes.
    std::vector<std::byte> again(kv::BlockFileSize(d->payload.size()));
    if (!kv::EncodeBlockFile(m, d->payload, again).ok()) fuzz::Broken("re-encode failed");
    if (std::memcmp(again.data(), file.data(), sizeof(h)) != 0) {
      fuzz::Broken("re-encoded header differs");
    }
  }
  return 0;
}
