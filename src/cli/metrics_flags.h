// `--metrics-addr` and `--metrics-wait-s`, the same on every long-running process of ours
// (`dualpath control serve`, `dualpath engine`; docs/metrics.md): the /metrics endpoint and how
// long the process waits, once its work is done, for the scrape that reads its final counts.
#pragma once

#include <memory>
#include <string>

#include "cli/command.h"
#include "dualpath/common/log.h"
#include "dualpath/common/metrics.h"
#include "dualpath/common/metrics_http.h"
#include "dualpath/common/numeric.h"
#include "dualpath/common/stop_signal.h"

namespace dualpath::cli {

struct MetricsFlags {
  std::string addr;    // empty: no endpoint
  double wait_s = 10;  // bound of the last-scrape wait
};

inline void AddMetricsOptions(CLI::App* app, MetricsFlags* f) {
  app->add_option("--metrics-addr", f->addr,
                  "Serve Prometheus metrics on HOST:PORT (GET /metrics; port 0: any free port) "
                  "or on an inherited listening socket fd:N (default: off)");
  app->add_option("--metrics-wait-s", f->wait_s,
                  "With --metrics-addr: at the end of the work, wait up to this long for one more "
                  "scrape so the final counts are read (default 10; 0: do not wait)");
}

// Validates the flags and starts the endpoint (null without --metrics-addr). Bad values are
// kInvalidArgument naming the flag (exit 2).
inline Result<std::unique_ptr<metrics::MetricsServer>> StartMetrics(const MetricsFlags& f,
                                                                    metrics::Registry& registry) {
  RETURN_IF_ERROR(CheckRange("--metrics-wait-s", f.wait_s, 0, metrics::kMaxMetricsWaitS, "s"));
  if (f.addr.empty()) return std::unique_ptr<metrics::MetricsServer>();
  RETURN_IF_ERROR(metrics::ValidateMetricsAddr("--metrics-addr", f.addr));
  ASSIGN_OR_RETURN(std::unique_ptr<metrics::MetricsServer> server,
                   metrics::MetricsServer::Start(f.addr, registry));
  log::Info("metrics: serving http://{}/metrics", server->address());
  return server;
}

// The work is done: wait (bounded) until a scrape that started after now has been answered. A
// process stopped by SIGINT / SIGTERM does not wait (it was asked to go now).
inline void AwaitFinalScrape(metrics::MetricsServer* server, const MetricsFlags& f) {
  if (server == nullptr || f.wait_s <= 0 || StopSignal() != 0) return;
  if (server->WaitForScrape(FromSeconds(f.wait_s))) {
    log::Info("metrics: final counts scraped ({} scrapes in all)", server->scrapes());
  } else {
    log::Warn("metrics: no scrape within --metrics-wait-s {} after the work ended", f.wait_s);
  }
}

}  // namespace dualpath::cli
