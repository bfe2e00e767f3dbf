// System test: the scheduler service and engine processes as a user runs them (loopback instead
// of testbed namespaces), authenticated as in production (issue 17): the engines' EnginePeer
// listeners and peer calls use mutual TLS with a CA made for this run, and their transfer engines
// admit only peers with the run's token. Every wait is a blocking read of a child's output, a
// long-poll RPC or a pidfd poll with a hang guard: no sleeps.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dualpath/common/grpc_tls_pki.h"
#include "dualpath/control/client.h"
#include "dualpath/engine/engine.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/pool/pool.h"
#include "dualpath/transfer/token.h"

namespace dualpath {
namespace {

namespace v1 = control::v1;

constexpr char kSpec[] = "layers=3,q_heads=4,kv_heads=2,head_dim=16,ffn_dim=64,vocab=512,seed=9";
constexpr int kGuardMs = 90'000;  // hang guard for any single wait, not a timing assertion

// A child process whose stdout+stderr come back through a pipe.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& log_path) {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(log >= 0 ? log : fds[1], STDERR_FILENO);
      std::vector<char*> args;
      for (const auto& a : argv) {
        args.push_back(const_cast<char*>(a.c_str()));
      }
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fds[0];
    pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_);
    if (pidfd_ >= 0) {
      close(pidfd_);
    }
  }
  // The next stdout line starting with `prefix` (others are skipped); "" on EOF or the guard.
  std::string WaitLine(const std::string& prefix) {
    while (true) {
      size_t nl;
      while ((nl = buf_.find('\n')) != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        if (line.rfind(prefix, 0) == 0) {
          return line;
        }
      }
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, kGuardMs) <= 0) {
        return "";
      }
      char chunk[4096];
      ssize_t n = read(out_, chunk, sizeof chunk);
      if (n <= 0) {
        return "";
      }
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  // Exit status (128 + signal if killed), or -1 if it did not exit within the guard.
  int Wait() {
    pollfd p{pidfd_, POLLIN, 0};
    if (pidfd_ >= 0 && poll(&p, 1, kGuardMs) <= 0) {
      return -1;
    }
    int st = 0;
    waitpid(pid_, &st, 0);
    reaped_ = true;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  void Kill() { kill(pid_, SIGKILL); }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int pidfd_ = -1;
  bool reaped_ = false;
  std::string buf_;
};

struct AgentState {
  std::vector<uint32_t> context;
  uint32_t turn = 0;
};

constexpr uint64_t kBufferBytes = 32ull << 20;  // --buffer-mib 32

// The roots of `pool` by name: size and owner pid.
std::map<std::string, std::pair<uint64_t, int32_t>> Roots(pool::Pool& pool) {
  std::map<std::string, std::pair<uint64_t, int32_t>> out;
  for (const pool::RootInfo& r : pool.Stats().root_list) out[r.name] = {r.bytes, r.owner_pid};
  return out;
}

