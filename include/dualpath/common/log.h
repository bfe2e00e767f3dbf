// Logging with levels, to stderr, via spdlog.
//
//   dualpath::log::Info("opened store root={} blocks={}", root, n);
//
// The level starts from the DUALPATH_LOG_LEVEL environment variable (trace, debug, info, warn,
// error, off; default info) and can be changed with SetLevel. Data-path code logs at debug or
// below; a line at info or above on a hot path is a bug.
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "dualpath/common/status.h"

namespace dualpath::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// "warn" → Level::kWarn. Unknown names are an InvalidArgument naming the accepted values.
Result<Level> ParseLevel(std::string_view name);
std::string_view LevelName(Level level);

void SetLevel(Level level);
Level GetLevel();
bool Enabled(Level level);

// Writes one line (adds the newline). Prefer the typed helpers below.
void Write(Level level, std::string_view message);

template <typename... Args>
void Log(Level level, fmt::format_string<Args...> f, Args&&... args) {
  if (Enabled(level)) {
    Write(level, fmt::format(f, std::forward<Args>(args)...));
  }
}
template <typename... Args>
void Trace(fmt::format_string<Args...> f, Args&&... args) {
  Log(Level::kTrace, f, std::forward<Args>(args)...);
}
template <typename... Args>
void Debug(fmt::format_string<Args...> f, Args&&... args) {
  Log(Level::kDebug, f, std::forward<Args>(args)...);
}
template <typename... Args>
void Info(fmt::format_string<Args...> f, Args&&... args) {
  Log(Level::kInfo, f, std::forward<Args>(args)...);
}
template <typename... Args>
void Warn(fmt::format_string<Args...> f, Args&&... args) {
  Log(Level::kWarn, f, std::forward<Args>(args)...);
}
template <typename... Args>
void Error(fmt::format_string<Args...> f, Args&&... args) {
  Log(Level::kError, f, std::forward<Args>(args)...);
}

}  // namespace dualpath::log
