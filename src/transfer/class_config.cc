#include "dualpath/transfer/class_config.h"

#include <string>

namespace dualpath::transfer {

ClassConfig DefaultHighClass() { return ClassConfig{.dscp = 46, .ib_sl = 0}; }
ClassConfig DefaultLowClass() { return ClassConfig{.dscp = 8, .ib_sl = 1}; }

Status ValidateClassConfig(const ClassConfig& c) {
  if (c.dscp < -1 || c.dscp > 63) {
    return InvalidArgument("dscp " + std::to_string(c.dscp) + " not in 0..63 (or -1 for none)");
  }
  if (c.ib_sl < -1 || c.ib_sl > 15) {
    return InvalidArgument("ib_sl " + std::to_string(c.ib_sl) +
                           " not in 0..15 (or -1 for UCX's default)");
  }
  if (c.ib_traffic_class < -1 || c.ib_traffic_class > 255) {
    return InvalidArgument("ib_traffic_class " + std::to_string(c.ib_traffic_class) +
                           " not in 0..255 (or -1 for UCX's default)");
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, std::string>> UcxConfigFor(const ClassConfig& c,
                                                              const std::string& tls) {
  std::vector<std::pair<std::string, std::string>> kv;
  if (!tls.empty()) {
    kv.emplace_back("TLS", tls);
  }
  // IB_SL / IB_TRAFFIC_CLASS are inherited by every IB transport (rc, dc, ud, their mlx5
  // variants); UCX accepts them even when no IB device is present, so the same configuration
  // works on a TCP-only host and on an InfiniBand or RoCE cluster.
  if (c.ib_sl >= 0) {
    kv.emplace_back("IB_SL", std::to_string(c.ib_sl));
  }
  if (c.ib_traffic_class >= 0) {
    kv.emplace_back("IB_TRAFFIC_CLASS", std::to_string(c.ib_traffic_class));
  }
  return kv;
}

}  // namespace dualpath::transfer
