// Mooncake (FAST'25) JSONL traces: {"timestamp": ms, "input_length": n, "output_length": n,
// "hash_ids": [...]} per line, 512 tokens per hash id. See docs/formats/trace.md.
#include <nlohmann/json.hpp>
#include <string>

#include "dualpath/common/file.h"
#include "dualpath/trace/workload.h"
#include "trace/json_util.h"

namespace dualpath::trace {

namespace {
constexpr uint32_t kMooncakeBlockSize = 512;
}  // namespace

Result<Workload> ReadMooncakeJsonl(const std::string& path) {
  using internal::Malformed;
  using internal::Where;
  ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, "Mooncake trace"));
  Workload w;
  w.name = "mooncake:" + path;
  uint64_t line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      continue;  // blank lines (a trailing newline pair) carry no request
    }
    const nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) {
      return Malformed(Where(path, line_no), "not valid JSON");
    }
    if (!obj.is_object()) {
      return Malformed(Where(path, line_no), "expected a JSON object");
    }
    ASSIGN_OR_RETURN(const double timestamp_ms,
                     internal::GetNumber(obj, "timestamp", Where(path, line_no), 0,
                                         kMaxTraceSeconds * 1000, "ms"));
    ASSIGN_OR_RETURN(const uint64_t input,
                     internal::GetCount(obj, "input_length", Where(path, line_no), 1,
                                        kMaxTraceTokens, "tokens"));
    ASSIGN_OR_RETURN(const uint64_t output,
                     internal::GetCount(obj, "output_length", Where(path, line_no), 0,
                                        kMaxTraceTokens, "tokens"));
    ASSIGN_OR_RETURN(std::vector<uint64_t> hash_ids,
                     internal::GetIds(obj, "hash_ids", Where(path, line_no)));
    const uint64_t want_blocks = (input + kMooncakeBlockSize - 1) / kMooncakeBlockSize;
    if (hash_ids.size() != want_blocks) {
      return Malformed(Where(path, line_no), "hash_ids has " + std::to_string(hash_ids.size()) +
                                                 " entries, want ceil(input_length/512) = " +
                                                 std::to_string(want_blocks));
    }
    Session s;
    s.id = w.sessions.size();
    s.start_s = timestamp_ms / 1000.0;
    s.block_size = kMooncakeBlockSize;
    s.turns.push_back(Turn{.append_tokens = input,
                           .gen_tokens = output,
                           .think_time_s = 0,
                           .arrival_s = s.start_s,
                           .hash_ids = std::move(hash_ids)});
    w.sessions.push_back(std::move(s));
  }
  if (w.sessions.empty()) {
    return Malformed(path, "no requests");
  }
  return w;
}

}  // namespace dualpath::trace
