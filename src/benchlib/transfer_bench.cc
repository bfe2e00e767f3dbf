#include "dualpath/benchlib/transfer_bench.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "dualpath/common/numeric.h"
#include "dualpath/common/stats.h"

namespace dualpath::transfer {
namespace {

// Page-aligned, pre-faulted memory (registration and first-touch costs stay out of the timing).
class Buffer {
 public:
  explicit Buffer(uint64_t n) : n_(n) {
    if (n == 0) {
      return;
    }
    p_ =
        mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p_ == MAP_FAILED) {
      p_ = nullptr;
    }
  }
  ~Buffer() {
    if (p_ != nullptr) {
      munmap(p_, n_);
    }
  }
  uint8_t* data() const { return static_cast<uint8_t*>(p_); }
  uint64_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  uint64_t n_;
};

}  // namespace

std::string BenchReport::ToJson() const {
  return fmt::format(
      "{{\"op\":\"{}\",\"size\":{},\"batch\":{},\"gbps\":{:.4f},\"p50_us\":{:.2f},"
      "\"p99_us\":{:.2f},\"depth\":{},\"batches\":{},\"seconds\":{:.4f},\"descs_per_s\":{:.0f},"
      "\"submit_ns_per_desc\":{:.1f},\"post_ns_per_desc\":{:.1f},\"inline_fraction\":{:.3f}}}",
      op, size, batch, gbps, p50_us, p99_us, depth, batches, seconds, descs_per_s,
      submit_ns_per_desc, post_ns_per_desc, inline_fraction);
}

Status ValidateBenchOptions(const BenchOptions& o) {
  if (o.listen.empty() == o.connect.empty()) {
    return InvalidArgument("give exactly one of --listen ADDR:PORT and --connect ADDR:PORT");
  }
  // docs/transfer.md "Input ranges": memory is size x batch x depth (client) and region_bytes
  // (server), time is iters or duration, the latency samples are one per measured batch.
  RETURN_IF_ERROR(CheckCountRange("--size", o.size, 1, kMaxBenchSize, "bytes"));
  RETURN_IF_ERROR(CheckCountRange("--batch", o.batch, 1, kMaxBenchBatch, "descriptors"));
  RETURN_IF_ERROR(CheckCountRange("--depth", o.depth, 1, kMaxBenchDepth, "batches"));
  const uint64_t local = o.size * o.batch * o.depth;  // < 2^30 x 2^20 x 2^10: no overflow
  if (local > kMaxBenchLocalBytes) {
    return InvalidArgument(fmt::format(
        "--size x --batch x --depth = {} bytes is above {} (the client registers all of it)", local,
        kMaxBenchLocalBytes));
  }
  RETURN_IF_ERROR(CheckCountRange("--iters", o.iters, 0, kMaxBenchIters, "batches"));
  RETURN_IF_ERROR(CheckCountRange("--warmup", o.warmup, 0, kMaxBenchIters, "batches"));
  RETURN_IF_ERROR(CheckRange("--duration", o.duration_s, 0, kMaxBenchDurationS, "s"));
  RETURN_IF_ERROR(
      CheckCountRange("--region-bytes", o.region_bytes, 1, kMaxBenchRegionBytes, "bytes"));
  return Status::Ok();
}

