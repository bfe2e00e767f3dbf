// What every numeric flag of every `dualpath` command refuses before its own range check runs
// (docs/cli.md "Numeric ranges"). CLI11 (2.1, Debian 12) converts an unsigned option with
// strtoull, which takes "-1" and hands the command 2^64-1 (`store bench --count -1` then puts
// forever), saturates a number beyond 64 bits without a word, and converts a floating-point
// option with strtold, which takes "nan", "inf" and 1e999. GuardNumberOptions adds one validator
// to each numeric option of the command tree, by the type CLI11 records for it, so that these
// inputs are refused for every flag at once, naming it (`dualpath: --count: -1 is negative: this
// flag takes a whole number >= 0 (see --help)`, exit 2), instead of a check per flag.
//
// Each command still states and checks its flags' ranges itself (CheckRange / CheckCountRange,
// common/numeric.h); this guard only makes sure the value those checks see is the one typed.
//
// Thread safety: call once from main() after every command registered, before parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "dualpath/common/status.h"

namespace dualpath::cli {

// Adds the validator to every numeric option of `app` and of all its subcommands, recursively:
// unsigned (CLI11 type "UINT"): no minus sign, at most 2^64-1; signed ("INT"): within 64 bits;
// floating point ("FLOAT"): a finite double.
void GuardNumberOptions(CLI::App& app);

// A byte size flag: "4096", "64K", "4M", "8G" (binary units; also k/m/g and KiB/MiB/GiB), at most
// 2^63-1 bytes (a file size). Anything else is kInvalidArgument naming `what` and the value.
Result<uint64_t> ParseSize(const std::string& what, const std::string& s);

}  // namespace dualpath::cli
