// What the trace fuzz targets check on every workload a reader accepts: the statistics and the
// replay helpers the CLI and the simulator run on it must not crash or overflow, and the
// per-session invariants the readers promise hold.
#pragma once

#include <cmath>

#include "dualpath/trace/workload.h"
#include "fuzz_util.h"

namespace dualpath::fuzz {

inline void CheckWorkload(const trace::Workload& w) {
  for (const trace::Session& s : w.sessions) {
    if (s.turns.empty()) Broken("accepted a session without turns");
    if (s.block_size == 0) Broken("accepted block size 0");
    if (!std::isfinite(s.start_s) || s.start_s < 0) Broken("start time negative or not finite");
    for (const trace::Turn& t : s.turns) {
      if (!std::isfinite(t.think_time_s) || t.think_time_s < 0) Broken("think time out of range");
    }
    (void)trace::Contexts(s);
    (void)trace::TotalTokens(s);
  }
  const trace::WorkloadStats st = trace::ComputeStats(w, 64);
  if (st.turns > 0 && !(st.ideal_hit_ratio >= 0 && st.ideal_hit_ratio <= 1)) {
    Broken("ideal hit ratio outside [0, 1]");
  }
  if (st.hit_tokens > st.prompt_tokens) Broken("more hit tokens than prompt tokens");
}

}  // namespace dualpath::fuzz
