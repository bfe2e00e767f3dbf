#include "dualpath/testbed/link_stats.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testbed/subprocess.h"

namespace dualpath::testbed {

Result<LinkCounters> ParseIpLinkStatsJson(std::string_view text) {
  using nlohmann::json;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array() || j.size() != 1 || !j[0].is_object()) {
    return ParseError("ip link stats: expected a JSON array with one interface");
  }
  const json& link = j[0];
  auto stats = link.find("stats64");
  if (stats == link.end() || !stats->is_object()) {
    return ParseError("ip link stats: no stats64 (run `ip` with -s)");
  }
  LinkCounters c;
  const auto get = [&](const char* dir, const char* key, uint64_t* out) -> Status {
    auto d = stats->find(dir);
    if (d == stats->end() || !d->is_object()) {
      return ParseError(fmt::format("ip link stats: no stats64.{}", dir));
    }
    auto v = d->find(key);
    if (v == d->end() || !v->is_number_unsigned()) {
      return ParseError(fmt::format("ip link stats: no stats64.{}.{}", dir, key));
    }
    *out = v->get<uint64_t>();
    return Status::Ok();
  };
  RETURN_IF_ERROR(get("rx", "bytes", &c.rx_bytes));
  RETURN_IF_ERROR(get("tx", "bytes", &c.tx_bytes));
  RETURN_IF_ERROR(get("rx", "packets", &c.rx_packets));
  RETURN_IF_ERROR(get("tx", "packets", &c.tx_packets));
  return c;
}

Result<LinkCounters> ReadLinkCounters(std::string_view netns, std::string_view ifname) {
  ASSIGN_OR_RETURN(ProcessResult r, RunProcess({"ip", "-j", "-s", "-n", std::string(netns), "link",
                                                "show", "dev", std::string(ifname)}));
  if (r.exit_code != 0) {
    std::string out = r.output;
    while (!out.empty() && out.back() == '\n') {
      out.pop_back();
    }
    return NotFound(fmt::format("link {} in netns {}: {}", ifname, netns, out));
  }
  Result<LinkCounters> c = ParseIpLinkStatsJson(r.output);
  if (!c.ok()) {
    return c.status().WithContext(fmt::format("link {} in netns {}", ifname, netns));
  }
  return c;
}

Result<LinkCounters> ReadNodeLink(const Node& node, Link link) {
  return ReadLinkCounters(node.netns, link == Link::kStorage ? node.storage_if : node.compute_if);
}

}  // namespace dualpath::testbed
