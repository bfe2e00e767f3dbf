// The on-disk Full Block file: a 4096-byte header followed by the Full Block payload.
//
// One file (or one object) per block hash. Layout (all integers little-endian; full description
// in docs/formats/block_file.md):
//
//   [0, 4096)          header: BlockFileHeader, then zero padding
//   [4096, 4096 + P)   payload: the Full Block [layers, tokens, bpt], P = payload_bytes
//   [4096 + P, end)    zero padding up to a multiple of 4096 (so O_DIRECT reads/writes work)
//
// The header carries its own XXH3-64 checksum (a torn or bit-flipped header is kKvBadHeader) and
// an XXH3-64 checksum of the payload (kKvChecksumMismatch). XXH3-64 was chosen over CRC32C and
// SHA-256 because it runs at memory bandwidth (tens of GB/s per core with SSE2/AVX2) and every
// read is verified; it detects corruption, not tampering.
//
// Decoding never returns bytes that failed a check: storage treats every error here as a miss.
//
// Thread safety: pure functions over caller-owned buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"
#include "dualpath/kv/model.h"

namespace dualpath::kv {

inline constexpr uint64_t kBlockFileMagic = 0x31304B4C42564B44ULL;  // "DKVBLK01" in LE bytes
inline constexpr uint32_t kBlockFileVersion = 1;
inline constexpr uint64_t kBlockFileAlignment = 4096;
inline constexpr uint64_t kBlockFileHeaderBytes = 4096;  // header region incl. padding

// The fixed part of the header, exactly as it lies on disk (little-endian hosts only: dualpath
// targets x86-64 and aarch64 Linux; a static_assert in block_file.cc checks the byte order).
struct BlockFileHeader {
  uint64_t magic;                      // kBlockFileMagic
  uint32_t version;                    // kBlockFileVersion
  uint32_t header_bytes;               // kBlockFileHeaderBytes: where the payload starts
  uint64_t model_fingerprint;          // ModelFingerprint() of the model that produced the KV
  uint8_t block_hash[32];              // BlockHash::bytes
  uint32_t token_count;                // tokens in the block
  uint32_t num_layers;                 // layers in the Full Block
  uint64_t bytes_per_token_per_layer;  // bpt
  uint64_t payload_bytes;              // == token_count * num_layers * bpt
  uint64_t payload_checksum;           // XXH3-64 (seed 0) of the payload bytes
  uint64_t reserved;                   // 0
  uint64_t header_checksum;            // XXH3-64 (seed 0) of the 96 bytes above
};
static_assert(sizeof(BlockFileHeader) == 104);

// What a header says about its block.
struct BlockFileMeta {
  uint64_t model_fingerprint = 0;
  BlockHash block_hash;
  uint32_t token_count = 0;
  uint32_t num_layers = 0;
  uint64_t bytes_per_token_per_layer = 0;

  uint64_t PayloadBytes() const {
    return uint64_t{token_count} * num_layers * bytes_per_token_per_layer;
  }
  bool operator==(const BlockFileMeta&) const = default;
};

// A decoded, fully verified block file: `payload` points into the buffer given to DecodeBlockFile.
struct DecodedBlockFile {
  BlockFileMeta meta;
  std::span<const std::byte> payload;
};

// Identifies a model's KV layout and identity: XXH3-64 over the model name and every field that
// changes KV bytes (layers, attention kind, heads, dims, dtype, bytes per token per layer). Two
// models with different weights must have different names; JSON models use their "name".
uint64_t ModelFingerprint(const ModelGeometry& model);

// The model-directory fingerprint of a `dualpath.KVStore` namespace (python/dualpath/store.py):
// BlockChecksum of "dualpath.KVStore/" + name_space. Engine connectors (vLLM, SGLang) store blocks
// of opaque layout under it; the scheduler service probes the same directory for hits
// (`control serve --store-namespace`).
uint64_t NamespaceFingerprint(std::string_view name_space);

// XXH3-64 (seed 0): the payload checksum.
uint64_t BlockChecksum(std::span<const std::byte> bytes);
// XXH3-64 with `seed`: a checksum bound to something besides the bytes. The store seeds it with
// a hash of the object's key (store::ObjectChecksum), so bytes read under another key fail it; it
// costs the same single pass as seed 0 (XXH3 derives its secret from the seed once per call).
uint64_t BlockChecksum(std::span<const std::byte> bytes, uint64_t seed);
// The seed that binds a checksum to a key: XXH3-64 (seed 0) of the 40 bytes model_fingerprint
// (u64, little-endian) || hash. A reader that recomputes BlockChecksum(bytes, KeySeed(its key))
// rejects bytes stored under another key, whatever an index or a peer says their checksum is
// (docs/formats/store_tier_file.md "Object checksum").
uint64_t KeySeed(uint64_t model_fingerprint, const BlockHash& hash);

// Rounds `n` up to a multiple of kBlockFileAlignment.
constexpr uint64_t AlignToBlockFile(uint64_t n) {
  return (n + kBlockFileAlignment - 1) / kBlockFileAlignment * kBlockFileAlignment;
}
// Total file size for a payload of `payload_bytes`: header + payload, padded to 4096.
constexpr uint64_t BlockFileSize(uint64_t payload_bytes) {
  return kBlockFileHeaderBytes + AlignToBlockFile(payload_bytes);
}

// Writes header + payload + zero padding into out[0, BlockFileSize(payload.size())).
// kInvalidArgument if payload.size() != meta.PayloadBytes() or `out` is too small.
Status EncodeBlockFile(const BlockFileMeta& meta, std::span<const std::byte> payload,
                       std::span<std::byte> out);

// Writes only the 4096-byte header region (for scatter writes where the payload already sits in
// an aligned buffer of its own). `out.size()` must be >= kBlockFileHeaderBytes.
Status EncodeBlockFileHeader(const BlockFileMeta& meta, uint64_t payload_checksum,
                             std::span<std::byte> out);

// Parses and checks a header region (at least sizeof(BlockFileHeader) bytes): magic
// (kKvBadMagic), version (kKvBadVersion), header checksum and field consistency (kKvBadHeader),
// short buffer (kKvTruncated). Does not look at the payload.
Result<BlockFileMeta> DecodeBlockFileHeader(std::span<const std::byte> header);

// Fully verifies a block file read from disk and returns a view of its payload. In check order:
//   kKvTruncated           file shorter than its header or than header + payload_bytes
//   kKvBadMagic            not a block file
//   kKvBadVersion          written by an incompatible version
//   kKvBadHeader           header checksum wrong, or fields inconsistent
//   kKvFingerprintMismatch written for another model
//   kKvHashMismatch        holds another block
//   kKvChecksumMismatch    payload corrupted
// Trailing padding is allowed but not required.
Result<DecodedBlockFile> DecodeBlockFile(std::span<const std::byte> file,
                                         uint64_t expected_fingerprint,
                                         const BlockHash& expected_hash);

}  // namespace dualpath::kv
