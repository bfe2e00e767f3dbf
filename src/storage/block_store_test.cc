#include "dualpath/storage/block_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "dualpath/storage/layout.h"
#include "storage/test_util.h"

namespace dualpath::storage {
namespace {

namespace fs = std::filesystem;
using testing::HashOf;
using testing::PayloadOf;
using testing::ScratchDir;
using testing::SmallShape;

constexpr uint64_t kFingerprint = 0xfeedfacecafebeefull;

class BlockStoreTest : public ::testing::TestWithParam<IoMode> {
 protected:
  StoreOptions Options() const {
    StoreOptions o;
    o.root = dir_.path();
    o.model_fingerprint = kFingerprint;
    o.io_mode = GetParam();
    o.queue_depth = 4;
    return o;
  }
  std::unique_ptr<BlockStore> OpenStore(StoreOptions o) {
    auto store = BlockStore::Open(o);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }
  Status WriteBlock(BlockStore& s, uint64_t i) {
    auto payload = PayloadOf(i, SmallShape().FullBytes());
    return s.Write(HashOf(i), SmallShape(), payload);
  }
  // Reads block i; on success checks the bytes are exactly block i's payload.
  Status ReadBlock(BlockStore& s, uint64_t i) {
    AlignedBuffer buf(BlockStore::FileBytes(SmallShape()));
    ReadRequest req{HashOf(i), buf.span(), SmallShape().tokens};
    auto results = s.ReadBatch({&req, 1});
    if (results[0].status.ok()) {
      auto want = PayloadOf(i, SmallShape().FullBytes());
      EXPECT_EQ(results[0].block.payload.size(), want.size());
      EXPECT_EQ(std::memcmp(results[0].block.payload.data(), want.data(), want.size()), 0);
      EXPECT_EQ(results[0].block.meta.block_hash, HashOf(i));
    }
    return results[0].status;
  }
  size_t QuarantineCount(const BlockStore& s) {
    size_t n = 0;
    for ([[maybe_unused]] auto& e : fs::directory_iterator(s.model_dir() + "/quarantine")) {
      ++n;
    }
    return n;
  }
  // Counts temporary files anywhere under the model directory.
  size_t TmpFileCount(const BlockStore& s) {
    size_t n = 0;
    for (auto& e : fs::recursive_directory_iterator(s.model_dir())) {
      if (ParseTmpFileName(e.path().filename().string())) {
        ++n;
      }
    }
    return n;
  }

