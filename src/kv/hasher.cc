#include "dualpath/kv/hasher.h"

// Keep the low-level SHA-256 API without deprecation warnings (-Werror); see Sha256Stream.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

#include "dualpath/common/check.h"
#include "dualpath/kv/cbor.h"
#include "kv/cbor_encode.h"
#include "kv/sha256.h"

namespace dualpath::kv {
namespace {

// ---- SHA-256 -----------------------------------------------------------------------------------

// Two paths with identical digests (kv/sha256.h): SHA-NI, where the message is padded in place in
// the staging buffer and compressed directly (no digest context, no per-call bookkeeping), and
// OpenSSL's low-level SHA256_Init/Update/Final as the fallback on CPUs without SHA-NI.
//
// OpenSSL's low-level calls (deprecated in 3.0 in favour of EVP) rather than EVP: a block hash
// digests only ~100-2,600 bytes, and EVP's per-digest provider dispatch cost about as much as
// hashing a 16-token block.
class Sha256Stream {
 public:
  Sha256Stream() { DUALPATH_CHECK(SHA256_Init(&ctx_) == 1, "SHA256_Init"); }
  void Update(const void* data, size_t n) {
    DUALPATH_CHECK(SHA256_Update(&ctx_, data, n) == 1, "SHA256_Update");
  }
  void Final(BlockHash* out) {
    DUALPATH_CHECK(SHA256_Final(out->bytes.data(), &ctx_) == 1, "SHA256_Final");
  }

