// `dualpath model ...`: the reference CPU model from the command line (for debugging engines and
// the replayer's checker).
//
//   dualpath model info --spec SPEC [--json]
//       geometry, KV bytes per token, parameter count, FLOPs per token
//   dualpath model generate --spec SPEC (--prompt-len N --seed S | --prompt-tokens "1,2,3")
//                           --gen N [--teacher own|random] [--json]
//       runs the model from scratch; prints the prompt, the generated tokens and the digest of the
//       first generated token's logits (what engines report and the checker compares)
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "dualpath/common/numeric.h"
#include "dualpath/common/splitmix.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/model/ref_model.h"

namespace dualpath::cli {
namespace {

using model::Generation;
using model::RefModel;
using model::RefModelConfig;

std::string Hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string JoinTokens(const std::vector<uint32_t>& tokens) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(tokens[i]);
  }
  return out;
}

// Token i of the seeded stream: splitmix64 (dualpath/common/splitmix.h, as the weights), reduced
// mod vocab.
std::vector<uint32_t> SeededTokens(uint64_t seed, uint64_t salt, size_t n, uint32_t vocab) {
  std::vector<uint32_t> out(n);
  SplitMix64 stream(seed ^ (salt * 0xd1b54a32d192ed03ull));
  for (auto& t : out) t = static_cast<uint32_t>(stream.Next() % vocab);
  return out;
}

struct InfoArgs {
  std::string spec;
  bool json = false;
};

