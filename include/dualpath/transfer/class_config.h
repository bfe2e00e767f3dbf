// Per-traffic-class network configuration and how it maps onto UCX and the kernel.
//
// Each class gets its own UCP context and worker (DualPath §5.1: separate virtual lanes / traffic
// classes for model traffic and KV traffic). What a class's settings become:
//   - InfiniBand: `ib_sl` → UCX `IB_SL` (the service level the subnet manager maps to a VL);
//     `ib_traffic_class` → UCX `IB_TRAFFIC_CLASS` (RoCE: the GRH traffic class, DSCP << 2).
//     Both are set per class context with ucp_config_modify, so two contexts in one process use
//     different SLs.
//   - TCP: `dscp` → IP_TOS / IPV6_TCLASS on every socket the class's worker creates. UCX 1.13's
//     tcp transport has no TOS knob, so the engine marks sockets itself (see socket_tos.h).
//
// Thread safety: values and pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dualpath/common/status.h"

namespace dualpath::transfer {

struct ClassConfig {
  int dscp = -1;              // 0..63; -1: leave sockets unmarked.
  int ib_sl = -1;             // 0..15; -1: UCX default ("auto").
  int ib_traffic_class = -1;  // 0..255; -1: UCX default ("auto").
};

// DSCP EF (46) for the latency-critical class and CS1 (8, "lower effort") for KV bulk traffic,
// the two code points a switch is most commonly configured to prioritise and to deprioritise;
// IB SL 0 (high-priority VL) and SL 1 (the low-priority VL of DualPath Appendix A.1).
ClassConfig DefaultHighClass();
ClassConfig DefaultLowClass();

// InvalidArgument naming the field when a value is out of range.
Status ValidateClassConfig(const ClassConfig& c);

// The ucp_config_modify() key/value pairs for a class context. `tls` (UCX_TLS syntax, e.g.
// "tcp" or "posix,sysv,cma,self") is added as "TLS" when not empty; empty keeps UCX's default,
// which also honours the UCX_TLS environment variable.
std::vector<std::pair<std::string, std::string>> UcxConfigFor(const ClassConfig& c,
                                                              const std::string& tls);

// The IP_TOS byte for a DSCP code point (DSCP occupies the upper six bits; ECN bits stay 0).
constexpr int TosForDscp(int dscp) { return dscp << 2; }

}  // namespace dualpath::transfer
