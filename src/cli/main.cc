// `dualpath`: the one command of the project. Subcommands register themselves (command.h).
//
// Exit statuses (docs/cli.md): 0 success, 1 runtime or environment failure, 2 bad input; a signal
// handler of a long-running command may use 128+N. No exception reaches the user raw: main() turns
// every exception a subcommand lets escape into one line naming the command and what kind of input
// or resource failed, and a terminate handler does the same for one escaping another thread.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "cli/command.h"
#include "cli/number_flags.h"
#include "dualpath/common/bad_input.h"
#include "dualpath/common/log.h"
#include "dualpath/common/stop_signal.h"

namespace dualpath::cli {

std::vector<RegisterFn>& Registry() {
  static std::vector<RegisterFn> registry;
  return registry;
}

bool IsBadInput(const Status& status) { return IsBadInputCode(status.code()); }

int ReportError(std::string_view what, const Status& status) {
  std::cerr << "dualpath " << what << ": " << status.ToString() << "\n";
  // Stopped by SIGINT / SIGTERM after cleaning up (stop_signal.h): 128 + the signal.
  if (status.code() == Code::kCancelled && StopSignal() != 0) return StopExitCode(StopSignal());
  return IsBadInput(status) ? kExitBadInput : kExitFailure;
}

CLI::App* GetOrAddGroup(CLI::App& parent, const std::string& name, const std::string& description) {
  // CLI11 2.1 (Debian 12) has no get_subcommand_no_throw; search the subcommand list instead.
  for (CLI::App* sub : parent.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == name) {
      return sub;
    }
  }
  CLI::App* group = parent.add_subcommand(name, description);
  group->require_subcommand(1);
  return group;
}

namespace {

// "bench pool": the subcommands the user selected, for messages about an escaped exception.
std::string CommandPath(const CLI::App& app) {
  std::string path;
  const CLI::App* at = &app;
  while (true) {
    const std::vector<CLI::App*> subs = at->get_subcommands();
    if (subs.empty()) break;
    at = subs.front();
    path += (path.empty() ? "" : " ") + at->get_name();
  }
  return path;
}

// nlohmann's what() starts with "[json.exception.parse_error.101] ": keep only the words after.
std::string WithoutLibraryTag(std::string what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
  }
  return what;
}

// The one line and exit status for the exception being handled (call only inside a catch or a
// terminate handler with a current exception). Bad input for what only input can cause (JSON that
// does not parse, a number that does not convert), runtime failure for the rest.
int ReportException(const std::string& command) {
  const std::string who = "dualpath" + (command.empty() ? "" : " " + command) + ": ";
  try {
    throw;
  } catch (const std::bad_alloc&) {
    std::cerr << who << "out of memory (a size or count given to the command may be too large)\n";
    return kExitFailure;
  } catch (const nlohmann::json::exception& e) {
    std::cerr << who << "malformed JSON input: " << WithoutLibraryTag(e.what()) << "\n";
    return kExitBadInput;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << who << "file system error";
    if (!e.path1().empty()) std::cerr << " on " << e.path1().string();
    if (!e.path2().empty()) std::cerr << " and " << e.path2().string();
    std::cerr << ": " << e.code().message() << "\n";
    return kExitFailure;
  } catch (const std::system_error& e) {
    std::cerr << who << "system error: " << e.code().message() << "\n";
    return kExitFailure;
  } catch (const std::invalid_argument& e) {
    // std::stoi and friends: what() is only the function's name.
    std::cerr << who << "a number in the input is not a number (" << e.what() << ")\n";
    return kExitBadInput;
  } catch (const std::out_of_range& e) {
    std::cerr << who << "a number in the input is out of range (" << e.what() << ")\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << who << "internal error: " << e.what() << "\n";
    return kExitFailure;
  } catch (...) {
    std::cerr << who << "internal error: unknown exception\n";
    return kExitFailure;
  }
}

// The command being run ("bench pool"), set by main() once parsing has selected it, before any
// subcommand code starts a thread.
std::string g_command;

// An exception escaping a thread other than main's (or a noexcept function): one line too, then
// exit 1 without unwinding (other threads may hold locks).
[[noreturn]] void OnTerminate() {
  int code = kExitFailure;
  if (std::current_exception()) {
    code = ReportException(g_command);
  } else {
    std::cerr << "dualpath: internal error: terminate called without an exception\n";
  }
  std::cerr.flush();
  std::_Exit(code == kExitOk ? kExitFailure : code);
}

// Output lost to a full disk, a closed pipe or a device error must not look like success.
int CheckStdout(const std::string& command, int exit_code) {
  std::cout.flush();
  errno = 0;
  const bool failed = !std::cout || std::fflush(stdout) != 0 || std::ferror(stdout);
  if (!failed) return exit_code;
  const int err = errno;
  std::cerr << "dualpath" << (command.empty() ? "" : " " + command)
            << ": write stdout: " << (err != 0 ? std::strerror(err) : "I/O error") << "\n";
  return exit_code == kExitOk ? kExitFailure : exit_code;
}

}  // namespace

}  // namespace dualpath::cli

int main(int argc, char** argv) {
  using namespace dualpath;
  CLI::App app{"dualpath: dual-path KV-cache loading for agentic LLM inference", "dualpath"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dualpath 0.1.0");
  std::string log_level;
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off (default: info)");
  std::set_terminate(cli::OnTerminate);
  app.parse_complete_callback([&] {
    cli::g_command = cli::CommandPath(app);
    if (!log_level.empty()) {
      Result<log::Level> level = log::ParseLevel(log_level);
      if (!level.ok()) {
        throw CLI::ValidationError("--log-level", level.status().message());
      }
      log::SetLevel(*level);
    }
  });

  int exit_code = cli::kExitOk;
  for (cli::RegisterFn fn : cli::Registry()) {
    fn(app, &exit_code);
  }
  // A negative unsigned, a number beyond 64 bits, nan or inf: refused for every flag, naming it.
  cli::GuardNumberOptions(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Usage errors: one line naming what was wrong, exit status 2.
    std::cerr << "dualpath: " << e.what() << " (see --help)\n";
    return cli::kExitBadInput;
  } catch (...) {
    // Subcommand callbacks run inside parse(): whatever they let escape ends here, as one line.
    const std::string command = cli::CommandPath(app);
    return cli::CheckStdout(command, cli::ReportException(command));
  }
  return cli::CheckStdout(cli::CommandPath(app), exit_code);
}
