// DataReach: which engines the compute network (the network the KV moves over) still connects, as
// the scheduler service judges it from what the engines' probes saw of each other
// (EngineReport.reach, EnginePeer.Ping; docs/control.md "Liveness"). Fetching over the service's
// unix socket proves an engine's process alive, not that its KV can move: an engine whose compute
// link is down keeps fetching and would keep taking work it can never finish.
//
// Evidence. Engine a reports, for each engine b of the other role it probes, how long ago its
// latest probe of b was answered and how long ago it began probing b. On the service clock that is
// a contact time ok(a->b) = now - ok_age and a start time since(a->b) = now - probing. A probe is
// a request and its answer over the compute network, so an answered probe proves the path both
// ways: the pair {a, b} was in contact at max(ok(a->b), ok(b->a)).
//
// Rule. The pair {a, b} is connected at `now` when its latest contact is at most `window` old; a
// pair probed for less than `window` (its earliest start is younger) counts as connected (a grace
// period after an engine registers or learns of another). Engine x is cut off when
//   - x has at least one probed pair with a live engine, and none of them is connected, and
//   - some pair of live engines without x is connected.
// The second condition tells "x's link is down" from "the whole compute network, or x's only
// counterpart, is down": there, cutting everyone off would stop all work without moving any (1P1D
// with d0's link down cuts off nobody: transfers time out and the requests are retried, as before).
// An engine that reports nothing and is probed by nobody is never cut off (it is judged by its
// fetches only).
//
// Taking back. A cut-off engine x that the rule no longer cuts off is taken back only once every
// pair with x has been answered both ways since the cut (BackSince): x's probe of each live peer
// y and y's probe of x. An engine lets go of an unreachable peer and fails new work with it at
// once until its own probe of it is answered (engine/peer_probe.h), so taking x back on the first
// answered probe either way (one pair in contact again) gave it work that x, or its DE, still
// failed at once: an attempt lost after the partition had ended.
//
// Thread safety: none; the owner (ControlState) holds its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "dualpath/common/clock.h"

namespace dualpath::control {

class DataReach {
 public:
  // `window`: how long a pair may go without contact before it counts as disconnected (the
  // service uses 3 heartbeats, as for fetches).
  explicit DataReach(Nanos window) : window_(window) {}

  // What `reporter` saw of `target` at `now`: its latest probe answered `ok_age` ago (negative:
  // none yet), probing began `probing` ago. Only ever moves a pair's contact forward.
  void Record(uint32_t reporter, uint32_t target, Nanos ok_age, Nanos probing, Nanos now);
  // `engine` (re-)registered: what was known about its pairs belonged to its previous process.
  void Forget(uint32_t engine);

  // The engines of `live` cut off at `now` (the rule above), in `live`'s order.
  std::vector<uint32_t> CutOff(const std::vector<uint32_t>& live, Nanos now) const;
  // True when, for every engine y of `peers` paired with `engine`, a probe of y by `engine` and a
  // probe of `engine` by y were both answered after `since` (see "Taking back" above).
  bool BackSince(uint32_t engine, const std::vector<uint32_t>& peers, Nanos since) const;
  // The latest answered probe between `engine` and any engine of `live`; nullopt when there was
  // none. For log messages.
  std::optional<Nanos> LastContact(uint32_t engine, const std::vector<uint32_t>& live) const;

  // True when a probe between `a` and `b`, either way, was answered after `since`.
  bool AnsweredAfter(uint32_t a, uint32_t b, Nanos since) const;

  Nanos window() const { return window_; }

 private:
  static constexpr Nanos kNever = INT64_MIN;
  struct Pair {
    Nanos contact = kNever;  // latest answered probe, either direction
    Nanos start = kNever;    // earliest start of probing, either direction (kNever: untracked)
  };
  // Unordered pairs, keyed (min id, max id).
  static std::pair<uint32_t, uint32_t> Key(uint32_t a, uint32_t b) {
    return a < b ? std::make_pair(a, b) : std::make_pair(b, a);
  }
  // Contact or, during the grace period, the start: what "connected" is measured from.
  Nanos Latest(const Pair& p, Nanos now) const;

  const Nanos window_;
  std::map<std::pair<uint32_t, uint32_t>, Pair> pairs_;
  // Latest answered probe by (reporter, target): one direction, unlike Pair::contact.
  std::map<std::pair<uint32_t, uint32_t>, Nanos> answered_;
};

}  // namespace dualpath::control
