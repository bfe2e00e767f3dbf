#include "dualpath/sched/cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace dualpath::sched {
namespace {

Status BadConfig(std::string message) { return Status(Code::kSchedBadConfig, std::move(message)); }

}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kPrefill:
      return "prefill";
    case Role::kDecode:
      return "decode";
  }
  return "unknown";
}

int ClusterDesc::num_nodes() const {
  uint32_t max_id = 0;
  for (const EngineDesc& e : engines) max_id = std::max(max_id, e.node.value() + 1);
  return static_cast<int>(max_id);
}

int ClusterDesc::num_groups() const {
  uint32_t max_id = 0;
  for (const EngineDesc& e : engines) max_id = std::max(max_id, e.group.value() + 1);
  return static_cast<int>(max_id);
}

Status ClusterDesc::Validate() const {
  if (engines.empty()) return BadConfig("cluster: no engines");
  const size_t n = engines.size();
  // Ids are dense: every node/group id < engine count is a sufficient bound to size the tables.
  for (size_t i = 0; i < n; ++i) {
    const EngineDesc& e = engines[i];
    if (e.id.value() != i) {
      return BadConfig(fmt::format("cluster: engines[{}].id is {}, want {} (ids must be dense)", i,
                                   e.id.value(), i));
    }
    if (e.node.value() >= n) {
      return BadConfig(fmt::format("cluster: engine {} node {} out of range (ids must be dense)", i,
                                   e.node.value()));
    }
    if (e.group.value() >= n) {
      return BadConfig(fmt::format("cluster: engine {} group {} out of range (ids must be dense)",
                                   i, e.group.value()));
    }
  }
  const size_t nodes = static_cast<size_t>(num_nodes());
  const size_t groups = static_cast<size_t>(num_groups());
  constexpr uint32_t kUnset = UINT32_MAX;
  std::vector<uint32_t> node_group(nodes, kUnset);
  std::vector<int> group_role(groups, -1);
  bool has_prefill = false;
  bool has_decode = false;
  for (const EngineDesc& e : engines) {
    has_prefill |= e.role == Role::kPrefill;
    has_decode |= e.role == Role::kDecode;
    uint32_t& g = node_group[e.node.value()];
    if (g == kUnset) {
      g = e.group.value();
    } else if (g != e.group.value()) {
      return BadConfig(fmt::format(
          "cluster: node {} has engines in groups {} and {} (a node must be in one group)",
          e.node.value(), g, e.group.value()));
    }
    int& r = group_role[e.group.value()];
    if (r == -1) {
      r = static_cast<int>(e.role);
    } else if (r != static_cast<int>(e.role)) {
      return BadConfig(fmt::format("cluster: group {} mixes prefill and decode engines (engine {})",
                                   e.group.value(), e.id.value()));
    }
  }
  for (size_t i = 0; i < nodes; ++i) {
    if (node_group[i] == kUnset) {
      return BadConfig(fmt::format("cluster: node {} has no engine (ids must be dense)", i));
    }
  }
  for (size_t i = 0; i < groups; ++i) {
    if (group_role[i] == -1) {
      return BadConfig(fmt::format("cluster: group {} has no engine (ids must be dense)", i));
    }
  }
  if (!has_prefill) return BadConfig("cluster: no prefill engine");
  if (!has_decode) return BadConfig("cluster: no decode engine");
  return Status::Ok();
}

Result<ClusterDesc> MakeUniformCluster(const UniformClusterSpec& spec) {
  if (spec.prefill_nodes <= 0) {
    return BadConfig(fmt::format("prefill_nodes must be > 0, got {}", spec.prefill_nodes));
  }
  if (spec.decode_nodes <= 0) {
    return BadConfig(fmt::format("decode_nodes must be > 0, got {}", spec.decode_nodes));
  }
  if (spec.gpus_per_node <= 0) {
    return BadConfig(fmt::format("gpus_per_node must be > 0, got {}", spec.gpus_per_node));
  }
  // Memory grows with the engine count: at most 2^20 engines (the paper's largest cluster has
  // 1,152), computed in 64 bits so the product cannot wrap.
  const int64_t engines =
      (int64_t{spec.prefill_nodes} + spec.decode_nodes) * int64_t{spec.gpus_per_node};
  if (engines > (int64_t{1} << 20)) {
    return BadConfig(
        fmt::format("(prefill_nodes + decode_nodes) x gpus_per_node = {} engines is "
                    "outside [1, 1048576]",
                    engines));
  }
  if (spec.nodes_per_prefill_group <= 0 || spec.prefill_nodes % spec.nodes_per_prefill_group) {
    return BadConfig(
        fmt::format("nodes_per_prefill_group {} must be > 0 and divide prefill_nodes {}",
                    spec.nodes_per_prefill_group, spec.prefill_nodes));
  }
  if (spec.nodes_per_decode_group <= 0 || spec.decode_nodes % spec.nodes_per_decode_group) {
    return BadConfig(fmt::format("nodes_per_decode_group {} must be > 0 and divide decode_nodes {}",
                                 spec.nodes_per_decode_group, spec.decode_nodes));
  }
  ClusterDesc c;
  c.engines.reserve(static_cast<size_t>(spec.prefill_nodes + spec.decode_nodes) *
                    static_cast<size_t>(spec.gpus_per_node));
  const uint32_t prefill_groups =
      static_cast<uint32_t>(spec.prefill_nodes / spec.nodes_per_prefill_group);
  for (int node = 0; node < spec.prefill_nodes + spec.decode_nodes; ++node) {
    const bool prefill = node < spec.prefill_nodes;
    const uint32_t group =
        prefill ? static_cast<uint32_t>(node / spec.nodes_per_prefill_group)
                : prefill_groups + static_cast<uint32_t>((node - spec.prefill_nodes) /
                                                         spec.nodes_per_decode_group);
    for (int g = 0; g < spec.gpus_per_node; ++g) {
      EngineDesc e;
      e.id = EngineId(static_cast<uint32_t>(c.engines.size()));
      e.role = prefill ? Role::kPrefill : Role::kDecode;
      e.node = NodeId(static_cast<uint32_t>(node));
      e.group = GroupId(group);
      c.engines.push_back(e);
    }
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

Result<UniformClusterSpec> ParsePd(std::string_view text) {
  auto bad = [&] {
    return BadConfig(fmt::format("pd: want <P>P<D>D with P, D >= 1 (e.g. 2P4D), got '{}'", text));
  };
  // Reads a positive decimal number at `pos` (at most 6 digits) followed by `suffix`.
  size_t pos = 0;
  auto number = [&](char suffix, int* value) {
    size_t start = pos;
    int v = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && pos - start < 6) {
      v = v * 10 + (text[pos] - '0');
      ++pos;
    }
    if (pos == start || pos >= text.size()) return false;
    const char c = text[pos];
    if (c != suffix && c != suffix - 'A' + 'a') return false;
    ++pos;
    *value = v;
    return v >= 1;
  };
  UniformClusterSpec spec;
  if (!number('P', &spec.prefill_nodes) || !number('D', &spec.decode_nodes) || pos != text.size()) {
    return bad();
  }
  return spec;
}

}  // namespace dualpath::sched
