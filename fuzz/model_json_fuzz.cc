// Model JSON files (`--model FILE.json`): any text into ParseModelJson. Invariants of an accepted
// model: it passes its own Validate(), its KV sizes are non-zero and bounded as model.h promises,
// the derived FLOP and byte figures are finite and non-negative, and its fingerprint is stable.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "dualpath/kv/block_file.h"
#include "dualpath/kv/model.h"
#include "fuzz_util.h"

using namespace dualpath;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<kv::ModelGeometry> m = kv::ParseModelJson(text, "fuzz.json");
  if (!m.ok()) {
    if (m.status().message().empty()) fuzz::Broken("error without a message");
    return 0;
  }
  if (!m->Validate().ok()) fuzz::Broken("accepted a model its Validate() rejects");
  const uint64_t bpt = m->kv_bytes_per_token_per_layer;
  if (bpt == 0 || bpt > kv::kMaxKvBytesPerTokenPerLayer) fuzz::Broken("KV bytes out of range");
  if (m->num_layers == 0 || m->num_layers > kv::kMaxModelLayers)
    fuzz::Broken("layers out of range");
  for (double v : {m->LinearFlopsPerToken(), m->PrefillFlops(4096, 512), m->DecodeFlopsPerToken(1),
                   m->DecodeKvBytesRead(100000), m->AttentionFlops(0, 1)}) {
    if (!std::isfinite(v) || v < 0) fuzz::Broken("a derived figure is negative or not finite");
  }
  if (kv::ModelFingerprint(*m) != kv::ModelFingerprint(*m)) fuzz::Broken("fingerprint unstable");
  (void)kv::DeriveKvBytesPerTokenPerLayer(*m);
  return 0;
}
