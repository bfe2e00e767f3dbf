// The `dualpath` command's subcommand registry.
//
// Each subcommand lives in its own src/cli/cmd_<name>.cc and registers itself with
// DUALPATH_CLI_COMMAND(Function): Function adds a CLI11 subcommand to the root app and sets a
// callback that stores the exit code in `*exit_code`. The registry keeps main.cc free of a list
// that every component would have to edit.
//
// Exit codes: 0 success, 1 runtime failure, 2 bad input (usage, malformed file, unknown model...),
// 128 + signal (130 SIGINT, 143 SIGTERM) when stopped by a signal after cleaning up.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "dualpath/common/status.h"

namespace dualpath::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

using RegisterFn = void (*)(CLI::App& root, int* exit_code);

std::vector<RegisterFn>& Registry();

struct Registrar {
  explicit Registrar(RegisterFn fn) { Registry().push_back(fn); }
};

// Prints "dualpath <what>: <status>" to stderr and returns the exit code for it: 2 for codes
// that mean bad input (invalid argument, parse error, unknown model, malformed trace, bad config),
// 128 + signal for kCancelled after a stop signal (stop_signal.h), 1 otherwise.
int ReportError(std::string_view what, const Status& status);

// True when the status's code means the user gave bad input.
bool IsBadInput(const Status& status);

// Returns parent's subcommand `name`, adding it (with `description`) if no other command file has
// yet. Groups shared by several components (`bench`) are reached through this, so registration
// order does not matter: `GetOrAddGroup(root, "bench", "...")->add_subcommand("storage", ...)`.
CLI::App* GetOrAddGroup(CLI::App& parent, const std::string& name, const std::string& description);

}  // namespace dualpath::cli

#define DUALPATH_CLI_COMMAND(fn) \
  static const ::dualpath::cli::Registrar DUALPATH_CONCAT(dualpath_cli_registrar_, __LINE__)(fn)
