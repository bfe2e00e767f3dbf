#include "dualpath/replay/replayer.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

#include "dualpath/common/log.h"

namespace dualpath::replay {
namespace {

class RealtimeClock final : public Clock {
 public:
  Nanos Now() const override {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<Nanos>(ts.tv_sec) * kNanosPerSecond + ts.tv_nsec;
  }
};

double Secs(int64_t from_ns, int64_t to_ns) {
  if (from_ns <= 0 || to_ns <= 0) return -1;
  return ToSeconds(to_ns - from_ns);
}

// Agent start offsets (ns after the replay starts): all zero offline; online, the arrival times
// of a Poisson process of rate aps, from the seeded Mersenne Twister (bit-exact by the standard)
// with our own exponential draw (std::exponential_distribution is implementation-defined).
std::vector<Nanos> ArrivalOffsets(size_t agents, const ReplayOptions& o) {
  std::vector<Nanos> out(agents, 0);
  if (!o.online) return out;
  std::mt19937_64 rng(o.seed ^ 0x6172726976616c73ULL);  // "arrivals"
  double t = 0;
  for (size_t k = 0; k < agents; ++k) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    t += -std::log1p(-u) / o.aps;
    out[k] = FromSeconds(t);
  }
  return out;
}

pb::RequestSpec MakeSpec(uint64_t request_id, const Agent& agent, const TurnSpec& turn) {
  pb::RequestSpec spec;
  spec.set_request_id(request_id);
  spec.set_agent_id(agent.id);
  spec.set_turn(turn.turn);
  spec.mutable_prompt()->Add(turn.prompt.begin(), turn.prompt.end());
  spec.set_gen_tokens(turn.gen_tokens);
  spec.mutable_teacher()->Add(turn.teacher.begin(), turn.teacher.end());
  return spec;
}

}  // namespace

double RequestRecord::TtftS() const {
  const int64_t sub =
      result.timing().submitted_ns() > 0 ? result.timing().submitted_ns() : submit_ns;
  return Secs(sub, result.timing().first_token_ns());
}
double RequestRecord::TtstS() const {
  return Secs(result.timing().first_token_ns(), result.timing().second_token_ns());
}
double RequestRecord::TpotS() const {
  if (gen_tokens <= 1) return 0;
  const double d = Secs(result.timing().first_token_ns(), result.timing().done_ns());
  return d < 0 ? -1 : d / (gen_tokens - 1);
}
double RequestRecord::QueueS() const {
  const int64_t sub =
      result.timing().submitted_ns() > 0 ? result.timing().submitted_ns() : submit_ns;
  return Secs(sub, result.timing().prefill_start_ns());
}
double RequestRecord::PrefillS() const {
  return Secs(result.timing().prefill_start_ns(), result.timing().first_token_ns());
}
double RequestRecord::DecodeS() const {
  return Secs(result.timing().first_token_ns(), result.timing().done_ns());
}
double RequestRecord::HandoffS() const {
  return Secs(result.timing().first_token_ns(), result.timing().decode_ready_ns());
}
double RequestRecord::DecodeWaitS() const {
  return Secs(result.timing().decode_ready_ns(), result.timing().decode_start_ns());
}
double RequestRecord::SubmitRpcS() const { return Secs(submit_ns, accepted_ns); }
double RequestRecord::RetireS() const {
  return Secs(result.timing().done_ns(), result.timing().retired_ns());
}
double RequestRecord::ReportS() const {
  return Secs(result.timing().retired_ns(), result.timing().reported_ns());
}
double RequestRecord::DeliverS() const { return Secs(result.timing().reported_ns(), result_ns); }
double RequestRecord::DeTtstS() const {
  return Secs(result.timing().decode_ready_ns(), result.timing().second_token_ns());
}

const Clock& WallClock() {
  static const RealtimeClock clock;
  return clock;
}

