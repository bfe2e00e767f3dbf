// engine_overlap_bench: one prefill and one decode engine in one process (loopback UCX, a real
// BlockStore in a directory) run the same batch of second turns twice per round: with the PE's
// loader reading ahead of compute (the default) and with prefetch off (load, compute, load, ...).
// The PE's storage link is emulated by pacing each block read at --rate-mbit (a FIFO link), so
// the benchmark shows whether the link idles while there is queued work.
//
//   build/release/bin/engine_overlap_bench --requests 8 --prompt 512 --append 256 --rounds 3
//
// Prints per round and configuration the makespan and the link's busy fraction, then the median
// ratio serial / overlapped (the speed-up from overlap) and checks both produced identical tokens.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "dualpath/engine/engine.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/storage/block_store.h"
#include "engine/local_scheduler.h"

namespace dualpath::engine {
namespace {

namespace v1c = control::v1;
using Clock = std::chrono::steady_clock;

// A storage link of fixed rate: each block read waits for its turn on the link (FIFO).
class PacedLink final : public storage::StorageFaults {
 public:
  explicit PacedLink(Clock::duration per_block) : per_block_(per_block) {}
  Status BeforeRead(const kv::BlockHash&) override {
    Clock::time_point until;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Clock::time_point start = std::max(Clock::now(), next_);
      next_ = start + per_block_;
      busy_ += per_block_;
      until = next_;
    }
    std::this_thread::sleep_until(until);  // emulates the transfer time on the link
    return Status::Ok();
  }
  Clock::duration TakeBusy() {
    std::lock_guard<std::mutex> lock(mu_);
    Clock::duration b = busy_;
    busy_ = {};
    return b;
  }

