// Helpers shared by storage unit and system tests (and tests of the engines' use of storage): a
// scratch directory on a disk that accepts O_DIRECT, deterministic block contents, a small block
// shape, and a gate that holds block publishes.
#pragma once

#include <stdlib.h>

#include <condition_variable>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/kv/block_hash.h"
#include "dualpath/kv/layout.h"
#include "dualpath/storage/faults.h"

namespace dualpath::storage::testing {

// 2 layers x 4 tokens x 512 bytes = 4 KiB payload, 8 KiB file: small enough for fast tests,
// large enough that payload and header are separate 4 KiB pages.
inline kv::BlockShape SmallShape() { return kv::BlockShape{2, 4, 512}; }

inline kv::BlockHash HashOf(uint64_t i) {
  kv::BlockHash h;
  std::mt19937_64 rng(i * 0x9E3779B97F4A7C15ull + 1);
  for (size_t k = 0; k < h.bytes.size(); k += 8) {
    uint64_t v = rng();
    for (size_t b = 0; b < 8; ++b) {
      h.bytes[k + b] = static_cast<uint8_t>(v >> (8 * b));
    }
  }
  return h;
}

// The payload of block i: a pure function of i, so any process can check what it read.
inline std::vector<std::byte> PayloadOf(uint64_t i, size_t bytes) {
  std::vector<std::byte> p(bytes);
  std::mt19937_64 rng(i + 12345);
  for (auto& b : p) {
    b = static_cast<std::byte>(rng());
  }
  return p;
}

// A fresh directory under /var/tmp (on disk: tmpfs would refuse O_DIRECT), removed on scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = "/var/tmp/dp_storage_test_XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    path_ = p == nullptr ? "" : tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Holds every publish (the rename after a block file is written) until opened, or only those of
// the blocks `holds` picks: a sink that does not drain, so a test fills a write-behind queue
// deterministically, without sleeps. Thread-safe.
class PublishGate : public StorageFaults {
 public:
  PublishGate() = default;
  explicit PublishGate(std::function<bool(const kv::BlockHash&)> holds)
      : holds_(std::move(holds)) {}
  void BeforePublish(const kv::BlockHash& hash) override {
    if (holds_ && !holds_(hash)) return;
    std::unique_lock lock(mu_);
    ++arrived_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  // Waits until n publishes reached the gate.
  void WaitArrived(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return arrived_ >= n; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  const std::function<bool(const kv::BlockHash&)> holds_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  bool open_ = false;
};

}  // namespace dualpath::storage::testing
