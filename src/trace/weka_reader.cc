// WEKA kv-cache-tester Claude Code sessions (trace_NNNN.json). See docs/formats/trace.md.
//
// A file is one top-level agent: {"block_size": 64, "requests": [...]}; a request is
// {"t", "type", "in", "out", "hash_ids", "think_time", ...}, and a request of type "subagent"
// carries its own nested "requests" (t relative to the sub-agent's start), to any depth. Each
// agent becomes one Session; sub-agents point at their parent.
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "dualpath/common/file.h"
#include "dualpath/trace/workload.h"
#include "trace/json_util.h"

namespace dualpath::trace {
namespace {

using internal::Malformed;
using nlohmann::json;

// Local hash ids get the file's namespace in the bits above kNamespaceShift, so ids of different
// files (which restart at 1) never collide when a directory is read.
constexpr int kNamespaceShift = 40;
constexpr uint64_t kMaxLocalId = (uint64_t{1} << kNamespaceShift) - 1;
// Sub-agents nest one level in the real traces; a hostile file must not recurse without bound.
constexpr int kMaxDepth = 16;
// Tokens per hash id: the recorded files use 64.
constexpr uint64_t kMaxBlockSize = uint64_t{1} << 20;

struct FileContext {
  std::string path;
  uint64_t ns;  // hash-id namespace of this file
  uint32_t block_size;
  Workload* w;
};

struct Recorded {
  uint64_t in = 0;
  uint64_t out = 0;
  std::vector<uint64_t> hash_ids;
};

// Turns from recorded prompts: prompt(i) must equal the recorded "in". Normally the prompt extends
// the whole previous context (A.3): append = in - (prev_in + prev_out). When the recorded prompt
// diverged from that (Claude Code drops thinking blocks and compacts long contexts; the hash ids
// then stop matching the previous prompt's), the turn keeps only the shared prefix.
Turn MakeTurn(const Recorded* prev, const Recorded& cur, uint32_t block_size) {
  Turn t;
  t.gen_tokens = cur.out;
  if (prev == nullptr) {
    t.append_tokens = cur.in;
    return t;
  }
  size_t k = 0;
  while (k < prev->hash_ids.size() && k < cur.hash_ids.size() &&
         prev->hash_ids[k] == cur.hash_ids[k]) {
    ++k;
  }
  const bool prefix_intact = k == prev->hash_ids.size();
  if (prefix_intact && cur.in >= prev->in + prev->out) {
    t.append_tokens = cur.in - (prev->in + prev->out);
    return t;
  }
  // The previous prompt survives whole only if every one of its full blocks still matches.
  const uint64_t shared = prefix_intact ? prev->in : k * uint64_t{block_size};
  t.keep_tokens = std::min(shared, cur.in);
  t.append_tokens = cur.in - t.keep_tokens;
  return t;
}

Status ReadAgent(const json& requests, const std::string& pointer, double start_s,
                 uint64_t parent_id, uint32_t parent_turn, int depth, FileContext& ctx) {
  const std::string where = ctx.path + ":" + pointer;
  if (depth > kMaxDepth) {
    return Malformed(where, "sub-agents nested deeper than " + std::to_string(kMaxDepth));
  }
  if (!requests.is_array()) {
    return Malformed(where, "\"requests\" must be an array");
  }
  // Reserve this agent's slot first: sub-agents are appended after it as they are met.
  const size_t index = ctx.w->sessions.size();
  ctx.w->sessions.emplace_back();
  Session s;
  s.id = index;
  s.start_s = start_s;
  s.block_size = ctx.block_size;
  s.parent_id = parent_id;
  s.parent_turn = parent_turn;
  Recorded prev;
  for (size_t i = 0; i < requests.size(); ++i) {
    const json& r = requests[i];
    const std::string rp = pointer + "/" + std::to_string(i);
    const std::string rwhere = ctx.path + ":" + rp;
    if (!r.is_object()) {
      return Malformed(rwhere, "request must be a JSON object");
    }
    ASSIGN_OR_RETURN(const double t, internal::GetNumber(r, "t", rwhere, 0, kMaxTraceSeconds, "s"));
    auto type = r.find("type");
    if (type != r.end() && *type == "subagent") {
      auto nested = r.find("requests");
      if (nested == r.end()) {
        return Malformed(rwhere, "subagent without \"requests\"");
      }
      const uint32_t launched_after =
          s.turns.empty() ? 0 : static_cast<uint32_t>(s.turns.size() - 1);
      RETURN_IF_ERROR(
          ReadAgent(*nested, rp + "/requests", start_s + t, s.id, launched_after, depth + 1, ctx));
      continue;
    }
    Recorded cur;
    ASSIGN_OR_RETURN(cur.in, internal::GetCount(r, "in", rwhere, 1, kMaxTraceTokens, "tokens"));
    ASSIGN_OR_RETURN(cur.out, internal::GetCount(r, "out", rwhere, 0, kMaxTraceTokens, "tokens"));
    ASSIGN_OR_RETURN(cur.hash_ids, internal::GetIds(r, "hash_ids", rwhere));
    // The files list the prompt's full blocks (floor); accept a trailing partial block too.
    const uint64_t full = cur.in / ctx.block_size;
    if (cur.hash_ids.size() != full && cur.hash_ids.size() != full + 1) {
      return Malformed(rwhere, "hash_ids has " + std::to_string(cur.hash_ids.size()) +
                                   " entries for in=" + std::to_string(cur.in) + " tokens, want " +
                                   std::to_string(full) + " blocks of " +
                                   std::to_string(ctx.block_size));
    }
    for (uint64_t& id : cur.hash_ids) {
      if (id > kMaxLocalId) {
        return Malformed(rwhere, "hash id " + std::to_string(id) + " exceeds 2^40-1");
      }
      id |= ctx.ns << kNamespaceShift;
    }
    double think = 0;
    if (r.contains("think_time")) {
      ASSIGN_OR_RETURN(think,
                       internal::GetNumber(r, "think_time", rwhere, 0, kMaxTraceSeconds, "s"));
    }
    Turn turn = MakeTurn(s.turns.empty() ? nullptr : &prev, cur, ctx.block_size);
    turn.think_time_s = think;
    turn.hash_ids = cur.hash_ids;
    s.turns.push_back(std::move(turn));
    prev = std::move(cur);
  }
  if (s.turns.empty()) {
    return Malformed(where, "agent has no requests");
  }
  ctx.w->sessions[index] = std::move(s);
  return Status::Ok();
}

Status ReadFileInto(const std::string& path, uint64_t ns, Workload& w) {
  ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, "WEKA trace"));
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: ...", or
    // out_of_range.406 "number overflow parsing '1e999'" for a number no double holds.
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) {
      what = what.substr(pos + 2);
    }
    return Malformed(path, "not valid JSON: " + what);
  }
  if (!doc.is_object()) {
    return Malformed(path, "expected a JSON object");
  }
  ASSIGN_OR_RETURN(const uint64_t block_size,
                   internal::GetCount(doc, "block_size", path, 1, kMaxBlockSize, "tokens"));
  auto requests = doc.find("requests");
  if (requests == doc.end()) {
    return Malformed(path, "missing field \"requests\"");
  }
  FileContext ctx{path, ns, static_cast<uint32_t>(block_size), &w};
  return ReadAgent(*requests, "/requests", 0.0, kNoParent, 0, /*depth=*/0, ctx);
}

}  // namespace

