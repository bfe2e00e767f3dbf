// Byte and packet counters of one network interface inside a network namespace: how benchmarks
// and tests see how many bytes crossed a node's storage or compute link.
//
// Counters are read from the kernel via `ip -j -s -n NETNS link show dev IF` (iproute2), so a
// process needs no namespace switching of its own. Counters are cumulative since the interface
// was created; take the difference of two readings.
//
// Thread safety: free functions; ReadLinkCounters forks `ip` and may be called from any thread.
#pragma once

#include <cstdint>
#include <string_view>

#include "dualpath/common/status.h"
#include "dualpath/testbed/cluster.h"

namespace dualpath::testbed {

struct LinkCounters {
  uint64_t rx_bytes = 0;
  uint64_t tx_bytes = 0;
  uint64_t rx_packets = 0;
  uint64_t tx_packets = 0;
};

enum class Link { kStorage, kCompute };

// Parses the output of `ip -j -s link show dev IF` (a one-element array with "stats64").
Result<LinkCounters> ParseIpLinkStatsJson(std::string_view json);
// Counters of interface `ifname` in network namespace `netns` (NotFound if either is missing).
Result<LinkCounters> ReadLinkCounters(std::string_view netns, std::string_view ifname);
// Counters of `node`'s end of its storage or compute link: rx = bytes the node received
// (e.g. file data read through its mount), tx = bytes it sent.
Result<LinkCounters> ReadNodeLink(const Node& node, Link link);

}  // namespace dualpath::testbed
