// A process killed (SIGKILL) at each fault point inside the metadata lock: the survivors' view
// must be repaired by the recovery sweep - no wedged lock, no WRITING leftovers, no stale pins,
// no leaked capacity (owner-bound roots included), and every READY block still intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <tuple>

#include "dualpath/pool/pool.h"
#include "pool/fault.h"
#include "pool/test_util.h"

namespace dualpath::pool {
namespace {

using testing::Checksum;
using testing::FillPayload;
using testing::MakeHash;
using testing::TempDir;

const char* g_point = nullptr;

void KillAtPoint(const char* point) {
  if (g_point != nullptr && std::strcmp(point, g_point) == 0) raise(SIGKILL);
}

std::vector<std::byte> Payload(uint64_t key, size_t n) {
  std::vector<std::byte> v(n);
  FillPayload(key, v);
  return v;
}

// (memory model, fault point, node of the victim)
using Param = std::tuple<MemoryModel, const char*, uint32_t>;

class RecoveryTest : public ::testing::TestWithParam<Param> {};

// The victim's script: every step reaches some fault point; the first matching one kills it.
[[noreturn]] void Victim(const std::string& path, const OpenOptions& o) {
  auto p = Pool::Open(path, o);
  if (!p.ok()) _exit(3);
  Pool& pool = **p;
  for (uint64_t k = 1; k <= 3; ++k) {
    auto d = Payload(k, 4096);
    if (!pool.Put(MakeHash(k), d, Checksum(d)).ok()) _exit(4);
  }
  if (!pool.Pin(MakeHash(1)).ok()) _exit(5);
  if (!pool.CreateRoot("victim/owned", 100000, RootLifetime::kProcess).ok()) _exit(6);
  if (!pool.CreateRoot("victim/kept", 1000).ok()) _exit(7);
  g_point = std::get<1>(RecoveryTest::GetParam());
  internal::SetFaultHook(&KillAtPoint);
  Result<WriteHandle> w = pool.Reserve(MakeHash(4), 20000);  // new size class: new chunk
  if (w.ok()) {
    auto d = Payload(4, 20000);
    std::memcpy(w->data, d.data(), d.size());
    (void)pool.Publish(*w);
  }
  Result<PinnedBlock> pin2 = pool.Pin(MakeHash(2));
  if (pin2.ok()) (void)pool.Unpin(*pin2);
  (void)pool.Delete(MakeHash(3));
  (void)pool.CreateRoot("victim/late", 5000, RootLifetime::kProcess);
  (void)pool.Recover();
  _exit(0);  // the point was not reached: the parent reports it
}

TEST_P(RecoveryTest, KilledInsideCriticalSection) {
  const auto [model, point, victim_node] = GetParam();
  TempDir dir;
  const std::string path = dir.File("region");
  Geometry g;
  g.chunk_bytes = 64 << 10;
  g.region_bytes = 4 << 20;
  g.max_procs = 4;
  g.pin_records = 16;
  g.num_nodes = 2;
  g.model = model;
  ASSERT_TRUE(Pool::Create(path, g).ok());
  OpenOptions o;
  o.background_thread = false;
  o.local_dir = dir.path();

  // A survivor on node 0 is attached throughout (it runs the lock manager in the non-coherent
  // model). fork() with its manager thread running is fine: the child only runs Victim.
  auto survivor = Pool::Open(path, o);
  ASSERT_TRUE(survivor.ok());
  auto keep = Payload(100, 3000);
  ASSERT_TRUE((*survivor)->Put(MakeHash(100), keep, Checksum(keep)).ok());

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    OpenOptions vo = o;
    vo.node = victim_node;
    Victim(path, vo);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "victim did not die at " << point << " (exit " << WEXITSTATUS(status) << ")";

  // Whatever the victim held comes back at the next Tick (it is dead: same host, pid gone).
  Pool& pool = **survivor;
  ASSERT_TRUE(pool.Tick().ok());
  PoolStats s = pool.Stats();
  EXPECT_EQ(s.live_procs, 1u);
  EXPECT_EQ(s.writing_entries, 0u);
  EXPECT_EQ(s.total_pins, 0u);
  EXPECT_GE(s.reclaimed_procs, 1u);
  // Its owner-bound roots are gone (committed or not), its persistent root stays.
  EXPECT_EQ(pool.GetRoot("victim/owned").status().code(), Code::kNotFound);
  EXPECT_EQ(pool.GetRoot("victim/late").status().code(), Code::kNotFound);
  EXPECT_GE(s.reclaimed_roots, 1u);
  ASSERT_TRUE(pool.DestroyRoot("victim/kept").ok());
  // Every READY block is intact.
  for (uint64_t k : {1, 2, 3, 4, 100}) {
    std::vector<std::byte> out(32 << 10);
    uint64_t tag = 0;
    Result<uint64_t> n = pool.Get(MakeHash(k), out, &tag);
    if (!n.ok()) {
      EXPECT_EQ(n.status().code(), Code::kNotFound) << k;
      EXPECT_NE(k, 100u);
      continue;
    }
    if (k == 4) continue;  // published without a checksum
    EXPECT_EQ(Checksum({out.data(), *n}), tag) << "block " << k;
  }
  // No capacity leaked: deleting everything frees every chunk.
  for (uint64_t k : {1, 2, 3, 4, 100}) (void)pool.Delete(MakeHash(k));
  s = pool.Stats();
  EXPECT_EQ(s.ready_entries, 0u);
  EXPECT_EQ(s.free_chunks, s.num_chunks);
  // And the pool works.
  auto d = Payload(7, 50000);
  ASSERT_TRUE(pool.Put(MakeHash(7), d, Checksum(d)).ok());
  std::vector<std::byte> out(d.size());
  ASSERT_TRUE(pool.Get(MakeHash(7), out).ok());
  EXPECT_EQ(out, d);
}

const char* const kPoints[] = {"reserve.allocated",  "alloc.descs_written",  "reserve.filled",
                               "reserve.writing",    "publish.before_ready", "pin.recorded",
                               "unpin.recorded",     "free.slot_cleared",    "remove.unpublished",
                               "sweep.pins_rebuilt", "root.before_commit",   "sweep.roots_dropped"};

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  std::string n = std::string(MemoryModelName(std::get<0>(info.param))) + "_" +
                  std::get<1>(info.param) + "_node" + std::to_string(std::get<2>(info.param));
  for (char& c : n) {
    if (c == '.') c = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(Coherent, RecoveryTest,
                         ::testing::Combine(::testing::Values(MemoryModel::kCoherent),
                                            ::testing::ValuesIn(kPoints), ::testing::Values(0u)),
                         Name);
// Non-coherent: a victim on the manager's node (the next local locker inherits) and one on
// another node (the manager revokes the dead holder's grant).
INSTANTIATE_TEST_SUITE_P(NonCoherent, RecoveryTest,
                         ::testing::Combine(::testing::Values(MemoryModel::kNonCoherent),
                                            ::testing::ValuesIn(kPoints),
                                            ::testing::Values(0u, 1u)),
                         Name);

}  // namespace
}  // namespace dualpath::pool
