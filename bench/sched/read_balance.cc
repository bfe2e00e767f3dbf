// Closed-loop toy study of the read-side rules (not the simulator: `dualpath sim` is the real
// model). A fluid model of a PD cluster drives the real Scheduler every 10 ms tick:
//   - each node's storage NIC drains its FIFO read queue at `snic_tokens_per_s`;
//   - a PE prefills its requests one at a time (FIFO) once their reads are complete, at
//     `pe_tokens_per_s` prompt tokens per second;
//   - a DE then decodes for gen x 40 ms, and the agent's next turn arrives at once.
// Agents replay seeded 64K-like trajectories (context grows by append + gen per turn).
// It reports the offline JCT and the storage-NIC max/avg traffic over 1 s windows (the paper's
// Figure 13 metric, averaged over the first half of the run) for: Basic (PE reads only),
// round-robin side, shorter queue (DualPath), and shorter queue + split reads (beyond the paper).
// Everything is deterministic (seeded); wall time is printed for information only.
//
//   build/release/bin/sched_read_balance [agents=256] [prefill_nodes=2] [decode_nodes=4]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "dualpath/sched/scheduler.h"

namespace dualpath::sched {
namespace {

constexpr double kTick = 0.01;  // s
constexpr double kSnicTokensPerS = 1.25e6;
constexpr double kPeTokensPerS = 4.0e5;
constexpr double kTpot = 0.04;
constexpr int64_t kHbmTokensPerDe = 3'000'000;
constexpr int kWindowTicks = 100;  // 1 s

struct Turn {
  int64_t context, append, gen;
};

std::vector<std::vector<Turn>> Trajectories(int agents, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> append(1.0 / 429), gen(1.0 / 176);
  std::uniform_int_distribution<int64_t> start(1000, 8000);
  std::vector<std::vector<Turn>> out(static_cast<size_t>(agents));
  for (auto& t : out) {
    int64_t ctx = start(rng);
    while (true) {
      Turn x{ctx, 1 + static_cast<int64_t>(append(rng)), 1 + static_cast<int64_t>(gen(rng))};
      if (ctx + x.append + x.gen > 65536) break;
      t.push_back(x);
      ctx += x.append + x.gen;
    }
  }
  return out;
}

struct Part {
  uint32_t req;
  int64_t left;
};

struct Req {
  int agent = 0;
  Turn turn{};
  uint32_t pe = 0, de = 0;
  int parts_left = 0;  // read parts outstanding
  bool assigned = false;
};

struct Result {
  double jct_s = 0;
  double snic_max_over_avg = 0;
  double decode_read_share = 0;
  int64_t splits = 0;
};

Result Run(const SchedConfig& config, int agents, int prefill_nodes, int decode_nodes) {
  const ClusterDesc cluster =
      MakeUniformCluster(
          {.prefill_nodes = prefill_nodes, .decode_nodes = decode_nodes, .gpus_per_node = 8})
          .value();
  auto sched = Scheduler::Create(cluster, config).value();
  const auto traj = Trajectories(agents, 42);
  const size_t n_eng = cluster.engines.size();
  const size_t n_nodes = static_cast<size_t>(cluster.num_nodes());
  const uint32_t n_groups = static_cast<uint32_t>(cluster.num_groups());

  std::vector<Req> reqs;
  std::vector<size_t> next_turn(static_cast<size_t>(agents), 0);
  std::vector<std::deque<Part>> node_q(n_nodes);
  std::vector<int64_t> node_q_tokens(n_nodes, 0);
  std::vector<std::deque<uint32_t>> pe_ready(n_eng);  // reads done, waiting for compute
  std::vector<double> pe_busy_left(n_eng, 0);
  std::vector<int64_t> pe_cur(n_eng, -1);
  std::vector<int64_t> eng_tokens(n_eng, 0), eng_reqs(n_eng, 0);
  struct Decoding {
    uint32_t req;
    double left;
  };
  std::vector<Decoding> decoding;
  std::vector<double> window_traffic(n_nodes, 0);
  std::vector<double> window_ratios;
  int64_t read_de = 0, read_total = 0;
  int done_agents = 0;

  auto submit = [&](int agent) {
    const size_t t = next_turn[static_cast<size_t>(agent)]++;
    if (t >= traj[static_cast<size_t>(agent)].size()) {
      ++done_agents;
      return;
    }
    Req r;
    r.agent = agent;
    r.turn = traj[static_cast<size_t>(agent)][t];
    reqs.push_back(r);
    SchedRequest s;
    s.id = RequestId(reqs.size() - 1);
    s.session = SessionId(static_cast<uint64_t>(agent));
    s.hit_tokens = r.turn.context;
    s.prompt_tokens = r.turn.context + r.turn.append;
    s.expected_gen_tokens = r.turn.gen;
    if (!sched->Submit(s).ok()) std::abort();
  };
  for (int a = 0; a < agents; ++a) submit(a);

  FetchResult out;
  std::vector<EngineReport> reports(n_eng);
  int64_t tick = 0;
  while (done_agents < agents) {
    // Reports for everyone, then decode fetches, then prefill fetches.
    for (size_t e = 0; e < n_eng; ++e) {
      EngineReport& r = reports[e];
      r.engine = EngineId(static_cast<uint32_t>(e));
      r.unfinished_requests = eng_reqs[e];
      r.unfinished_tokens = eng_tokens[e];
      r.read_queue_tokens = node_q_tokens[cluster.engines[e].node.value()];
      r.hbm_free_tokens = std::max<int64_t>(0, kHbmTokensPerDe - eng_tokens[e]);
    }
    if (!sched->ApplyReports(reports).ok()) std::abort();
    for (int pass = 0; pass < 2; ++pass) {
      for (uint32_t g = 0; g < n_groups; ++g) {
        const bool decode = sched->group_role(GroupId(g)) == Role::kDecode;
        if (decode != (pass == 0)) continue;
        out.Clear();
        if (!sched->FetchForGroup(GroupId(g), {}, &out).ok()) std::abort();
        for (const DecodeAssignment& d : out.decode) {
          Req& r = reqs[d.request.value()];
          r.de = d.decode.value();
          eng_reqs[r.de] += 1;
          eng_tokens[r.de] += r.turn.context + r.turn.append + r.turn.gen;
        }
        for (const Assignment& a : out.prefill) {
          const uint32_t id = static_cast<uint32_t>(a.request.value());
          Req& r = reqs[id];
          r.pe = a.prefill.value();
          eng_reqs[r.pe] += 1;
          eng_tokens[r.pe] += a.prompt_tokens;
          auto enqueue = [&](uint32_t engine, int64_t tokens) {
            if (tokens <= 0) return;
            const uint32_t node = cluster.engines[engine].node.value();
            node_q[node].push_back(Part{id, tokens});
            node_q_tokens[node] += tokens;
            ++r.parts_left;
          };
          enqueue(r.pe, a.prefill_read_tokens);
          enqueue(r.de, a.decode_read_tokens);
          read_de += a.decode_read_tokens;
          read_total += a.prefill_read_tokens + a.decode_read_tokens;
          if (r.parts_left == 0) pe_ready[r.pe].push_back(id);
        }
      }
    }
    // Storage NICs: drain FIFO read queues.
    for (size_t n = 0; n < n_nodes; ++n) {
      double budget = kSnicTokensPerS * kTick;
      while (budget > 0 && !node_q[n].empty()) {
        Part& p = node_q[n].front();
        const int64_t take = std::min<int64_t>(p.left, static_cast<int64_t>(std::ceil(budget)));
        p.left -= take;
        budget -= static_cast<double>(take);
        node_q_tokens[n] -= take;
        window_traffic[n] += static_cast<double>(take);
        if (p.left == 0) {
          Req& r = reqs[p.req];
          if (--r.parts_left == 0) pe_ready[r.pe].push_back(p.req);
          node_q[n].pop_front();
        }
      }
    }
    // PEs compute one request at a time.
    for (size_t e = 0; e < n_eng; ++e) {
      double t = kTick;
      while (t > 0) {
        if (pe_cur[e] < 0) {
          if (pe_ready[e].empty()) break;
          pe_cur[e] = pe_ready[e].front();
          pe_ready[e].pop_front();
          const Req& r = reqs[static_cast<size_t>(pe_cur[e])];
          pe_busy_left[e] = static_cast<double>(r.turn.context + r.turn.append) / kPeTokensPerS;
        }
        const double step = std::min(t, pe_busy_left[e]);
        pe_busy_left[e] -= step;
        t -= step;
        if (pe_busy_left[e] <= 1e-12) {
          const uint32_t id = static_cast<uint32_t>(pe_cur[e]);
          const Req& r = reqs[id];
          eng_reqs[e] -= 1;
          eng_tokens[e] -= r.turn.context + r.turn.append;
          decoding.push_back(Decoding{id, static_cast<double>(r.turn.gen) * kTpot});
          pe_cur[e] = -1;
        }
      }
    }
    // DEs decode; a finished turn starts the agent's next.
    for (size_t i = 0; i < decoding.size();) {
      decoding[i].left -= kTick;
      if (decoding[i].left <= 0) {
        const Req& r = reqs[decoding[i].req];
        eng_reqs[r.de] -= 1;
        eng_tokens[r.de] -= r.turn.context + r.turn.append + r.turn.gen;
        const int agent = r.agent;
        decoding[i] = decoding.back();
        decoding.pop_back();
        submit(agent);
      } else {
        ++i;
      }
    }
    ++tick;
    if (tick % kWindowTicks == 0) {
      double sum = 0, mx = 0;
      for (double v : window_traffic) {
        sum += v;
        mx = std::max(mx, v);
      }
      window_ratios.push_back(sum > 0 ? mx / (sum / static_cast<double>(n_nodes)) : 1.0);
      std::fill(window_traffic.begin(), window_traffic.end(), 0);
    }
  }
  Result res;
  res.jct_s = static_cast<double>(tick) * kTick;
  const size_t half = std::max<size_t>(1, window_ratios.size() / 2);
  double acc = 0;
  for (size_t i = 0; i < half && i < window_ratios.size(); ++i) acc += window_ratios[i];
  res.snic_max_over_avg = acc / static_cast<double>(std::min(half, window_ratios.size()));
  res.decode_read_share =
      read_total > 0 ? static_cast<double>(read_de) / static_cast<double>(read_total) : 0;
  res.splits = sched->stats().read_split;
  return res;
}

}  // namespace
}  // namespace dualpath::sched

