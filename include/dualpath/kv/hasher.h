// Prefix block hashing: token ids -> one BlockHash per full block, chained so that a block's hash
// depends on every token before it.
//
// Two algorithms:
//  - kSha256Cbor: byte-exact with vLLM's `sha256_cbor` prefix caching hash, so a dualpath store
//    can share block keys with vLLM (and LMCache/AIBrix deployments keyed on vLLM hashes):
//      NONE_HASH = sha256(cbor(seed))                         seed: vLLM's PYTHONHASHSEED string
//      hash_i    = sha256(cbor([hash_{i-1} or NONE_HASH, [tokens of block i], extra_keys or null]))
//    with canonical CBOR (cbor2.dumps(..., canonical=True)). Only full blocks are hashed.
//  - kXxh3: XXH3-128 over the same chain (parent digest || little-endian u32 token ids), much
//    faster, for internal use only: NOT vLLM-compatible. Bytes 16..31 of its BlockHash are zero.
//
// Token ids are accepted in [0, kMaxTokenId] (2^31 - 1): vLLM token ids are non-negative and
// real vocabularies are < 2^20; the bound keeps ids representable as int32 everywhere.
//
// Thread safety: a BlockHasher is immutable after Create(); all const methods may be called
// concurrently from any thread (each call keeps its SHA-256 state on its own stack).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"

namespace dualpath::kv {

using TokenId = uint32_t;
inline constexpr TokenId kMaxTokenId = 0x7FFFFFFF;

enum class HashAlgo { kSha256Cbor, kXxh3 };

std::string_view HashAlgoName(HashAlgo algo);  // "sha256_cbor", "xxh3"
// Accepts "sha256_cbor" and "xxh3" (also "xxh3_128"); kInvalidArgument naming the valid ones.
Result<HashAlgo> ParseHashAlgo(std::string_view name);

// Block sizes used in practice: 16 (vLLM default), 64 (DualPath), 256 (LMCache/AIBrix),
// 512 (Mooncake). Any size in [1, kMaxBlockSize] works.
inline constexpr uint32_t kMaxBlockSize = 1u << 20;

class BlockHasher {
 public:
  // kInvalidArgument if block_size is 0 or > kMaxBlockSize.
  static Result<BlockHasher> Create(HashAlgo algo, std::string_view seed, uint32_t block_size);

  HashAlgo algo() const { return algo_; }
  uint32_t block_size() const { return block_size_; }
  const std::string& seed() const { return seed_; }
  // The chain's root: sha256(cbor(seed)) for kSha256Cbor; XXH3-128(seed) for kXxh3.
  const BlockHash& none_hash() const { return none_hash_; }

  // Hash of one block whose parent is `parent` (use none_hash() for the first block). `tokens`
  // may have any length (vLLM only hashes full blocks; callers normally pass block_size tokens).
  // `extra_keys` (vLLM's LoRA name / cache salt, as text strings) are appended as a CBOR array;
  // empty means null. Token ids must be <= kMaxTokenId (checked: larger ids abort; validate
  // untrusted input with ValidateTokens first).
  BlockHash HashBlock(const BlockHash& parent, std::span<const TokenId> tokens,
                      std::span<const std::string_view> extra_keys = {}) const;

  // Same, with the extra keys given as one already-encoded canonical CBOR item
  // (cbor2.dumps(extra_keys, canonical=True)); empty means none (CBOR null). For callers that hold
  // extra keys of other shapes than text strings: vLLM 0.33 tags them as tuples, e.g.
  // (("cache_salt", "s"),) or (("lora", name, path),), and the Python binding encodes those
  // objects itself. The bytes are not parsed: a malformed item hashes, but matches nothing vLLM
  // makes. In xxh3 mode the bytes are hashed as one length-prefixed extra key.
  BlockHash HashBlockCborExtra(const BlockHash& parent, std::span<const TokenId> tokens,
                               std::span<const uint8_t> extra_keys_cbor) const;

  // Hashes every full block of `tokens` (a partial tail is ignored), starting from `parent`
  // (none_hash() when omitted), and appends the hashes to `*out`. Allocation-free apart from
  // growing `*out`.
  void HashBlocks(std::span<const TokenId> tokens, std::vector<BlockHash>* out) const;
  void HashBlocks(const BlockHash& parent, std::span<const TokenId> tokens,
                  std::vector<BlockHash>* out) const;
  std::vector<BlockHash> HashPrefix(std::span<const TokenId> tokens) const;

 private:
  BlockHasher(HashAlgo algo, std::string seed, uint32_t block_size);

  HashAlgo algo_;
  std::string seed_;
  uint32_t block_size_;
  BlockHash none_hash_;
};

// kKvBadToken naming the first id > kMaxTokenId and its position.
Status ValidateTokens(std::span<const TokenId> tokens);

// Parses token ids separated by whitespace and/or commas ("1, 2,3\n4"). Each must be a decimal
// integer in [0, kMaxTokenId]; otherwise kKvBadToken naming the offending text and its index.
Result<std::vector<TokenId>> ParseTokenIds(std::string_view text);

}  // namespace dualpath::kv
