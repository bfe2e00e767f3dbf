// Per-class DSCP marking of the TCP sockets UCX creates.
//
// UCX 1.13's tcp transport has no IP_TOS setting (checked with `ucx_info -c -f`: only
// UCX_TCP_* buffer, keepalive and port knobs). The engine therefore interposes socket(): this
// library defines `socket` and the link exports it (--export-dynamic-symbol=socket, set as an
// INTERFACE link option of dualpath_transfer), so libuct's calls resolve here first. A socket
// created while a ScopedSocketTos is active on the calling thread gets that TOS byte before it
// connects or listens. The progress thread enters a scope per class around every call into that
// class's worker (create, endpoint create, progress), so each class's connections carry its own
// DSCP; accepted connections inherit the listening socket's TOS (Linux copies inet tos to the
// child when net.ipv4.tcp_reflect_tos is 0, the default).
//
// Thread safety: scopes are thread-local; SetSocketTos is a plain syscall wrapper.
#pragma once

#include <cstdint>

#include "dualpath/common/status.h"

namespace dualpath::transfer {

class ScopedSocketTos {
 public:
  // tos < 0: leave sockets unmarked inside the scope.
  explicit ScopedSocketTos(int tos);
  ~ScopedSocketTos();
  ScopedSocketTos(const ScopedSocketTos&) = delete;
  ScopedSocketTos& operator=(const ScopedSocketTos&) = delete;

 private:
  int saved_;
};

// Sets IP_TOS (IPv4) or IPV6_TCLASS (IPv6) on an inet socket; a no-op for other families.
Status SetSocketTos(int fd, int tos);

// How many sockets the interposer has marked in this process (tests check interposition works).
uint64_t MarkedSocketCount();

// True when socket() calls from shared libraries reach the interposer (the executable exports
// the symbol). Checked by the engine at start-up so a link without the export is reported.
bool SocketInterposerActive();

}  // namespace dualpath::transfer
