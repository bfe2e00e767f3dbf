// The SimConfig as a JSON value (private to sim): SimConfigToJson's object before it is printed,
// so the report (report.cc) embeds it under "config.sim" without printing and re-parsing it.
//
// Thread safety: a pure function.
#pragma once

#include <nlohmann/json.hpp>

#include "dualpath/sim/config.h"

namespace dualpath::sim {

nlohmann::json SimConfigJson(const SimConfig& config);

}  // namespace dualpath::sim