int main(int argc, char** argv) {
  using namespace dualpath::sched;
  const int agents = argc > 1 ? std::atoi(argv[1]) : 256;
  const int p = argc > 2 ? std::atoi(argv[2]) : 2;
  const int d = argc > 3 ? std::atoi(argv[3]) : 4;
  if (agents <= 0 || p <= 0 || d <= 0) {
    std::fprintf(stderr, "sched_read_balance: agents, prefill_nodes, decode_nodes must be > 0\n");
    return 2;
  }
  SchedConfig basic = SchedConfig::Basic();
  SchedConfig split = SchedConfig::DualPath();
  split.split_reads = true;
  // A lower α makes "both queues long" (the split condition) common; compare at equal α.
  SchedConfig low_alpha = SchedConfig::DualPath();
  low_alpha.short_read_queue_tokens /= 8;
  SchedConfig split_low_alpha = split;
  split_low_alpha.short_read_queue_tokens /= 8;
  struct Policy {
    const char* name;
    SchedConfig config;
  } policies[] = {{"basic (PE reads only)", basic},
                  {"round-robin side", SchedConfig::DualPathRoundRobinSide()},
                  {"dualpath (shorter queue)", SchedConfig::DualPath()},
                  {"dualpath + split reads", split},
                  {"dualpath, alpha/8", low_alpha},
                  {"dualpath + split, alpha/8", split_low_alpha}};
  std::printf("%d agents, %dP%dD, SNIC %.2fM tok/s/node, PE %.0fK tok/s\n", agents, p, d, 1.25,
              400.0);
  std::printf("%-26s %10s %12s %10s %10s %8s\n", "policy", "JCT s", "vs basic", "SNIC m/a",
              "DE share", "splits");
  double base = 0;
  for (const Policy& pol : policies) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = Run(pol.config, agents, p, d);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (base == 0) base = r.jct_s;
    std::printf("%-26s %10.1f %11.2fx %10.3f %10.3f %8lld   (wall %.1f s)\n", pol.name, r.jct_s,
                base / r.jct_s, r.snic_max_over_avg, r.decode_read_share,
                static_cast<long long>(r.splits), wall);
  }
  return 0;
}