Result<ReplayResult> RunReplay(const ReplayWorkload& workload, const ReplayOptions& options,
                               ServiceClient& client, const Clock& wall) {
  if (options.online && !(options.aps > 0)) {
    return InvalidArgument("--aps must be positive");
  }
  const size_t n = workload.agents.size();
  const std::vector<Nanos> arrivals = ArrivalOffsets(n, options);
  struct InFlight {
    size_t agent;
    size_t turn;
    Nanos submit_ns;
    int64_t hit_tokens;
    Nanos accepted_ns;  // the service's Submit returned (its hit probe done)
  };
  std::unordered_map<uint64_t, InFlight> in_flight;
  std::vector<size_t> next_turn(n, 0);
  ReplayResult out;
  uint64_t next_id = options.first_request_id;
  size_t arrived = 0, finished = 0, second_turns_pending = 0;
  for (const Agent& a : workload.agents) {
    if (a.turns.size() >= 2) ++second_turns_pending;
    if (a.turns.empty()) ++finished;  // nothing to run
  }
  // The steady state ends when a quarter of the agents (at least one) are done: an agent whose
  // trajectory was cut short should not end it for the others.
  const size_t steady_end_after = std::max<size_t>(1, n / 4);
  out.start_ns = wall.Now();
  const Nanos deadline = out.start_ns + FromSeconds(options.timeout_s);

  // A call to the service, retried while the service does not answer (see service_outage_s).
  auto call = [&](auto&& fn) -> decltype(fn()) {
    Nanos outage_since = 0;
    while (true) {
      auto r = fn();
      if (r.ok()) return r;
      const Code code = r.status().code();
      if (code != Code::kUnavailable && code != Code::kTimeout) return r;
      const Nanos now = wall.Now();
      if (outage_since == 0) {
        outage_since = now;
        log::Warn("replay: the scheduler service does not answer ({}); waiting up to {} s",
                  r.status().ToString(), options.service_outage_s);
      }
      if (now - outage_since >= FromSeconds(options.service_outage_s)) {
        return r.status().WithContext("the service did not answer for " +
                                      std::to_string(options.service_outage_s) + " s");
      }
      if (options.health) RETURN_IF_ERROR(options.health());
      const Status waited = client.WaitForService(Nanos{options.poll_ms} * kNanosPerMilli);
      if (waited.code() == Code::kUnimplemented) return r;
    }
  };

  uint64_t after_seq = 0;
  uint64_t epoch = 0;  // the service incarnation seen so far (0: none yet)
  // After every successful call: a new epoch means the service restarted and lost every request
  // and result; re-submit what is in flight under the same ids and read results from seq 0.
  auto check_epoch = [&]() -> Status {
    for (uint64_t e = client.epoch(); e != 0 && e != epoch; e = client.epoch()) {
      if (epoch == 0) {
        epoch = e;
        break;
      }
      epoch = e;
      after_seq = 0;
      ++out.service_restarts;
      std::vector<uint64_t> ids;
      for (const auto& [id, f] : in_flight) ids.push_back(id);
      std::sort(ids.begin(), ids.end());
      log::Warn("replay: the scheduler service restarted (epoch {:x}); re-submitting {} requests",
                e, ids.size());
      for (uint64_t id : ids) {
        const InFlight& f = in_flight.at(id);
        const Agent& a = workload.agents[f.agent];
        const pb::RequestSpec spec = MakeSpec(id, a, a.turns[f.turn]);
        RETURN_IF_ERROR(call([&] { return client.Submit(spec); }).status());
        ++out.resubmitted;
      }
      // A re-submission may itself have met a newer incarnation: the loop looks again.
    }
    return Status::Ok();
  };

  auto submit = [&](size_t agent) -> Status {
    const Agent& a = workload.agents[agent];
    const size_t turn = next_turn[agent]++;
    const uint64_t id = next_id++;
    const Nanos now = wall.Now();
    const pb::RequestSpec spec = MakeSpec(id, a, a.turns[turn]);
    ASSIGN_OR_RETURN(int64_t hit, call([&] { return client.Submit(spec); }));
    in_flight[id] = InFlight{agent, turn, now, hit, wall.Now()};
    if (turn == 1 && --second_turns_pending == 0) {
      out.steady_start_ns = now;
    }
    return check_epoch();
  };

  while (finished < n) {
    Nanos now = wall.Now();
    while (arrived < n && out.start_ns + arrivals[arrived] <= now) {
      if (!workload.agents[arrived].turns.empty()) {
        RETURN_IF_ERROR(submit(arrived));
      }
      ++arrived;
    }
    if (now > deadline) {
      return Timeout("replay did not finish within " + std::to_string(options.timeout_s) +
                     " s: " + std::to_string(out.records.size()) + " results, " +
                     std::to_string(in_flight.size()) + " requests in flight");
    }
    if (options.health) {
      RETURN_IF_ERROR(options.health());
    }
    uint32_t wait_ms = options.poll_ms;
    if (arrived < n) {
      const Nanos until = out.start_ns + arrivals[arrived] - now;
      wait_ms = static_cast<uint32_t>(std::clamp<Nanos>(until / kNanosPerMilli, 1, wait_ms));
    }
    ASSIGN_OR_RETURN(std::vector<pb::SequencedResult> results,
                     call([&] { return client.WaitResults(after_seq, wait_ms); }));
    if (const uint64_t before = epoch; client.epoch() != before) {
      RETURN_IF_ERROR(check_epoch());
      // Results of a new incarnation are read from its first sequence number on (below).
      if (epoch != before && before != 0) continue;
    }
    for (pb::SequencedResult& sr : results) {
      after_seq = std::max(after_seq, sr.seq());
      auto it = in_flight.find(sr.result().request_id());
      if (it == in_flight.end()) {
        // A duplicate (a re-submitted request finishing twice) or not ours: the first counts.
        log::Warn("replay: result for request {} that is not in flight; ignored",
                  sr.result().request_id());
        continue;
      }
      const InFlight f = it->second;
      in_flight.erase(it);
      const Agent& a = workload.agents[f.agent];
      RequestRecord r;
      r.request_id = sr.result().request_id();
      r.agent = a.id;
      r.turn = a.turns[f.turn].turn;
      r.prompt_tokens = a.turns[f.turn].prompt.size();
      r.gen_tokens = a.turns[f.turn].gen_tokens;
      r.hit_tokens = f.hit_tokens;
      r.submit_ns = f.submit_ns;
      r.accepted_ns = f.accepted_ns;
      r.result_ns = wall.Now();
      r.result = std::move(*sr.mutable_result());
      if (!r.result.ok()) {
        log::Warn("replay: request {} (agent {} turn {}) failed: {}", r.request_id, r.agent, r.turn,
                  r.result.error());
      }
      if (options.on_result) options.on_result(r);
      out.records.push_back(std::move(r));
      if (next_turn[f.agent] < a.turns.size()) {
        RETURN_IF_ERROR(submit(f.agent));
      } else {
        ++finished;
        if (finished == steady_end_after) out.steady_end_ns = wall.Now();
      }
    }
  }
  out.end_ns = out.records.empty() ? wall.Now() : out.records.back().result_ns;
  if (out.steady_start_ns == 0 || out.steady_end_ns <= out.steady_start_ns) {
    out.steady_start_ns = out.steady_end_ns = 0;  // no steady state (one turn, or one agent)
  }
  return out;
}

}  // namespace dualpath::replay
