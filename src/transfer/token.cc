#include "dualpath/transfer/token.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cerrno>

#include "dualpath/common/file.h"

namespace dualpath::transfer {

Result<std::string> ReadTransferToken(const std::string& path) {
  constexpr std::string_view kWhat = "--transfer-token-file";
  ASSIGN_OR_RETURN(std::string token, ReadSecretFile(path, kWhat, kMaxTransferTokenBytes + 2));
  if (token.ends_with("\r\n")) {
    token.resize(token.size() - 2);
  } else if (token.ends_with('\n')) {
    token.pop_back();
  }
  if (token.size() < kMinTransferTokenBytes || token.size() > kMaxTransferTokenBytes) {
    return InvalidArgument(fmt::format("{} {}: a token of {} bytes; it must have {} to {}", kWhat,
                                       path, token.size(), kMinTransferTokenBytes,
                                       kMaxTransferTokenBytes));
  }
  return token;
}

Status WriteTransferTokenFile(const std::string& path) {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1) return Internal("RAND_bytes failed for the transfer token");
  std::string hex;
  for (unsigned char c : raw) hex += fmt::format("{:02x}", c);
  hex += '\n';
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoStatus("create transfer token " + path, errno);
  if (::write(fd.get(), hex.data(), hex.size()) != static_cast<ssize_t>(hex.size())) {
    return ErrnoStatus("write transfer token " + path, errno);
  }
  return Status::Ok();
}

}  // namespace dualpath::transfer
