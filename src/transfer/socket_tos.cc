#include "socket_tos.h"

#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace dualpath::transfer {
namespace {

thread_local int t_tos = -1;
std::atomic<uint64_t> g_marked{0};

using SocketFn = int (*)(int, int, int);

SocketFn RealSocket() {
  // RTLD_NEXT: the next definition after this object's, i.e. libc's.
  static SocketFn fn = reinterpret_cast<SocketFn>(dlsym(RTLD_NEXT, "socket"));
  return fn;
}

}  // namespace

ScopedSocketTos::ScopedSocketTos(int tos) : saved_(t_tos) { t_tos = tos; }
ScopedSocketTos::~ScopedSocketTos() { t_tos = saved_; }

Status SetSocketTos(int fd, int tos) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return IoError("getsockname for IP_TOS", errno);
  }
  int v = tos;
  if (ss.ss_family == AF_INET) {
    if (setsockopt(fd, IPPROTO_IP, IP_TOS, &v, sizeof v) != 0) {
      return IoError("setsockopt IP_TOS", errno);
    }
  } else if (ss.ss_family == AF_INET6) {
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &v, sizeof v) != 0) {
      return IoError("setsockopt IPV6_TCLASS", errno);
    }
  }
  return Status::Ok();
}

uint64_t MarkedSocketCount() { return g_marked.load(std::memory_order_relaxed); }

bool SocketInterposerActive() {
  // A probe through the dynamic linker's global scope, the way libuct resolves socket(): if it
  // finds this object's definition, interposition is in effect.
  void* global = dlsym(RTLD_DEFAULT, "socket");
  return global == reinterpret_cast<void*>(&::socket) && global != nullptr &&
         RealSocket() != nullptr && global != reinterpret_cast<void*>(RealSocket());
}

}  // namespace dualpath::transfer

// The interposer. Must stay async-signal-safe-ish and allocation free: it runs inside libc
// callers of every thread of the process.
extern "C" int socket(int domain, int type, int protocol) {
  using dualpath::transfer::RealSocket;
  dualpath::transfer::SocketFn real = RealSocket();
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  int fd = real(domain, type, protocol);
  int tos = dualpath::transfer::t_tos;
  if (fd >= 0 && tos >= 0 && (type & 0xf) == SOCK_STREAM) {
    int v = tos;
    int rc = -1;
    if (domain == AF_INET) {
      rc = setsockopt(fd, IPPROTO_IP, IP_TOS, &v, sizeof v);
    } else if (domain == AF_INET6) {
      rc = setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &v, sizeof v);
    }
    if (rc == 0) {
      dualpath::transfer::g_marked.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return fd;
}
