#include "dualpath/control/options.h"

#include <fmt/format.h>

#include <set>

#include "dualpath/common/numeric.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/storage/layout.h"

namespace dualpath::control {

std::vector<std::string> SplitStoreSubdirs(std::string_view subdirs) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= subdirs.size()) {
    size_t comma = subdirs.find(',', start);
    if (comma == std::string_view::npos) comma = subdirs.size();
    if (comma > start) out.emplace_back(subdirs.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Result<std::vector<ExpectedEngine>> ParseEngineList(std::string_view text) {
  std::vector<ExpectedEngine> out;
  std::set<std::string> names;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t c1 = item.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : item.find(':', c1 + 1);
    if (c2 == std::string_view::npos || item.find(':', c2 + 1) != std::string_view::npos) {
      return InvalidArgument(
          fmt::format("engine list: '{}' is not NAME:ROLE:NODE (e.g. p0.0:prefill:p0)", item));
    }
    ExpectedEngine e;
    e.name = std::string(item.substr(0, c1));
    const std::string_view role = item.substr(c1 + 1, c2 - c1 - 1);
    e.node = std::string(item.substr(c2 + 1));
    if (e.name.empty() || e.node.empty()) {
      return InvalidArgument(fmt::format("engine list: empty name or node in '{}'", item));
    }
    if (role == "prefill") {
      e.role = sched::Role::kPrefill;
    } else if (role == "decode") {
      e.role = sched::Role::kDecode;
    } else {
      return InvalidArgument(fmt::format(
          "engine list: unknown role '{}' in '{}' (expected prefill or decode)", role, item));
    }
    if (!names.insert(e.name).second) {
      return InvalidArgument(fmt::format("engine list: duplicate engine name '{}'", e.name));
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) return InvalidArgument("engine list: no engines");
  return out;
}

Status ServiceOptions::Validate() const {
  // docs/control.md "Input ranges".
  RETURN_IF_ERROR(CheckCountRange("--block-tokens", block_tokens, 1, kv::kMaxBlockSize, "tokens"));
  RETURN_IF_ERROR(CheckRange("--heartbeat-s", heartbeat_s, kMinHeartbeatS, kMaxHeartbeatS, "s"));
  RETURN_IF_ERROR(CheckCountRange("--max-attempts", max_attempts, 1, kMaxAttempts, "attempts"));
  if (expect_prefill < 0 || expect_decode < 0) {
    return InvalidArgument("--expect-prefill / --expect-decode must be >= 0");
  }
  RETURN_IF_ERROR(CheckCountRange("--expect-prefill", static_cast<uint64_t>(expect_prefill), 0,
                                  kMaxEngines, "engines"));
  RETURN_IF_ERROR(CheckCountRange("--expect-decode", static_cast<uint64_t>(expect_decode), 0,
                                  kMaxEngines, "engines"));
  if (short_read_queue_tokens < 0 || unfinished_token_limit < 0) {
    return InvalidArgument("sched thresholds must be >= 0 (0 = default)");
  }
  RETURN_IF_ERROR(CheckCountRange("--short-read-queue-tokens",
                                  static_cast<uint64_t>(short_read_queue_tokens), 0,
                                  kMaxThresholdTokens, "tokens"));
  RETURN_IF_ERROR(CheckCountRange("--unfinished-token-limit",
                                  static_cast<uint64_t>(unfinished_token_limit), 0,
                                  kMaxThresholdTokens, "tokens"));
  if (!store_subdir.empty() && store_root.empty()) {
    return InvalidArgument("store_subdir '" + store_subdir + "' given without store_root");
  }
  if (!store_subdir.empty()) {
    for (const std::string& d : SplitStoreSubdirs(store_subdir)) {
      RETURN_IF_ERROR(storage::CheckPathComponent(d, "store_subdir"));
    }
  }
  if (!store_namespace.empty() && store_root.empty()) {
    return InvalidArgument("--store-namespace '" + store_namespace +
                           "' given without --store-root");
  }
  if (!kv_store_etcd.empty() && kv_store_cluster.empty()) {
    return InvalidArgument("kv_store_etcd '" + kv_store_etcd + "' given without kv_store_cluster");
  }
  if (engines.empty()) {
    if (expect_prefill < 1 || expect_decode < 1) {
      return InvalidArgument(fmt::format(
          "expected engines: give an engine list or at least 1 prefill and 1 decode engine "
          "(got {} prefill, {} decode)",
          expect_prefill, expect_decode));
    }
  } else {
    bool p = false;
    bool d = false;
    for (const ExpectedEngine& e : engines) {
      p |= e.role == sched::Role::kPrefill;
      d |= e.role == sched::Role::kDecode;
    }
    if (!p || !d) return InvalidArgument("engine list: needs at least one prefill and one decode");
  }
  return kv::ParseHashAlgo(hash_algo).status();
}

}  // namespace dualpath::control
