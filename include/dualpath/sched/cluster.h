// The cluster as the scheduler sees it: engines (one per GPU), the node each sits on, and the
// engine group each belongs to (DualPath §6.1).
//
// A group is the unit that fetches work: its leader (the engine with the lowest id in the group,
// "rank 0" in the paper) asks the scheduler for requests on behalf of every engine of the group.
// The paper's invariants are enforced by Validate(): all engines of a group have the same role,
// and all engines of a node are in the same group (so a node is either prefill or decode, and the
// node's storage read queue belongs to exactly one group).
//
// Ids are dense: engine ids are 0..E-1 (engines[i].id == i), group ids 0..G-1 and node ids 0..N-1,
// each id in range used at least once. Dense ids let the scheduler keep its state in flat arrays;
// a deployment with sparse ids (the gRPC service) maps them once at start-up.
//
// Ownership: plain values. Thread safety: values; no shared state.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "dualpath/common/ids.h"
#include "dualpath/common/status.h"

namespace dualpath::sched {

using GroupId = StrongId<struct GroupIdTag, uint32_t>;

enum class Role : uint8_t { kPrefill, kDecode };

std::string_view RoleName(Role role);

struct EngineDesc {
  EngineId id;
  Role role = Role::kPrefill;
  NodeId node;
  GroupId group;
};

struct ClusterDesc {
  std::vector<EngineDesc> engines;

  // Checks the invariants above; errors are kSchedBadConfig naming the offending engine/field.
  Status Validate() const;

  int num_engines() const { return static_cast<int>(engines.size()); }
  // Number of distinct nodes / groups (max id + 1; valid only after Validate() succeeded).
  int num_nodes() const;
  int num_groups() const;
};

// The shape of a uniform cluster, the kind the paper evaluates ("2P4D" = 2 prefill nodes and 4
// decode nodes of `gpus_per_node` GPUs each, one engine per GPU).
struct UniformClusterSpec {
  int prefill_nodes = 2;
  int decode_nodes = 4;
  int gpus_per_node = 8;
  // Nodes per engine group (a group must hold whole nodes). 1 = one group per node.
  int nodes_per_prefill_group = 1;
  int nodes_per_decode_group = 1;
};

// Builds a uniform cluster: prefill nodes first (node ids 0..P-1, engine ids 0..P*g-1), then decode
// nodes. Groups are numbered in the same order. Errors (kSchedBadConfig) name the bad field, e.g.
// zero nodes or a group size that does not divide the node count.
Result<ClusterDesc> MakeUniformCluster(const UniformClusterSpec& spec);

// Parses the paper's P/D notation, "<P>P<D>D" with P, D >= 1 (e.g. "2P4D", "48P96D"; case
// insensitive), into a spec with the other fields at their defaults. kSchedBadConfig quoting the
// text for anything else ("0P2D", "2X4D", "2P", "").
Result<UniformClusterSpec> ParsePd(std::string_view text);

}  // namespace dualpath::sched
