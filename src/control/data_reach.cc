#include "control/data_reach.h"

#include <algorithm>

namespace dualpath::control {

void DataReach::Record(uint32_t reporter, uint32_t target, Nanos ok_age, Nanos probing, Nanos now) {
  if (reporter == target) return;
  Pair& p = pairs_[Key(reporter, target)];
  const Nanos start = now - std::max<Nanos>(probing, 0);
  // The earliest start: a pair both sides began probing is as old as the first of them.
  p.start = p.start == kNever ? start : std::min(p.start, start);
  if (ok_age >= 0) {
    p.contact = std::max(p.contact, now - ok_age);
    auto [it, _] = answered_.try_emplace({reporter, target}, kNever);
    it->second = std::max(it->second, now - ok_age);
  }
}

void DataReach::Forget(uint32_t engine) {
  auto involves = [engine](const auto& kv) {
    return kv.first.first == engine || kv.first.second == engine;
  };
  std::erase_if(pairs_, involves);
  std::erase_if(answered_, involves);
}

bool DataReach::BackSince(uint32_t engine, const std::vector<uint32_t>& peers, Nanos since) const {
  auto answered_after = [&](uint32_t from, uint32_t to) {
    auto it = answered_.find({from, to});
    return it != answered_.end() && it->second > since;
  };
  for (uint32_t y : peers) {
    if (y == engine || !pairs_.contains(Key(engine, y))) continue;
    if (!answered_after(engine, y) || !answered_after(y, engine)) return false;
  }
  return true;
}

bool DataReach::AnsweredAfter(uint32_t a, uint32_t b, Nanos since) const {
  auto it = pairs_.find(Key(a, b));
  return it != pairs_.end() && it->second.contact != kNever && it->second.contact > since;
}

Nanos DataReach::Latest(const Pair& p, Nanos now) const {
  // A pair probed for less than the window has had no chance to be proven either way.
  if (now - p.start <= window_) return std::max(p.contact, p.start);
  return p.contact;
}

std::vector<uint32_t> DataReach::CutOff(const std::vector<uint32_t>& live, Nanos now) const {
  auto is_live = [&](uint32_t id) { return std::find(live.begin(), live.end(), id) != live.end(); };
  struct Seen {
    bool any = false;        // has a probed pair with a live engine
    bool connected = false;  // ... and one of them is connected
  };
  std::map<uint32_t, Seen> seen;
  std::vector<std::pair<uint32_t, uint32_t>> connected;
  for (const auto& [key, p] : pairs_) {
    if (!is_live(key.first) || !is_live(key.second)) continue;
    const Nanos latest = Latest(p, now);
    const bool ok = latest != kNever && now - latest <= window_;
    for (uint32_t id : {key.first, key.second}) {
      seen[id].any = true;
      seen[id].connected |= ok;
    }
    if (ok) connected.push_back(key);
  }
  std::vector<uint32_t> out;
  for (uint32_t x : live) {
    auto it = seen.find(x);
    if (it == seen.end() || !it->second.any || it->second.connected) continue;
    // Cut off only when the network works elsewhere (see the header).
    const bool elsewhere = std::any_of(connected.begin(), connected.end(), [x](const auto& k) {
      return k.first != x && k.second != x;
    });
    if (elsewhere) out.push_back(x);
  }
  return out;
}

std::optional<Nanos> DataReach::LastContact(uint32_t engine,
                                            const std::vector<uint32_t>& live) const {
  std::optional<Nanos> best;
  for (const auto& [key, p] : pairs_) {
    if (key.first != engine && key.second != engine) continue;
    const uint32_t other = key.first == engine ? key.second : key.first;
    if (std::find(live.begin(), live.end(), other) == live.end()) continue;
    // The grace period's start is no contact: only answered probes count here.
    if (p.contact != kNever) best = std::max(best.value_or(kNever), p.contact);
  }
  return best;
}

}  // namespace dualpath::control
