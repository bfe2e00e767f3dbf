// `dualpath model ...`: the reference CPU model from the command line (for debugging engines and
// the replayer's checker).
//
//   dualpath model info --spec SPEC [--json]
//       geometry, KV bytes per token, parameter count, FLOPs per token
//   dualpath model generate --spec SPEC (--prompt-len N --seed S | --prompt-tokens "1,2,3")
//                           --gen N [--teacher own|random] [--json]
//       runs the model from scratch; prints the prompt, the generated tokens and the digest of the
//       first generated token's logits (what engines report and the checker compares)
//   dualpath model calibrate --spec SPEC [--reps 5] [--json] [--sim-config OUT
//                            --stor-rate 400mbit --comp-rate 2gbit --storage-efficiency 0.994
//                            --buffer-mib 256 --ranks 1]
//       measures the model's prefill and decode costs on this machine (thread CPU time) and fits
//       the simulator's cost model to them; --sim-config writes a `dualpath sim --config` file for
//       the emulated testbed (docs/sim.md "Against the engines")
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "dualpath/common/file.h"
#include "dualpath/common/numeric.h"
#include "dualpath/common/splitmix.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/sim/config.h"
#include "dualpath/testbed/cluster.h"

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

// ---- model calibrate ---------------------------------------------------------------------------

struct CalibrateArgs {
  std::string spec;
  int64_t reps = 5;
  bool json = false;
  std::string sim_config;
  std::string stor_rate = "400mbit";
  std::string comp_rate = "2gbit";
  double storage_efficiency = 0.994;
  int64_t buffer_mib = 256;
  int64_t ranks = 1;
};

// This thread's CPU time: the work a shape costs on a core of its own. Wall time on the shared
// machine would add whatever else runs (other engines, builds), which the simulator does not model
// (docs/sim.md "Against the engines").
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One measured shape: features x (the fitted terms' coefficients' multipliers) and its time.
struct Sample {
  std::array<double, 3> x{};
  double seconds = 0;
};

// Least squares on relative error (weight 1 / t², so a small shape counts as much as a large
// one) over the first `terms` features, coefficients >= 0: every subset of the terms is solved
// (at most 7 small systems) and the feasible one of least residual kept. false if none is.
bool FitNonNegative(const std::vector<Sample>& samples, int terms, std::array<double, 3>* coef,
                    double* rms_rel_error) {
  double best = INFINITY;
  for (int mask = 1; mask < (1 << terms); ++mask) {
    std::vector<int> idx;
    for (int k = 0; k < terms; ++k) {
      if (mask & (1 << k)) idx.push_back(k);
    }
    const size_t m = idx.size();
    double a[3][4] = {};  // normal equations [XᵀWX | XᵀWy]
    for (const Sample& s : samples) {
      const double w = 1 / (s.seconds * s.seconds);
      for (size_t r = 0; r < m; ++r) {
        for (size_t c = 0; c < m; ++c) a[r][c] += w * s.x[idx[r]] * s.x[idx[c]];
        a[r][m] += w * s.x[idx[r]] * s.seconds;
      }
    }
    bool singular = false;
    for (size_t p = 0; p < m && !singular; ++p) {  // Gaussian elimination with partial pivoting
      size_t piv = p;
      for (size_t r = p + 1; r < m; ++r) {
        if (std::fabs(a[r][p]) > std::fabs(a[piv][p])) piv = r;
      }
      if (std::fabs(a[piv][p]) < 1e-300) singular = true;
      if (singular) break;
      for (size_t c = 0; c <= m; ++c) std::swap(a[p][c], a[piv][c]);
      for (size_t r = 0; r < m; ++r) {
        if (r == p) continue;
        const double f = a[r][p] / a[p][p];
        for (size_t c = p; c <= m; ++c) a[r][c] -= f * a[p][c];
      }
    }
    if (singular) continue;
    std::array<double, 3> c{};
    bool feasible = true;
    for (size_t r = 0; r < m; ++r) {
      c[idx[r]] = a[r][m] / a[r][r];
      if (!(c[idx[r]] >= 0)) feasible = false;
    }
    if (!feasible) continue;
    double err = 0;
    for (const Sample& s : samples) {
      double pred = 0;
      for (int k = 0; k < terms; ++k) pred += c[k] * s.x[k];
      err += (pred - s.seconds) * (pred - s.seconds) / (s.seconds * s.seconds);
    }
    if (err < best) {
      best = err;
      *coef = c;
    }
  }
  if (!std::isfinite(best)) return false;
  *rms_rel_error = std::sqrt(best / static_cast<double>(samples.size()));
  return true;
}

