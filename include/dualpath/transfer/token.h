// The cluster's transfer token: a shared secret every engine of a cluster holds, so that a
// transfer engine admits as a peer (and so lets reach its registered regions) only another engine
// of the same cluster (docs/transfer.md "Peer authentication"). Peers prove they hold it by a
// challenge-response in the connection setup (HMAC-SHA256 over fresh nonces from both sides): the
// token itself never travels, and a process that does not hold it learns nothing it could replay.
//
// The token is read from a file (`dualpath engine --transfer-token-file PATH`) that must be a
// regular file, owner-only (no permission for group or others), of kMinTransferTokenBytes to
// kMaxTransferTokenBytes bytes after a trailing newline is dropped. `dualpath cluster run` writes
// one per run with WriteTransferTokenFile.
//
// Thread safety: free functions.
#pragma once

#include <cstddef>
#include <string>

#include "dualpath/common/status.h"

namespace dualpath::transfer {

inline constexpr size_t kMinTransferTokenBytes = 16;  // 128 bits of a random hex token
inline constexpr size_t kMaxTransferTokenBytes = 4096;

// The token in `path`. kInvalidArgument naming the file for a missing, non-regular, group- or
// other-accessible, too short or too long file.
Result<std::string> ReadTransferToken(const std::string& path);

// Writes a fresh random token (64 hex digits, 256 bits from OpenSSL RAND_bytes) to `path`, created
// with mode 0600 (O_EXCL: an existing file is an error).
Status WriteTransferTokenFile(const std::string& path);

}  // namespace dualpath::transfer
