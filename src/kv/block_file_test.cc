#include "dualpath/kv/block_file.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <vector>

#include "dualpath/kv/hasher.h"
#include "dualpath/kv/layout.h"

namespace dualpath::kv {
namespace {

struct Fixture {
  ModelGeometry model = *FindModel("ds27b");
  BlockFileMeta meta;
  std::vector<std::byte> payload;
  std::vector<std::byte> file;

  explicit Fixture(uint32_t tokens = 64) {
    meta.model_fingerprint = ModelFingerprint(model);
    meta.block_hash = BlockHasher::Create(HashAlgo::kSha256Cbor, "0", tokens)
                          .value()
                          .HashPrefix(std::vector<TokenId>(tokens, 7))[0];
    meta.token_count = tokens;
    meta.num_layers = model.num_layers;
    meta.bytes_per_token_per_layer = model.kv_bytes_per_token_per_layer;
    payload.resize(meta.PayloadBytes());
    uint64_t x = 0x12345;
    for (std::byte& b : payload) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;  // seeded LCG
      b = static_cast<std::byte>(x >> 56);
    }
    file.resize(BlockFileSize(payload.size()));
    EXPECT_TRUE(EncodeBlockFile(meta, payload, file).ok());
  }
  Result<DecodedBlockFile> Decode() const {
    return DecodeBlockFile(file, meta.model_fingerprint, meta.block_hash);
  }
};

TEST(BlockFileTest, SizesAreAligned) {
  EXPECT_EQ(AlignToBlockFile(0), 0u);
  EXPECT_EQ(AlignToBlockFile(1), 4096u);
  EXPECT_EQ(AlignToBlockFile(4096), 4096u);
  EXPECT_EQ(BlockFileSize(1), 8192u);
  EXPECT_EQ(BlockFileSize(4097), 4096u + 8192u);
  Fixture f;
  EXPECT_EQ(f.file.size() % kBlockFileAlignment, 0u);
  EXPECT_GE(f.file.size(), kBlockFileHeaderBytes + f.payload.size());
}

// Acceptance 4: the round trip is exact.
TEST(BlockFileTest, RoundTripExact) {
  Fixture f;
  Result<DecodedBlockFile> d = f.Decode();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->meta, f.meta);
  ASSERT_EQ(d->payload.size(), f.payload.size());
  EXPECT_EQ(0, std::memcmp(d->payload.data(), f.payload.data(), f.payload.size()));
  EXPECT_EQ(d->payload.data(), f.file.data() + kBlockFileHeaderBytes);  // a view, no copy
  // Header-only decode agrees, and the payload view is a valid Full Block of the model.
  EXPECT_EQ(*DecodeBlockFileHeader(f.file), f.meta);
  EXPECT_TRUE(FullBlockView::Make(d->payload, BlockShape::For(f.model, 64)).ok());
  // Padding is zero.
  for (size_t i = kBlockFileHeaderBytes + f.payload.size(); i < f.file.size(); ++i) {
    ASSERT_EQ(f.file[i], std::byte{0}) << i;
  }
}

TEST(BlockFileTest, TrailingPaddingOptional) {
  Fixture f(16);
  f.file.resize(kBlockFileHeaderBytes + f.payload.size());  // e.g. read with exact size
  EXPECT_TRUE(f.Decode().ok());
}

// Acceptance 4: each corruption is its own error and never returns data.
TEST(BlockFileTest, FlippedPayloadByteIsChecksumMismatch) {
  Fixture f;
  for (size_t off : {size_t{0}, f.payload.size() / 2, f.payload.size() - 1}) {
    Fixture g;
    g.file[kBlockFileHeaderBytes + off] ^= std::byte{0x01};
    EXPECT_EQ(g.Decode().status().code(), Code::kKvChecksumMismatch) << off;
  }
}

TEST(BlockFileTest, TruncatedFile) {
  Fixture f;
  for (size_t len : {size_t{0}, size_t{7}, size_t{50}, size_t{103}, size_t{4096},
                     kBlockFileHeaderBytes + f.payload.size() - 1}) {
    std::span<const std::byte> cut(f.file.data(), len);
    EXPECT_EQ(DecodeBlockFile(cut, f.meta.model_fingerprint, f.meta.block_hash).status().code(),
              Code::kKvTruncated)
        << len;
  }
}

