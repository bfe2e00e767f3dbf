// Helpers shared by the libFuzzer targets (docs/fuzzing.md).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace dualpath::fuzz {

// A scratch file of this process, rewritten with each input, for readers that take a path (the
// trace readers read files the way the CLI does: size and type checks included). Under /dev/shm
// when it exists so a long run does not wear a disk. `suffix` picks the reader's format.
class ScratchFile {
 public:
  explicit ScratchFile(std::string_view suffix) {
    const char* dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    path_ = std::string(dir) + "/dualpath_fuzz_" + std::to_string(::getpid()) + std::string(suffix);
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's contents; aborts on an I/O error (that is the harness failing, not the
  // code under test).
  const std::string& Write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) ||
        std::fclose(f) != 0) {
      std::perror(path_.c_str());
      std::abort();
    }
    return path_;
  }

 private:
  std::string path_;
};

// An invariant of the code under test broke: report it the way sanitizers do (libFuzzer saves the
// input as a crash).
[[noreturn]] inline void Broken(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

}  // namespace dualpath::fuzz
