// cluster.json: serialization of a Cluster (schema in docs/testbed.md).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "dualpath/common/file.h"
#include "dualpath/testbed/cluster.h"

namespace dualpath::testbed {
namespace {

using nlohmann::json;

// Typed field access that names the missing or mistyped field (the file is read by other
// components and edited by hand in experiments: say exactly what is wrong).
class Reader {
 public:
  Reader(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  Status Str(const char* key, std::string* out) const {
    return Get(key, out, &json::is_string, "a string");
  }
  Status Int(const char* key, int* out) const {
    return Get(key, out, &json::is_number_integer, "an integer");
  }
  Status U64(const char* key, uint64_t* out) const {
    return Get(key, out, &json::is_number_unsigned, "a non-negative integer");
  }
  Status Bool(const char* key, bool* out) const {
    return Get(key, out, &json::is_boolean, "a boolean");
  }
  Result<Reader> Obj(const char* key) const {
    const json* v = Find(key);
    if (v == nullptr || !v->is_object()) {
      return Bad(key, "an object");
    }
    return Reader(*v, Field(key));
  }
  const json* Array(const char* key) const {
    const json* v = Find(key);
    return (v != nullptr && v->is_array()) ? v : nullptr;
  }
  std::string Field(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }

 private:
  // One typed field: present, of the JSON type `is_type` accepts, converted to T.
  template <typename T>
  Status Get(const char* key, T* out, bool (json::*is_type)() const noexcept,
             const char* what) const {
    const json* v = Find(key);
    if (v == nullptr || !(v->*is_type)()) {
      return Bad(key, what);
    }
    *out = v->get<T>();
    return Status::Ok();
  }

  const json* Find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  Status Bad(const char* key, std::string_view what) const {
    return ParseError(fmt::format("cluster.json: field '{}' must be {}", Field(key), what));
  }

  const json& obj_;
  std::string path_;
};

Result<Node> ParseNode(const Reader& r) {
  Node n;
  std::string role;
  RETURN_IF_ERROR(r.Str("name", &n.name));
  RETURN_IF_ERROR(r.Str("role", &role));
  if (role == "prefill") {
    n.role = Role::kPrefill;
  } else if (role == "decode") {
    n.role = Role::kDecode;
  } else {
    return ParseError(
        fmt::format("cluster.json: field '{}' must be \"prefill\" or \"decode\"", r.Field("role")));
  }
  RETURN_IF_ERROR(r.Int("index", &n.index));
  RETURN_IF_ERROR(r.Str("netns", &n.netns));
  RETURN_IF_ERROR(r.Str("storage_addr", &n.storage_addr));
  RETURN_IF_ERROR(r.Str("compute_addr", &n.compute_addr));
  RETURN_IF_ERROR(r.Str("storage_if", &n.storage_if));
  RETURN_IF_ERROR(r.Str("compute_if", &n.compute_if));
  RETURN_IF_ERROR(r.Str("storage_peer_if", &n.storage_peer_if));
  RETURN_IF_ERROR(r.Str("compute_peer_if", &n.compute_peer_if));
  RETURN_IF_ERROR(r.Str("mount", &n.mount));
  return n;
}

}  // namespace

std::string ClusterToJson(const Cluster& c) {
  json nodes = json::array();
  for (const Node& n : c.nodes) {
    nodes.push_back({{"name", n.name},
                     {"role", RoleName(n.role)},
                     {"index", n.index},
                     {"netns", n.netns},
                     {"storage_addr", n.storage_addr},
                     {"compute_addr", n.compute_addr},
                     {"storage_if", n.storage_if},
                     {"compute_if", n.compute_if},
                     {"storage_peer_if", n.storage_peer_if},
                     {"compute_peer_if", n.compute_peer_if},
                     {"mount", n.mount}});
  }
  json j = {
      {"schema", kClusterSchemaName},
      {"version", kClusterSchemaVersion},
      {"name", c.name},
      {"state_dir", c.state_dir},
      {"pd", c.PdSpec()},
      {"prefill_nodes", c.prefill_nodes},
      {"decode_nodes", c.decode_nodes},
      {"storage_rate_bps", c.storage_rate_bps},
      {"compute_rate_bps", c.compute_rate_bps},
      {"dscp_priority", c.dscp_priority},
      {"dscp_high", json::array({kDscpHigh})},
      {"storage",
       {{"netns", c.storage.netns},
        {"address", c.storage.address},
        {"prefix_len", c.storage.prefix_len},
        {"volume", c.storage.volume},
        {"brick", c.storage.brick},
        {"admin_mount", c.storage.admin_mount}}},
      {"compute",
       {{"netns", c.compute.netns},
        {"bridge", c.compute.bridge},
        {"prefix_len", c.compute.prefix_len}}},
      {"nodes", std::move(nodes)},
  };
  return j.dump(2) + "\n";
}

Result<Cluster> ParseClusterJson(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return ParseError("cluster.json: not valid JSON");
  }
  if (!j.is_object()) {
    return ParseError("cluster.json: top level must be an object");
  }
  const Reader r(j, "");
  std::string schema;
  int version = 0;
  RETURN_IF_ERROR(r.Str("schema", &schema));
  RETURN_IF_ERROR(r.Int("version", &version));
  if (schema != kClusterSchemaName || version != kClusterSchemaVersion) {
    return ParseError(fmt::format("cluster.json: schema {} version {}; this build reads {} {}",
                                  schema, version, kClusterSchemaName, kClusterSchemaVersion));
  }
  Cluster c;
  RETURN_IF_ERROR(r.Str("name", &c.name));
  RETURN_IF_ERROR(r.Str("state_dir", &c.state_dir));
  RETURN_IF_ERROR(r.Int("prefill_nodes", &c.prefill_nodes));
  RETURN_IF_ERROR(r.Int("decode_nodes", &c.decode_nodes));
  RETURN_IF_ERROR(r.U64("storage_rate_bps", &c.storage_rate_bps));
  RETURN_IF_ERROR(r.U64("compute_rate_bps", &c.compute_rate_bps));
  RETURN_IF_ERROR(r.Bool("dscp_priority", &c.dscp_priority));
  {
    ASSIGN_OR_RETURN(Reader s, r.Obj("storage"));
    RETURN_IF_ERROR(s.Str("netns", &c.storage.netns));
    RETURN_IF_ERROR(s.Str("address", &c.storage.address));
    RETURN_IF_ERROR(s.Int("prefix_len", &c.storage.prefix_len));
    RETURN_IF_ERROR(s.Str("volume", &c.storage.volume));
    RETURN_IF_ERROR(s.Str("brick", &c.storage.brick));
    RETURN_IF_ERROR(s.Str("admin_mount", &c.storage.admin_mount));
  }
  {
    ASSIGN_OR_RETURN(Reader s, r.Obj("compute"));
    RETURN_IF_ERROR(s.Str("netns", &c.compute.netns));
    RETURN_IF_ERROR(s.Str("bridge", &c.compute.bridge));
    RETURN_IF_ERROR(s.Int("prefix_len", &c.compute.prefix_len));
  }
  const json* nodes = r.Array("nodes");
  if (nodes == nullptr) {
    return ParseError("cluster.json: field 'nodes' must be an array");
  }
  for (size_t i = 0; i < nodes->size(); ++i) {
    const json& n = (*nodes)[i];
    const std::string path = fmt::format("nodes[{}]", i);
    if (!n.is_object()) {
      return ParseError(fmt::format("cluster.json: field '{}' must be an object", path));
    }
    ASSIGN_OR_RETURN(Node node, ParseNode(Reader(n, path)));
    c.nodes.push_back(std::move(node));
  }
  if (static_cast<int>(c.nodes.size()) != c.prefill_nodes + c.decode_nodes) {
    return ParseError(
        fmt::format("cluster.json: {} nodes listed, but prefill_nodes={} and "
                    "decode_nodes={}",
                    c.nodes.size(), c.prefill_nodes, c.decode_nodes));
  }
  return c;
}

Result<Cluster> LoadCluster(std::string_view name, std::string_view state_root) {
  RETURN_IF_ERROR(ValidateClusterName(name));
  const std::string root = state_root.empty() ? StateRoot() : std::string(state_root);
  const std::string path = StateDir(root, name) + "/cluster.json";
  Result<std::string> text = ReadRegularFile(path, "cluster state", 16 << 20);
  if (text.status().code() == Code::kNotFound) {
    return Status(Code::kTestbedNotFound,
                  fmt::format("cluster '{}' is not up ({} not found); start it with `dualpath "
                              "cluster up --name {}`",
                              name, path, name));
  }
  if (!text.ok()) return text.status();
  Result<Cluster> c = ParseClusterJson(*text);
  if (!c.ok()) {
    return c.status().WithContext(path);
  }
  return c;
}

}  // namespace dualpath::testbed
