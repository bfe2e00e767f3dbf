// ReadTrace: picks a reader by path (see workload.h).
#include <filesystem>

#include "dualpath/trace/workload.h"

namespace dualpath::trace {

Result<Workload> ReadTrace(const std::string& path, const std::string& format) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  if (!is_dir && !fs::exists(path, ec)) {
    return InvalidArgument(path + ": no such file or directory");
  }
  std::string kind = format;
  if (kind == "auto") {
    const std::string ext = fs::path(path).extension().string();
    if (is_dir || ext == ".json") {
      kind = "weka";
    } else if (ext == ".jsonl") {
      kind = "mooncake";
    } else {
      return InvalidArgument(path +
                             ": cannot tell the format (want a Mooncake .jsonl, a WEKA .json, a "
                             "directory of WEKA sessions, or an explicit format)");
    }
  }
  if (kind == "mooncake") {
    return ReadMooncakeJsonl(path);
  }
  if (kind == "weka") {
    return is_dir ? ReadWekaDir(path) : ReadWekaSession(path);
  }
  return InvalidArgument("unknown trace format '" + format + "' (want auto, mooncake or weka)");
}

}  // namespace dualpath::trace
