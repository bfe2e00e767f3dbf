// PeerProber: this engine's view of the compute network, the network its KV moves over (issue 25
// item 9; docs/engine.md "Failures"). An engine talks to the scheduler over a unix socket (or the
// management network), so fetching proves its process alive, not that its KV can move: with its
// compute link down it would keep fetching and taking work it can never finish.
//
// The scheduler names the engines of the other role, the ones this engine moves KV with
// (FetchReply.peers). The prober pings each (EnginePeer.Ping, over the same channel as
// StartDecode) every `interval`, with at most one ping per peer in flight, each bounded by two
// intervals. Every Fetch carries what it saw (AddReach: per peer, the age of its latest answered
// ping and how long it has been probing); the scheduler cuts off an engine that nobody reaches
// while others reach each other (control/data_reach.h).
//
// A peer whose pings have gone unanswered for `window` (the scheduler's 3 heartbeats) is
// unreachable here; its channel is then replaced after every unanswered ping (a connection stuck
// in TCP's retransmission backoff is not what carries the first ping once the link is back).
// The engine lets go of it once the scheduler agrees (SetCutOff: the peer, or this engine itself,
// is cut off; the scheduler has then re-submitted every request between them elsewhere, so what
// this engine fails now is a superseded attempt and costs no retry): its EnginePeer calls in
// progress are cancelled, its transfer peers disconnected both ways (their batches fail now and
// their endpoints close: nothing of it can land in our buffers any more, which is what makes the
// areas it might have written safe to reuse, Released), and new work with it fails fast
// (CheckReachable). Without the scheduler's verdict (only the path between two engines is broken,
// or the whole network) nothing is let go early: transfers time out as before. One answered ping
// makes the peer reachable again.
//
// Thread safety: SetPeers, SetCutOff, AddReach, Gone, Released, CheckReachable and Stop may be
// called from any thread. The prober's thread sends the pings; their answers arrive on gRPC's
// threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/control/v1/scheduler.pb.h"
#include "engine/peers.h"

namespace dualpath::engine {

class PeerProber {
 public:
  struct Options {
    std::string self;                       // this engine's name (logs, PingRequest.from)
    Nanos interval = 500 * kNanosPerMilli;  // a ping per peer this often
    Nanos window = 3 * kNanosPerSecond;     // no answer for this long: unreachable
    const Clock* clock = nullptr;           // default: SteadyClock
    // Called (on the prober's or a gRPC thread, no lock held) when a peer's first ping is
    // answered or it becomes reachable again ("reachable"), when it becomes unreachable here
    // ("unreachable"), and when it has been let go of and disconnected ("released").
    std::function<void(const std::string& name, const std::string& state)> on_state;
  };

  PeerProber(PeerDirectory& peers, Options options);
  ~PeerProber();
  PeerProber(const PeerProber&) = delete;
  PeerProber& operator=(const PeerProber&) = delete;

  // The engines to probe (FetchReply.peers). A peer whose address changed is probed afresh; one
  // no longer listed is forgotten.
  void SetPeers(const google::protobuf::RepeatedPtrField<control::v1::PeerEngine>& peers);
  // Appends one PeerReach per probed peer to `report`.
  void AddReach(control::v1::EngineReport* report) const;
  // The scheduler's verdict (FetchReply.cut_off): the engines it has cut off, and this engine's
  // own id (which may be among them).
  void SetCutOff(const google::protobuf::RepeatedField<uint32_t>& cut_off, uint32_t self_id);
  // True while engine `name` is a probed peer, unreachable here, and this engine has let go of it
  // (the scheduler cut it, or this engine, off).
  bool Gone(const std::string& name) const;
  // True while some peer on `host` (the host part of its address) is gone: the engine's store
  // link skips the store nodes and a leader master there (KvStoreLink's skip_addr).
  bool HostGone(const std::string& host) const;
  // True once engine `name` is gone and its transfer peers (both directions) have been
  // disconnected: nothing of it can land in this engine's buffers any more, so what it might have
  // written into is safe to free.
  bool Released(const std::string& name) const;
  // Ok, or kEnginePeerFailed naming the engine (`role` engine `name`) and how long its pings have
  // gone unanswered, when it is gone.
  Status CheckReachable(const std::string& name, std::string_view role) const;
  // Ends the thread and every ping in flight; waits for their answers. Idempotent.
  void Stop();

 private:
  struct Call;
  struct Target {
    control::v1::PeerEngine peer;
    uint64_t generation = 0;  // a new one when the peer is (re-)announced at another address
    Nanos since = 0;          // probing began
    Nanos last_ok = -1;       // latest answered ping (-1: none)
    Nanos next = 0;           // next ping due
    bool in_flight = false;
    bool unreachable = false;  // no answer for the window (this engine's view)
    bool cut_off = false;      // the scheduler has cut it off
    bool gone = false;         // let go of: unreachable, and it or this engine is cut off
    bool released = false;     // gone and its transfer peers disconnected
    bool drop_stub = false;    // an unanswered ping while unreachable: open a new channel
    std::shared_ptr<Call> call;
  };

  void Loop();
  // Sends a ping to `t` (outside mu_: the stub may answer at once).
  void Send(uint32_t engine_id, uint64_t generation, const control::v1::PeerEngine& peer,
            const std::shared_ptr<Call>& call);
  void OnAnswer(uint32_t engine_id, uint64_t generation, bool ok);
  // Nanoseconds since `t` was last heard from (or began to be probed).
  Nanos SilentLocked(const Target& t, Nanos now) const;

  PeerDirectory& peers_;
  const Options options_;
  const Clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint32_t, Target> targets_;  // by engine id; guarded by mu_
  uint64_t next_generation_ = 1;        // guarded by mu_
  int outstanding_ = 0;                 // pings whose answer has not run; guarded by mu_
  bool self_cut_off_ = false;           // the scheduler has cut this engine off; guarded by mu_
  bool wake_ = false;                   // a new verdict for the loop; guarded by mu_
  bool stop_ = false;                   // guarded by mu_
  std::thread thread_;
};

}  // namespace dualpath::engine
