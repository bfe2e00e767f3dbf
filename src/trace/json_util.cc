#include "trace/json_util.h"

#include <cmath>

#include "dualpath/common/numeric.h"

namespace dualpath::trace::internal {

using nlohmann::json;

std::string Where(std::string_view path, uint64_t line) {
  std::string out(path);
  if (line > 0) {
    out += ":" + std::to_string(line);
  }
  return out;
}

Status Malformed(std::string_view where, std::string_view what) {
  std::string msg(where);
  msg += ": ";
  msg += what;
  return Status(Code::kTraceMalformed, std::move(msg));
}

namespace {

const json* Find(const json& obj, std::string_view key) {
  if (!obj.is_object()) {
    return nullptr;
  }
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// A JSON number that is a non-negative integer, whichever way the writer encoded it.
bool AsCount(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < 0) {
      return false;
    }
    out = static_cast<uint64_t>(x);
    return true;
  }
  if (v.is_number_float()) {
    const double x = v.get<double>();
    // 2^63: larger doubles do not convert exactly and no token count is that large.
    if (!std::isfinite(x) || x < 0 || x != std::floor(x) || x >= 9.2e18) {
      return false;
    }
    out = static_cast<uint64_t>(x);
    return true;
  }
  return false;
}

std::string Describe(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) {
    s = s.substr(0, 37) + "...";
  }
  return s;
}

}  // namespace

Result<uint64_t> GetCount(const json& obj, std::string_view key, std::string_view where,
                          uint64_t lo, uint64_t hi, std::string_view unit) {
  const json* v = Find(obj, key);
  if (v == nullptr) {
    return Malformed(where, "missing field \"" + std::string(key) + "\"");
  }
  uint64_t out = 0;
  if (!AsCount(*v, out)) {
    return Malformed(where, "field \"" + std::string(key) +
                                "\" must be a non-negative integer, got " + Describe(*v));
  }
  const Status range = CheckCountRange("field \"" + std::string(key) + "\"", out, lo, hi, unit);
  if (!range.ok()) {
    return Malformed(where, range.message());
  }
  return out;
}

Result<double> GetNumber(const json& obj, std::string_view key, std::string_view where, double lo,
                         double hi, std::string_view unit) {
  const json* v = Find(obj, key);
  if (v == nullptr) {
    return Malformed(where, "missing field \"" + std::string(key) + "\"");
  }
  if (!v->is_number()) {
    return Malformed(where,
                     "field \"" + std::string(key) + "\" must be a number, got " + Describe(*v));
  }
  const Status range =
      CheckRange("field \"" + std::string(key) + "\"", v->get<double>(), lo, hi, unit);
  if (!range.ok()) {
    return Malformed(where, range.message());
  }
  return v->get<double>();
}

Result<std::vector<uint64_t>> GetIds(const json& obj, std::string_view key,
                                     std::string_view where) {
  const json* v = Find(obj, key);
  if (v == nullptr) {
    return Malformed(where, "missing field \"" + std::string(key) + "\"");
  }
  if (!v->is_array()) {
    return Malformed(where,
                     "field \"" + std::string(key) + "\" must be an array, got " + Describe(*v));
  }
  std::vector<uint64_t> ids;
  ids.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    uint64_t id = 0;
    if (!AsCount((*v)[i], id)) {
      return Malformed(where, "field \"" + std::string(key) + "\"[" + std::to_string(i) +
                                  "] must be a non-negative integer, got " + Describe((*v)[i]));
    }
    ids.push_back(id);
  }
  return ids;
}

}  // namespace dualpath::trace::internal