TEST(BlockFileTest, WrongMagic) {
  Fixture f;
  f.file[0] ^= std::byte{0x20};
  EXPECT_EQ(f.Decode().status().code(), Code::kKvBadMagic);
  // Even a short buffer that is not a block file says so.
  std::vector<std::byte> junk(16, std::byte{'x'});
  EXPECT_EQ(DecodeBlockFile(junk, 0, BlockHash{}).status().code(), Code::kKvBadMagic);
}

TEST(BlockFileTest, WrongVersion) {
  Fixture f;
  const uint32_t v2 = 2;
  std::memcpy(f.file.data() + offsetof(BlockFileHeader, version), &v2, sizeof(v2));
  Result<DecodedBlockFile> d = f.Decode();
  EXPECT_EQ(d.status().code(), Code::kKvBadVersion);
  EXPECT_NE(d.status().message().find("version 2"), std::string::npos);
}

TEST(BlockFileTest, CorruptHeaderFieldIsBadHeader) {
  for (size_t off :
       {offsetof(BlockFileHeader, model_fingerprint), offsetof(BlockFileHeader, block_hash) + 5,
        offsetof(BlockFileHeader, token_count), offsetof(BlockFileHeader, payload_bytes),
        offsetof(BlockFileHeader, payload_checksum)}) {
    Fixture f;
    f.file[off] ^= std::byte{0x04};
    EXPECT_EQ(f.Decode().status().code(), Code::kKvBadHeader) << off;
  }
}

// Regression (found by fuzz/block_file_fuzz.cc): factors whose product wraps around 2^64 to the
// stated payload_bytes were accepted, and readers index the payload by those factors. The header
// checksum is recomputed so only the field check can reject it.
TEST(BlockFileTest, PayloadProductOverflowIsBadHeader) {
  Fixture f;
  BlockFileHeader h;
  std::memcpy(&h, f.file.data(), sizeof(h));
  h.token_count = 3;
  h.num_layers = 1;
  h.bytes_per_token_per_layer = 0x5555555555555556ULL;  // 3 * this = 2^64 + 2: wraps to 2
  h.payload_bytes = 2;
  h.payload_checksum = XXH3_64bits(f.file.data() + kBlockFileHeaderBytes, 2);  // else consistent
  h.header_checksum = XXH3_64bits(&h, offsetof(BlockFileHeader, header_checksum));
  std::memcpy(f.file.data(), &h, sizeof(h));
  Result<DecodedBlockFile> d = f.Decode();
  EXPECT_EQ(d.status().code(), Code::kKvBadHeader);
  EXPECT_NE(d.status().message().find("inconsistent header"), std::string::npos);
  EXPECT_EQ(DecodeBlockFileHeader(f.file).status().code(), Code::kKvBadHeader);
}

TEST(BlockFileTest, WrongModelOrHash) {
  Fixture f;
  EXPECT_EQ(DecodeBlockFile(f.file, ModelFingerprint(*FindModel("ds660b")), f.meta.block_hash)
                .status()
                .code(),
            Code::kKvFingerprintMismatch);
  BlockHash other = f.meta.block_hash;
  other.bytes[31] ^= 1;
  EXPECT_EQ(DecodeBlockFile(f.file, f.meta.model_fingerprint, other).status().code(),
            Code::kKvHashMismatch);
}

TEST(BlockFileTest, EncodeRejectsBadArguments) {
  Fixture f;
  std::vector<std::byte> small(f.file.size() - 1);
  EXPECT_EQ(EncodeBlockFile(f.meta, f.payload, small).code(), Code::kInvalidArgument);
  EXPECT_EQ(EncodeBlockFile(f.meta, std::span(f.payload).first(10), f.file).code(),
            Code::kInvalidArgument);
  BlockFileMeta zero = f.meta;
  zero.token_count = 0;
  EXPECT_EQ(EncodeBlockFileHeader(zero, 0, f.file).code(), Code::kInvalidArgument);
  EXPECT_EQ(EncodeBlockFileHeader(f.meta, 0, std::span(f.file).first(100)).code(),
            Code::kInvalidArgument);
}

