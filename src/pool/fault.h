// Fault injection points on the pool's critical sections (3FS FAULT_INJECTION_POINT), so tests
// can kill a process at an exact instruction boundary inside the metadata lock and check that the
// recovery sweep repairs whatever was half-done. Without a hook installed, a point costs one
// relaxed load.
//
// Thread safety: the hook may be set from any thread; it is called on the thread at the point.
#pragma once

#include <atomic>

namespace dualpath::pool::internal {

using FaultHook = void (*)(const char* point);

inline std::atomic<FaultHook>& FaultHookSlot() {
  static std::atomic<FaultHook> hook{nullptr};
  return hook;
}

inline void SetFaultHook(FaultHook hook) { FaultHookSlot().store(hook); }

inline void FaultPoint(const char* point) {
  if (FaultHook h = FaultHookSlot().load(std::memory_order_relaxed)) h(point);
}

}  // namespace dualpath::pool::internal
