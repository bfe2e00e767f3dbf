// The `dualpath kv hash` token reader: any text into kv::ParseTokenIds, and the ids it accepts
// into both block hashers. Invariants: every accepted id is <= kMaxTokenId; printing the ids back
// and parsing again gives the same ids; hashing is deterministic and a prefix's hashes are a
// prefix of the whole's.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/kv/hasher.h"
#include "fuzz_util.h"

using namespace dualpath;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<std::vector<kv::TokenId>> ids = kv::ParseTokenIds(text);
  if (!ids.ok()) {
    if (ids.status().code() != Code::kKvBadToken) fuzz::Broken("rejected with another code");
    return 0;
  }
  std::string printed;
  for (kv::TokenId t : *ids) {
    if (t > kv::kMaxTokenId) fuzz::Broken("accepted an id above kMaxTokenId");
    printed += std::to_string(t) + (printed.size() % 3 == 0 ? "," : " ");
  }
  Result<std::vector<kv::TokenId>> again = kv::ParseTokenIds(printed);
  if (!again.ok() || *again != *ids) fuzz::Broken("ids do not survive printing and parsing");

  const uint32_t block = 1 + static_cast<uint32_t>(size % 16);
  for (kv::HashAlgo algo : {kv::HashAlgo::kSha256Cbor, kv::HashAlgo::kXxh3}) {
    Result<kv::BlockHasher> h = kv::BlockHasher::Create(algo, "fuzz", block);
    if (!h.ok()) fuzz::Broken("hasher creation failed");
    const std::vector<kv::BlockHash> all = h->HashPrefix(*ids);
    if (all.size() != ids->size() / block) fuzz::Broken("wrong number of block hashes");
    if (h->HashPrefix(*ids) != all) fuzz::Broken("hashing is not deterministic");
    if (!all.empty()) {
      const std::vector<kv::TokenId> head(ids->begin(), ids->begin() + block);
      const std::vector<kv::BlockHash> first = h->HashPrefix(head);
      if (first.size() != 1 || first[0] != all[0]) fuzz::Broken("prefix hashes differ");
    }
  }
  return 0;
}