// Scatter-write path: header encoded separately, payload from its own buffer.
TEST(BlockFileTest, SeparateHeaderEncodingMatches) {
  Fixture f;
  std::vector<std::byte> header(kBlockFileHeaderBytes);
  ASSERT_TRUE(EncodeBlockFileHeader(f.meta, BlockChecksum(f.payload), header).ok());
  EXPECT_TRUE(std::equal(header.begin(), header.end(), f.file.begin()));
}

TEST(BlockFileTest, FingerprintAndChecksumProperties) {
  const ModelGeometry a = *FindModel("qwen2.5-32b");
  EXPECT_EQ(ModelFingerprint(a), ModelFingerprint(*FindModel("qwen32b")));  // alias, same model
  EXPECT_NE(ModelFingerprint(a), ModelFingerprint(*FindModel("qwen3-32b")));
  ModelGeometry b = a;
  b.kv_dtype = KvDtype::kFp8;
  EXPECT_NE(ModelFingerprint(a), ModelFingerprint(b));
  ModelGeometry c = a;
  c.name = "qwen2.5-32b-finetune";
  EXPECT_NE(ModelFingerprint(a), ModelFingerprint(c));
  std::vector<std::byte> x(100, std::byte{1});
  const uint64_t h = BlockChecksum(x);
  x[99] = std::byte{2};
  EXPECT_NE(BlockChecksum(x), h);
  EXPECT_EQ(BlockChecksum({}), BlockChecksum(std::span<const std::byte>()));
}

// BlockChecksum takes an AVX2 build of XXH3 for payloads of 4 KiB and more (issue 27); its value
// must stay the library's (Debian's libxxhash, the SSE2 build): block files and store objects
// written by either are read by the other.
TEST(BlockFileTest, ChecksumEqualsTheLibraryOnEveryPath) {
  std::vector<std::byte> x((1 << 20) + 77);
  uint64_t v = 0x9E3779B97F4A7C15ULL;
  for (std::byte& b : x) {
    v = v * 6364136223846793005ULL + 1442695040888963407ULL;
    b = static_cast<std::byte>(v >> 56);
  }
  for (size_t n : {0, 1, 100, 4095, 4096, 4097, 65536, 262144 + 3, (1 << 20) + 77}) {
    for (size_t shift : {0, 1}) {
      if (shift + n > x.size()) continue;
      const std::span<const std::byte> bytes(x.data() + shift, n);
      EXPECT_EQ(BlockChecksum(bytes), XXH3_64bits(bytes.data(), n)) << n << " " << shift;
      for (uint64_t seed : {uint64_t{0}, uint64_t{27}, ~uint64_t{0}}) {
        EXPECT_EQ(BlockChecksum(bytes, seed), XXH3_64bits_withSeed(bytes.data(), n, seed))
            << n << " " << shift << " " << seed;
      }
    }
  }
}

TEST(BlockFileTest, HeaderOnlyDecodeChecks) {
  Fixture f;
  EXPECT_EQ(DecodeBlockFileHeader(std::span(f.file).first(50)).status().code(), Code::kKvTruncated);
  // The header region alone is enough; the payload is not looked at.
  f.file[kBlockFileHeaderBytes] ^= std::byte{1};
  EXPECT_TRUE(DecodeBlockFileHeader(std::span(f.file).first(kBlockFileHeaderBytes)).ok());
  f.file[offsetof(BlockFileHeader, num_layers)] ^= std::byte{1};
  EXPECT_EQ(DecodeBlockFileHeader(f.file).status().code(), Code::kKvBadHeader);
  f.file[0] = std::byte{0};
  EXPECT_EQ(DecodeBlockFileHeader(f.file).status().code(), Code::kKvBadMagic);
}

TEST(BlockFileTest, MagicSpellsOnDisk) {
  Fixture f;
  EXPECT_EQ(0, std::memcmp(f.file.data(), "DKVBLK01", 8));
}

}  // namespace
}  // namespace dualpath::kv
