// Test helper shared by engine_test and rack_link_test: a fresh rack pool region of this test
// process (the rack-pool KV substrate's region, engine/rack_link.h).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/pool/pool.h"

namespace dualpath::engine {

// Creates /dev/shm/<tag>-<pid>.pool in `model` with `chunks` 4 MiB chunks and an index of
// `index_capacity` entries (lease 1 s), removing a crashed earlier run's pool of that name first
// (Destroy removes only a pool). *path gets the region's path.
inline Status CreateTestRackPool(const std::string& tag, pool::MemoryModel model,
                                 uint64_t index_capacity, uint64_t chunks, std::string* path) {
  *path = "/dev/shm/" + tag + "-" + std::to_string(getpid()) + ".pool";
  (void)pool::Pool::Destroy(*path);
  pool::Geometry g;
  g.model = model;
  g.lease = kNanosPerSecond;
  g.index_capacity = index_capacity;
  g.region_bytes = pool::RegionBytesFor(g, chunks);
  return pool::Pool::Create(*path, g);
}

}  // namespace dualpath::engine