 private:
  const Clock::duration per_block_;
  std::mutex mu_;
  Clock::time_point next_{};
  Clock::duration busy_{};
};

struct Args {
  int requests = 8;
  int prompt = 512;
  int append = 256;
  int gen = 4;
  double rate_mbit = 400;
  int rounds = 3;
  uint32_t block_tokens = 64;
  std::string spec = "layers=8,q_heads=4,kv_heads=4,head_dim=32,ffn_dim=256,vocab=4096,seed=1";
  std::string dir = "/var/tmp";
};

int Main(int argc, char** argv) {
  Args a;
  CLI::App app{"engine_overlap_bench"};
  app.add_option("--requests", a.requests, "Requests per batch (one per agent)");
  app.add_option("--prompt", a.prompt, "First-turn prompt tokens (the second turn's hit)");
  app.add_option("--append", a.append, "Second-turn append tokens (computed)");
  app.add_option("--gen", a.gen, "Generated tokens per turn");
  app.add_option("--rate-mbit", a.rate_mbit, "Emulated PE storage link, Mbit/s");
  app.add_option("--rounds", a.rounds, "Rounds (each runs both configurations)");
  app.add_option("--block-tokens", a.block_tokens, "Tokens per KV block");
  app.add_option("--spec", a.spec, "Reference model spec");
  app.add_option("--dir", a.dir, "Directory for the temporary store");
  CLI11_PARSE(app, argc, argv);

  auto cfg = model::RefModelConfig::Parse(a.spec);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().ToString().c_str());
    return 2;
  }
  const kv::BlockShape shape = kv::BlockShape::For(cfg->Geometry(), a.block_tokens);
  const double block_s =
      static_cast<double>(storage::BlockStore::FileBytes(shape)) * 8 / (a.rate_mbit * 1e6);
  // A fresh directory (mkdtemp), so the remove_all at the end removes only what this run made.
  std::string root = a.dir + "/engine_overlap_bench.XXXXXX";
  std::error_code ec;
  std::filesystem::create_directories(a.dir, ec);
  if (::mkdtemp(root.data()) == nullptr) {
    std::fprintf(stderr, "mkdtemp %s: %s\n", root.c_str(), std::strerror(errno));
    return 1;
  }
  LocalScheduler sched(a.spec, a.block_tokens);
  PacedLink link_overlap(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(block_s)));
  PacedLink link_serial(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(block_s)));

  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<std::thread> threads;
  auto start = [&](Role role, const std::string& name, PacedLink* link, uint32_t prefetch) {
    EngineOptions o;
    o.role = role;
    o.name = name;
    o.node = name.substr(0, 2);
    o.store_root = root;
    o.tls.insecure = true;  // a benchmark on loopback: plaintext EnginePeer, no transfer token
    o.buffer_bytes = 1ull << 30;
    o.prefetch_requests = prefetch;
    o.faults = link;
    o.fetch_wait_ms = 50;
    auto e = Engine::Create(o, sched.Link());
    if (!e.ok()) {
      std::fprintf(stderr, "engine %s: %s\n", name.c_str(), e.status().ToString().c_str());
      std::exit(1);
    }
    Engine* raw = e->get();
    threads.emplace_back([raw] { (void)raw->Run(); });
    engines.push_back(std::move(e).value());
    return raw->engine_id();
  };
  const uint32_t pe_overlap = start(Role::kPrefill, "p0.overlap", &link_overlap, 1u << 30);
  const uint32_t pe_serial = start(Role::kPrefill, "p1.serial", &link_serial, 0);
  const uint32_t de = start(Role::kDecode, "d0.0", nullptr, 0);

  // Turn 1 of every agent (no hit): the DE writes their blocks behind.
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> tok(0, cfg->vocab - 1);
  std::vector<std::vector<uint32_t>> ctx(a.requests);
  auto spec_for = [&](uint64_t id, std::vector<uint32_t>& c, int append) {
    for (int i = 0; i < append; ++i) {
      c.push_back(tok(rng));
    }
    v1c::RequestSpec s;
    s.set_request_id(id);
    s.set_gen_tokens(a.gen);
    for (uint32_t t : c) {
      s.add_prompt(t);
    }
    for (int i = 0; i < a.gen; ++i) {
      s.add_teacher(tok(rng));
    }
    return s;
  };
  auto wait = [&](uint64_t id) {
    auto r = sched.Wait(id, std::chrono::minutes(10));
    if (!r || !r->ok()) {
      std::fprintf(stderr, "request %llu failed: %s\n", static_cast<unsigned long long>(id),
                   r ? r->error().c_str() : "no result");
      std::exit(1);
    }
    return *r;
  };
  std::vector<v1c::RequestSpec> turn2;
  for (int i = 0; i < a.requests; ++i) {
    v1c::RequestSpec s = spec_for(i + 1, ctx[i], a.prompt);
    sched.Assign(pe_overlap, de, s, v1c::READ_SIDE_PREFILL, 0, 0);
    // The recorded output continues the context.
    ctx[i].insert(ctx[i].end(), s.teacher().begin(), s.teacher().end());
    turn2.push_back(spec_for(0, ctx[i], a.append));
  }
  for (int i = 0; i < a.requests; ++i) {
    wait(i + 1);
  }
  // Turn 2's hit: the whole blocks turn 1 computed (prompt + gen - 1 positions).
  const int64_t hit = (a.prompt + a.gen - 1) / a.block_tokens * a.block_tokens;
  (void)link_overlap.TakeBusy();

  std::printf(
      "rate %.0f Mbit/s, %.1f ms per %u-token block, hit %lld tokens (%lld blocks) per "
      "request, %d requests\n",
      a.rate_mbit, block_s * 1e3, a.block_tokens, static_cast<long long>(hit),
      static_cast<long long>(hit / a.block_tokens), a.requests);
  std::printf("round  config    makespan_s  link_busy\n");
  std::vector<double> ratios;
  std::vector<std::vector<uint32_t>> tokens_first;
  uint64_t next_id = 1000;
  bool identical = true;
  for (int round = 0; round < a.rounds; ++round) {
    double makespan[2] = {1, 1};
    for (int k = 0; k < 2; ++k) {
      // Alternate which configuration goes first, so drift in machine load hits both.
      const bool overlap = ((round + k) % 2) == 0;
      const uint32_t pe = overlap ? pe_overlap : pe_serial;
      PacedLink& link = overlap ? link_overlap : link_serial;
      std::vector<uint64_t> ids;
      auto t0 = Clock::now();
      for (auto s : turn2) {
        s.set_request_id(next_id++);
        ids.push_back(s.request_id());
        sched.Assign(pe, de, s, v1c::READ_SIDE_PREFILL, hit, 0);
      }
      std::vector<std::vector<uint32_t>> toks;
      for (uint64_t id : ids) {
        v1c::RequestResult r = wait(id);
        toks.emplace_back(r.generated().begin(), r.generated().end());
      }
      double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      double busy = std::chrono::duration<double>(link.TakeBusy()).count();
      if (tokens_first.empty()) {
        tokens_first = toks;
      } else if (toks != tokens_first) {
        identical = false;
      }
      makespan[overlap ? 0 : 1] = secs;
      std::printf("%5d  %-8s  %10.3f  %9.2f\n", round + 1, overlap ? "overlap" : "serial", secs,
                  busy / secs);
    }
    ratios.push_back(makespan[1] / makespan[0]);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("median serial/overlap makespan ratio: %.2f (rounds: %zu); outputs identical: %s\n",
              ratios[ratios.size() / 2], ratios.size(), identical ? "yes" : "NO");
  sched.Shutdown();
  for (auto& t : threads) {
    t.join();
  }
  engines.clear();
  std::filesystem::remove_all(root);
  return identical ? 0 : 1;
}

}  // namespace
}  // namespace dualpath::engine

int main(int argc, char** argv) { return dualpath::engine::Main(argc, argv); }