 private:
  SHA256_CTX ctx_;
};

// Size of the on-stack staging buffer for the CBOR message. Tokens are encoded into it and fed to
// SHA-256 in chunks, so the message is never materialized whole and nothing is allocated.
constexpr size_t kStageBytes = 2048;

// Writes the message head up to the token array: 0x83 (3-array), bytes(parent), array(ntokens).
size_t WriteMessageHead(const BlockHash& parent, size_t ntokens, uint8_t* buf) {
  size_t n = 0;
  buf[n++] = 0x83;
  n += cbor::WriteHead(cbor::Major::kByteString, parent.bytes.size(), buf + n);
  std::memcpy(buf + n, parent.bytes.data(), parent.bytes.size());
  n += parent.bytes.size();
  n += cbor::WriteHead(cbor::Major::kArray, ntokens, buf + n);
  return n;
}

// Encodes as many tokens as fit below `limit` (keeping the encoder's slack) at buf + *n; returns
// how many were encoded.
size_t EncodeTokenChunk(std::span<const TokenId> tokens, size_t limit, uint8_t* buf, size_t* n) {
  const size_t room = (limit - *n - cbor::kEncodeSlack) / 5;  // 5 bytes per token worst case
  const size_t count = std::min(tokens.size(), room);
  uint32_t or_all = 0;
  *n += cbor::EncodeUint32s(tokens.data(), count, buf + *n, &or_all);
  DUALPATH_CHECK(or_all <= kMaxTokenId, "token id > 2^31-1 (validate input with ValidateTokens)");
  return count;
}

// The extra-keys tail (LoRA name / cache salt): cold path, built as a string.
std::string ExtraKeysTail(std::span<const std::string_view> extra_keys) {
  std::string tail;
  cbor::AppendArrayHead(extra_keys.size(), &tail);
  for (std::string_view k : extra_keys) {
    cbor::AppendText(k, &tail);
  }
  return tail;
}

// `tail` is the extra keys' canonical CBOR item; empty means null (no extra keys).
BlockHash Sha256CborBlockOpenSsl(const BlockHash& parent, std::span<const TokenId> tokens,
                                 std::string_view tail) {
  uint8_t buf[kStageBytes];
  size_t n = WriteMessageHead(parent, tokens.size(), buf);
  Sha256Stream sha;
  size_t i = 0;
  while (true) {
    i += EncodeTokenChunk(tokens.subspan(i), kStageBytes, buf, &n);
    if (i == tokens.size()) break;
    sha.Update(buf, n);
    n = 0;
  }
  if (tail.empty()) {
    buf[n++] = cbor::kNull;  // room: the encoder leaves >= kEncodeSlack bytes free
    sha.Update(buf, n);
  } else {
    sha.Update(buf, n);
    sha.Update(tail.data(), tail.size());
  }
  BlockHash out;
  sha.Final(&out);
  return out;
}

constexpr size_t kNiLimit = kStageBytes - sha256::kPadRoom;
// Token count whose whole message (35-byte head + <= 5-byte array head + 5 bytes per token +
// null) fits below kNiLimit with the encoder's slack.
constexpr size_t kWholeTokens = (kNiLimit - cbor::kEncodeSlack - 35 - 5 - 1) / 5;

// Builds the padded message of a block without extra keys in buf, except the parent bytes
// (3..34), which the SHA-NI digest functions take separately; returns the 64-byte block count.
// tokens.size() <= kWholeTokens.
size_t BuildWholeMessage(std::span<const TokenId> tokens, uint8_t* buf) {
  buf[0] = 0x83;
  cbor::WriteHead(cbor::Major::kByteString, 32, buf + 1);  // 2 bytes: 0x58 0x20
  size_t n = 3 + 32;
  n += cbor::WriteHead(cbor::Major::kArray, tokens.size(), buf + n);
  const size_t encoded = EncodeTokenChunk(tokens, kNiLimit, buf, &n);
  DUALPATH_CHECK(encoded == tokens.size(), "sha256_cbor: staging buffer too small");
  buf[n++] = cbor::kNull;
  return sha256::PadInPlace(buf, n, n);
}

// SHA-NI path: the message is encoded into a 64-byte aligned buffer that keeps sha256::kPadRoom
// bytes free, so a block that fits (up to ~370 tokens, no extra keys) is padded where it lies and
// compressed with no copy; longer messages compress whole 64-byte blocks as they fill up.
BlockHash Sha256CborBlockNi(const BlockHash& parent, std::span<const TokenId> tokens,
                            std::string_view tail) {
  alignas(64) uint8_t buf[kStageBytes];
  BlockHash out;
  if (tail.empty() && tokens.size() <= kWholeTokens) {
    // Hot path: the whole padded message is built here except the parent bytes (3..34), which
    // DigestWithPrefix32 takes from `parent` directly (registers, not a copy through buf).
    sha256::DigestWithPrefix32(buf, BuildWholeMessage(tokens, buf), parent.bytes.data(),
                               out.bytes.data());
    return out;
  }
  size_t n = WriteMessageHead(parent, tokens.size(), buf);
  sha256::NiState sha;
  size_t i = 0;
  while (true) {
    i += EncodeTokenChunk(tokens.subspan(i), kNiLimit, buf, &n);
    if (i == tokens.size()) break;
    sha.AbsorbBlocks(buf, &n);
  }
  if (tail.empty()) {
    buf[n++] = cbor::kNull;  // room: n <= kLimit - kEncodeSlack before this
  } else {
    for (size_t off = 0; off < tail.size();) {
      const size_t take = std::min(tail.size() - off, kNiLimit - n);
      std::memcpy(buf + n, tail.data() + off, take);
      n += take;
      off += take;
      sha.AbsorbBlocks(buf, &n);
    }
  }
  sha.Finish(buf, n, out.bytes.data());  // n <= kNiLimit: kPadRoom bytes free for the padding
  return out;
}

struct ChainCtx {
  std::span<const TokenId> tokens;
  uint32_t block_size;
};

size_t BuildChainMessage(void* ctx, size_t step, uint8_t* msg) {
  const auto* c = static_cast<const ChainCtx*>(ctx);
  return BuildWholeMessage(c->tokens.subspan(step * c->block_size, c->block_size), msg);
}

static_assert(sizeof(BlockHash) == 32, "DigestChain writes BlockHashes as packed 32-byte rows");

BlockHash Sha256CborBlockTail(const BlockHash& parent, std::span<const TokenId> tokens,
                              std::string_view tail) {
  return sha256::ActiveImpl() == sha256::Impl::kShaNi
             ? Sha256CborBlockNi(parent, tokens, tail)
             : Sha256CborBlockOpenSsl(parent, tokens, tail);
}

BlockHash Sha256CborBlock(const BlockHash& parent, std::span<const TokenId> tokens,
                          std::span<const std::string_view> extra_keys) {
  if (extra_keys.empty()) {
    return Sha256CborBlockTail(parent, tokens, {});
  }
  // The extra-keys tail (LoRA name / cache salt) is the cold path, built as a string.
  return Sha256CborBlockTail(parent, tokens, ExtraKeysTail(extra_keys));
}

// ---- XXH3-128 -------------------------------------------------------------------------------

struct XxhStateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

XXH3_state_t* ThreadXxhState() {
  thread_local std::unique_ptr<XXH3_state_t, XxhStateDeleter> state(XXH3_createState());
  DUALPATH_CHECK(state != nullptr, "XXH3_createState failed");
  return state.get();
}

void StoreXxh128(XXH128_hash_t h, BlockHash* out) {
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);  // big-endian, platform independent
  out->bytes = {};
  std::memcpy(out->bytes.data(), canon.digest, sizeof(canon.digest));
}

static_assert(std::endian::native == std::endian::little,
              "xxh3 mode hashes token ids as little-endian u32 straight from memory");

BlockHash Xxh3Block(const BlockHash& parent, std::span<const TokenId> tokens,
                    std::span<const std::string_view> extra_keys) {
  XXH3_state_t* st = ThreadXxhState();
  XXH3_128bits_reset(st);
  XXH3_128bits_update(st, parent.bytes.data(), 16);
  const uint64_t count = tokens.size();
  XXH3_128bits_update(st, &count, sizeof(count));
  for (TokenId t : tokens) {
    DUALPATH_CHECK(t <= kMaxTokenId, "token id > 2^31-1 (validate input with ValidateTokens)");
  }
  XXH3_128bits_update(st, tokens.data(), tokens.size_bytes());
  for (std::string_view k : extra_keys) {
    const uint64_t len = k.size();  // length-prefixed so ("ab","c") != ("a","bc")
    XXH3_128bits_update(st, &len, sizeof(len));
    XXH3_128bits_update(st, k.data(), k.size());
  }
  BlockHash out;
  StoreXxh128(XXH3_128bits_digest(st), &out);
  return out;
}

}  // namespace

