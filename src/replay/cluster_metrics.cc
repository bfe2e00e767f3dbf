#include "cluster_metrics.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "dualpath/common/metrics_http.h"
#include "dualpath/replay/cluster_run.h"

namespace dualpath::replay {

Result<std::unique_ptr<MetricsEndpoints>> MetricsEndpoints::Open(const testbed::Cluster& cluster,
                                                                 const std::string& host) {
  auto e = std::make_unique<MetricsEndpoints>();
  e->cluster_ = cluster.name;
  std::vector<std::string> names = {"service"};
  for (const testbed::Node& n : cluster.nodes) names.push_back(n.name);
  const bool v6 = host.find(':') != std::string::npos;
  const std::string bind = (v6 ? "[" + host + "]" : host) + ":0";
  for (const std::string& name : names) {
    Result<int> fd = metrics::ListenMetrics(bind);
    if (!fd.ok()) return fd.status().WithContext("--metrics-host " + host);
    Slot s{.name = name, .fd = UniqueFd(*fd), .address = metrics::BoundAddress(*fd)};
    e->slots_.push_back(std::move(s));
  }
  return e;
}

std::vector<std::string> MetricsEndpoints::Args(size_t slot, double wait_s) const {
  return {"--metrics-addr", "fd:" + std::to_string(Fd(slot)), "--metrics-wait-s",
          fmt::format("{}", wait_s)};
}

std::string MetricsEndpoints::Describe() const {
  std::string out;
  for (const Slot& s : slots_) {
    out += "metrics: scrape http://" + s.address + "/metrics (" + s.name + ")\n";
  }
  return out;
}

std::string MetricsEndpoints::FileSdJson() const {
  nlohmann::json j = nlohmann::json::array();
  for (const Slot& s : slots_) {
    j.push_back(
        {{"targets", {s.address}}, {"labels", {{"process", s.name}, {"cluster", cluster_}}}});
  }
  return j.dump(2) + "\n";
}

std::string MetricsEndpoints::PrometheusYaml(double interval_s) const {
  // Single-quoted YAML scalars: names and addresses hold no quote (cluster names are checked).
  std::string out = fmt::format(
      "# Written by `dualpath cluster run --metrics` for cluster {}.\n"
      "global:\n  scrape_interval: {}ms\n  scrape_timeout: {}ms\n"
      "scrape_configs:\n  - job_name: 'dualpath'\n    static_configs:\n",
      cluster_, static_cast<int>(interval_s * 1000), static_cast<int>(interval_s * 1000));
  for (const Slot& s : slots_) {
    out +=
        fmt::format("      - targets: ['{}']\n        labels: {{process: '{}', cluster: '{}'}}\n",
                    s.address, s.name, cluster_);
  }
  return out;
}

std::vector<std::string> MetricsEndpoints::ArgsOf(const MetricsEndpoints* m, size_t slot,
                                                  double wait_s) {
  return m == nullptr ? std::vector<std::string>{} : m->Args(slot, wait_s);
}

std::vector<int> MetricsEndpoints::FdsOf(const MetricsEndpoints* m, size_t slot) {
  return m == nullptr ? std::vector<int>{} : std::vector<int>{m->Fd(slot)};
}

Result<std::unique_ptr<MetricsEndpoints>> OpenRunMetrics(const ClusterRunOptions& o,
                                                         const testbed::Cluster& cluster,
                                                         std::ostream& progress) {
  if (!o.metrics) return std::unique_ptr<MetricsEndpoints>();
  ASSIGN_OR_RETURN(std::unique_ptr<MetricsEndpoints> m,
                   MetricsEndpoints::Open(cluster, o.metrics_host));
  if (!o.metrics_config.empty()) {
    RETURN_IF_ERROR(WriteOutputFile(o.metrics_config, m->PrometheusYaml(kMetricsScrapeIntervalS),
                                    "--metrics-config"));
    progress << "metrics: Prometheus config " << o.metrics_config << "\n";
  }
  if (!o.metrics_targets.empty()) {
    RETURN_IF_ERROR(WriteOutputFile(o.metrics_targets, m->FileSdJson(), "--metrics-targets"));
    progress << "metrics: file_sd targets " << o.metrics_targets << "\n";
  }
  progress << m->Describe() << std::flush;
  return m;
}

}  // namespace dualpath::replay