// The median thread CPU time of `reps` runs of `work`.
template <typename F>
double MedianSeconds(int64_t reps, F&& work) {
  std::vector<double> t;
  for (int64_t r = 0; r < reps; ++r) {
    const double t0 = ThreadCpuSeconds();
    work();
    t.push_back(ThreadCpuSeconds() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int RunCalibrate(const CalibrateArgs& a) {
  Result<RefModelConfig> c = RefModelConfig::Parse(a.spec);
  if (!c.ok()) return ReportError("model calibrate: --spec", c.status());
  Status st = CheckCountRange("--reps", a.reps, 1, 1000, "repetitions");
  if (st.ok()) st = CheckCountRange("--buffer-mib", a.buffer_mib, 64, 1 << 20, "MiB");
  if (st.ok()) st = CheckCountRange("--ranks", a.ranks, 1, 64, "ranks");
  if (st.ok()) {
    st = CheckRange("--storage-efficiency", a.storage_efficiency, 0.01, 1, "(fraction)");
  }
  Result<uint64_t> stor_bps = testbed::ParseRate(a.stor_rate);
  Result<uint64_t> comp_bps = testbed::ParseRate(a.comp_rate);
  if (st.ok() && !stor_bps.ok()) st = stor_bps.status().WithContext("--stor-rate");
  if (st.ok() && !comp_bps.ok()) st = comp_bps.status().WithContext("--comp-rate");
  if (!st.ok()) return ReportError("model calibrate", st);
  Result<std::unique_ptr<RefModel>> made = RefModel::Create(*c);
  if (!made.ok()) return ReportError("model calibrate", made.status());
  const RefModel& m = **made;
  const kv::ModelGeometry g = c->Geometry();
  const uint64_t bpt = c->KvBytesPerTokenPerLayer();
  const uint32_t hidden = c->hidden();

  // Prefill: one request's forward over all layers (Embed, every layer, the last row's logits),
  // as a serial or one-request PE batch runs it, at the workloads' shapes: appends of tens to
  // hundreds of tokens over contexts of 0 to ~3K tokens.
  std::vector<Sample> prefill;
  nlohmann::json shapes = nlohmann::json::array();
  std::vector<float> logits(c->vocab);
  for (uint64_t cached : {0ull, 1024ull, 2560ull}) {
    for (uint64_t n : {16ull, 64ull, 256ull}) {
      std::vector<std::byte> kv(c->layers * (cached + n) * bpt);
      std::vector<uint32_t> tokens(n, 1);
      std::vector<float> h(n * hidden);
      const double t = MedianSeconds(a.reps, [&] {
        m.Embed(tokens, h);
        for (uint32_t l = 0; l < c->layers; ++l) {
          std::span<std::byte> layer_kv(kv.data() + l * (cached + n) * bpt, (cached + n) * bpt);
          const RefModel::BatchSeq seq{.start = cached, .n = n, .layer_kv = layer_kv};
          m.ForwardLayerBatch(l, std::span<const RefModel::BatchSeq>(&seq, 1), h);
        }
        m.Logits(std::span<const float>(h).subspan((n - 1) * hidden, hidden), logits);
      });
      prefill.push_back({{1.0, static_cast<double>(n), g.AttentionFlops(cached, n)}, t});
      shapes.push_back({{"kind", "prefill"}, {"cached", cached}, {"tokens", n}, {"seconds", t}});
    }
  }
  // Decode: one continuous-batching step of b requests at context `ctx` (every request one token,
  // its logits), as the DE runs it.
  std::vector<Sample> decode;
  for (uint64_t ctx : {512ull, 2048ull}) {
    for (uint64_t b : {1ull, 4ull, 16ull}) {
      std::vector<std::byte> kv(b * c->layers * (ctx + 1) * bpt);
      std::vector<uint32_t> tokens(b, 1);
      std::vector<float> h(b * hidden);
      std::vector<float> rows_logits(b * c->vocab);
      const double t = MedianSeconds(a.reps, [&] {
        m.Embed(tokens, h);
        for (uint32_t l = 0; l < c->layers; ++l) {
          std::vector<RefModel::BatchSeq> seqs(b);
          for (uint64_t i = 0; i < b; ++i) {
            const size_t off = ((i * c->layers) + l) * (ctx + 1) * bpt;
            seqs[i] = {.start = ctx, .n = 1, .layer_kv = {kv.data() + off, (ctx + 1) * bpt}};
          }
          m.ForwardLayerBatch(l, seqs, h);
        }
        m.LogitsRows(h, rows_logits);
      });
      decode.push_back({{1.0, static_cast<double>(b) * g.DecodeFlopsPerToken(ctx), 0}, t});
      shapes.push_back({{"kind", "decode"}, {"context", ctx}, {"batch", b}, {"seconds", t}});
    }
  }
  std::array<double, 3> pc{}, dc{};
  double prefill_err = 0, decode_err = 0;
  if (!FitNonNegative(prefill, 3, &pc, &prefill_err) ||
      !FitNonNegative(decode, 2, &dc, &decode_err) || pc[1] <= 0 || pc[2] <= 0 || dc[1] <= 0) {
    return ReportError("model calibrate",
                       Status(Code::kInternal,
                              "the measured times fit no cost model with positive "
                              "per-token and per-FLOP costs (a clock that did not "
                              "advance?); try more --reps"));
  }
  sim::MeasuredCosts costs{.forward_overhead_s = pc[0],
                           .linear_s_per_token = pc[1],
                           .attention_s_per_flop = pc[2],
                           .decode_step_overhead_s = dc[0],
                           .decode_s_per_flop = dc[1]};
  nlohmann::json j = {
      {"spec", c->ToString()},
      {"isa", std::string(m.isa())},
      {"kv_bytes_per_token", g.KvBytesPerToken()},
      {"clock", "thread CPU time, median of --reps"},
      {"costs",
       {{"forward_overhead_s", costs.forward_overhead_s},
        {"linear_s_per_token", costs.linear_s_per_token},
        {"attention_s_per_flop", costs.attention_s_per_flop},
        {"decode_step_overhead_s", costs.decode_step_overhead_s},
        {"decode_s_per_flop", costs.decode_s_per_flop}}},
      {"fit_rms_relative_error", {{"prefill", prefill_err}, {"decode", decode_err}}},
      {"shapes", shapes},
  };
  if (!a.sim_config.empty()) {
    // The emulated testbed as the simulator sees it: one "GPU" per rank, the shaped links (all of
    // the compute link is the engines' KV traffic: there is no model traffic to leave room for),
    // and the engine's registered buffer as both its HBM for KV and its DRAM buffer.
    sim::SimConfig sc;
    sc.hw.gpus_per_node = static_cast<uint32_t>(a.ranks);
    sc.hw.snic_gbps = static_cast<double>(*stor_bps) / 1e9;
    sc.hw.snic_efficiency = a.storage_efficiency;
    sc.hw.cnic_gbps = static_cast<double>(*comp_bps) / 1e9;
    sc.hw.cnic_kv_share = 1;
    sc.hw.pcie_gBps = 1e4;
    const double buffer_gb = static_cast<double>(a.buffer_mib) * (1 << 20) / 1e9;
    sc.hw.hbm_gb = std::max(1.0, 2 * buffer_gb);
    sc.engine.pe_hbm_reserved_gb = sc.hw.hbm_gb - buffer_gb;
    sc.engine.de_hbm_reserved_gb = sc.hw.hbm_gb - buffer_gb;
    sc.hw.dram_buffer_gb = buffer_gb;
    sc.engine.pe_ep_nodes = 1;
    sc.engine.de_ep_nodes = 1;
    Result<sim::SimConfig> applied = sim::ApplyMeasuredCosts(sc, g, costs);
    if (!applied.ok()) return ReportError("model calibrate", applied.status());
    Status w = WriteOutputFile(a.sim_config,
                               nlohmann::json::parse(sim::SimConfigToJson(*applied)).dump(2) + "\n",
                               "--sim-config");
    if (!w.ok()) return ReportError("model calibrate", w);
    j["sim_config"] = a.sim_config;
  }
  if (a.json) {
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::printf("model %s (%s kernels), thread CPU time, median of %lld\n", c->ToString().c_str(),
              std::string(m.isa()).c_str(), static_cast<long long>(a.reps));
  std::printf(
      "prefill: %.3f ms per forward + %.2f us per token + %.3f ns per attention FLOP "
      "(fit rms relative error %.3f)\n",
      costs.forward_overhead_s * 1e3, costs.linear_s_per_token * 1e6,
      costs.attention_s_per_flop * 1e9, prefill_err);
  std::printf(
      "decode:  %.3f ms per step + %.3f ns per request FLOP (fit rms relative error %.3f)\n",
      costs.decode_step_overhead_s * 1e3, costs.decode_s_per_flop * 1e9, decode_err);
  if (!a.sim_config.empty()) std::printf("sim config: %s\n", a.sim_config.c_str());
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

  auto cal = std::make_shared<CalibrateArgs>();
  CLI::App* calibrate = m->add_subcommand(
      "calibrate",
      "Measure the model's prefill and decode costs here and fit the simulator's cost model");
  calibrate->add_option("--spec", cal->spec, spec_help);
  calibrate->add_option("--reps", cal->reps, "Runs per shape; the median counts (default 5)");
  calibrate->add_flag("--json", cal->json, "Print JSON (costs, fit error, every shape's time)");
  calibrate->add_option("--sim-config", cal->sim_config,
                        "Write a `dualpath sim --config` file: these costs on the testbed below");
  calibrate->add_option("--stor-rate", cal->stor_rate, "Storage link rate (default 400mbit)");
  calibrate->add_option("--comp-rate", cal->comp_rate, "Compute link rate (default 2gbit)");
  calibrate->add_option("--storage-efficiency", cal->storage_efficiency,
                        "Measured goodput / storage link rate (default 0.994, cluster run's "
                        "probe on the 400mbit testbed, MTU 9000)");
  calibrate->add_option("--buffer-mib", cal->buffer_mib,
                        "Engine buffer (engine --buffer-mib, default 256): HBM for KV and DRAM "
                        "buffer");
  calibrate->add_option("--ranks", cal->ranks, "Prefill engine ranks = GPUs per node (default 1)");
  calibrate->callback([cal, exit_code] { *exit_code = RunCalibrate(*cal); });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
