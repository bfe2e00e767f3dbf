#include "dualpath/common/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <memory>

namespace dualpath::log {
namespace {

spdlog::level::level_enum ToSpd(Level level) {
  switch (level) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

Level InitialLevel() {
  const char* env = std::getenv("DUALPATH_LOG_LEVEL");
  if (env == nullptr) {
    return Level::kInfo;
  }
  Result<Level> parsed = ParseLevel(env);
  return parsed.ok() ? *parsed : Level::kInfo;
}

struct State {
  std::atomic<Level> level{InitialLevel()};
  std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("dualpath",
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %L %P %v");
    l->set_level(spdlog::level::trace);  // filtering happens in Enabled()
    return l;
  }();
};

State& GetState() {
  static State* state = new State();  // never destroyed: logging works during static teardown
  return *state;
}

}  // namespace

Result<Level> ParseLevel(std::string_view name) {
  if (name == "trace") return Level::kTrace;
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn" || name == "warning") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  return InvalidArgument("unknown log level '" + std::string(name) +
                         "' (expected trace, debug, info, warn, error or off)");
}

std::string_view LevelName(Level level) {
  switch (level) {
    case Level::kTrace:
      return "trace";
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
    case Level::kOff:
      return "off";
  }
  return "?";
}

void SetLevel(Level level) { GetState().level.store(level, std::memory_order_relaxed); }
Level GetLevel() { return GetState().level.load(std::memory_order_relaxed); }
bool Enabled(Level level) { return level != Level::kOff && level >= GetLevel(); }

void Write(Level level, std::string_view message) {
  GetState().logger->log(ToSpd(level), "{}", message);
}

}  // namespace dualpath::log
