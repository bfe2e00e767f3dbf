// `dualpath`: the one command of the project. Subcommands register themselves (command.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>

#include "cli/command.h"
#include "dualpath/common/log.h"
#include "dualpath/common/stop_signal.h"

namespace dualpath::cli {

std::vector<RegisterFn>& Registry() {
  static std::vector<RegisterFn> registry;
  return registry;
}

bool IsBadInput(const Status& status) {
  switch (status.code()) {
    case Code::kInvalidArgument:
    case Code::kParseError:
    case Code::kOutOfRange:
    case Code::kKvUnknownModel:
    case Code::kKvBadToken:
    case Code::kTraceMalformed:
    case Code::kSchedBadConfig:
    case Code::kSimBadConfig:
    case Code::kCliUsage:
      return true;
    default:
      return false;
  }
}

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

}  // namespace dualpath::cli

int main(int argc, char** argv) {
  using namespace dualpath;
  CLI::App app{"dualpath: dual-path KV-cache loading for agentic LLM inference", "dualpath"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dualpath 0.1.0");
  std::string log_level;
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off (default: info)");
  app.parse_complete_callback([&] {
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
  } catch (const std::exception& e) {
    // Start-up and configuration errors that escaped as exceptions.
    std::cerr << "dualpath: " << e.what() << "\n";
    return cli::kExitFailure;
  }
  return exit_code;
}
