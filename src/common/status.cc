#include "dualpath/common/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dualpath/common/check.h"

namespace dualpath {
namespace {

struct CodeInfo {
  Code code;
  std::string_view name;
  std::string_view description;
};

constexpr CodeInfo kCodeTable[] = {
#define DUALPATH_X(name, value, desc) {Code::name, #name, desc},
    DUALPATH_STATUS_CODES(DUALPATH_X)
#undef DUALPATH_X
};

const CodeInfo* Find(Code code) {
  for (const auto& info : kCodeTable) {
    if (info.code == code) {
      return &info;
    }
  }
  return nullptr;
}

std::string AppendErrno(std::string message, int errno_value) {
  if (errno_value != 0) {
    message += ": ";
    message += std::strerror(errno_value);
  }
  return message;
}

}  // namespace

std::string_view CodeName(Code code) {
  const CodeInfo* info = Find(code);
  return info ? info->name : "kUnknown";
}

std::string_view CodeDescription(Code code) {
  const CodeInfo* info = Find(code);
  return info ? info->description : "unknown error";
}

std::string_view CodeComponent(Code code) {
  static constexpr std::string_view kComponents[] = {
      "common", "kv",      "storage", "pool", "transfer", "sched",  "sim",   "trace",
      "engine", "control", "testbed", "cli",  "model",    "replay", "store", "coord"};
  const int v = static_cast<int>(code);
  if (v < 0) {
    return "unknown";
  }
  const int range = v < 100 ? 0 : v / 100;
  if (range >= static_cast<int>(std::size(kComponents))) {
    return "unknown";
  }
  return kComponents[range];
}

Status::Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

const std::string& Status::message() const { return message_; }

std::string Status::ToString() const {
  if (ok()) {
    return "OK";
  }
  std::string out(CodeDescription(code_));
  out += " (";
  out += CodeName(code_);
  out += ")";
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) {
    return *this;
  }
  std::string m(context);
  if (!message_.empty()) {
    m += ": ";
    m += message_;
  }
  return Status(code_, std::move(m));
}

Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
Status AlreadyExists(std::string m) { return Status(Code::kAlreadyExists, std::move(m)); }
Status OutOfRange(std::string m) { return Status(Code::kOutOfRange, std::move(m)); }
Status IoError(std::string m, int errno_value) {
  return Status(Code::kIoError, AppendErrno(std::move(m), errno_value));
}
Status Corruption(std::string m) { return Status(Code::kCorruption, std::move(m)); }
Status ResourceExhausted(std::string m) { return Status(Code::kResourceExhausted, std::move(m)); }
Status Timeout(std::string m) { return Status(Code::kTimeout, std::move(m)); }
Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
Status PermissionDenied(std::string m) { return Status(Code::kPermissionDenied, std::move(m)); }
Status FailedPrecondition(std::string m) { return Status(Code::kFailedPrecondition, std::move(m)); }
Status Unimplemented(std::string m) { return Status(Code::kUnimplemented, std::move(m)); }
Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
Status ParseError(std::string m) { return Status(Code::kParseError, std::move(m)); }

// Beyond the mapping status.h lists: EFBIG is no space (a size the file system cannot hold in one
// file) and ENOTDIR / EISDIR are kInvalidArgument (a path of the wrong type is bad input, exit 2).
Status ErrnoStatus(std::string m, int errno_value) {
  Code code = Code::kIoError;
  switch (errno_value) {
    case EACCES:
    case EPERM:
    case EROFS:
      code = Code::kPermissionDenied;
      break;
    case ENOENT:
      code = Code::kNotFound;
      break;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:  // a size beyond what the file system holds in one file: no space for it
      code = Code::kStorageNoSpace;
      break;
    case ENOTDIR:  // a path of the wrong type (a file where a directory was named): bad input
    case EISDIR:
      code = Code::kInvalidArgument;
      break;
    case EEXIST:
      code = Code::kAlreadyExists;
      break;
    default:
      break;
  }
  return Status(code, AppendErrno(std::move(m), errno_value));
}

namespace internal {
void DieBadResultAccess(const Status& status) {
  DUALPATH_FATAL("Result::value() on an error: " + status.ToString());
}
}  // namespace internal

}  // namespace dualpath
