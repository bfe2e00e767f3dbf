// Planning and validation of a cluster description (names, addresses, rates). JSON is in
// cluster_json.cc.
#include "dualpath/testbed/cluster.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstdlib>

namespace dualpath::testbed {
namespace {

constexpr int kMaxNodesPerRole = 32;
constexpr uint64_t kMinRate = 1'000'000;        // 1 mbit: below it a 64 MiB read takes minutes
constexpr uint64_t kMaxRate = 100'000'000'000;  // 100 gbit: beyond what tbf shapes reliably
constexpr std::string_view kStorageNet = "10.99.1.";  // private block, see docs/testbed.md
constexpr std::string_view kComputeNet = "10.99.2.";
constexpr int kFirstNodeHost = 11;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

std::string_view RoleName(Role role) { return role == Role::kPrefill ? "prefill" : "decode"; }

std::string Cluster::PdSpec() const { return fmt::format("{}P{}D", prefill_nodes, decode_nodes); }

const Node* Cluster::FindNode(std::string_view node_name) const {
  for (const Node& n : nodes) {
    if (n.name == node_name) {
      return &n;
    }
  }
  return nullptr;
}

Result<std::pair<int, int>> ParsePdSpec(std::string_view spec) {
  const std::string s = Lower(spec);
  const size_t p = s.find('p');
  const auto bad = [&] {
    return InvalidArgument(fmt::format(
        "--pd '{}': expected <prefill nodes>P<decode nodes>D, e.g. 1P1D or 2P4D, with 1..{} each",
        spec, kMaxNodesPerRole));
  };
  if (p == std::string::npos || s.empty() || s.back() != 'd' || p + 1 >= s.size() - 1) {
    return bad();
  }
  int prefill = 0;
  int decode = 0;
  const char* b = s.data();
  auto r1 = std::from_chars(b, b + p, prefill);
  auto r2 = std::from_chars(b + p + 1, b + s.size() - 1, decode);
  if (r1.ec != std::errc() || r1.ptr != b + p || r2.ec != std::errc() ||
      r2.ptr != b + s.size() - 1 || prefill < 1 || decode < 1 || prefill > kMaxNodesPerRole ||
      decode > kMaxNodesPerRole) {
    return bad();
  }
  return std::pair{prefill, decode};
}

Result<uint64_t> ParseRate(std::string_view rate) {
  const std::string s = Lower(rate);
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) {
    ++digits;
  }
  const auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format(
        "rate '{}': {}; expected an integer with unit bit, kbit, mbit or gbit (SI, as tc), "
        "between 1mbit and 100gbit, e.g. 400mbit",
        rate, why));
  };
  if (digits == 0) {
    return bad("no number");
  }
  uint64_t value = 0;
  auto r = std::from_chars(s.data(), s.data() + digits, value);
  if (r.ec != std::errc()) {
    return bad("number too large");
  }
  const std::string_view unit = std::string_view(s).substr(digits);
  uint64_t mult = 0;
  if (unit == "bit") {
    mult = 1;
  } else if (unit == "kbit") {
    mult = 1'000;
  } else if (unit == "mbit") {
    mult = 1'000'000;
  } else if (unit == "gbit") {
    mult = 1'000'000'000;
  } else {
    return bad(unit.empty() ? "missing unit" : "unknown unit");
  }
  if (value > kMaxRate / mult || value * mult < kMinRate) {
    return bad("out of range");
  }
  return value * mult;
}

std::string FormatRate(uint64_t bps) {
  if (bps != 0 && bps % 1'000'000'000 == 0) {
    return fmt::format("{}gbit", bps / 1'000'000'000);
  }
  if (bps != 0 && bps % 1'000'000 == 0) {
    return fmt::format("{}mbit", bps / 1'000'000);
  }
  if (bps != 0 && bps % 1'000 == 0) {
    return fmt::format("{}kbit", bps / 1'000);
  }
  return fmt::format("{}bit", bps);
}

Status ValidateClusterName(std::string_view name) {
  if (name.empty() || name.size() > 24) {
    return InvalidArgument(fmt::format("cluster name '{}': must be 1-24 characters", name));
  }
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') {
      return InvalidArgument(
          fmt::format("cluster name '{}': only letters, digits, '_' and '-' are allowed", name));
    }
  }
  return Status::Ok();
}

std::string StateRoot() {
  const char* env = std::getenv("DUALPATH_TESTBED_ROOT");
  return (env != nullptr && *env != '\0') ? std::string(env) : std::string(kDefaultStateRoot);
}

std::string StateDir(std::string_view root, std::string_view name) {
  return fmt::format("{}/{}", root, name);
}

std::string NetnsPrefix(std::string_view name) { return fmt::format("dp-{}.", name); }

Result<Cluster> PlanCluster(const ClusterOptions& options) {
  RETURN_IF_ERROR(ValidateClusterName(options.name));
  if (options.prefill_nodes < 1 || options.decode_nodes < 1 ||
      options.prefill_nodes > kMaxNodesPerRole || options.decode_nodes > kMaxNodesPerRole) {
    return InvalidArgument(fmt::format("{}P{}D: need 1..{} prefill and decode nodes",
                                       options.prefill_nodes, options.decode_nodes,
                                       kMaxNodesPerRole));
  }
  for (uint64_t rate : {options.storage_rate_bps, options.compute_rate_bps}) {
    if (rate < kMinRate || rate > kMaxRate) {
      return InvalidArgument(fmt::format("rate {} bit/s: must be between 1mbit and 100gbit", rate));
    }
  }
  const std::string root = options.state_root.empty() ? StateRoot() : options.state_root;
  if (root.empty() || root.front() != '/') {
    return InvalidArgument(fmt::format("state root '{}': must be an absolute path", root));
  }

  Cluster c;
  c.name = options.name;
  c.state_dir = StateDir(root, options.name);
  c.prefill_nodes = options.prefill_nodes;
  c.decode_nodes = options.decode_nodes;
  c.storage_rate_bps = options.storage_rate_bps;
  c.compute_rate_bps = options.compute_rate_bps;
  c.dscp_priority = options.dscp_priority;
  const std::string prefix = NetnsPrefix(options.name);
  c.storage = StorageServer{.netns = prefix + "stor",
                            .address = fmt::format("{}1", kStorageNet),
                            .prefix_len = 24,
                            .volume = "dpvol",
                            .brick = c.state_dir + "/brick",
                            .admin_mount = c.state_dir + "/mnt/_admin"};
  c.compute = ComputeSwitch{.netns = prefix + "sw", .bridge = "cbr", .prefix_len = 24};
  int k = 0;
  for (Role role : {Role::kPrefill, Role::kDecode}) {
    const int count = role == Role::kPrefill ? options.prefill_nodes : options.decode_nodes;
    for (int i = 0; i < count; ++i, ++k) {
      Node n;
      n.name = fmt::format("{}{}", role == Role::kPrefill ? 'p' : 'd', i);
      n.role = role;
      n.index = i;
      n.netns = prefix + n.name;
      n.storage_addr = fmt::format("{}{}", kStorageNet, kFirstNodeHost + k);
      n.compute_addr = fmt::format("{}{}", kComputeNet, kFirstNodeHost + k);
      n.storage_if = std::string(kStorageIf);
      n.compute_if = std::string(kComputeIf);
      n.storage_peer_if = "s-" + n.name;
      n.compute_peer_if = "c-" + n.name;
      n.mount = fmt::format("{}/mnt/{}", c.state_dir, n.name);
      c.nodes.push_back(std::move(n));
    }
  }
  return c;
}

}  // namespace dualpath::testbed
