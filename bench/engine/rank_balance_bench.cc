// rank_balance_bench: attention balance across a prefill engine's ranks in one process (issue 28
// acceptance 3), taking apart what a cluster run mixes together:
//
//  noise   every rank computes the same chunk (same cached prefix, same new tokens), so the ranks'
//          measured attention max/avg is the measurement's own noise (thread CPU time on this
//          machine: caches, SMT, preemption, steal), for ranks <= cores and ranks > cores;
//  loaded  a PE whose FIFO queue is kept at --queue agentic requests (most an append of --append
//          tokens over a cached prefix of up to --max-context, every --first-every-th a first
//          turn computed from scratch), batches planned by sched::PackRanks and run by
//          RefModel::ForwardLayerBatch on a model::RankPool as the PE runs them, in four
//          configurations over the same request stream:
//            round-robin         the baseline placement (calibrated model, fine chunks);
//            packed-ref-min64    §6.2 packing with the fixed reference model and 64-token
//                                minimum chunks (the PE before calibration);
//            packed-ref          the same with --min-chunk (granularity only);
//            packed-calibrated   the same with the model fitted online to the measured rank
//                                times (sched::AttentionFit, as the PE does): the PE now.
//          For each: measured and predicted max/avg over the batches with at least R chunks
//          (mean, p50, time-weighted), the model's relative error, tokens per batch.
//
//   build/release/bin/rank_balance_bench --ranks 4 --batches 40 --quota-ms 20
//
// RANK_BALANCE_DEBUG=1 prints every busy rank's features (chunks, tokens, pairs, ...), measured and
// predicted time per layer, for fitting other model forms offline.
//
// Times are CPU times of the rank threads (what ForwardLayerBatch records), so the figures hold
// on a busy machine as far as CPU time does; the load average is printed before and after.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dualpath/common/stats.h"
#include "dualpath/engine/attention_model.h"
#include "dualpath/model/rank_pool.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/sched/attention_fit.h"
#include "dualpath/sched/batch.h"

namespace dualpath::engine {
namespace {

struct Args {
  uint32_t ranks = 4;
  int batches = 40;
  int warmup = 8;  // batches not counted (the calibrated model's first fit happens in them)
  double quota_ms = 20;
  int queue = 12;
  int64_t append = 68;
  int64_t max_context = 3072;
  int first_every = 8;
  int64_t min_chunk = 8;
  int noise_batches = 30;
  uint64_t seed = 1;
};

std::string LoadAvg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// One request of the synthetic PE queue; its KV is one layer's worth, reused by every layer
// (timing only: the bytes are whatever the previous layer wrote).
struct Req {
  int64_t prompt = 0;
  int64_t next = 0;  // computed (or hit) so far
  std::vector<std::byte> kv;
};

class Stream {
 public:
  Stream(const Args& a, uint64_t bpt) : a_(a), bpt_(bpt), rng_(a.seed) {}
  Req Next() {
    Req r;
    if (a_.first_every > 0 && ++count_ % a_.first_every == 0) {
      r.prompt = 256 + static_cast<int64_t>(rng_() % static_cast<uint64_t>(a_.max_context - 256));
      r.next = 0;
    } else {
      const int64_t cached =
          static_cast<int64_t>(rng_() % static_cast<uint64_t>(a_.max_context - a_.append));
      r.prompt = cached + a_.append;
      r.next = cached;
    }
    r.kv.assign(static_cast<size_t>(r.prompt) * bpt_, std::byte{0});
    return r;
  }

