// pool_stress_worker: one process of the multi-process stress and crash tests.
//
//   pool_stress_worker <region> <local_dir> <node> <seed> <ops> [progress_fd]
//
// Performs `ops` random operations (0 = until its control stdin reaches EOF) on a shared key
// space: put, lookup (longest prefix), pin + read + unpin, copy-out get, delete, evict. Every
// payload read is verified against the checksum stored with the block (the block's user tag) and
// against the payload the key must have. With a progress fd it writes one byte per 16 operations
// (non-blocking; dropped if the pipe is full) so the parent can kill it mid-operation without
// sleeping. Mix: 20% read of a pinned block, 30% lookup, 15% put, 10% pin, 10% unpin, 10% get,
// 3% delete, 2% evict. Prints "ops=N verified=N mismatches=N" and exits 0, or exits 10 on a
// mismatch.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "dualpath/pool/pool.h"
#include "pool/test_util.h"

using namespace dualpath;        // NOLINT(google-build-using-namespace)
using namespace dualpath::pool;  // NOLINT(google-build-using-namespace)
using pool::testing::Checksum;
using pool::testing::FillPayload;
using pool::testing::MakeHash;

namespace {

constexpr uint64_t kKeys = 512;
constexpr uint64_t kChain = 8;  // lookups walk chains of 8 consecutive keys

size_t SizeOf(uint64_t key) { return 512 + (key % 8) * 512; }

uint64_t g_mismatches = 0, g_verified = 0;

void Verify(uint64_t key, const std::byte* data, uint64_t size, uint64_t tag) {
  std::vector<std::byte> want(SizeOf(key));
  FillPayload(key, want);
  const bool ok = size == want.size() && Checksum({data, size}) == tag && tag == Checksum(want) &&
                  std::memcmp(data, want.data(), size) == 0;
  if (ok) {
    ++g_verified;
  } else {
    ++g_mismatches;
    std::fprintf(stderr, "pool_stress_worker %d: MISMATCH key=%lu size=%lu\n", getpid(),
                 static_cast<unsigned long>(key), static_cast<unsigned long>(size));
  }
}

bool StdinClosed() {
  pollfd p{0, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  char c;
  return read(0, &c, 1) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: pool_stress_worker region local_dir node seed ops [fd]\n");
    return 2;
  }
  OpenOptions o;
  o.local_dir = argv[2];
  o.node = static_cast<uint32_t>(std::atoi(argv[3]));
  o.background_thread = false;
  const uint64_t seed = std::strtoull(argv[4], nullptr, 10);
  const uint64_t ops = std::strtoull(argv[5], nullptr, 10);
  const int progress_fd = argc > 6 ? std::atoi(argv[6]) : -1;
  if (progress_fd >= 0) fcntl(progress_fd, F_SETFL, O_NONBLOCK);
  Result<std::unique_ptr<Pool>> opened = Pool::Open(argv[1], o);
  if (!opened.ok()) {
    std::fprintf(stderr, "pool_stress_worker: %s\n", opened.status().ToString().c_str());
    return 3;
  }
  Pool& pool = **opened;
  std::mt19937_64 rng(seed);
  std::vector<std::byte> buf(8192);
  std::vector<std::pair<uint64_t, PinnedBlock>> pins;
  uint64_t done = 0;
  for (; ops == 0 || done < ops; ++done) {
    const uint64_t key = rng() % kKeys;
    const BlockHash h = MakeHash(key);
    const uint64_t dice = rng() % 100;
    if (dice < 20 && !pins.empty()) {  // read a block this process holds pinned (zero-copy)
      auto& [k, p] = pins[rng() % pins.size()];
      Verify(k, p.data, p.size, p.user_tag);
    } else if (dice < 50) {  // lookup: longest prefix of a chain (lock-free)
      std::vector<BlockHash> chain;
      const uint64_t start = key / kChain * kChain;
      for (uint64_t k = start; k < start + kChain; ++k) chain.push_back(MakeHash(k));
      (void)pool.LongestPrefix(chain);
    } else if (dice < 65) {  // put
      std::vector<std::byte> d(SizeOf(key));
      FillPayload(key, d);
      Status s = pool.Put(h, d, Checksum(d));
      if (!s.ok() && s.code() != Code::kAlreadyExists && s.code() != Code::kPoolFull) {
        std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
        return 4;
      }
    } else if (dice < 75) {  // pin + read
      Result<PinnedBlock> p = pool.Pin(h);
      if (p.ok()) {
        Verify(key, p->data, p->size, p->user_tag);
        pins.emplace_back(key, *p);
      }
    } else if (dice < 85) {  // read once more and unpin the oldest pin
      if (!pins.empty()) {
        auto& [k, p] = pins.front();
        Verify(k, p.data, p.size, p.user_tag);
        if (!pool.Unpin(p).ok()) return 5;
        pins.erase(pins.begin());
      }
    } else if (dice < 95) {  // copy-out get
      uint64_t tag = 0;
      Result<uint64_t> n = pool.Get(h, buf, &tag);
      if (n.ok()) Verify(key, buf.data(), *n, tag);
    } else if (dice < 98) {  // delete
      Status s = pool.Delete(h);
      if (!s.ok() && s.code() != Code::kNotFound && s.code() != Code::kPoolPinned) return 6;
    } else {  // evict
      if (!pool.Evict(1).ok()) return 7;
    }
    if (pins.size() > 16) {  // bound pins per process
      auto& [k, p] = pins.front();
      Verify(k, p.data, p.size, p.user_tag);
      if (!pool.Unpin(p).ok()) return 5;
      pins.erase(pins.begin());
    }
    if (g_mismatches > 0) return 10;
    if (progress_fd >= 0 && done % 16 == 0) {
      const char c = 1;
      (void)!write(progress_fd, &c, 1);
    }
    if (ops == 0 && done % 256 == 0 && StdinClosed()) break;
  }
  for (auto& [k, p] : pins) {
    Verify(k, p.data, p.size, p.user_tag);
    if (!pool.Unpin(p).ok()) return 5;
  }
  std::printf("ops=%lu verified=%lu mismatches=%lu\n", static_cast<unsigned long>(done),
              static_cast<unsigned long>(g_verified), static_cast<unsigned long>(g_mismatches));
  return g_mismatches == 0 ? 0 : 10;
}