  ScratchDir dir_;
};

TEST_P(BlockStoreTest, WriteThenReadRoundTripsUnderFanOutPath) {
  auto s = OpenStore(Options());
  ASSERT_TRUE(s);
  ASSERT_TRUE(WriteBlock(*s, 1).ok());
  std::string path = BlockPath(s->model_dir(), HashOf(1));
  EXPECT_TRUE(fs::exists(path));
  std::string hex = HashOf(1).Hex();
  EXPECT_EQ(path, dir_.path() + "/feedfacecafebeef/" + hex.substr(0, 2) + "/" + hex.substr(2, 2) +
                      "/" + hex + ".kvb");
  EXPECT_EQ(fs::file_size(path), BlockStore::FileBytes(SmallShape()));
  EXPECT_TRUE(ReadBlock(*s, 1).ok());
  EXPECT_TRUE(s->Contains(HashOf(1)));
  StoreStats st = s->stats();
  EXPECT_EQ(st.writes, 1u);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.indexed_blocks, 1u);
  EXPECT_EQ(TmpFileCount(*s), 0u);
  if (GetParam() == IoMode::kBuffered) {
    EXPECT_FALSE(s->direct_io());
  }
}

// Issue 17: everything the store creates is 0750 (directories) / 0640 (files), even under a
// umask of 0 (which would leave mkdir 0755 / open 0644 as they are); the umask may only narrow.
TEST_P(BlockStoreTest, CreatedFilesAndDirectoriesHaveRestrictiveModesUnderAnyUmask) {
  const mode_t old_umask = ::umask(0);
  auto s = OpenStore(Options());
  ASSERT_TRUE(s);
  ASSERT_TRUE(WriteBlock(*s, 1).ok());
  ::umask(old_umask);
  auto mode = [](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode(BlockPath(s->model_dir(), HashOf(1))), kStoreFileMode);
  EXPECT_EQ(kStoreFileMode, 0640u);
  EXPECT_EQ(kStoreDirMode, 0750u);
  size_t dirs = 0;
  for (auto& e : fs::recursive_directory_iterator(dir_.path())) {
    if (e.is_directory()) {
      ++dirs;
      EXPECT_EQ(mode(e.path().string()), kStoreDirMode) << e.path();
    } else {
      EXPECT_EQ(mode(e.path().string()), kStoreFileMode) << e.path();
    }
  }
  EXPECT_EQ(dirs, 4u);  // <fingerprint>, quarantine, <h0h1>, <h2h3>
}

TEST_P(BlockStoreTest, BatchReadsMixHitsAndMisses) {
  auto s = OpenStore(Options());
  ASSERT_TRUE(s);
  std::vector<EncodedBlock> blocks;
  for (uint64_t i = 0; i < 10; i += 2) {
    auto p = PayloadOf(i, SmallShape().FullBytes());
    auto e = s->Encode(HashOf(i), SmallShape(), p);
    ASSERT_TRUE(e.ok());
    blocks.push_back(std::move(*e));
  }
  for (const Status& st : s->WriteBatch(blocks)) {
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  std::vector<AlignedBuffer> bufs;
  std::vector<ReadRequest> reqs;
  for (uint64_t i = 0; i < 10; ++i) {
    bufs.emplace_back(BlockStore::FileBytes(SmallShape()));
  }
  for (uint64_t i = 0; i < 10; ++i) {
    reqs.push_back({HashOf(i), bufs[i].span(), 4});
  }
  auto results = s->ReadBatch(reqs);
  for (uint64_t i = 0; i < 10; ++i) {
    if (i % 2 == 0) {
      ASSERT_TRUE(results[i].status.ok()) << i << results[i].status.ToString();
      auto want = PayloadOf(i, SmallShape().FullBytes());
      EXPECT_EQ(std::memcmp(results[i].block.payload.data(), want.data(), want.size()), 0);
    } else {
      EXPECT_EQ(results[i].status.code(), Code::kStorageMiss) << i;
    }
  }
  EXPECT_EQ(s->stats().misses, 5u);
  EXPECT_EQ(s->read_queue().Snapshot().blocks, 0u);
}

TEST_P(BlockStoreTest, MissingBlockIsAMiss) {
  auto s = OpenStore(Options());
  ASSERT_TRUE(s);
  EXPECT_EQ(ReadBlock(*s, 9).code(), Code::kStorageMiss);
  EXPECT_EQ(s->stats().misses, 1u);
  EXPECT_FALSE(s->Contains(HashOf(9)));
}

// Flipped payload byte, flipped header byte, truncation: each a counted, quarantined miss, and the
// store keeps serving (the block can be written again and read).
TEST_P(BlockStoreTest, DamagedFilesAreQuarantinedMisses) {
  auto s = OpenStore(Options());
  ASSERT_TRUE(s);
  struct Damage {
    const char* what;
    std::function<void(const std::string&)> apply;
  };
  auto flip = [](off_t off) {
    return [off](const std::string& path) {
      int fd = ::open(path.c_str(), O_RDWR);
      ASSERT_GE(fd, 0);
      char c;
      ASSERT_EQ(::pread(fd, &c, 1, off), 1);
      c ^= 0x01;
      ASSERT_EQ(::pwrite(fd, &c, 1, off), 1);
      ::close(fd);
    };
  };
  std::vector<Damage> damages = {
      {"payload byte", flip(4096 + 777)},
      {"header byte", flip(20)},
      {"truncated", [](const std::string& p) { fs::resize_file(p, 4096 + 100); }},
      {"header only", [](const std::string& p) { fs::resize_file(p, 4096); }},
      {"empty", [](const std::string& p) { fs::resize_file(p, 0); }},
  };
  uint64_t corrupt = 0;
  for (size_t k = 0; k < damages.size(); ++k) {
    SCOPED_TRACE(damages[k].what);
    ASSERT_TRUE(WriteBlock(*s, 100 + k).ok());
    std::string path = BlockPath(s->model_dir(), HashOf(100 + k));
    damages[k].apply(path);
    Status st = ReadBlock(*s, 100 + k);
    EXPECT_EQ(st.code(), Code::kStorageMiss) << st.ToString();
    EXPECT_EQ(s->stats().corrupt, ++corrupt);
    EXPECT_FALSE(fs::exists(path)) << "damaged file must leave the block name";
    EXPECT_EQ(QuarantineCount(*s), corrupt);
    // Keeps serving: a rewrite publishes a good copy.
    ASSERT_TRUE(WriteBlock(*s, 100 + k).ok());
    EXPECT_TRUE(ReadBlock(*s, 100 + k).ok());
  }
}

TEST_P(BlockStoreTest, ForeignFilesAreMisses) {
  auto s = OpenStore(Options());
  ASSERT_TRUE(s);
  // Another model's store in the same root: same hash, different directory, never shared.
  StoreOptions other = Options();
  other.model_fingerprint = kFingerprint + 1;
  auto s2 = OpenStore(other);
  ASSERT_TRUE(s2);
  ASSERT_TRUE(WriteBlock(*s2, 5).ok());
  EXPECT_EQ(ReadBlock(*s, 5).code(), Code::kStorageMiss);
  EXPECT_EQ(s->stats().corrupt, 0u);

  // The other model's file copied under our name: fingerprint mismatch.
  fs::create_directories(BlockDir(s->model_dir(), HashOf(5)));
  fs::copy_file(BlockPath(s2->model_dir(), HashOf(5)), BlockPath(s->model_dir(), HashOf(5)));
  Status st = ReadBlock(*s, 5);
  EXPECT_EQ(st.code(), Code::kStorageMiss);
  EXPECT_NE(st.message().find("fingerprint"), std::string::npos) << st.ToString();

  // Our own block 6 copied under block 7's name: hash mismatch.
  ASSERT_TRUE(WriteBlock(*s, 6).ok());
  fs::create_directories(BlockDir(s->model_dir(), HashOf(7)));
  fs::copy_file(BlockPath(s->model_dir(), HashOf(6)), BlockPath(s->model_dir(), HashOf(7)));
  st = ReadBlock(*s, 7);
  EXPECT_EQ(st.code(), Code::kStorageMiss);
  EXPECT_NE(st.message().find("hash"), std::string::npos) << st.ToString();
  EXPECT_EQ(s->stats().corrupt, 2u);
  EXPECT_TRUE(ReadBlock(*s, 6).ok());
}

TEST_P(BlockStoreTest, SmallBufferIsCallerErrorNotCorruption) {
  auto s = OpenStore(Options());
  ASSERT_TRUE(s);
  ASSERT_TRUE(WriteBlock(*s, 3).ok());
  AlignedBuffer small(4096);  // header only
  ReadRequest req{HashOf(3), small.span(), 4};
  auto r = s->ReadBatch({&req, 1});
  EXPECT_EQ(r[0].status.code(), Code::kInvalidArgument) << r[0].status.ToString();
  EXPECT_EQ(s->stats().corrupt, 0u);
  EXPECT_TRUE(ReadBlock(*s, 3).ok());
}

// A FIFO or a directory under a block's name (a careless or hostile user): a failed read at once,
// never an open that waits for a writer (this test would hang) and never a served block.
TEST_P(BlockStoreTest, NonRegularFilesUnderABlockNameFailWithoutBlocking) {
  auto s = OpenStore(Options());
  ASSERT_TRUE(s);
  fs::create_directories(BlockDir(s->model_dir(), HashOf(11)));
  ASSERT_EQ(::mkfifo(BlockPath(s->model_dir(), HashOf(11)).c_str(), 0600), 0);
  EXPECT_FALSE(ReadBlock(*s, 11).ok());
  fs::create_directories(BlockPath(s->model_dir(), HashOf(12)));
  EXPECT_FALSE(ReadBlock(*s, 12).ok());
  // The store keeps serving.
  ASSERT_TRUE(WriteBlock(*s, 13).ok());
  EXPECT_TRUE(ReadBlock(*s, 13).ok());
}

TEST_P(BlockStoreTest, SecondWriteOfSameBlockIsIdempotent) {
  auto s = OpenStore(Options());
  ASSERT_TRUE(s);
  ASSERT_TRUE(WriteBlock(*s, 4).ok());
  ASSERT_TRUE(WriteBlock(*s, 4).ok());
  EXPECT_EQ(s->stats().writes, 1u);
  EXPECT_EQ(s->stats().write_dedup, 1u);
  EXPECT_TRUE(ReadBlock(*s, 4).ok());
}

TEST_P(BlockStoreTest, CapacityEvictsLeastRecentlyUsed) {
  StoreOptions o = Options();
  o.capacity_bytes = 3 * BlockStore::FileBytes(SmallShape());
  auto s = OpenStore(o);
  ASSERT_TRUE(s);
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(WriteBlock(*s, i).ok());
  }
  ASSERT_TRUE(ReadBlock(*s, 1).ok());  // 1 becomes most recent; 2 is now the oldest
  ASSERT_TRUE(WriteBlock(*s, 4).ok());
  EXPECT_TRUE(s->Contains(HashOf(1)));
  EXPECT_FALSE(s->Contains(HashOf(2)));
  EXPECT_TRUE(s->Contains(HashOf(3)));
  EXPECT_TRUE(s->Contains(HashOf(4)));
  EXPECT_EQ(s->stats().evictions, 1u);
  EXPECT_EQ(s->stats().indexed_bytes, o.capacity_bytes);
}

TEST_P(BlockStoreTest, ReopenRebuildsIndexAndCleansDeadWritersTmpFiles) {
  StoreOptions o = Options();
  std::string tmp_dead, tmp_live;
  {
    auto s = OpenStore(o);
    ASSERT_TRUE(s);
    for (uint64_t i = 0; i < 5; ++i) {
      ASSERT_TRUE(WriteBlock(*s, i).ok());
    }
    // A process that has exited (reaped): its pid is certainly not alive.
    pid_t child = ::fork();
    if (child == 0) {
      ::_exit(0);
    }
    ASSERT_GT(child, 0);
    ASSERT_EQ(::waitpid(child, nullptr, 0), child);
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    std::string h = host;
    std::replace(h.begin(), h.end(), '.', '_');
    tmp_dead = TmpPath(s->model_dir(), HashOf(1), h, child, 1);
    // A writer on another host with a fresh file may still be writing: must be kept.
    tmp_live = TmpPath(s->model_dir(), HashOf(2), "otherhost", 42, 1);
    std::ofstream(tmp_dead) << "partial";
    std::ofstream(tmp_live) << "partial";
  }
  auto s = OpenStore(o);
  ASSERT_TRUE(s);
  StoreStats st = s->stats();
  EXPECT_EQ(st.indexed_blocks, 5u);
  EXPECT_EQ(st.indexed_bytes, 5 * BlockStore::FileBytes(SmallShape()));
  EXPECT_EQ(st.tmp_cleaned, 1u);
  EXPECT_FALSE(fs::exists(tmp_dead));
  EXPECT_TRUE(fs::exists(tmp_live));
  for (uint64_t i = 0; i < 5; ++i) {
    EXPECT_TRUE(ReadBlock(*s, i).ok()) << i;
  }
}

// Fault points: a failed read is an error, not data; a short write publishes nothing.
class Faults : public StorageFaults {
 public:
  Status BeforeRead(const kv::BlockHash& h) override {
    seen_queue = store->read_queue().Snapshot();
    if (h == fail_read) {
      return IoError("injected read failure", EIO);
    }
    return Status::Ok();
  }
  uint64_t WriteLimit(const kv::BlockHash& h, uint64_t bytes) override {
    return h == short_write ? bytes / 2 : bytes;
  }
  BlockStore* store = nullptr;
  kv::BlockHash fail_read, short_write;
  ReadQueueSnapshot seen_queue;
};

TEST_P(BlockStoreTest, InjectedFaultsNeverYieldDataOrPartialFiles) {
  Faults faults;
  faults.fail_read = HashOf(1);
  faults.short_write = HashOf(2);
  StoreOptions o = Options();
  o.faults = &faults;
  auto s = OpenStore(o);
  ASSERT_TRUE(s);
  faults.store = s.get();
  ASSERT_TRUE(WriteBlock(*s, 1).ok());
  Status st = ReadBlock(*s, 1);
  EXPECT_EQ(st.code(), Code::kIoError);
  EXPECT_EQ(s->stats().read_errors, 1u);
  // The read was queued (bytes and tokens) while the fault point ran, and left the queue after.
  EXPECT_EQ(faults.seen_queue.blocks, 1u);
  EXPECT_EQ(faults.seen_queue.tokens, SmallShape().tokens);
  EXPECT_EQ(faults.seen_queue.bytes, BlockStore::FileBytes(SmallShape()));
  EXPECT_EQ(s->read_queue().Snapshot().bytes, 0u);

  st = WriteBlock(*s, 2);
  EXPECT_EQ(st.code(), Code::kStorageNoSpace) << st.ToString();
  EXPECT_FALSE(s->Contains(HashOf(2)));
  EXPECT_EQ(TmpFileCount(*s), 0u);
  EXPECT_EQ(s->stats().write_errors, 1u);
  EXPECT_EQ(ReadBlock(*s, 2).code(), Code::kStorageMiss);
  // Still serving.
  ASSERT_TRUE(WriteBlock(*s, 3).ok());
  EXPECT_TRUE(ReadBlock(*s, 3).ok());
}

// ReadStream through 3 x queue_depth recycled buffers (the documented bound), with the verify
// pool and inline, over many more blocks than buffers; some blocks missing, one corrupt.
TEST_P(BlockStoreTest, ReadStreamRecyclesThreeTimesQueueDepthBuffers) {
  for (unsigned verify_threads : {0u, 1u, 3u}) {
    SCOPED_TRACE(verify_threads);
    StoreOptions o = Options();
    o.verify_threads = verify_threads;
    o.model_fingerprint = kFingerprint + 10 + verify_threads;  // a fresh model directory
    auto s = OpenStore(o);
    ASSERT_TRUE(s);
    constexpr uint64_t kN = 60;
    for (uint64_t i = 0; i < kN; ++i) {
      if (i % 5 != 0) {
        ASSERT_TRUE(WriteBlock(*s, i).ok());
      }
    }
    {
      std::string victim = BlockPath(s->model_dir(), HashOf(7));
      std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(4096 + 3);
      f.put('\x7f');
    }
    std::vector<AlignedBuffer> bufs;
    std::vector<size_t> free_bufs;
    for (size_t k = 0; k < 3 * o.queue_depth; ++k) {
      bufs.emplace_back(BlockStore::FileBytes(SmallShape()));
      free_bufs.push_back(k);
    }
    std::vector<size_t> buf_of(kN);
    std::vector<int> outcome(kN, -1);  // 1 hit with the right bytes, 0 miss, 2 anything else
    bool ran_out = false;
    s->ReadStream(
        kN,
        [&](size_t i) {
          if (free_bufs.empty()) {
            ran_out = true;
            bufs.emplace_back(BlockStore::FileBytes(SmallShape()));
            free_bufs.push_back(bufs.size() - 1);
          }
          buf_of[i] = free_bufs.back();
          free_bufs.pop_back();
          return ReadRequest{HashOf(i), bufs[buf_of[i]].span(), 4};
        },
        [&](size_t i, ReadResult&& r) {
          if (r.status.ok()) {
            auto want = PayloadOf(i, SmallShape().FullBytes());
            outcome[i] = std::memcmp(r.block.payload.data(), want.data(), want.size()) == 0 ? 1 : 2;
          } else {
            outcome[i] = r.status.code() == Code::kStorageMiss ? 0 : 2;
          }
          free_bufs.push_back(buf_of[i]);
        });
    EXPECT_FALSE(ran_out);
    for (uint64_t i = 0; i < kN; ++i) {
      EXPECT_EQ(outcome[i], (i % 5 == 0 || i == 7) ? 0 : 1) << i;
    }
    EXPECT_EQ(s->stats().corrupt, 1u);
    EXPECT_EQ(s->read_queue().Snapshot().bytes, 0u);
  }
}

// WriteStream tells exactly one writer that it created a block's file: a caller that removes
// what it wrote (bench storage) must never remove a file that was there before it.
TEST_P(BlockStoreTest, WriteStreamReportsWhichBlocksThisCallCreated) {
  auto s = OpenStore(Options());
  ASSERT_TRUE(s);
  ASSERT_TRUE(WriteBlock(*s, 1).ok());  // there before the stream
  std::vector<EncodedBlock> blocks;
  for (uint64_t i : {1, 2, 2}) {  // an old block, a new one, and the new one again
    auto p = PayloadOf(i, SmallShape().FullBytes());
    auto e = s->Encode(HashOf(i), SmallShape(), p);
    ASSERT_TRUE(e.ok());
    blocks.push_back(std::move(*e));
  }
  std::vector<int> created(blocks.size(), -1);
  s->WriteStream(
      blocks.size(), [&](size_t i) -> const EncodedBlock& { return blocks[i]; },
      [&](size_t i, Status st, bool c) {
        EXPECT_TRUE(st.ok()) << st.ToString();
        created[i] = c;
      });
  EXPECT_EQ(created[0], 0) << "block 1 existed before the stream";
  // Blocks 2 and 2 may be in flight together: whichever publishes first created the file, the
  // other finds the name taken.
  EXPECT_EQ(created[1] + created[2], 1);
  EXPECT_EQ(s->stats().writes, 2u);
  EXPECT_EQ(s->stats().write_dedup, 2u);
  EXPECT_EQ(TmpFileCount(*s), 0u);
  EXPECT_TRUE(ReadBlock(*s, 2).ok());
}

// A read-only store changes nothing on disk: it creates no directory (a missing one is
// kNotFound), writes and removes nothing, and leaves a damaged file where it is.
TEST_P(BlockStoreTest, ReadOnlyStoreChangesNothing) {
  StoreOptions o = Options();
  o.read_only = true;
  auto missing = BlockStore::Open(o);
  EXPECT_EQ(missing.status().code(), Code::kNotFound) << missing.status().ToString();
  EXPECT_TRUE(fs::is_empty(dir_.path())) << "a read-only open created something";

  {
    auto w = OpenStore(Options());
    ASSERT_TRUE(w);
    ASSERT_TRUE(WriteBlock(*w, 1).ok());
    ASSERT_TRUE(WriteBlock(*w, 2).ok());
  }
  // Damage block 2 and leave a dead writer's temporary file: a writable open would clean both.
  const std::string model_dir = BlockStore::ModelDir(dir_.path(), kFingerprint);
  const std::string bad = BlockPath(model_dir, HashOf(2));
  fs::resize_file(bad, 4096 + 100);
  const std::string tmp = TmpPath(model_dir, HashOf(3), "nohost", 1, 0);
  fs::create_directories(fs::path(tmp).parent_path());
  std::ofstream(tmp) << "partial";
  fs::last_write_time(tmp, fs::file_time_type::clock::now() - std::chrono::hours(1));
  auto listing = [&] {
    std::vector<std::string> v;
    for (auto& e : fs::recursive_directory_iterator(dir_.path())) {
      v.push_back(e.path().string() + ":" +
                  std::to_string(e.is_regular_file() ? fs::file_size(e.path()) : 0));
    }
    std::sort(v.begin(), v.end());
    return v;
  };
  const std::vector<std::string> before = listing();

  o.capacity_bytes = 1;  // eviction would remove everything
  o.scan_on_open = true;
  o.stale_tmp_seconds = 0;
  auto r = OpenStore(o);
  ASSERT_TRUE(r);
  EXPECT_TRUE(ReadBlock(*r, 1).ok());
  EXPECT_EQ(ReadBlock(*r, 2).code(), Code::kStorageMiss);
  EXPECT_EQ(r->stats().corrupt, 1u);
  EXPECT_EQ(WriteBlock(*r, 4).code(), Code::kFailedPrecondition);
  EXPECT_EQ(r->Remove(HashOf(1)).code(), Code::kFailedPrecondition);
  r.reset();
  EXPECT_EQ(listing(), before) << "a read-only store changed the directory";
}

TEST_P(BlockStoreTest, RejectsBadOptions) {
  StoreOptions o = Options();
  o.root = "";
  EXPECT_EQ(BlockStore::Open(o).status().code(), Code::kInvalidArgument);
  o = Options();
  o.queue_depth = 0;
  EXPECT_EQ(BlockStore::Open(o).status().code(), Code::kInvalidArgument);
  o = Options();
  o.root = dir_.path() + "/file";
  std::ofstream(o.root) << "x";
  EXPECT_FALSE(BlockStore::Open(o).ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, BlockStoreTest,
                         ::testing::Values(IoMode::kDirect, IoMode::kBuffered),
                         [](const auto& info) {
                           return info.param == IoMode::kDirect ? "Direct" : "Buffered";
                         });

}  // namespace
}  // namespace dualpath::storage
