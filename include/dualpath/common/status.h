// Status and Result<T>: how every dualpath data-path function reports failure.
//
// A Status is a code from the table in status_codes.h plus a context message naming what failed
// (`IoError("pread block=ab12.. off=4096", errno)`). Both types are [[nodiscard]]: ignoring an
// error is a compile error under -Werror. Exceptions are reserved for start-up and configuration
// parsing, and main() turns any that escapes into one line and an exit status (docs/cli.md).
//
// Thread safety: values; a const Status may be read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "dualpath/common/status_codes.h"

namespace dualpath {

enum class Code : int32_t {
#define DUALPATH_X(name, value, desc) name = value,
  DUALPATH_STATUS_CODES(DUALPATH_X)
#undef DUALPATH_X
};

// "kIoError" for Code::kIoError; "kUnknown" for a value not in the table.
std::string_view CodeName(Code code);
// Human description from the table ("I/O error").
std::string_view CodeDescription(Code code);
// Component owning the code's range ("common", "kv", "storage", ...).
std::string_view CodeComponent(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const;

  // "I/O error (kIoError): pread block=ab12 off=4096: No such file or directory"
  std::string ToString() const;

  // Returns a copy with `context` prepended to the message ("open store: <old message>").
  Status WithContext(std::string_view context) const;

  bool operator==(const Status& other) const = default;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Constructors for the common codes; `errno_value` (if nonzero) appends strerror.
Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status AlreadyExists(std::string message);
Status OutOfRange(std::string message);
Status IoError(std::string message, int errno_value = 0);
Status Corruption(std::string message);
Status ResourceExhausted(std::string message);
Status Timeout(std::string message);
Status Unavailable(std::string message);
Status PermissionDenied(std::string message);
Status FailedPrecondition(std::string message);
Status Unimplemented(std::string message);
Status Internal(std::string message);
Status ParseError(std::string message);
// A Status for a failed syscall: EACCES/EPERM → kPermissionDenied, ENOENT → kNotFound,
// ENOSPC/EDQUOT → kStorageNoSpace, EEXIST → kAlreadyExists, otherwise kIoError.
Status ErrnoStatus(std::string message, int errno_value);

// Either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) {
      v_ = Status(Code::kInternal, "Result constructed from an OK status without a value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }

  // Precondition: ok(). Checked always (a wrong value must never be used silently).
  T& value() & {
    CheckOk();
    return std::get<T>(v_);
  }
  const T& value() const& {
    CheckOk();
    return std::get<T>(v_);
  }
  T&& value() && {
    CheckOk();
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  T value_or(T fallback) const& { return ok() ? std::get<T>(v_) : std::move(fallback); }

 private:
  void CheckOk() const;
  std::variant<T, Status> v_;
};

namespace internal {
[[noreturn]] void DieBadResultAccess(const Status& status);
}  // namespace internal

template <typename T>
void Result<T>::CheckOk() const {
  if (!ok()) {
    internal::DieBadResultAccess(std::get<Status>(v_));
  }
}

}  // namespace dualpath

#define DUALPATH_CONCAT_INNER(a, b) a##b
#define DUALPATH_CONCAT(a, b) DUALPATH_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not OK.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::dualpath::Status _dp_status = (expr);  \
    if (!_dp_status.ok()) return _dp_status; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, FunctionReturningResult())`.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(DUALPATH_CONCAT(_dp_result_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
