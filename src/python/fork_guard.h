// Objects of the extension that own threads, io_uring rings, locks, channels or a pool attachment
// belong to the process that opened them. fork() gives a child a copy of their memory but none of
// their threads: a call in the child waits forever for a thread that does not exist there (the
// persistent tier's verify pool, issue 25 item 11), a mutex copied while another thread held it
// never opens, and the child's io_uring submissions and epoll waits share the parent's kernel
// objects. Destroying such an object in the child is no better: joining a thread of the parent
// waits forever or aborts ("No such process"), and closing the pool attachment would unregister
// the parent's.
//
// OwnerProcess records the process that opened an object. The bindings check it before they
// touch anything (no lock, no thread): in another process a call raises ForkedError, and close()
// and destruction abandon the native state without touching it (its memory in the child is
// leaked on purpose: it is the parent's). The Python layer (python/dualpath/store.py) opens the
// store again in the child on its first call, so `dualpath.KVStore` and `dualpath.ClusterStore`
// keep working after fork; the raw `dualpath._core` objects raise.
//
// Thread safety: CurrentPid and OwnerProcess may be used from any thread.
#pragma once

#include <sys/types.h>

#include <string_view>

#include "dualpath/common/status.h"

namespace dualpath::python {

// This process's id. Kept by a pthread_atfork child handler (installed on first use), so a check
// per call costs a load, not a getpid() system call.
pid_t CurrentPid();

class OwnerProcess {
 public:
  OwnerProcess() : pid_(CurrentPid()) {}
  // True in a process forked from the owner (or a descendant of one).
  bool forked() const { return CurrentPid() != pid_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

// kFailedPrecondition: `what` (e.g. "KVStore") was opened by process `owner` before fork() and
// cannot run here, followed by `advice` (what to do instead).
Status ForkedError(std::string_view what, pid_t owner, std::string_view advice);

}  // namespace dualpath::python
