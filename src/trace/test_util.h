// Helpers for the trace unit tests: where the shipped samples are, and scratch files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace dualpath::trace::testing {

// data/traces/<rel> in the source tree (CTest sets DUALPATH_SOURCE_DIR; a manual run from the
// source root works too).
inline std::string SamplePath(const std::string& rel) {
  const char* root = std::getenv("DUALPATH_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/data/traces/" + rel;
}

// A file with `content` in a fresh per-process scratch directory; returns its path.
inline std::string WriteScratch(const std::string& name, const std::string& content) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("dualpath_trace_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path p = dir / name;
  std::ofstream(p) << content;
  return p.string();
}

}  // namespace dualpath::trace::testing