 private:
  const Args& a_;
  const uint64_t bpt_;
  std::mt19937_64 rng_;
  uint64_t count_ = 0;
};

struct Batch {
  double measured = 0;  // max/avg
  double predicted = 0;
  double measured_max = 0, measured_avg = 0;
  double abs_err = 0, sum = 0;
  int64_t tokens = 0;
  size_t chunks = 0;
};

// Runs one forward batch (all layers) of `plan` over the queue's front; returns per-rank CPU ns.
std::vector<int64_t> RunPlan(const model::RefModel& m, model::RankPool& pool, std::deque<Req>& q,
                             const sched::BatchPlan& plan) {
  const size_t h = m.config().hidden();
  const uint64_t bpt = m.config().KvBytesPerTokenPerLayer();
  std::vector<model::RefModel::BatchSeq> seqs;
  int64_t rows = 0;
  for (const sched::BatchEntry& e : plan.entries) {
    Req& r = q[e.index];
    seqs.push_back({static_cast<uint64_t>(r.next), static_cast<uint64_t>(e.bsz),
                    std::span<std::byte>(r.kv.data(), static_cast<size_t>(r.next + e.bsz) * bpt),
                    e.rank});
    rows += e.bsz;
  }
  std::vector<float> hidden(static_cast<size_t>(rows) * h);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = 0.01f * static_cast<float>(i % 97);
  std::vector<int64_t> rank_ns(pool.ranks(), 0);
  for (uint32_t l = 0; l < m.config().layers; ++l)
    m.ForwardLayerBatch(l, seqs, hidden, pool, rank_ns);
  return rank_ns;
}

double MaxAvg(const std::vector<double>& t, double* mx_out = nullptr, double* avg_out = nullptr) {
  double sum = 0, mx = 0;
  for (double v : t) {
    sum += v;
    mx = std::max(mx, v);
  }
  const double avg = sum / static_cast<double>(t.size());
  if (mx_out != nullptr) *mx_out = mx;
  if (avg_out != nullptr) *avg_out = avg;
  return avg > 0 ? mx / avg : 0;
}

void Summary(const char* name, const std::vector<Batch>& bs, uint32_t ranks, double wall_s) {
  std::vector<double> meas, pred;
  double smax = 0, savg = 0, err = 0, sum = 0, tokens = 0;
  for (const Batch& b : bs) {
    tokens += static_cast<double>(b.tokens);
    err += b.abs_err;
    sum += b.sum;
    if (b.chunks < ranks) continue;
    meas.push_back(b.measured);
    pred.push_back(b.predicted);
    smax += b.measured_max;
    savg += b.measured_avg;
  }
  if (meas.empty()) {
    std::printf("%-18s no batch with >= %u chunks\n", name, ranks);
    return;
  }
  double mm = 0, pm = 0;
  for (double v : meas) mm += v;
  for (double v : pred) pm += v;
  std::printf(
      "%-18s %3zu/%3zu full  measured max/avg mean %.3f p50 %.3f weighted %.3f  predicted mean "
      "%.3f  model error %.3f  tokens/batch %.0f  wall %.1f s\n",
      name, meas.size(), bs.size(), mm / static_cast<double>(meas.size()), Percentile(meas, 0.5),
      smax / savg, pm / static_cast<double>(pred.size()), sum > 0 ? err / sum : 0,
      tokens / static_cast<double>(bs.size()), wall_s);
}

void Noise(const model::RefModel& m, uint32_t ranks, const Args& a) {
  model::RankPool pool(ranks);
  const uint64_t bpt = m.config().KvBytesPerTokenPerLayer();
  std::deque<Req> q;
  sched::BatchPlan plan;
  const int64_t cached = a.max_context / 2, n = a.append;
  for (uint32_t r = 0; r < ranks; ++r) {
    q.push_back({cached + n, cached, std::vector<std::byte>((cached + n) * bpt, std::byte{0})});
    plan.entries.push_back({r, n, false, r});
  }
  std::vector<double> ratios;
  for (int b = 0; b < a.noise_batches; ++b) {
    const std::vector<int64_t> ns = RunPlan(m, pool, q, plan);
    ratios.push_back(MaxAvg(std::vector<double>(ns.begin(), ns.end())));
  }
  double mean = 0;
  for (double v : ratios) mean += v;
  std::printf(
      "noise R=%u: identical chunks (%lld cached, %lld new) on every rank, %d batches: "
      "max/avg mean %.3f p50 %.3f p90 %.3f max %.3f\n",
      ranks, static_cast<long long>(cached), static_cast<long long>(n), a.noise_batches,
      mean / static_cast<double>(ratios.size()), Percentile(ratios, 0.5), Percentile(ratios, 0.9),
      *std::max_element(ratios.begin(), ratios.end()));
}

struct Config {
  const char* name;
  sched::RankPlacement placement;
  bool calibrate;
  int64_t min_chunk;
};

void Loaded(const model::RefModel& m, const Args& a, const Config& c) {
  model::RankPool pool(a.ranks);
  Stream stream(a, m.config().KvBytesPerTokenPerLayer());
  const sched::AttentionTimeModel reference = ReferenceAttentionModel(m.config());
  sched::AttentionTimeModel model = reference;
  sched::AttentionFit fit(0.995);  // the PE's forgetting (prefill.h)
  sched::BatchLimits limits;
  limits.compute_quota = static_cast<Nanos>(a.quota_ms * 1e6);
  limits.min_chunk_tokens = c.min_chunk;
  std::deque<Req> q;
  std::vector<sched::PrefillWork> work;
  std::vector<sched::RankWork> rank_work(a.ranks);
  sched::BatchPlan plan;
  std::vector<Batch> out;
  const double layers = m.config().layers;
  const auto t0 = std::chrono::steady_clock::now();
  for (int b = 0; b < a.warmup + a.batches; ++b) {
    while (static_cast<int>(q.size()) < a.queue) q.push_back(stream.Next());
    work.clear();
    for (const Req& r : q) work.push_back({r.next, r.prompt - r.next});
    if (!sched::PackRanks(work, model, limits, a.ranks, c.placement, &plan).ok()) {
      std::fprintf(stderr, "PackRanks failed\n");
      std::exit(1);
    }
    const std::vector<int64_t> ns = RunPlan(m, pool, q, plan);
    sched::RankWorkOf(work, plan, a.ranks, rank_work);
    Batch rec;
    std::vector<double> meas(ns.begin(), ns.end()), pred(a.ranks);
    for (uint32_t r = 0; r < a.ranks; ++r) {
      pred[r] = rank_work[r].PredictNs(model) * layers;
      if (!rank_work[r].empty()) {
        rec.abs_err += std::abs(pred[r] - meas[r]);
        rec.sum += meas[r];
      }
      fit.Add(rank_work[r], meas[r] / layers);
      if (std::getenv("RANK_BALANCE_DEBUG") != nullptr && !rank_work[r].empty()) {
        std::printf("DBG b%d r%u chunks %.0f tokens %.0f pairs %.0f sq %.0f meas %.0f pred %.0f\n",
                    b, r, rank_work[r].chunks, rank_work[r].tokens, rank_work[r].pairs,
                    rank_work[r].sq, meas[r] / layers, pred[r] / layers);
      }
    }
    rec.measured = MaxAvg(meas, &rec.measured_max, &rec.measured_avg);
    rec.predicted = MaxAvg(pred);
    rec.tokens = plan.tokens;
    rec.chunks = plan.entries.size();
    if (b >= a.warmup) out.push_back(rec);
    sched::AttentionTimeModel fitted;
    if (c.calibrate && fit.samples() >= 24 && fit.Fit(&fitted)) model = fitted;
    // Advance: chunks continue in place, finished requests leave (FIFO as the PE).
    for (const sched::BatchEntry& e : plan.entries) q[e.index].next += e.bsz;
    std::erase_if(q, [](const Req& r) { return r.next == r.prompt; });
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Summary(c.name, out, a.ranks, wall);
  if (c.calibrate) {
    std::printf(
        "%-18s fitted per layer: fixed %.0f ns, per chunk %.0f ns, per token %.0f ns, per "
        "(new, cached) pair %.2f ns, per new token^2 %.2f ns, per pair and cached token %.5f ns "
        "(reference: %.0f, %.2f, %.2f)\n",
        "", model.fixed_ns, model.per_chunk_ns, model.per_token_ns, model.per_cached_pair_ns,
        model.per_token_sq_ns, model.per_cached_pair_ctx_ns, reference.per_token_ns,
        reference.per_cached_pair_ns, reference.per_token_sq_ns);
  }
}

}  // namespace
}  // namespace dualpath::engine

int main(int argc, char** argv) {
  using namespace dualpath;
  engine::Args a;
  CLI::App app{"Attention balance across a prefill engine's ranks (issue 28 acceptance 3)"};
  app.add_option("--ranks", a.ranks, "ranks (threads) of the engine")->check(CLI::Range(2, 64));
  app.add_option("--batches", a.batches, "measured batches per configuration")
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", a.warmup, "batches run before measuring")->check(CLI::Range(0, 1000));
  app.add_option("--quota-ms", a.quota_ms, "compute quota per rank, ms")
      ->check(CLI::Range(0.01, 60000.0));
  app.add_option("--queue", a.queue, "requests kept in the PE's queue")->check(CLI::Range(1, 4096));
  app.add_option("--append", a.append, "new tokens of a later turn")->check(CLI::Range(1, 65536));
  app.add_option("--max-context", a.max_context, "longest prompt")->check(CLI::Range(512, 65536));
  app.add_option("--first-every", a.first_every, "every n-th request is a first turn (0: none)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--min-chunk", a.min_chunk, "the PE's minimum chunk now")
      ->check(CLI::Range(1, 65536));
  app.add_option("--noise-batches", a.noise_batches, "batches of the noise check")
      ->check(CLI::Range(1, 100000));
  app.add_option("--seed", a.seed, "request stream seed");
  CLI11_PARSE(app, argc, argv);
  if (a.append >= a.max_context) {
    std::fprintf(stderr, "rank_balance_bench: --append must be < --max-context\n");
    return 2;
  }
  Result<std::unique_ptr<model::RefModel>> m = model::RefModel::Create(model::RefModelConfig{});
  if (!m.ok()) {
    std::fprintf(stderr, "rank_balance_bench: %s\n", m.status().ToString().c_str());
    return 1;
  }
  std::printf("load average before: %s\n", engine::LoadAvg().c_str());
  engine::Noise(**m, 2, a);
  if (a.ranks != 2) engine::Noise(**m, a.ranks, a);
  const engine::Config configs[] = {
      {"round-robin", sched::RankPlacement::kRoundRobin, true, a.min_chunk},
      {"packed-ref-min64", sched::RankPlacement::kPacked, false, 64},
      {"packed-ref", sched::RankPlacement::kPacked, false, a.min_chunk},
      {"packed-calibrated", sched::RankPlacement::kPacked, true, a.min_chunk},
  };
  for (const engine::Config& c : configs) engine::Loaded(**m, a, c);
  std::printf("load average after: %s\n", engine::LoadAvg().c_str());
  return 0;
}