Result<Workload> ReadWekaSession(const std::string& path) {
  Workload w;
  w.name = "weka:" + path;
  RETURN_IF_ERROR(ReadFileInto(path, 0, w));
  return w;
}

Result<Workload> ReadWekaDir(const std::string& dir) {
  namespace fs = std::filesystem;
  RETURN_IF_ERROR(CheckDirectory(dir, "WEKA trace directory"));
  std::vector<std::string> files;
  // The error_code overloads throughout: the range-for's increment would throw on a read error.
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_regular_file(type_ec) && it->path().extension() == ".json") {
      files.push_back(it->path().string());
    }
  }
  if (ec) {
    return ErrnoStatus("list " + dir, ec.value());
  }
  if (files.empty()) {
    // The directory is there but is not a trace: bad input, like a malformed file.
    return InvalidArgument("WEKA trace directory " + dir + " has no *.json session files");
  }
  std::sort(files.begin(), files.end());
  Workload w;
  w.name = "weka:" + dir;
  for (size_t i = 0; i < files.size(); ++i) {
    // Namespace 0 is what ReadWekaSession uses; a directory's files get 1, 2, ...
    RETURN_IF_ERROR(ReadFileInto(files[i], i + 1, w));
  }
  return w;
}

}  // namespace dualpath::trace