std::string_view HashAlgoName(HashAlgo algo) {
  switch (algo) {
    case HashAlgo::kSha256Cbor:
      return "sha256_cbor";
    case HashAlgo::kXxh3:
      return "xxh3";
  }
  return "unknown";
}

Result<HashAlgo> ParseHashAlgo(std::string_view name) {
  if (name == "sha256_cbor") return HashAlgo::kSha256Cbor;
  if (name == "xxh3" || name == "xxh3_128") return HashAlgo::kXxh3;
  return InvalidArgument("unknown hash algorithm '" + std::string(name) +
                         "' (known: sha256_cbor, xxh3)");
}

BlockHasher::BlockHasher(HashAlgo algo, std::string seed, uint32_t block_size)
    : algo_(algo), seed_(std::move(seed)), block_size_(block_size) {
  if (algo_ == HashAlgo::kSha256Cbor) {
    // NONE_HASH = sha256(cbor2.dumps(seed_string, canonical=True)).
    std::string msg;
    cbor::AppendText(seed_, &msg);
    sha256::Digest(msg.data(), msg.size(), none_hash_.bytes.data());
  } else {
    StoreXxh128(XXH3_128bits(seed_.data(), seed_.size()), &none_hash_);
  }
}

Result<BlockHasher> BlockHasher::Create(HashAlgo algo, std::string_view seed, uint32_t block_size) {
  if (block_size == 0 || block_size > kMaxBlockSize) {
    return InvalidArgument("block size must be in [1, " + std::to_string(kMaxBlockSize) +
                           "], got " + std::to_string(block_size));
  }
  return BlockHasher(algo, std::string(seed), block_size);
}

BlockHash BlockHasher::HashBlock(const BlockHash& parent, std::span<const TokenId> tokens,
                                 std::span<const std::string_view> extra_keys) const {
  return algo_ == HashAlgo::kSha256Cbor ? Sha256CborBlock(parent, tokens, extra_keys)
                                        : Xxh3Block(parent, tokens, extra_keys);
}

