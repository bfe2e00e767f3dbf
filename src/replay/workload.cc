#include "dualpath/replay/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "dualpath/common/numeric.h"
#include "dualpath/common/splitmix.h"
#include "dualpath/trace/tokens.h"

#ifndef DUALPATH_SOURCE_DATA_DIR
#define DUALPATH_SOURCE_DATA_DIR ""
#endif

namespace dualpath::replay {
namespace {

uint64_t Scaled(uint64_t tokens, double factor) {
  return std::max<uint64_t>(
      1, static_cast<uint64_t>(std::llround(static_cast<double>(tokens) * factor)));
}

// docs/replay.md "Input ranges": every prompt of every turn is held as token ids, so memory grows
// as agents x turns x max_context; each bound keeps one flag from making a run unbounded.
Status Validate(const WorkloadOptions& o) {
  RETURN_IF_ERROR(CheckCountRange("--agents", o.agents, 1, kMaxAgents, "agents"));
  RETURN_IF_ERROR(CheckCountRange("--turns", o.turns, 1, kMaxTurns, "turns"));
  RETURN_IF_ERROR(CheckCountRange("--max-context", o.max_context, 64, kMaxContext, "tokens"));
  RETURN_IF_ERROR(CheckCountRange("--append", o.append, 1, o.max_context, "tokens"));
  RETURN_IF_ERROR(CheckCountRange("--gen", o.gen, 1, (o.max_context - 1) / 2, "tokens"));
  if (o.vocab < 2) return InvalidArgument("vocab must be at least 2");
  if (o.source == "codex") {
    if (o.shared_prefix != 0) {
      RETURN_IF_ERROR(CheckCountRange("--shared-prefix", o.shared_prefix, 1, o.max_context / 2,
                                      "tokens (at most the first prompt, --max-context / 2)"));
    }
  } else if (o.shared_prefix != 0) {
    return InvalidArgument(fmt::format("--shared-prefix {} is for --workload codex only (got '{}')",
                                       o.shared_prefix, o.source));
  }
  if (o.source == "static" && o.turns > 1) {
    // --max-context does not cut a static agent: its last turn's context is the bound.
    const uint64_t longest = kStaticInputTokens.back() + uint64_t{o.turns - 1} * o.append +
                             uint64_t{o.turns} * kStaticGenTokens;
    if (longest > kMaxContext) {
      return InvalidArgument(fmt::format(
          "--workload static: --turns {} x --append {} makes a context of {} tokens, above {}",
          o.turns, o.append, longest, kMaxContext));
    }
  }
  const uint64_t tokens = static_cast<uint64_t>(o.agents) * o.turns * o.max_context;
  if (tokens > kMaxWorkloadTokens) {
    return InvalidArgument(
        fmt::format("--agents x --turns x --max-context = {} x {} x {} = {} tokens is above {}: "
                    "every prompt is held in memory as token ids",
                    o.agents, o.turns, o.max_context, tokens, kMaxWorkloadTokens));
  }
  return Status::Ok();
}

// The block hash id whose token stream is the codex source's shared system prefix (any fixed
// value: trace::BlockTokenIds keeps block streams apart from session streams).
constexpr uint64_t kSharedPrefixStream = 0x436f646578535953ULL;  // "CodexSYS"

// A standard normal draw (Box-Muller) from two splitmix64 uniforms: the same on every platform,
// unlike std::normal_distribution.
double Normal(SplitMix64& rng) {
  const double u1 = (static_cast<double>(rng.Next() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(rng.Next() >> 11) * 0x1.0p-53;          // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
}

// The "codex" shape, before scaling: every agent runs o.turns turns; the first appends are equal
// (one system prompt + one long task input, scaled to max_context / 2); later appends and all
// generations vary lognormally around their means (relative sizes only: ShapeWorkload normalizes
// them to --append and --gen).
// o.agents sessions of o.turns turns each (64-token blocks, as every generated source here),
// turn(agent, turn) giving each turn's sizes: the frame CodexShape and StaticWorkload share.
template <typename TurnFn>
trace::Workload AgentSessions(const WorkloadOptions& o, std::string name, TurnFn turn) {
  trace::Workload w;
  w.name = std::move(name);
  for (uint32_t k = 0; k < o.agents; ++k) {
    trace::Session s;
    s.id = k;
    s.block_size = 64;
    for (uint32_t i = 0; i < o.turns; ++i) s.turns.push_back(turn(k, i));
    w.sessions.push_back(std::move(s));
  }
  return w;
}

trace::Workload CodexShape(const WorkloadOptions& o) {
  constexpr double kUnit = 1000;        // relative size of a mean append or generation
  constexpr double kAppendSigma = 0.6;  // Codex appends: a few hundred to a few thousand tokens
  constexpr double kGenSigma = 0.5;
  SplitMix64 rng(SplitMix64::Mix(o.seed) ^ 0x636f646578ULL);  // "codex"
  // Turns are drawn in agent-major order, append before generation: the draws' order is the
  // workload (AgentSessions calls turn() in that order).
  return AgentSessions(o, "codex", [&](uint32_t, uint32_t i) {
    trace::Turn t;
    t.append_tokens =
        i == 0 ? static_cast<uint64_t>(kUnit)
               : static_cast<uint64_t>(std::llround(kUnit * std::exp(kAppendSigma * Normal(rng))));
    t.gen_tokens = static_cast<uint64_t>(std::llround(kUnit * std::exp(kGenSigma * Normal(rng))));
    t.append_tokens = std::max<uint64_t>(1, t.append_tokens);
    t.gen_tokens = std::max<uint64_t>(1, t.gen_tokens);
    return t;
  });
}

// The "static" source (TraCT §5's static workload): agent k's first prompt is
// kStaticInputTokens[k % 4] tokens, every generation 3 tokens; later turns (--turns > 1) append
// --append tokens. Fixed sizes, not a shape: ShapeWorkload returns it unscaled.
trace::Workload StaticWorkload(const WorkloadOptions& o) {
  return AgentSessions(o, "static", [&](uint32_t k, uint32_t i) {
    trace::Turn t;
    t.append_tokens = i == 0 ? kStaticInputTokens[k % kStaticInputTokens.size()] : o.append;
    t.gen_tokens = kStaticGenTokens;
    return t;
  });
}

// The source's sessions, before scaling.
Result<trace::Workload> LoadSource(const WorkloadOptions& o) {
  const std::string data = o.data_dir.empty() ? DataDir() : o.data_dir;
  if (o.source == "codex") return CodexShape(o);
  if (o.source == "synthetic" || o.source == "compute") {
    // The 32K row of Table 2: the shortest fitted trajectories, so --turns cuts fewer of them.
    return trace::GenerateSynthetic(
        {.max_len_k = 32, .sessions = o.agents, .seed = o.seed, .block_size = 64});
  }
  if (o.source == "weka") {
    return trace::ReadWekaDir(data + "/traces/weka-claude-code");
  }
  if (o.source == "mooncake") {
    ASSIGN_OR_RETURN(trace::Workload requests,
                     trace::ReadMooncakeJsonl(data + "/traces/mooncake/"
                                                     "conversation_trace_head200.jsonl"));
    return trace::InferMooncakeSessions(requests);
  }
  std::error_code ec;
  if (!std::filesystem::exists(o.source, ec)) {
    return InvalidArgument(
        "--workload '" + o.source +
        "': expected synthetic, compute, codex, static, weka, mooncake or a trace file");
  }
  return trace::ReadTrace(o.source);
}

}  // namespace

WorkloadOptions WithSourceDefaults(WorkloadOptions o, GivenOptions given) {
  if (o.source == "compute" && !given.append) {
    o.append = 512;
  }
  if (o.source == "codex") {
    if (!given.append) o.append = 2048;
    if (!given.turns) o.turns = 30;
  }
  return o;
}

uint32_t SharedPrefixTokens(const WorkloadOptions& o) {
  if (o.source != "codex") return 0;
  return o.shared_prefix != 0 ? o.shared_prefix : o.max_context / 4;
}

std::vector<uint32_t> SharedPrefixTokenIds(uint64_t n, uint32_t vocab) {
  std::vector<uint32_t> out(n);
  trace::BlockTokenIds(kSharedPrefixStream, vocab, out);
  return out;
}

std::string DataDir() {
  if (const char* env = std::getenv("DUALPATH_DATA_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return DUALPATH_SOURCE_DATA_DIR;
}

Result<trace::Workload> ShapeWorkload(const WorkloadOptions& o) {
  RETURN_IF_ERROR(Validate(o));
  if (o.source == "static") return StaticWorkload(o);
  ASSIGN_OR_RETURN(trace::Workload src, LoadSource(o));
  if (src.sessions.empty()) {
    return InvalidArgument("--workload '" + o.source + "' has no sessions");
  }
  // Recorded traces: the sessions with the most turns first (stable, so file order breaks
  // ties); agents beyond the trace's sessions replay them again under their own ids.
  std::vector<size_t> order(src.sessions.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return src.sessions[a].turns.size() > src.sessions[b].turns.size();
  });
  std::vector<const trace::Session*> picked;
  for (uint32_t k = 0; k < o.agents; ++k) {
    picked.push_back(&src.sessions[order[k % order.size()]]);
  }
  // Sizes keep the source's order but with their spread damped (square root of the ratio to the
  // mean): Table 2's lognormal tails would otherwise give 2-token outputs next to 200-token ones
  // on a testbed that runs a few dozen requests. Each kind is then normalized to its target mean.
  double first_sum = 0, later_sum = 0, gen_sum = 0;
  uint64_t later_n = 0, gen_n = 0;
  for (const trace::Session* s : picked) {
    for (size_t i = 0; i < s->turns.size() && i < o.turns; ++i) {
      const trace::Turn& t = s->turns[i];
      if (i == 0) {
        first_sum += static_cast<double>(t.append_tokens);
      } else {
        later_sum += static_cast<double>(t.append_tokens);
        ++later_n;
      }
      gen_sum += static_cast<double>(t.gen_tokens);
      ++gen_n;
    }
  }
  const double first_mean = std::max(1.0, first_sum / static_cast<double>(picked.size()));
  const double later_mean = later_n ? std::max(1.0, later_sum / static_cast<double>(later_n)) : 1;
  const double gen_mean = gen_n ? std::max(1.0, gen_sum / static_cast<double>(gen_n)) : 1;
  const auto damp = [](double x, double mean) { return std::sqrt(std::max(x, 1.0) / mean); };
  double first_d = 0, later_d = 0, gen_d = 0;
  for (const trace::Session* s : picked) {
    for (size_t i = 0; i < s->turns.size() && i < o.turns; ++i) {
      const trace::Turn& t = s->turns[i];
      (i == 0 ? first_d : later_d) +=
          damp(static_cast<double>(t.append_tokens), i == 0 ? first_mean : later_mean);
      gen_d += damp(static_cast<double>(t.gen_tokens), gen_mean);
    }
  }
  first_d = std::max(1e-9, first_d / static_cast<double>(picked.size()));
  later_d = later_n ? std::max(1e-9, later_d / static_cast<double>(later_n)) : 1;
  gen_d = gen_n ? std::max(1e-9, gen_d / static_cast<double>(gen_n)) : 1;
  const auto first_tokens = [&](uint64_t x) {
    return Scaled(1, o.max_context / 2.0 * damp(static_cast<double>(x), first_mean) / first_d);
  };
  const auto append_tokens = [&](uint64_t x) {
    return Scaled(1, o.append * damp(static_cast<double>(x), later_mean) / later_d);
  };
  // At least 2 generated tokens, so every request has a decode step (TTST, TPOT).
  const auto gen_tokens = [&](uint64_t x) {
    return std::max<uint64_t>(2, Scaled(1, o.gen * damp(static_cast<double>(x), gen_mean) / gen_d));
  };

  trace::Workload out;
  out.name = o.source;
  for (uint32_t k = 0; k < o.agents; ++k) {
    const trace::Session& s = *picked[k];
    trace::Session t;
    t.id = k;
    t.start_s = 0;
    t.block_size = 64;
    uint64_t context = 0;
    for (size_t i = 0; i < s.turns.size() && t.turns.size() < o.turns; ++i) {
      trace::Turn turn;  // no hash ids, no compaction, zero think time (offline, A.3)
      turn.append_tokens =
          i == 0 ? first_tokens(s.turns[i].append_tokens) : append_tokens(s.turns[i].append_tokens);
      turn.gen_tokens = o.gen == 1 ? 1 : gen_tokens(s.turns[i].gen_tokens);
      if (context + turn.append_tokens + turn.gen_tokens > o.max_context) {
        if (i == 0) {  // a first prompt alone too long is clipped: no agent is empty
          turn.gen_tokens = std::min<uint64_t>(turn.gen_tokens, o.max_context / 2);
          turn.append_tokens = o.max_context - turn.gen_tokens;
          t.turns.push_back(turn);
        }
        break;
      }
      context += turn.append_tokens + turn.gen_tokens;
      t.turns.push_back(turn);
    }
    out.sessions.push_back(std::move(t));
  }
  return out;
}

TurnSpec MakeTurnSpec(const trace::Session& s, size_t i, uint32_t vocab, uint64_t shared_prefix) {
  // The recorded output positions follow the prompt; PromptTokenIds of a copy whose turn i
  // appends the generation too gives prompt and teacher in one stream (for sessions without hash
  // ids the token at a position depends only on the session and the position).
  trace::Session ext = s;
  ext.turns.resize(i + 1);
  const uint64_t gen = s.turns[i].gen_tokens;
  ext.turns[i].append_tokens += gen > 0 ? gen - 1 : 0;
  std::vector<uint32_t> all = trace::PromptTokenIds(ext, i, vocab);
  // The shared system prefix replaces the session's own tokens at the same positions: still a
  // function of the position alone, so every prompt keeps extending the previous context.
  const std::vector<uint32_t> shared =
      SharedPrefixTokenIds(std::min<uint64_t>(shared_prefix, all.size()), vocab);
  std::copy(shared.begin(), shared.end(), all.begin());
  const uint64_t prompt = trace::PromptTokens(s, i);
  TurnSpec t;
  t.turn = static_cast<uint32_t>(i);
  t.gen_tokens = static_cast<uint32_t>(gen);
  t.prompt.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(prompt));
  t.teacher.assign(all.begin() + static_cast<std::ptrdiff_t>(prompt), all.end());
  t.context_tokens = trace::ContextTokens(s, i);
  return t;
}

Result<ReplayWorkload> BuildWorkload(const WorkloadOptions& o) {
  ASSIGN_OR_RETURN(trace::Workload shaped, ShapeWorkload(o));
  ReplayWorkload w;
  w.name = shaped.name;
  w.shared_prefix_tokens = SharedPrefixTokens(o);
  for (const trace::Session& s : shaped.sessions) {
    Agent a;
    a.id = s.id;
    for (size_t i = 0; i < s.turns.size(); ++i) {
      TurnSpec t = MakeTurnSpec(s, i, o.vocab, w.shared_prefix_tokens);
      ++w.requests;
      w.prompt_tokens += t.prompt.size();
      w.context_tokens += t.context_tokens;
      w.gen_tokens += t.gen_tokens;
      a.turns.push_back(std::move(t));
    }
    w.agents.push_back(std::move(a));
  }
  return w;
}

}  // namespace dualpath::replay
