// Reference (from scratch, literally prefill then one decode step per generated token) and
// ReferenceSession (incremental, one chunk per layer). Reference deliberately follows the
// engines' schedule (prefill, then token-by-token decode) so that the tests comparing the two
// compare two different chunkings.
#include <algorithm>
#include <string>

#include "dualpath/common/check.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/model/reference_session.h"

namespace dualpath::model {

Generation Reference(const RefModel& model, std::span<const uint32_t> prompt,
                     std::span<const uint32_t> teacher, uint32_t gen_tokens,
                     std::vector<std::byte>* kv_out) {
  const RefModelConfig& c = model.config();
  DUALPATH_CHECK(!prompt.empty(), "Reference: empty prompt");
  DUALPATH_CHECK(gen_tokens == 0 || teacher.size() >= gen_tokens - 1,
                 "Reference: teacher holds fewer than gen_tokens - 1 tokens");
  const size_t h = c.hidden();
  const size_t p = prompt.size();
  const size_t total = p + (gen_tokens > 0 ? gen_tokens - 1 : 0);
  const size_t bpt = c.KvBytesPerTokenPerLayer();

  std::vector<std::byte> local;
  std::vector<std::byte>& kv = kv_out != nullptr ? *kv_out : local;
  kv.assign(size_t{c.layers} * total * bpt, std::byte{0});
  auto layer_span = [&](uint32_t l, size_t tokens) {
    return std::span<std::byte>(kv.data() + l * total * bpt, tokens * bpt);
  };

  Generation gen;
  std::vector<float> logits(c.vocab);
  std::vector<float> hidden(p * h);
  model.Embed(prompt, hidden);
  for (uint32_t l = 0; l < c.layers; ++l) model.ForwardLayer(l, 0, layer_span(l, p), hidden);
  model.Logits(std::span<const float>(hidden).subspan((p - 1) * h, h), logits);
  gen.first_logits_digest = RefModel::LogitsDigest(logits);
  if (gen_tokens == 0) return gen;
  gen.tokens.push_back(RefModel::Argmax(logits));

  std::vector<float> row(h);
  for (uint32_t j = 1; j < gen_tokens; ++j) {
    const size_t pos = p + j - 1;
    model.Embed(teacher.subspan(j - 1, 1), row);
    for (uint32_t l = 0; l < c.layers; ++l) model.ForwardLayer(l, pos, layer_span(l, pos + 1), row);
    model.Logits(row, logits);
    gen.tokens.push_back(RefModel::Argmax(logits));
  }
  return gen;
}

Generation Greedy(const RefModel& model, std::span<const uint32_t> prompt, uint32_t gen_tokens) {
  const RefModelConfig& c = model.config();
  DUALPATH_CHECK(!prompt.empty(), "Greedy: empty prompt");
  const size_t h = c.hidden();
  const size_t p = prompt.size();
  const size_t total = p + (gen_tokens > 0 ? gen_tokens - 1 : 0);
  const size_t bpt = c.KvBytesPerTokenPerLayer();
  std::vector<std::vector<std::byte>> kv(c.layers, std::vector<std::byte>(total * bpt));

  Generation gen;
  std::vector<float> logits(c.vocab);
  std::vector<float> hidden(p * h);
  model.Embed(prompt, hidden);
  for (uint32_t l = 0; l < c.layers; ++l) model.ForwardLayer(l, 0, kv[l], hidden);
  model.Logits(std::span<const float>(hidden).subspan((p - 1) * h, h), logits);
  gen.first_logits_digest = RefModel::LogitsDigest(logits);
  if (gen_tokens == 0) return gen;
  gen.tokens.push_back(RefModel::Argmax(logits));
  std::vector<float> row(h);
  for (uint32_t j = 1; j < gen_tokens; ++j) {
    model.Embed(std::span<const uint32_t>(&gen.tokens.back(), 1), row);
    for (uint32_t l = 0; l < c.layers; ++l) model.ForwardLayer(l, p + j - 1, kv[l], row);
    model.Logits(row, logits);
    gen.tokens.push_back(RefModel::Argmax(logits));
  }
  return gen;
}

ReferenceSession::ReferenceSession(const RefModel& model)
    : model_(model), kv_(model.config().layers) {}

std::span<const std::byte> ReferenceSession::layer_kv(uint32_t layer) const {
  DUALPATH_CHECK(layer < kv_.size(), "ReferenceSession::layer_kv: layer out of range");
  return std::span<const std::byte>(kv_[layer])
      .first(tokens_.size() * model_.config().KvBytesPerTokenPerLayer());
}

void ReferenceSession::Clear() {
  tokens_.clear();
  tokens_.shrink_to_fit();
  for (auto& layer : kv_) {
    layer.clear();
    layer.shrink_to_fit();
  }
}

Result<Generation> ReferenceSession::Run(std::span<const uint32_t> prompt,
                                         std::span<const uint32_t> teacher, uint32_t gen_tokens) {
  const RefModelConfig& c = model_.config();
  if (prompt.empty()) return InvalidArgument("reference: empty prompt");
  if (gen_tokens > 0 && teacher.size() < gen_tokens - 1) {
    return InvalidArgument("reference: gen_tokens=" + std::to_string(gen_tokens) + " needs " +
                           std::to_string(gen_tokens - 1) + " teacher tokens, got " +
                           std::to_string(teacher.size()));
  }
  // The positions this request computes: the prompt, then the teacher tokens fed to decode steps.
  std::vector<uint32_t> seq(prompt.begin(), prompt.end());
  if (gen_tokens > 1) seq.insert(seq.end(), teacher.begin(), teacher.begin() + (gen_tokens - 1));
  for (size_t i = 0; i < seq.size(); ++i) {
    if (seq[i] >= c.vocab) {
      return InvalidArgument("reference: token id " + std::to_string(seq[i]) + " at position " +
                             std::to_string(i) + " >= vocab " + std::to_string(c.vocab));
    }
  }

  // Reuse the common prefix, but recompute at least the last prompt token: its logits (not only
  // its KV) are needed, and the session keeps only KV.
  const size_t p = prompt.size();
  const size_t limit = std::min(tokens_.size(), p - 1);
  size_t common = 0;
  while (common < limit && tokens_[common] == seq[common]) ++common;

  const size_t total = seq.size();
  const size_t n = total - common;
  const size_t h = c.hidden();
  const size_t bpt = c.KvBytesPerTokenPerLayer();
  for (auto& layer : kv_) layer.resize(total * bpt);
  tokens_ = std::move(seq);

  std::vector<float> hidden(n * h);
  model_.Embed(std::span<const uint32_t>(tokens_).subspan(common), hidden);
  for (uint32_t l = 0; l < c.layers; ++l) {
    model_.ForwardLayer(l, common, std::span<std::byte>(kv_[l]).first(total * bpt), hidden);
  }
  computed_tokens_ += n;
  reused_tokens_ += common;

  // Logits of position p - 1 (the first generated token) and of every teacher-fed position.
  Generation gen;
  std::vector<float> logits(c.vocab);
  const size_t rows = gen_tokens > 0 ? gen_tokens : 1;
  for (size_t r = 0; r < rows; ++r) {
    const size_t pos = p - 1 + r;
    model_.Logits(std::span<const float>(hidden).subspan((pos - common) * h, h), logits);
    if (r == 0) gen.first_logits_digest = RefModel::LogitsDigest(logits);
    if (gen_tokens > 0) gen.tokens.push_back(RefModel::Argmax(logits));
  }
  return gen;
}

}  // namespace dualpath::model
