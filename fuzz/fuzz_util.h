// Helpers shared by the libFuzzer targets (docs/fuzzing.md).
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dualpath/common/file.h"
#include "dualpath/common/status.h"

namespace dualpath::fuzz {

// An invariant of the code under test broke: report it the way sanitizers do (libFuzzer saves the
// input as a crash).
[[noreturn]] inline void Broken(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

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

  // Replaces the file's contents (common/file.h's writer); aborts on an I/O error (that is the
  // harness failing, not the code under test).
  const std::string& Write(const uint8_t* data, size_t size) {
    const Status st = WriteOutputFile(
        path_, std::string_view(reinterpret_cast<const char*>(data), size), "fuzz input");
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      Broken("cannot write the scratch file");
    }
    return path_;
  }

 private:
  std::string path_;
};

// A fresh directory under /tmp named after `prefix` (the RPC targets' store roots).
inline std::string ScratchDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) Broken("mkdtemp");
  return tmpl;
}

// An RPC handler's answer (a grpc::Status): a refusal must say why.
template <typename GrpcStatus>
void CheckRefusal(const GrpcStatus& s) {
  if (!s.ok() && s.error_message().empty()) Broken("refusal without a message");
}

}  // namespace dualpath::fuzz
