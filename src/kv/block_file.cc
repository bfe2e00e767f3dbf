#include "dualpath/kv/block_file.h"

#include <xxhash.h>

#include <bit>
#include <cstddef>
#include <cstring>
#include <string>

namespace dualpath::kv {
namespace internal {
#if defined(__x86_64__)
uint64_t ChecksumAvx2(const std::byte* p, uint64_t n, uint64_t seed);  // copy_verify_avx2.cc
#endif
}  // namespace internal

namespace {

// XXH3-64 of a payload with `seed` (0: the unseeded hash, which XXH3 defines equal). Payloads of
// at least this many bytes take the AVX2 build of XXH3 where the CPU has it: Debian's libxxhash
// is built for SSE2, and AVX2 hashes a 64 MiB batch out of memory at 12.4 GB/s against 8-11 on
// the development VM (issue 27: the checksum of a remote put's registered memory, and of a
// zero-copy get, runs beside the transfer and competes with it for the CPU). Same value either way.
constexpr uint64_t kAvx2ChecksumMin = 4096;

uint64_t PayloadChecksum(const std::byte* p, uint64_t n, uint64_t seed) {
#if defined(__x86_64__)
  static const bool have_avx2 = __builtin_cpu_supports("avx2");
  if (n >= kAvx2ChecksumMin && have_avx2) return internal::ChecksumAvx2(p, n, seed);
#endif
  return XXH3_64bits_withSeed(p, n, seed);
}

static_assert(std::endian::native == std::endian::little,
              "block files are little-endian and the header is copied as a struct");
static_assert(offsetof(BlockFileHeader, version) == 8);
static_assert(offsetof(BlockFileHeader, header_bytes) == 12);
static_assert(offsetof(BlockFileHeader, model_fingerprint) == 16);
static_assert(offsetof(BlockFileHeader, block_hash) == 24);
static_assert(offsetof(BlockFileHeader, token_count) == 56);
static_assert(offsetof(BlockFileHeader, num_layers) == 60);
static_assert(offsetof(BlockFileHeader, bytes_per_token_per_layer) == 64);
static_assert(offsetof(BlockFileHeader, payload_bytes) == 72);
static_assert(offsetof(BlockFileHeader, payload_checksum) == 80);
static_assert(offsetof(BlockFileHeader, reserved) == 88);
static_assert(offsetof(BlockFileHeader, header_checksum) == 96);

constexpr size_t kChecksummedHeaderBytes = offsetof(BlockFileHeader, header_checksum);

uint64_t HeaderChecksum(const BlockFileHeader& h) {
  return XXH3_64bits(&h, kChecksummedHeaderBytes);
}

std::string ShortHex(const BlockHash& h) { return h.Hex().substr(0, 16); }

// Payload sizes beyond this are rejected as inconsistent: a Full Block is at most a few hundred
// MiB (512 tokens x 61 layers x ~1.3 KiB for DeepSeek-V3.2 is ~40 MiB).
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 34;

}  // namespace

uint64_t BlockChecksum(std::span<const std::byte> bytes) {
  return PayloadChecksum(bytes.data(), bytes.size(), 0);
}

uint64_t NamespaceFingerprint(std::string_view name_space) {
  const std::string text = "dualpath.KVStore/" + std::string(name_space);
  return BlockChecksum(std::as_bytes(std::span(text.data(), text.size())));
}

uint64_t BlockChecksum(std::span<const std::byte> bytes, uint64_t seed) {
  return PayloadChecksum(bytes.data(), bytes.size(), seed);
}

uint64_t KeySeed(uint64_t model_fingerprint, const BlockHash& hash) {
  std::byte text[8 + 32];
  std::memcpy(text, &model_fingerprint, 8);  // little-endian (asserted above)
  std::memcpy(text + 8, hash.bytes.data(), 32);
  return XXH3_64bits(text, sizeof(text));
}

uint64_t ModelFingerprint(const ModelGeometry& m) {
  // A canonical text form: stable across compilers and struct layout changes, easy to document.
  std::string s = "dualpath-model-v1|" + m.name + "|" + std::to_string(m.num_layers) + "|" +
                  std::string(AttentionKindName(m.attention)) + "|" + std::to_string(m.num_heads) +
                  "|" + std::to_string(m.num_kv_heads) + "|" + std::to_string(m.head_dim) + "|" +
                  std::to_string(m.v_head_dim) + "|" + std::to_string(m.kv_lora_rank) + "|" +
                  std::to_string(m.qk_rope_head_dim) + "|" + std::to_string(m.index_head_dim) +
                  "|" + std::to_string(m.index_topk) + "|" + std::string(KvDtypeName(m.kv_dtype)) +
                  "|" + std::to_string(m.kv_bytes_per_token_per_layer);
  return XXH3_64bits(s.data(), s.size());
}

Status EncodeBlockFileHeader(const BlockFileMeta& meta, uint64_t payload_checksum,
                             std::span<std::byte> out) {
  if (out.size() < kBlockFileHeaderBytes) {
    return InvalidArgument("block file header: output buffer has " + std::to_string(out.size()) +
                           " bytes, needs " + std::to_string(kBlockFileHeaderBytes));
  }
  if (meta.token_count == 0 || meta.num_layers == 0 || meta.bytes_per_token_per_layer == 0) {
    return InvalidArgument("block file header: zero tokens, layers or bytes per token");
  }
  BlockFileHeader h{};
  h.magic = kBlockFileMagic;
  h.version = kBlockFileVersion;
  h.header_bytes = static_cast<uint32_t>(kBlockFileHeaderBytes);
  h.model_fingerprint = meta.model_fingerprint;
  std::memcpy(h.block_hash, meta.block_hash.bytes.data(), sizeof(h.block_hash));
  h.token_count = meta.token_count;
  h.num_layers = meta.num_layers;
  h.bytes_per_token_per_layer = meta.bytes_per_token_per_layer;
  h.payload_bytes = meta.PayloadBytes();
  h.payload_checksum = payload_checksum;
  h.reserved = 0;
  h.header_checksum = HeaderChecksum(h);
  std::memset(out.data(), 0, kBlockFileHeaderBytes);
  std::memcpy(out.data(), &h, sizeof(h));
  return Status::Ok();
}

Status EncodeBlockFile(const BlockFileMeta& meta, std::span<const std::byte> payload,
                       std::span<std::byte> out) {
  if (payload.size() != meta.PayloadBytes()) {
    return InvalidArgument("block file: payload has " + std::to_string(payload.size()) +
                           " bytes, header says " + std::to_string(meta.PayloadBytes()));
  }
  const uint64_t total = BlockFileSize(payload.size());
  if (out.size() < total) {
    return InvalidArgument("block file: output buffer has " + std::to_string(out.size()) +
                           " bytes, needs " + std::to_string(total));
  }
  RETURN_IF_ERROR(EncodeBlockFileHeader(meta, BlockChecksum(payload), out));
  std::memcpy(out.data() + kBlockFileHeaderBytes, payload.data(), payload.size());
  std::memset(out.data() + kBlockFileHeaderBytes + payload.size(), 0,
              total - kBlockFileHeaderBytes - payload.size());
  return Status::Ok();
}

namespace {

// Header checks shared by DecodeBlockFileHeader and DecodeBlockFile. Fills `*h`.
Status ParseHeader(std::span<const std::byte> buf, BlockFileHeader* h) {
  if (buf.size() < sizeof(BlockFileHeader)) {
    // Check the magic on what we have, so a short non-block file is called what it is.
    if (buf.size() >= sizeof(uint64_t)) {
      uint64_t magic;
      std::memcpy(&magic, buf.data(), sizeof(magic));
      if (magic != kBlockFileMagic) {
        return Status(Code::kKvBadMagic, "block file: bad magic (not a dualpath block file)");
      }
    }
    return Status(Code::kKvTruncated, "block file: " + std::to_string(buf.size()) +
                                          " bytes, shorter than its header (" +
                                          std::to_string(sizeof(BlockFileHeader)) + ")");
  }
  std::memcpy(h, buf.data(), sizeof(*h));
  if (h->magic != kBlockFileMagic) {
    return Status(Code::kKvBadMagic, "block file: bad magic (not a dualpath block file)");
  }
  if (h->version != kBlockFileVersion) {
    return Status(Code::kKvBadVersion, "block file: version " + std::to_string(h->version) +
                                           ", this build reads version " +
                                           std::to_string(kBlockFileVersion));
  }
  if (h->header_checksum != HeaderChecksum(*h)) {
    return Status(Code::kKvBadHeader, "block file: header checksum mismatch (torn or corrupted)");
  }
  // The product is checked for overflow: a wrapped token_count * num_layers * bpt could equal a
  // small payload_bytes while each factor is huge, and readers index the payload by those factors
  // (found by fuzz/block_file_fuzz.cc).
  uint64_t product = 0;
  const bool overflow =
      __builtin_mul_overflow(uint64_t{h->token_count}, uint64_t{h->num_layers}, &product) ||
      __builtin_mul_overflow(product, h->bytes_per_token_per_layer, &product);
  if (h->header_bytes != kBlockFileHeaderBytes || h->reserved != 0 || h->token_count == 0 ||
      h->num_layers == 0 || h->bytes_per_token_per_layer == 0 ||
      h->payload_bytes > kMaxPayloadBytes || overflow || h->payload_bytes != product) {
    return Status(
        Code::kKvBadHeader,
        "block file: inconsistent header (header_bytes=" + std::to_string(h->header_bytes) +
            " tokens=" + std::to_string(h->token_count) + " layers=" +
            std::to_string(h->num_layers) + " bpt=" + std::to_string(h->bytes_per_token_per_layer) +
            " payload_bytes=" + std::to_string(h->payload_bytes) + ")");
  }
  return Status::Ok();
}

BlockFileMeta MetaOf(const BlockFileHeader& h) {
  BlockFileMeta m;
  m.model_fingerprint = h.model_fingerprint;
  std::memcpy(m.block_hash.bytes.data(), h.block_hash, sizeof(h.block_hash));
  m.token_count = h.token_count;
  m.num_layers = h.num_layers;
  m.bytes_per_token_per_layer = h.bytes_per_token_per_layer;
  return m;
}

}  // namespace

Result<BlockFileMeta> DecodeBlockFileHeader(std::span<const std::byte> header) {
  BlockFileHeader h;
  RETURN_IF_ERROR(ParseHeader(header, &h));
  return MetaOf(h);
}

Result<DecodedBlockFile> DecodeBlockFile(std::span<const std::byte> file,
                                         uint64_t expected_fingerprint,
                                         const BlockHash& expected_hash) {
  BlockFileHeader h;
  RETURN_IF_ERROR(ParseHeader(file, &h));
  const uint64_t needed = kBlockFileHeaderBytes + h.payload_bytes;
  if (file.size() < needed) {
    return Status(Code::kKvTruncated, "block file " + ShortHex(expected_hash) + ": " +
                                          std::to_string(file.size()) + " bytes, header says " +
                                          std::to_string(needed));
  }
  DecodedBlockFile out{MetaOf(h), file.subspan(kBlockFileHeaderBytes, h.payload_bytes)};
  if (h.model_fingerprint != expected_fingerprint) {
    return Status(Code::kKvFingerprintMismatch,
                  "block file " + ShortHex(expected_hash) + ": written for model fingerprint " +
                      std::to_string(h.model_fingerprint) + ", expected " +
                      std::to_string(expected_fingerprint));
  }
  if (out.meta.block_hash != expected_hash) {
    return Status(Code::kKvHashMismatch, "block file " + ShortHex(expected_hash) +
                                             ": holds block " + ShortHex(out.meta.block_hash));
  }
  if (BlockChecksum(out.payload) != h.payload_checksum) {
    return Status(Code::kKvChecksumMismatch,
                  "block file " + ShortHex(expected_hash) + ": payload checksum mismatch");
  }
  return out;
}

}  // namespace dualpath::kv
