#include "dualpath/sim/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dualpath/common/file.h"
#include "dualpath/common/numeric.h"
#include "sim/config_json.h"

namespace dualpath::sim {
namespace {

using nlohmann::json;

// One table of fields per section, so parsing, validation, printing and the docs cannot drift
// apart. X(field, lo, hi, unit, derive): the field's physical range (docs/sim.md "Input ranges");
// derive = a negative value means "derive from the model" (ResolveEngine) and skips the range.
// Lower bounds keep every rate far from 0 and upper bounds keep every size and time far from the
// limits of a double: simulated time grows as 1/rate, and the events and metric windows with it.
// The link and FLOP-rate floors (10 Mbit/s, 0.1 GFLOP/s) admit the emulated testbed's CPU engines
// and shaped links (ApplyMeasuredCosts, `dualpath model calibrate`), ~1000x slower than a GPU.
// clang-format off
#define DP_HW_FIELDS(X)                                                                    \
  X(gpus_per_node, 1, 64, "GPUs", false)                                                   \
  X(cnic_gbps, 0.01, 1e4, "Gbit/s", false)                                                 \
  X(snic_gbps, 0.01, 1e4, "Gbit/s", false)                                                 \
  X(snic_efficiency, 0.01, 1, "", false)                                                   \
  X(cnic_kv_share, 0.01, 1, "", false)                                                     \
  X(dram_buffer_gb, 0.1, 1e5, "GB", false)                                                 \
  X(host_mem_gBps, 1, 1e5, "GB/s", false)                                                  \
  X(pcie_gBps, 1, 1e4, "GB/s", false)                                                      \
  X(gpu_bf16_tflops, 1e-4, 1e5, "TFLOP/s", false)                                          \
  X(gpu_fp8_tflops, 1e-4, 1e5, "TFLOP/s", false)                                           \
  X(hbm_gb, 1, 1e4, "GB", false)                                                           \
  X(hbm_tbps, 0.1, 1e3, "TB/s", false)
#define DP_ENGINE_FIELDS(X)                                                                \
  X(linear_efficiency, 0.01, 1, "", false)                                                 \
  X(attention_efficiency, 0.01, 1, "", false)                                              \
  X(linear_half_tokens, 0, 1e7, "tokens", false)                                           \
  X(layer_overhead_us, 0, 1e6, "us", false)                                                \
  X(compute_quota_ms, 1, 1e5, "ms", false)                                                 \
  X(pe_hbm_reserved_gb, 0, 1e4, "GB", true)                                                \
  X(decode_overhead_ms, 0, 1e4, "ms", true)                                                \
  X(decode_compute_efficiency, 0.01, 1, "", false)                                         \
  X(decode_hbm_efficiency, 0.01, 1, "", false)                                             \
  X(de_hbm_reserved_gb, 0, 1e4, "GB", true)                                                \
  X(decode_weight_gb, 0, 1e6, "GB", true)                                                  \
  X(weight_bytes_per_param, 0.125, 8, "bytes", true)                                       \
  X(ep_pe_workspace_gb, 0, 1e4, "GB", false)                                               \
  X(ep_de_workspace_gb, 0, 1e4, "GB", false)                                               \
  X(dp_workspace_gb, 0, 1e4, "GB", false)                                                  \
  X(decode_layer_overhead_us, 0, 1e6, "us", false)                                         \
  X(decode_moe_layer_overhead_us, 0, 1e6, "us", false)                                     \
  X(max_decode_batch, 1, 65536, "requests", false)                                         \
  X(pe_ep_nodes, 1, 4096, "nodes", false)                                                  \
  X(de_ep_nodes, 1, 4096, "nodes", false)                                                  \
  X(block_tokens, 1, 65536, "tokens", false)
#define DP_SCHED_FIELDS(X)                                                                 \
  X(short_read_queue_s, 0.001, 1e4, "s", false)                                            \
  X(unfinished_token_limit_s, 0.001, 1e4, "s", false)                                      \
  X(fetch_interval_ms, 0.1, 1e4, "ms", false)
#define DP_SLO_FIELDS(X)                                                                   \
  X(ttft_mean_s, 0.001, 3600, "s", false)                                                  \
  X(tpot_mean_s, 0.0001, 60, "s", false)
#define DP_TOP_FIELDS(X)                                                                   \
  X(snic_window_s, 0.001, 1e6, "s", false)                                                 \
  X(balance_phase_fraction, 0.01, 1, "", false)                                            \
  X(online_horizon_s, 1, 86400, "s", false)                                                \
  X(synthetic_trajectories, 0, 1e5, "trajectories", false)                                \
  X(offline_start_skew_s, 0, 1e6, "s", false)
// clang-format on

struct FieldRange {
  double lo, hi;
  const char* unit;
  bool derive;
};

// A field's value against its range, named by its full key ("hardware.snic_gbps").
Status CheckField(std::string_view path, double v, const FieldRange& r) {
  if (r.derive && v < 0) {
    return Status::Ok();
  }
  return CheckRange(path, v, r.lo, r.hi,
                    r.derive ? std::string(r.unit) + " (or < 0: derive)" : r.unit,
                    Code::kSimBadConfig);
}

template <typename T>
Status ReadField(const json& j, std::string_view path, const FieldRange& r, T* out) {
  double v = 0;
  if constexpr (std::is_integral_v<T>) {
    if (!j.is_number_integer() && !j.is_number_unsigned()) {
      return Status(Code::kSimBadConfig, std::string(path) + ": expected an integer");
    }
    // Checked before converting, so 2^40 cannot wrap into a small uint32_t.
    v = j.is_number_unsigned() ? static_cast<double>(j.get<uint64_t>())
                               : static_cast<double>(j.get<int64_t>());
  } else {
    if (!j.is_number()) {
      return Status(Code::kSimBadConfig, std::string(path) + ": expected a number");
    }
    v = j.get<double>();
  }
  RETURN_IF_ERROR(CheckField(path, v, r));
  *out = static_cast<T>(v);
  return Status::Ok();
}

#define DP_READ_CASE(f, lo, hi, unit, derive)                              \
  if (key == #f) {                                                         \
    RETURN_IF_ERROR(ReadField(value, std::string(section) + "." #f,        \
                              FieldRange{lo, hi, unit, derive}, &obj->f)); \
    continue;                                                              \
  }
#define DP_READ_TOP_CASE(f, lo, hi, unit, derive)                      \
  if (key == #f) {                                                     \
    st = ReadField(value, #f, FieldRange{lo, hi, unit, derive}, &c.f); \
    if (!st.ok()) return st.WithContext(origin);                       \
    continue;                                                          \
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

Status ParseSlo(const json& j, std::string_view section, SloConfig* obj) {
  RETURN_IF_ERROR(CheckObject<SloConfig>(j, section));
  for (const auto& [key, value] : j.items()) {
    DP_SLO_FIELDS(DP_READ_CASE)
    return Status(Code::kSimBadConfig, "unknown key " + std::string(section) + "." + key);
  }
  return Status::Ok();
}

}  // namespace

Status SimConfig::Validate() const {
#define DP_CHECK_FIELD(prefix, obj, f, lo, hi, unit, derive) \
  RETURN_IF_ERROR(                                           \
      CheckField(prefix #f, static_cast<double>(obj.f), FieldRange{lo, hi, unit, derive}));
#define DP_CHECK_HW(f, lo, hi, unit, derive) \
  DP_CHECK_FIELD("hardware.", hw, f, lo, hi, unit, derive)
#define DP_CHECK_ENGINE(f, lo, hi, unit, derive) \
  DP_CHECK_FIELD("engine.", engine, f, lo, hi, unit, derive)
#define DP_CHECK_SCHED(f, lo, hi, unit, derive) \
  DP_CHECK_FIELD("sched.", sched, f, lo, hi, unit, derive)
#define DP_CHECK_SLO(f, lo, hi, unit, derive) DP_CHECK_FIELD("slo.", slo, f, lo, hi, unit, derive)
#define DP_CHECK_TOP(f, lo, hi, unit, derive) DP_CHECK_FIELD("", (*this), f, lo, hi, unit, derive)
  DP_HW_FIELDS(DP_CHECK_HW)
  DP_ENGINE_FIELDS(DP_CHECK_ENGINE)
  DP_SCHED_FIELDS(DP_CHECK_SCHED)
  DP_SLO_FIELDS(DP_CHECK_SLO)
  DP_TOP_FIELDS(DP_CHECK_TOP)
  // Negative = derived from the model (ResolveEngine); explicit values must fit in HBM.
  if (engine.pe_hbm_reserved_gb >= hw.hbm_gb || engine.de_hbm_reserved_gb >= hw.hbm_gb) {
    return Status(Code::kSimBadConfig,
                  "engine.pe_hbm_reserved_gb / de_hbm_reserved_gb must be below hardware.hbm_gb");
  }
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
  for (const auto& [key, value] : j.items()) {
    Status st;
    if (key == "hardware") {
      st = ParseHw(value, "hardware", &c.hw);
    } else if (key == "engine") {
      st = ParseEngine(value, "engine", &c.engine);
    } else if (key == "sched") {
      st = ParseSched(value, "sched", &c.sched);
    } else if (key == "slo") {
      st = ParseSlo(value, "slo", &c.slo);
    } else {
      DP_TOP_FIELDS(DP_READ_TOP_CASE)
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
  ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, "sim config", 16 << 20));
  return ParseSimConfig(text, path);
}

json SimConfigJson(const SimConfig& c) {
  json j;
#define DP_WRITE_HW(f, ...) j["hardware"][#f] = c.hw.f;
#define DP_WRITE_ENGINE(f, ...) j["engine"][#f] = c.engine.f;
#define DP_WRITE_SCHED(f, ...) j["sched"][#f] = c.sched.f;
#define DP_WRITE_SLO(f, ...) j["slo"][#f] = c.slo.f;
#define DP_WRITE_TOP(f, ...) j[#f] = c.f;
  DP_HW_FIELDS(DP_WRITE_HW)
  DP_ENGINE_FIELDS(DP_WRITE_ENGINE)
  DP_SCHED_FIELDS(DP_WRITE_SCHED)
  DP_SLO_FIELDS(DP_WRITE_SLO)
  DP_TOP_FIELDS(DP_WRITE_TOP)
  return j;
}

std::string SimConfigToJson(const SimConfig& c) { return SimConfigJson(c).dump(); }

Result<SimConfig> ApplyMeasuredCosts(SimConfig c, const kv::ModelGeometry& model,
                                     const MeasuredCosts& m) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  auto non_negative = [](double v) { return std::isfinite(v) && v >= 0; };
  if (!positive(m.linear_s_per_token) || !positive(m.attention_s_per_flop) ||
      !positive(m.decode_s_per_flop) || !non_negative(m.forward_overhead_s) ||
      !non_negative(m.decode_step_overhead_s)) {
    return Status(Code::kSimBadConfig,
                  "measured costs: per-token and per-FLOP costs must be > 0 and overheads >= 0");
  }
  if (model.num_layers == 0 || !(model.LinearFlopsPerToken() > 0)) {
    return Status(Code::kSimBadConfig, "measured costs: model '" + model.name +
                                           "' has no layers or no linear FLOPs per token");
  }
  // CostModel charges linear time LinearFlopsPerToken * (tokens + half) / (fp8 peak * eff):
  // half = 0 and eff = 1 make the FP8 "peak" the measured linear FLOP rate.
  c.hw.gpu_fp8_tflops = model.LinearFlopsPerToken() / m.linear_s_per_token / 1e12;
  c.engine.linear_efficiency = 1;
  c.engine.linear_half_tokens = 0;
  // Attention and decode both scale the BF16 peak by an efficiency <= 1: the peak is the faster of
  // the two measured rates and each efficiency the ratio to it.
  const double attention_flops_per_s = 1 / m.attention_s_per_flop;
  const double decode_flops_per_s = 1 / m.decode_s_per_flop;
  const double peak = std::max(attention_flops_per_s, decode_flops_per_s);
  c.hw.gpu_bf16_tflops = peak / 1e12;
  c.engine.attention_efficiency = attention_flops_per_s / peak;
  c.engine.decode_compute_efficiency = decode_flops_per_s / peak;
  c.engine.layer_overhead_us = m.forward_overhead_s / model.num_layers * 1e6;
  c.engine.decode_overhead_ms = m.decode_step_overhead_s * 1e3;
  // A CPU engine reads its weights from caches and DRAM at a cost the measured per-FLOP rate
  // already holds: no separate HBM term (its bandwidth at the range's top, no weight bytes).
  c.hw.hbm_tbps = 1e3;
  c.engine.decode_hbm_efficiency = 1;
  c.engine.decode_weight_gb = 0;
  RETURN_IF_ERROR(c.Validate().WithContext("measured costs"));
  return c;
}

}  // namespace dualpath::sim
