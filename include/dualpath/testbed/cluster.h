// The description of an emulated cluster (the testbed): which nodes exist, their roles, their
// addresses on the storage and compute networks, their network namespaces, link names, rates and
// GlusterFS mount paths.
//
// `dualpath cluster up` plans a Cluster (PlanCluster), builds it, and writes it as JSON to
// <state_dir>/cluster.json (schema in docs/testbed.md, version kClusterSchemaVersion). Other
// components (storage and transfer benchmarks, the end-to-end engine) read it with LoadCluster
// to learn where to run and which paths to use; they never guess names or addresses.
//
// Thread safety: plain values and pure functions; LoadCluster only reads a file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/status.h"

namespace dualpath::testbed {

inline constexpr int kClusterSchemaVersion = 1;
inline constexpr std::string_view kClusterSchemaName = "dualpath.testbed.cluster";
// Default parent of every cluster's state directory (overridden by DUALPATH_TESTBED_ROOT).
inline constexpr std::string_view kDefaultStateRoot = "/var/tmp/dualpath-testbed";
inline constexpr std::string_view kDefaultClusterName = "dp";
// Interface names inside a node's namespace (fixed: every node has exactly these two links).
inline constexpr std::string_view kStorageIf = "stor0";
inline constexpr std::string_view kComputeIf = "comp0";
// DSCP values that the --dscp priority tree puts in the high class; everything else is low.
inline constexpr int kDscpHigh = 46;        // EF: model-execution traffic.
inline constexpr int kDscpLowExample = 10;  // AF11: what KV-cache transfers should use.

enum class Role { kPrefill, kDecode };
std::string_view RoleName(Role role);  // "prefill" / "decode"

struct Node {
  std::string name;  // "p0", "p1", "d0": role letter + index within the role
  Role role = Role::kPrefill;
  int index = 0;                // index within the role
  std::string netns;            // "dp-<cluster>.<name>"
  std::string storage_addr;     // IPv4 on the storage network (interface kStorageIf)
  std::string compute_addr;     // IPv4 on the compute network (interface kComputeIf)
  std::string storage_if;       // kStorageIf
  std::string compute_if;       // kComputeIf
  std::string storage_peer_if;  // storage-namespace end of the storage link ("s-<name>")
  std::string compute_peer_if;  // switch-namespace end of the compute link ("c-<name>")
  std::string mount;            // GlusterFS FUSE mount whose traffic crosses this node's link
};

struct StorageServer {
  std::string netns;        // "dp-<cluster>.stor"
  std::string address;      // glusterd's and the brick's address
  int prefix_len = 24;      // storage network prefix length
  std::string volume;       // GlusterFS volume name
  std::string brick;        // brick directory
  std::string admin_mount;  // unshaped mount inside the storage namespace (for populating data)
};

struct ComputeSwitch {
  std::string netns;   // "dp-<cluster>.sw"
  std::string bridge;  // bridge joining the nodes' compute links
  int prefix_len = 24;
};

struct Cluster {
  std::string name;
  std::string state_dir;  // everything the cluster writes lives below it
  int prefill_nodes = 0;
  int decode_nodes = 0;
  uint64_t storage_rate_bps = 0;  // bits per second, each direction of each storage link
  uint64_t compute_rate_bps = 0;  // bits per second, each direction of each compute link
  bool dscp_priority = false;     // compute links use the DSCP priority tree (docs/testbed.md)
  StorageServer storage;
  ComputeSwitch compute;
  std::vector<Node> nodes;  // prefill nodes first, then decode nodes

  // "2P1D".
  std::string PdSpec() const;
  // The node with this name, or nullptr.
  const Node* FindNode(std::string_view node_name) const;
};

// What `cluster up` is asked for.
struct ClusterOptions {
  std::string name{kDefaultClusterName};
  int prefill_nodes = 1;
  int decode_nodes = 1;
  uint64_t storage_rate_bps = 400'000'000;
  uint64_t compute_rate_bps = 2'000'000'000;
  bool dscp_priority = false;
  std::string state_root;  // empty: StateRoot()
};

// "2P1D" (case-insensitive) → {2, 1}. 1..32 of each; anything else is InvalidArgument.
Result<std::pair<int, int>> ParsePdSpec(std::string_view spec);
// "400mbit", "2gbit", "1500kbit", "1000000bit" (SI units, like tc) → bits per second.
// Between 1 mbit and 100 gbit; anything else is InvalidArgument naming the accepted forms.
Result<uint64_t> ParseRate(std::string_view rate);
// "400mbit" for 400'000'000 (the largest unit that divides exactly).
std::string FormatRate(uint64_t bps);
// Cluster names: 1-24 characters of [A-Za-z0-9_-] (they become namespace and file names; '.'
// separates the cluster from the node in namespace names, so it is not allowed).
Status ValidateClusterName(std::string_view name);

// $DUALPATH_TESTBED_ROOT if set, else kDefaultStateRoot.
std::string StateRoot();
// <root>/<name>.
std::string StateDir(std::string_view root, std::string_view name);
// Prefix of every network namespace of the cluster: "dp-<name>.".
std::string NetnsPrefix(std::string_view name);

// The full description for `options`: names, addresses (storage 10.99.1.0/24, server .1; compute
// 10.99.2.0/24; node k → .(11+k)), paths. Pure: creates nothing. Validates the options.
Result<Cluster> PlanCluster(const ClusterOptions& options);

// JSON (docs/testbed.md). ParseClusterJson rejects a wrong schema name or version, missing or
// mistyped fields, with a ParseError naming the field.
std::string ClusterToJson(const Cluster& cluster);
Result<Cluster> ParseClusterJson(std::string_view json);
// Reads <StateDir(root, name)>/cluster.json. NotFound (kTestbedNotFound) if the cluster is not up.
Result<Cluster> LoadCluster(std::string_view name = kDefaultClusterName,
                            std::string_view state_root = {});

}  // namespace dualpath::testbed