BlockHash BlockHasher::HashBlockCborExtra(const BlockHash& parent, std::span<const TokenId> tokens,
                                          std::span<const uint8_t> extra_keys_cbor) const {
  const std::string_view tail(reinterpret_cast<const char*>(extra_keys_cbor.data()),
                              extra_keys_cbor.size());
  if (algo_ == HashAlgo::kSha256Cbor) {
    return Sha256CborBlockTail(parent, tokens, tail);
  }
  // xxh3 mode: the encoded item is one length-prefixed extra key (empty: none).
  if (tail.empty()) {
    return Xxh3Block(parent, tokens, {});
  }
  return Xxh3Block(parent, tokens, std::span<const std::string_view>(&tail, 1));
}

void BlockHasher::HashBlocks(std::span<const TokenId> tokens, std::vector<BlockHash>* out) const {
  HashBlocks(none_hash_, tokens, out);
}

void BlockHasher::HashBlocks(const BlockHash& parent, std::span<const TokenId> tokens,
                             std::vector<BlockHash>* out) const {
  // Copy the parent first: callers continue a chain with HashBlocks(out->back(), ..., out), and
  // reserve() below may move *out.
  BlockHash prev = parent;
  const size_t full = tokens.size() / block_size_;
  if (algo_ == HashAlgo::kSha256Cbor && sha256::ActiveImpl() == sha256::Impl::kShaNi &&
      block_size_ <= kWholeTokens && full > 0) {
    // The chain's hot path: digests stay in registers from block to block (see DigestChain).
    const size_t first = out->size();
    out->resize(first + full);
    ChainCtx ctx{tokens, block_size_};
    alignas(64) uint8_t buf0[kStageBytes];
    alignas(64) uint8_t buf1[kStageBytes];
    uint8_t* const bufs[2] = {buf0, buf1};
    sha256::DigestChain(prev.bytes.data(), full, &BuildChainMessage, &ctx, bufs,
                        (*out)[first].bytes.data());
    return;
  }
  out->reserve(out->size() + full);
  for (size_t b = 0; b < full; ++b) {
    prev = HashBlock(prev, tokens.subspan(b * block_size_, block_size_));
    out->push_back(prev);
  }
}

std::vector<BlockHash> BlockHasher::HashPrefix(std::span<const TokenId> tokens) const {
  std::vector<BlockHash> out;
  HashBlocks(tokens, &out);
  return out;
}

Status ValidateTokens(std::span<const TokenId> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] > kMaxTokenId) {
      return Status(Code::kKvBadToken, "token id " + std::to_string(tokens[i]) + " at index " +
                                           std::to_string(i) + " exceeds 2^31-1");
    }
  }
  return Status::Ok();
}

Result<std::vector<TokenId>> ParseTokenIds(std::string_view text) {
  std::vector<TokenId> out;
  auto is_sep = [](char c) {
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  };
  size_t i = 0;
  while (i < text.size()) {
    if (is_sep(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !is_sep(text[j])) ++j;
    const std::string_view tok = text.substr(i, j - i);
    const std::string shown =
        tok.size() > 32 ? std::string(tok.substr(0, 32)) + "..." : std::string(tok);
    const std::string where = " (token #" + std::to_string(out.size()) + ")";
    if (tok[0] == '-') {
      return Status(Code::kKvBadToken,
                    "negative token id '" + shown + "'" + where + ": ids must be >= 0");
    }
    uint64_t v = 0;
    const auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ptr != tok.data() + tok.size() ||
        (ec != std::errc() && ec != std::errc::result_out_of_range)) {
      return Status(Code::kKvBadToken, "token '" + shown + "'" + where + " is not an integer");
    }
    if (ec == std::errc::result_out_of_range || v > kMaxTokenId) {
      return Status(Code::kKvBadToken,
                    "token id " + shown + where + " out of range: ids must be <= 2147483647");
    }
    out.push_back(static_cast<TokenId>(v));
    i = j;
  }
  return out;
}

}  // namespace dualpath::kv