int RunInfo(const InfoArgs& a) {
  Result<RefModelConfig> c = RefModelConfig::Parse(a.spec);
  if (!c.ok()) return ReportError("model info: --spec", c.status());
  const kv::ModelGeometry g = c->Geometry();
  const uint64_t params = c->ParameterCount();
  const double kv_per_token = static_cast<double>(g.KvBytesPerToken());
  if (a.json) {
    nlohmann::json j = {
        {"spec", c->ToString()},
        {"attention", std::string(kv::AttentionKindName(g.attention))},
        {"layers", c->layers},
        {"hidden", c->hidden()},
        {"q_heads", c->q_heads},
        {"kv_heads", c->kv_heads},
        {"head_dim", c->head_dim},
        {"ffn_dim", c->ffn_dim},
        {"vocab", c->vocab},
        {"seed", c->seed},
        {"kv_bytes_per_token_per_layer", c->KvBytesPerTokenPerLayer()},
        {"kv_bytes_per_token", g.KvBytesPerToken()},
        {"parameters", params},
        {"weight_bytes", params * sizeof(float)},
        {"linear_flops_per_token", g.LinearFlopsPerToken()},
        {"attention_flops_per_token_at_2k", g.AttentionFlops(2048, 1)},
    };
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::printf("spec:        %s\n", c->ToString().c_str());
  std::printf("attention:   %s, %u layers, hidden %u, %u query heads, %u KV heads, head_dim %u\n",
              std::string(kv::AttentionKindName(g.attention)).c_str(), c->layers, c->hidden(),
              c->q_heads, c->kv_heads, c->head_dim);
  std::printf("mlp:         SwiGLU, ffn_dim %u; vocab %u\n", c->ffn_dim, c->vocab);
  std::printf("kv / token:  %llu bytes per layer, %.0f bytes all layers (%.2f KiB), fp32\n",
              static_cast<unsigned long long>(c->KvBytesPerTokenPerLayer()), kv_per_token,
              kv_per_token / 1024);
  std::printf("kv / block:  %.0f KiB per 64-token block\n", kv_per_token * 64 / 1024);
  std::printf("parameters:  %llu (%.2f MiB of fp32 weights)\n",
              static_cast<unsigned long long>(params), params * 4.0 / (1 << 20));
  std::printf("flops/token: %.3g linear, %.3g attention at 2K context\n", g.LinearFlopsPerToken(),
              g.AttentionFlops(2048, 1));
  return kExitOk;
}

// Input ranges (docs/model.md "Input ranges"); the KV of prompt + gen is also held under 8 GiB.
constexpr double kMaxGen = 100'000;
constexpr double kMaxPromptLen = 1'000'000;

struct GenerateArgs {
  std::string spec;
  int64_t prompt_len = 0;
  std::string prompt_tokens;
  int64_t gen = 1;
  uint64_t seed = 1;
  std::string teacher = "own";
  bool json = false;
};

int RunGenerate(const GenerateArgs& a) {
  const char* what = "model generate";
  Result<RefModelConfig> c = RefModelConfig::Parse(a.spec);
  if (!c.ok()) return ReportError("model generate: --spec", c.status());
  if (a.teacher != "own" && a.teacher != "random") {
    return ReportError(what,
                       InvalidArgument("--teacher must be own or random, got '" + a.teacher + "'"));
  }
  // docs/model.md "Input ranges" (signed flags checked as doubles: a negative prints as given).
  if (Status st = CheckRange("--gen", static_cast<double>(a.gen), 0, kMaxGen, "tokens"); !st.ok()) {
    return ReportError(what, st);
  }
  std::vector<uint32_t> prompt;
  if (!a.prompt_tokens.empty()) {
    if (a.prompt_len != 0) {
      return ReportError(what, InvalidArgument("give --prompt-len or --prompt-tokens, not both"));
    }
    Result<std::vector<kv::TokenId>> t = kv::ParseTokenIds(a.prompt_tokens);
    if (!t.ok()) return ReportError("model generate: --prompt-tokens", t.status());
    prompt = std::move(t).value();
    for (uint32_t tok : prompt) {
      if (tok >= c->vocab) {
        return ReportError(what, InvalidArgument("--prompt-tokens: token " + std::to_string(tok) +
                                                 " >= vocab " + std::to_string(c->vocab)));
      }
    }
  } else {
    if (Status st = CheckRange("--prompt-len", static_cast<double>(a.prompt_len), 1, kMaxPromptLen,
                               "tokens (or give --prompt-tokens)");
        !st.ok()) {
      return ReportError(what, st);
    }
    prompt = SeededTokens(a.seed, 1, static_cast<size_t>(a.prompt_len), c->vocab);
  }
  if (prompt.empty()) return ReportError(what, InvalidArgument("empty prompt"));
  const double kv_bytes = static_cast<double>(prompt.size() + a.gen) *
                          static_cast<double>(c->Geometry().KvBytesPerToken());
  if (kv_bytes > 8.0 * (1ull << 30)) {
    return ReportError(what, InvalidArgument("the KV of prompt + gen tokens would exceed 8 GiB"));
  }

  Result<std::unique_ptr<RefModel>> model = RefModel::Create(*c);
  if (!model.ok()) return ReportError(what, model.status());
  const uint32_t gen = static_cast<uint32_t>(a.gen);

  // "own": true greedy decoding (each step feeds the previous argmax). "random": teacher forcing
  // with seeded recorded tokens, as the replayer's synthetic workloads do.
  const auto t0 = std::chrono::steady_clock::now();
  Generation result;
  std::vector<uint32_t> teacher;
  if (a.teacher == "random") {
    teacher = SeededTokens(a.seed, 2, gen > 0 ? gen - 1 : 0, c->vocab);
    result = model::Reference(**model, prompt, teacher, gen);
  } else {
    result = model::Greedy(**model, prompt, gen);
    // The tokens greedy decoding fed to its decode steps: Reference with them as the teacher
    // reproduces the run.
    teacher.assign(result.tokens.begin(), result.tokens.end() - (gen > 0 ? 1 : 0));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (a.json) {
    nlohmann::json j = {
        {"spec", c->ToString()},     {"prompt", prompt},
        {"teacher_mode", a.teacher}, {"teacher", teacher},
        {"tokens", result.tokens},   {"first_logits_digest", Hex64(result.first_logits_digest)},
        {"seconds", seconds}};
    std::cout << j.dump() << "\n";
    return kExitOk;
  }
  std::printf("prompt (%zu tokens): %s\n", prompt.size(), JoinTokens(prompt).c_str());
  if (a.teacher == "random") {
    std::printf("teacher (%zu tokens): %s\n", teacher.size(), JoinTokens(teacher).c_str());
  }
  std::printf("generated (%zu tokens, %s): %s\n", result.tokens.size(),
              a.teacher == "own" ? "greedy" : "teacher-forced", JoinTokens(result.tokens).c_str());
  std::printf("first_logits_digest: %s\n", Hex64(result.first_logits_digest).c_str());
  std::printf("time: %.3f s\n", seconds);
  return kExitOk;
}

void Register(CLI::App& root, int* exit_code) {
  CLI::App* m = root.add_subcommand("model", "The reference CPU model (RefModel)");
  m->require_subcommand(1);
  const std::string spec_help =
      "Model spec, e.g. layers=8,q_heads=4,kv_heads=4,head_dim=32,ffn_dim=256,vocab=4096,seed=1 "
      "(any subset; empty = defaults)";

  auto info_args = std::make_shared<InfoArgs>();
  CLI::App* info = m->add_subcommand("info", "Geometry, KV bytes per token, parameter count");
  info->add_option("--spec", info_args->spec, spec_help);
  info->add_flag("--json", info_args->json, "Print JSON");
  info->callback([info_args, exit_code] { *exit_code = RunInfo(*info_args); });

  auto gen_args = std::make_shared<GenerateArgs>();
  CLI::App* gen = m->add_subcommand(
      "generate", "Run the model from scratch on a prompt; print tokens and the logits digest");
  gen->add_option("--spec", gen_args->spec, spec_help);
  gen->add_option("--prompt-len", gen_args->prompt_len, "Random prompt of N tokens from --seed");
  gen->add_option("--prompt-tokens", gen_args->prompt_tokens,
                  "Explicit prompt: token ids separated by commas or spaces");
  gen->add_option("--gen", gen_args->gen, "Tokens to generate (default 1; 0 = prefill only)");
  gen->add_option("--seed", gen_args->seed, "Seed of the random prompt and teacher (default 1)");
  gen->add_option("--teacher", gen_args->teacher,
                  "own: greedy (feed the model's tokens, default); random: teacher forcing with "
                  "seeded tokens, like Reference()");
  gen->add_flag("--json", gen_args->json, "Print one JSON object");
  gen->callback([gen_args, exit_code] { *exit_code = RunGenerate(*gen_args); });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
