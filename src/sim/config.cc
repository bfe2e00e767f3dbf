#include "dualpath/sim/config.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "dualpath/common/file.h"

namespace dualpath::sim {
namespace {

using nlohmann::json;

// One table of fields per section, so parsing, printing and the docs cannot drift apart.
// clang-format off
#define DP_HW_FIELDS(X)                                                                  \
  X(gpus_per_node) X(cnic_gbps) X(snic_gbps) X(snic_efficiency) X(cnic_kv_share)         \
  X(dram_buffer_gb) X(host_mem_gBps) X(pcie_gBps) X(gpu_bf16_tflops) X(gpu_fp8_tflops)   \
  X(hbm_gb) X(hbm_tbps)
#define DP_ENGINE_FIELDS(X)                                                              \
  X(linear_efficiency) X(attention_efficiency) X(linear_half_tokens) X(layer_overhead_us) \
  X(compute_quota_ms) X(pe_hbm_reserved_gb) X(decode_overhead_ms)                        \
  X(decode_compute_efficiency) X(decode_hbm_efficiency) X(de_hbm_reserved_gb)            \
  X(decode_weight_gb) X(weight_bytes_per_param) X(ep_pe_workspace_gb) X(ep_de_workspace_gb)    \
  X(dp_workspace_gb) X(decode_layer_overhead_us) X(decode_moe_layer_overhead_us)         \
  X(max_decode_batch) X(pe_ep_nodes) X(de_ep_nodes) X(block_tokens)
#define DP_SCHED_FIELDS(X) X(short_read_queue_s) X(unfinished_token_limit_s) X(fetch_interval_ms)
#define DP_TOP_FIELDS(X)                                                                 \
  X(snic_window_s) X(balance_phase_fraction) X(online_horizon_s) X(synthetic_trajectories)
// clang-format on

template <typename T>
Status ReadField(const json& j, std::string_view path, T* out) {
  if constexpr (std::is_integral_v<T>) {
    if (!j.is_number_integer() && !j.is_number_unsigned()) {
      return Status(Code::kSimBadConfig, std::string(path) + ": expected an integer");
    }
    if (j.is_number_integer() && j.get<int64_t>() < 0) {
      return Status(Code::kSimBadConfig, std::string(path) + ": must not be negative");
    }
  } else if (!j.is_number()) {
    return Status(Code::kSimBadConfig, std::string(path) + ": expected a number");
  }
  *out = j.get<T>();
  return Status::Ok();
}

#define DP_READ_CASE(f)                                                        \
  if (key == #f) {                                                             \
    RETURN_IF_ERROR(ReadField(value, std::string(section) + "." #f, &obj->f)); \
    continue;                                                                  \
  }

template <typename S>
Status CheckObject(const json& j, std::string_view section) {
  if (!j.is_object()) {
    return Status(Code::kSimBadConfig, std::string(section) + ": expected a JSON object");
  }
  return Status::Ok();
}

Status ParseHw(const json& j, std::string_view section, HardwareConfig* obj) {
  RETURN_IF_ERROR(CheckObject<HardwareConfig>(j, section));
  for (const auto& [key, value] : j.items()) {
    DP_HW_FIELDS(DP_READ_CASE)
    return Status(Code::kSimBadConfig, "unknown key " + std::string(section) + "." + key);
  }
  return Status::Ok();
}
Status ParseEngine(const json& j, std::string_view section, EngineConfig* obj) {
  RETURN_IF_ERROR(CheckObject<EngineConfig>(j, section));
  for (const auto& [key, value] : j.items()) {
    DP_ENGINE_FIELDS(DP_READ_CASE)
    return Status(Code::kSimBadConfig, "unknown key " + std::string(section) + "." + key);
  }
  return Status::Ok();
}
Status ParseSched(const json& j, std::string_view section, SchedConfig* obj) {
  RETURN_IF_ERROR(CheckObject<SchedConfig>(j, section));
  for (const auto& [key, value] : j.items()) {
    DP_SCHED_FIELDS(DP_READ_CASE)
    return Status(Code::kSimBadConfig, "unknown key " + std::string(section) + "." + key);
  }
  return Status::Ok();
}

Status Positive(double v, const char* name) {
  if (!(v > 0)) {
    return Status(Code::kSimBadConfig, std::string(name) + " must be > 0");
  }
  return Status::Ok();
}
Status Fraction(double v, const char* name) {
  if (!(v > 0 && v <= 1)) {
    return Status(Code::kSimBadConfig, std::string(name) + " must be in (0, 1]");
  }
  return Status::Ok();
}

}  // namespace

Status SimConfig::Validate() const {
  RETURN_IF_ERROR(Positive(hw.gpus_per_node, "hardware.gpus_per_node"));
  RETURN_IF_ERROR(Positive(hw.cnic_gbps, "hardware.cnic_gbps"));
  RETURN_IF_ERROR(Positive(hw.snic_gbps, "hardware.snic_gbps"));
  RETURN_IF_ERROR(Fraction(hw.snic_efficiency, "hardware.snic_efficiency"));
  RETURN_IF_ERROR(Fraction(hw.cnic_kv_share, "hardware.cnic_kv_share"));
  RETURN_IF_ERROR(Positive(hw.dram_buffer_gb, "hardware.dram_buffer_gb"));
  RETURN_IF_ERROR(Positive(hw.host_mem_gBps, "hardware.host_mem_gBps"));
  RETURN_IF_ERROR(Positive(hw.pcie_gBps, "hardware.pcie_gBps"));
  RETURN_IF_ERROR(Positive(hw.gpu_bf16_tflops, "hardware.gpu_bf16_tflops"));
  RETURN_IF_ERROR(Positive(hw.gpu_fp8_tflops, "hardware.gpu_fp8_tflops"));
  RETURN_IF_ERROR(Positive(hw.hbm_gb, "hardware.hbm_gb"));
  RETURN_IF_ERROR(Positive(hw.hbm_tbps, "hardware.hbm_tbps"));
  RETURN_IF_ERROR(Fraction(engine.linear_efficiency, "engine.linear_efficiency"));
  RETURN_IF_ERROR(Fraction(engine.attention_efficiency, "engine.attention_efficiency"));
  RETURN_IF_ERROR(Fraction(engine.decode_compute_efficiency, "engine.decode_compute_efficiency"));
  RETURN_IF_ERROR(Fraction(engine.decode_hbm_efficiency, "engine.decode_hbm_efficiency"));
  RETURN_IF_ERROR(Positive(engine.compute_quota_ms, "engine.compute_quota_ms"));
  RETURN_IF_ERROR(Positive(engine.max_decode_batch, "engine.max_decode_batch"));
  RETURN_IF_ERROR(Positive(engine.pe_ep_nodes, "engine.pe_ep_nodes"));
  RETURN_IF_ERROR(Positive(engine.de_ep_nodes, "engine.de_ep_nodes"));
  RETURN_IF_ERROR(Positive(engine.block_tokens, "engine.block_tokens"));
  if (engine.linear_half_tokens < 0 || engine.layer_overhead_us < 0 ||
      engine.ep_pe_workspace_gb < 0 || engine.ep_de_workspace_gb < 0 ||
      engine.dp_workspace_gb < 0 || engine.decode_layer_overhead_us < 0 ||
      engine.decode_moe_layer_overhead_us < 0) {
    return Status(Code::kSimBadConfig, "engine: overheads and sizes must not be negative");
  }
  // Negative = derived from the model (ResolveEngine); explicit values must fit in HBM.
  if (engine.pe_hbm_reserved_gb >= hw.hbm_gb || engine.de_hbm_reserved_gb >= hw.hbm_gb) {
    return Status(Code::kSimBadConfig,
                  "engine.pe_hbm_reserved_gb / de_hbm_reserved_gb must be below hardware.hbm_gb");
  }
  if (engine.weight_bytes_per_param == 0) {
    return Status(Code::kSimBadConfig, "engine.weight_bytes_per_param must be > 0 (or < 0: auto)");
  }
  RETURN_IF_ERROR(Positive(sched.short_read_queue_s, "sched.short_read_queue_s"));
  RETURN_IF_ERROR(Positive(sched.unfinished_token_limit_s, "sched.unfinished_token_limit_s"));
  RETURN_IF_ERROR(Positive(sched.fetch_interval_ms, "sched.fetch_interval_ms"));
  RETURN_IF_ERROR(Positive(snic_window_s, "snic_window_s"));
  RETURN_IF_ERROR(Fraction(balance_phase_fraction, "balance_phase_fraction"));
  RETURN_IF_ERROR(Positive(online_horizon_s, "online_horizon_s"));
  return Status::Ok();
}

Result<SimConfig> ParseSimConfig(std::string_view text, std::string_view origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    // parse_error for bad syntax; out_of_range (406) for a number no double holds, e.g. 1e999.
    // e.what() starts with the library's "[json.exception.parse_error.101] ": drop that.
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    const bool range = dynamic_cast<const json::out_of_range*>(&e) != nullptr;
    return Status(Code::kSimBadConfig, std::string(origin) + ": bad JSON: " +
                                           (range ? "number out of range (" + what + ")" : what));
  }
  if (!j.is_object()) {
    return Status(Code::kSimBadConfig, std::string(origin) + ": expected a JSON object");
  }
  SimConfig c;
  SimConfig* obj = &c;
  const std::string_view section = origin;
  for (const auto& [key, value] : j.items()) {
    Status st;
    if (key == "hardware") {
      st = ParseHw(value, "hardware", &c.hw);
    } else if (key == "engine") {
      st = ParseEngine(value, "engine", &c.engine);
    } else if (key == "sched") {
      st = ParseSched(value, "sched", &c.sched);
    } else {
      DP_TOP_FIELDS(DP_READ_CASE)
      st = Status(Code::kSimBadConfig, "unknown key " + key);
    }
    if (!st.ok()) {
      return st.WithContext(origin);
    }
  }
  RETURN_IF_ERROR(c.Validate().WithContext(origin));
  return c;
}

Result<SimConfig> LoadSimConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadRegularFile(path, "sim config", 16 << 20));
  return ParseSimConfig(text, path);
}

std::string SimConfigToJson(const SimConfig& c) {
  json j;
#define DP_WRITE_HW(f) j["hardware"][#f] = c.hw.f;
#define DP_WRITE_ENGINE(f) j["engine"][#f] = c.engine.f;
#define DP_WRITE_SCHED(f) j["sched"][#f] = c.sched.f;
#define DP_WRITE_TOP(f) j[#f] = c.f;
  DP_HW_FIELDS(DP_WRITE_HW)
  DP_ENGINE_FIELDS(DP_WRITE_ENGINE)
  DP_SCHED_FIELDS(DP_WRITE_SCHED)
  DP_TOP_FIELDS(DP_WRITE_TOP)
  return j.dump();
}

}  // namespace dualpath::sim
