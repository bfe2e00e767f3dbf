// Helpers shared by the JSON trace readers: typed field access that turns every problem into a
// kTraceMalformed Status naming the file, line and field.
//
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "dualpath/common/status.h"

namespace dualpath::trace::internal {

// "path:line" (line 0 means "the whole file": just "path").
std::string Where(std::string_view path, uint64_t line);
// kTraceMalformed "<where>: <what>". `where` names the file and line ("a.jsonl:12") or the file and
// JSON pointer of the offending object ("trace_0001.json:/requests/3").
Status Malformed(std::string_view where, std::string_view what);

// The field `key` of object `obj`, as an integer in [lo, hi] (a JSON integer, or an integral
// double such as 12.0). Out of range: `<where>: field "key" = v is outside [lo, hi] <unit>`.
Result<uint64_t> GetCount(const nlohmann::json& obj, std::string_view key, std::string_view where,
                          uint64_t lo, uint64_t hi, std::string_view unit);
// The field `key` as a finite number in [lo, hi].
Result<double> GetNumber(const nlohmann::json& obj, std::string_view key, std::string_view where,
                         double lo, double hi, std::string_view unit);
// The field `key` as an array of non-negative integers.
Result<std::vector<uint64_t>> GetIds(const nlohmann::json& obj, std::string_view key,
                                     std::string_view where);

}  // namespace dualpath::trace::internal