Status RunBenchServer(const BenchOptions& o,
                      const std::function<void(const std::string&)>& on_ready) {
  RETURN_IF_ERROR(ValidateBenchOptions(o));
  // The buffer outlives the engine (declared first), so deregistration sees mapped memory.
  Buffer buf(o.ucx_alloc ? 0 : o.region_bytes);
  if (!o.ucx_alloc && buf.data() == nullptr) {
    return ResourceExhausted(fmt::format("mmap {} bytes", o.region_bytes));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TransferEngine> engine, TransferEngine::Create(o.engine));
  uint8_t* data = buf.data();
  if (o.ucx_alloc) {
    ASSIGN_OR_RETURN(auto region, engine->AllocateRegion(o.region_bytes));
    data = static_cast<uint8_t*>(region.second);
  } else {
    RETURN_IF_ERROR(engine->RegisterRegion(data, o.region_bytes).status());
  }
  // A recognisable pattern for get benchmarks (also faults the pages in before timing).
  for (uint64_t i = 0; i < o.region_bytes; i += 4096) {
    data[i] = static_cast<uint8_t>(i >> 12);
  }
  ASSIGN_OR_RETURN(std::string addr, engine->Listen(o.listen));
  if (on_ready) {
    on_ready(addr);
  }
  RETURN_IF_ERROR(engine->WaitForPeers(1, o.accept_timeout));
  // Serve until every peer has gone. This is a command-line server's idle loop, not a data path.
  while (!engine->Peers().empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Ok();
}

Result<BenchReport> RunBenchClient(const BenchOptions& o) {
  RETURN_IF_ERROR(ValidateBenchOptions(o));
  const uint64_t batch_bytes = o.size * o.batch;
  const uint64_t local_bytes = batch_bytes * o.depth;
  Buffer buf(o.ucx_alloc ? 0 : local_bytes);
  if (!o.ucx_alloc && buf.data() == nullptr) {
    return ResourceExhausted(fmt::format("mmap {} bytes", local_bytes));
  }
  // Completion callbacks share this state; it outlives the engine even on an early return.
  struct State {
    std::mutex mu;
    std::vector<uint64_t> free_slots;
    std::vector<Nanos> lat;
    Status failure;
    // Mirrors free_slots.size() (and failure) so the submitting thread can spin without the
    // lock: like ucx_perftest, the benchmark polls instead of sleeping on a futex per batch.
    std::atomic<uint64_t> free_count{0};
    std::atomic<bool> failed{false};
    std::condition_variable cv;
  };
  auto state = std::make_shared<State>();
  ASSIGN_OR_RETURN(std::unique_ptr<TransferEngine> engine, TransferEngine::Create(o.engine));
  uint8_t* data = buf.data();
  if (o.ucx_alloc) {
    ASSIGN_OR_RETURN(auto region, engine->AllocateRegion(local_bytes));
    data = static_cast<uint8_t*>(region.second);
  } else {
    RETURN_IF_ERROR(engine->RegisterRegion(data, local_bytes).status());
  }
  std::memset(data, 0x5a, local_bytes);
  ASSIGN_OR_RETURN(PeerId peer, engine->Connect(o.connect));
  ASSIGN_OR_RETURN(std::vector<RegionRange> remote, engine->RemoteRegions(peer));
  if (remote.empty()) {
    return FailedPrecondition("the server advertised no region");
  }
  const RegionRange& target = remote.front();
  // Each in-flight slot writes its own remote window when the server's region is large enough,
  // and wraps onto the same window otherwise (bandwidth is unaffected; contents are not checked).
  const uint64_t slot_span = std::min<uint64_t>(batch_bytes, target.length);
  if (o.size > target.length) {
    return InvalidArgument(
        fmt::format("--size {} exceeds the server's region of {} bytes", o.size, target.length));
  }

  uint64_t total = o.iters;
  if (total == 0) {
    total = std::max<uint64_t>(o.depth * 4, o.bytes / batch_bytes);
  }
  const uint64_t warmup = o.warmup != 0 ? o.warmup : o.depth * 2;
  const Nanos duration = FromSeconds(o.duration_s);

  std::vector<std::vector<Descriptor>> slots(o.depth);
  for (uint64_t s = 0; s < o.depth; ++s) {
    uint64_t remote_base = target.addr + (s * slot_span) % (target.length - slot_span + 1);
    for (uint64_t i = 0; i < o.batch; ++i) {
      uint64_t roff = (i * o.size) % (slot_span - o.size + 1);
      if (o.same_buffer) {
        slots[s].push_back({reinterpret_cast<uint64_t>(data), target.addr, o.size});
      } else {
        slots[s].push_back({reinterpret_cast<uint64_t>(data) + s * batch_bytes + i * o.size,
                            remote_base + roff, o.size});
      }
    }
  }

  std::mutex& mu = state->mu;
  std::vector<uint64_t>& free_slots = state->free_slots;
  std::vector<Nanos>& lat = state->lat;
  Status& failure = state->failure;
  for (uint64_t s = 0; s < o.depth; ++s) {
    free_slots.push_back(s);
  }
  state->free_count = o.depth;
  // Sleep, not spin, while waiting for a completion: on a host with fewer cores than busy
  // threads (the 2-core development VM), a spinning submitter starves the progress threads of
  // both processes; measured: spinning here cut 64 KiB tcp throughput several-fold.
  auto wait_free = [&](uint64_t n) {
    if (state->free_count.load(std::memory_order_acquire) >= n) {
      return;
    }
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] {
      return state->free_count.load(std::memory_order_acquire) >= n ||
             state->failed.load(std::memory_order_acquire);
    });
  };
  lat.reserve(total + warmup);
  Clock& clock = SteadyClock::Default();

  Nanos submit_ns = 0;
  uint64_t submitted_descs = 0;
  Nanos t0 = 0;
  Nanos t_end = 0;
  TransferEngine::Stats stats0;
  uint64_t measured = 0;
  for (uint64_t n = 0;; ++n) {
    if (n == warmup) {
      // Drain the warm-up batches, then start the clock.
      wait_free(o.depth);
      std::lock_guard<std::mutex> lock(mu);
      lat.clear();
      t0 = clock.Now();
      stats0 = engine->GetStats();
      submit_ns = 0;
      submitted_descs = 0;
    }
    if (n >= warmup) {
      bool stop = duration > 0 ? clock.Now() - t0 >= duration : n - warmup >= total;
      if (stop) {
        break;
      }
      ++measured;
    }
    uint64_t slot = 0;
    wait_free(1);
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure.ok()) {
        return failure;
      }
      slot = free_slots.back();
      free_slots.pop_back();
      state->free_count.fetch_sub(1, std::memory_order_relaxed);
    }
    Batch b{.peer = peer, .cls = o.cls, .op = o.op, .descs = slots[slot]};
    const Nanos start = clock.Now();
    b.on_complete = [state, &clock, slot, start](const Status& s) {
      Nanos now = clock.Now();
      std::lock_guard<std::mutex> lock(state->mu);
      if (!s.ok() && state->failure.ok()) {
        state->failure = s;
      }
      state->lat.push_back(now - start);
      state->free_slots.push_back(slot);
      state->failed.store(!state->failure.ok(), std::memory_order_release);
      state->free_count.fetch_add(1, std::memory_order_release);
      state->cv.notify_one();  // under the lock: the waiter cannot miss it
    };
    Status st = engine->Submit(std::move(b));
    submit_ns += clock.Now() - start;
    submitted_descs += o.batch;
    if (!st.ok()) {
      return st;
    }
  }
  wait_free(o.depth);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!failure.ok()) {
      return failure;
    }
    t_end = clock.Now();
  }
  TransferEngine::Stats stats1 = engine->GetStats();
  BenchReport r;
  r.op = std::string(OpName(o.op));
  r.size = o.size;
  r.batch = o.batch;
  r.depth = o.depth;
  r.batches = measured;
  r.seconds = ToSeconds(t_end - t0);
  double bytes = static_cast<double>(measured) * static_cast<double>(batch_bytes);
  r.gbps = r.seconds > 0 ? bytes * 8 / r.seconds / 1e9 : 0;
  r.p50_us = static_cast<double>(Percentile(lat, 0.50)) / 1e3;  // nearest rank (common/stats.h)
  r.p99_us = static_cast<double>(Percentile(lat, 0.99)) / 1e3;
  r.descs_per_s = r.seconds > 0 ? static_cast<double>(measured * o.batch) / r.seconds : 0;
  r.submit_ns_per_desc = submitted_descs > 0
                             ? static_cast<double>(submit_ns) / static_cast<double>(submitted_descs)
                             : 0;
  uint64_t completed = stats1.batches_completed - stats0.batches_completed;
  r.inline_fraction =
      completed > 0
          ? static_cast<double>(stats1.batches_posted_inline - stats0.batches_posted_inline) /
                static_cast<double>(completed)
          : 0;
  uint64_t posted = stats1.descs_posted - stats0.descs_posted;
  r.post_ns_per_desc = posted > 0 ? static_cast<double>(stats1.post_nanos - stats0.post_nanos) /
                                        static_cast<double>(posted)
                                  : 0;
  return r;
}

}  // namespace dualpath::transfer
