// `dualpath version`: prints the version and the build configuration.
#include <iostream>

#include "cli/command.h"

namespace dualpath::cli {
namespace {

void Register(CLI::App& root, int* exit_code) {
  CLI::App* sub = root.add_subcommand("version", "Print the version and build configuration");
  sub->callback([exit_code] {
#ifdef NDEBUG
    constexpr const char* kBuild = "optimized";
#else
    constexpr const char* kBuild = "debug";
#endif
    std::cout << "dualpath 0.1.0 (" << kBuild << ", C++" << __cplusplus / 100 % 100 << ")\n";
    *exit_code = kExitOk;
  });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