// Acceptance 4 of issue 8: the engines keep their buffers in one shared-memory pool (as engines
// of one host would); a decode engine is SIGKILLed mid-run. Its requests are rescheduled and every
// output matches the reference; after a recovery sweep its buffer root is gone and the pool holds
// exactly the survivors' buffers; a new decode engine under the same name gets its full buffer;
// clean exits give every buffer back.
TEST(EngineSystemTest, AgentsCompleteWithReferenceOutputsAcrossADecodeEngineKill) {
  const char* bin_dir = std::getenv("DUALPATH_BINARY_DIR");
  ASSERT_NE(bin_dir, nullptr);
  const std::string bin = std::string(bin_dir) + "/bin/dualpath";
  char tmpl[] = "/tmp/dualpath_engine_sys.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string tmp = tmpl;
  const std::string sock = "unix:" + tmp + "/sched.sock";
  const std::string store = tmp + "/store";
  const std::string pool_path = "/dev/shm/dualpath_engine_sys." + tmp.substr(tmp.rfind('.') + 1);
  // Removed on every path (declared before the engines: they are killed first).
  struct Unlink {
    std::string path;
    ~Unlink() { unlink(path.c_str()); }
  } unlink_pool{pool_path};

  Child serve(
      {bin, "control", "serve", "--listen", sock, "--system", "dualpath", "--model-spec", kSpec,
       "--block-tokens", "16", "--store-root", store, "--store-subdir", "dp", "--engines",
       "p0.0:prefill:p0,d0.0:decode:d0,d1.0:decode:d1", "--heartbeat-s", "0.5"},
      tmp + "/serve.log");
  ASSERT_EQ(serve.WaitLine("listening on"), "listening on " + sock);
  // One certificate per engine (SAN 127.0.0.1: they all listen on loopback) and the run's token.
  const std::string pki = tmp + "/pki", token = tmp + "/token";
  ASSERT_TRUE(WriteClusterPki(
                  pki, {{"p0.0", {"127.0.0.1"}}, {"d0.0", {"127.0.0.1"}}, {"d1.0", {"127.0.0.1"}}})
                  .ok());
  ASSERT_TRUE(transfer::WriteTransferTokenFile(token).ok());
  auto engine_argv = [&](const std::string& name, const std::string& role,
                         const std::string& node) {
    return std::vector<std::string>{
        bin, "engine", "--tls-cert", PkiCertPath(pki, name), "--tls-key", PkiKeyPath(pki, name),
        "--tls-ca", PkiCaPath(pki), "--transfer-token-file", token, "--role", role, "--name", name,
        "--node", node, "--scheduler", sock, "--listen", "127.0.0.1", "--store-root", store,
        // Each turn must hit what the last one wrote (checked below).
        "--result-after-write", "on", "--store-subdir", "dp", "--buffer-mib", "32", "--pool",
        pool_path, "--pool-mib", "96", "--fetch-wait-ms", "100", "--peer-timeout-s", "2",
        "--request-timeout-s", "20"};
  };
  std::map<std::string, std::unique_ptr<Child>> engines;
  for (const char* spec : {"p0.0:prefill:p0", "d0.0:decode:d0", "d1.0:decode:d1"}) {
    std::string s = spec;
    std::string name = s.substr(0, 4), role = s.substr(5, s.rfind(':') - 5), node = s.substr(0, 2);
    engines[name] =
        std::make_unique<Child>(engine_argv(name, role, node), tmp + "/" + name + ".log");
    ASSERT_NE(engines[name]->WaitLine("engine " + name + " ready"), "") << name;
  }
  // Every engine's buffer is an owner-bound root of the pool, of the full buffer size.
  pool::OpenOptions po;
  po.background_thread = false;  // this test sweeps explicitly
  auto pool = pool::Pool::Open(pool_path, po);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  {
    auto roots = Roots(**pool);
    ASSERT_EQ(roots.size(), 3u);
    for (const char* name : {"p0.0", "d0.0", "d1.0"}) {
      const auto& r = roots[pool::EngineRootName(name)];
      EXPECT_EQ(r.first, kBufferBytes) << name;
      EXPECT_EQ(r.second, engines[name]->pid()) << name;
    }
    EXPECT_EQ((*pool)->Stats().used_bytes, 3 * kBufferBytes);
  }

  auto model = model::RefModel::Create(*model::RefModelConfig::Parse(kSpec));
  ASSERT_TRUE(model.ok());
  // Submit may wait while the engines warm up: a generous call timeout (a hang guard).
  control::Client scheduler(sock, control::ClientOptions{.rpc_timeout = 30 * kNanosPerSecond});
  constexpr int kAgents = 3, kTurns = 4;
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> tok(0, 511);
  std::vector<AgentState> agents(kAgents);
  std::map<uint64_t, v1::RequestSpec> specs;
  auto submit = [&](int agent) {
    AgentState& a = agents[agent];
    for (int i = 0; i < (a.turn == 0 ? 60 : 25); ++i) {
      a.context.push_back(tok(rng));
    }
    v1::RequestSpec s;
    s.set_request_id(static_cast<uint64_t>(agent) * 100 + a.turn);
    s.set_agent_id(agent);
    s.set_turn(a.turn);
    s.set_gen_tokens(5);
    for (uint32_t t : a.context) {
      s.add_prompt(t);
    }
    for (int i = 0; i < 5; ++i) {
      uint32_t t = tok(rng);
      s.add_teacher(t);
      a.context.push_back(t);
    }
    ++a.turn;
    specs[s.request_id()] = s;
    v1::SubmitRequest req;
    *req.mutable_request() = s;
    Result<v1::SubmitReply> reply = scheduler.Submit(req);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
  };
  for (int a = 0; a < kAgents; ++a) {
    submit(a);
  }
  uint64_t after = 0;
  int done = 0, with_hits = 0;
  bool killed = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kGuardMs);
  while (done < kAgents * kTurns && std::chrono::steady_clock::now() < deadline) {
    v1::WaitResultsRequest req;
    req.set_after_seq(after);
    req.set_wait_ms(500);
    Result<v1::WaitResultsReply> reply = scheduler.WaitResults(req);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    for (const auto& sr : reply->results()) {
      after = std::max(after, sr.seq());
      const v1::RequestResult& r = sr.result();
      const v1::RequestSpec& s = specs.at(r.request_id());
      ASSERT_TRUE(r.ok()) << "request " << r.request_id() << ": " << r.error();
      std::vector<uint32_t> prompt(s.prompt().begin(), s.prompt().end());
      std::vector<uint32_t> teacher(s.teacher().begin(), s.teacher().end());
      model::Generation want = model::Reference(**model, prompt, teacher, s.gen_tokens());
      EXPECT_EQ(std::vector<uint32_t>(r.generated().begin(), r.generated().end()), want.tokens)
          << "request " << r.request_id();
      EXPECT_EQ(r.first_logits_digest(), want.first_logits_digest);
      EXPECT_EQ(r.loaded_tokens(), r.hit_tokens()) << "request " << r.request_id();
      with_hits += r.hit_tokens() > 0 ? 1 : 0;
      ++done;
      if (!killed && done == kAgents) {
        // Every agent finished a turn: kill one decode engine; the service reschedules its
        // requests (and new ones) to the other.
        engines["d1.0"]->Kill();
        EXPECT_EQ(engines["d1.0"]->Wait(), 128 + SIGKILL);  // reaped: its pid is gone
        killed = true;
      }
      int agent = static_cast<int>(r.request_id() / 100);
      if (agents[agent].turn < kTurns) {
        submit(agent);
      }
    }
  }
  EXPECT_EQ(done, kAgents * kTurns);
  // Every turn after the first starts with the previous turn's written-behind blocks.
  EXPECT_GE(with_hits, kAgents * (kTurns - 1));
  ASSERT_TRUE(killed);

  // The killed engine's buffer is reclaimed by a recovery sweep (a survivor's background tick may
  // have run it already; Recover runs it regardless): its root is gone, the pool holds exactly
  // the survivors' buffers, and it pinned nothing.
  ASSERT_TRUE((*pool)->Recover().ok());
  {
    pool::PoolStats st = (*pool)->Stats();
    auto roots = Roots(**pool);
    EXPECT_EQ(roots.count(pool::EngineRootName("d1.0")), 0u);
    EXPECT_EQ(roots.size(), 2u);
    EXPECT_EQ(st.used_bytes, 2 * kBufferBytes);
    EXPECT_GE(st.reclaimed_roots, 1u);
    EXPECT_EQ(st.total_pins, 0u);
    EXPECT_EQ(st.live_procs, 3u);  // p0.0, d0.0 and this test
  }
  // A new decode engine under the same name gets its full buffer back.
  engines["d1.0"] =
      std::make_unique<Child>(engine_argv("d1.0", "decode", "d1"), tmp + "/d1.0-restarted.log");
  ASSERT_NE(engines["d1.0"]->WaitLine("engine d1.0 ready"), "");
  {
    auto roots = Roots(**pool);
    EXPECT_EQ(roots.size(), 3u);
    EXPECT_EQ(roots[pool::EngineRootName("d1.0")].first, kBufferBytes);
    EXPECT_EQ(roots[pool::EngineRootName("d1.0")].second, engines["d1.0"]->pid());
    EXPECT_EQ((*pool)->Stats().used_bytes, 3 * kBufferBytes);
  }

  ASSERT_TRUE(scheduler.Shutdown().ok());
  EXPECT_EQ(engines["p0.0"]->Wait(), 0);
  EXPECT_EQ(engines["d0.0"]->Wait(), 0);
  EXPECT_EQ(engines["d1.0"]->Wait(), 0);  // the restarted one
  EXPECT_EQ(serve.Wait(), 0);
  // Clean exits destroyed every engine's root.
  {
    pool::PoolStats st = (*pool)->Stats();
    EXPECT_EQ(st.roots, 0u);
    EXPECT_EQ(st.used_bytes, 0u);
    EXPECT_EQ(st.live_procs, 1u);
  }
  pool->reset();
  EXPECT_TRUE(pool::Pool::Destroy(pool_path).ok());  // it is a pool region, intact
  if (!HasFailure() && std::getenv("DUALPATH_TEST_KEEP") == nullptr) {
    std::filesystem::remove_all(tmp);
  } else {
    std::cerr << "logs kept in " << tmp << "\n";
  }
}

}  // namespace
}  // namespace dualpath
