// Conversions between Python objects and dualpath values, shared by the extension's bindings:
// Status -> Python exception, keys -> BlockHash, buffer objects -> (pointer, size).
//
// Every function here must be called with the GIL held. Errors are raised as Python exceptions
// (nb::python_error) whose message names the argument and what was wrong with it.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"

namespace dualpath::python {

namespace nb = nanobind;

// dualpath.Error (a RuntimeError): failures that are not bad input (I/O, a full tier, ...).
// Created once by InitErrors; `code` on the exception object is the dualpath status code.
void InitErrors(nb::module_& m);

// Raises the Python exception for `status` (which must not be OK):
//   kInvalidArgument, kOutOfRange, kKvBadToken, kKvUnknownModel, kStorageClosed -> ValueError
//   kPermissionDenied -> PermissionError;  kNotFound, kStorageMiss -> KeyError
//   anything else -> dualpath.Error
// The message is Status::ToString(), prefixed by `context` when given.
[[noreturn]] void Raise(const Status& status, const std::string& context = "");
[[noreturn]] void RaiseValueError(const std::string& message);
[[noreturn]] void RaiseTypeError(const std::string& message);

// A key: `bytes` of exactly 32 bytes is used as the BlockHash itself (vLLM's sha256_cbor block
// hashes are such bytes); any other `bytes` or a `str` (UTF-8) is hashed with SHA-256 into one.
// Anything else is a TypeError naming `what`.
kv::BlockHash KeyToHash(PyObject* key, const char* what);
// Every element of a sequence of keys (list, tuple or any sequence).
std::vector<kv::BlockHash> KeysToHashes(nb::handle keys, const char* what);

// Integers of a sequence (pointers and sizes), as uint64; ValueError naming `what` and the index
// for negatives or non-integers.
std::vector<uint64_t> ToU64s(nb::handle seq, const char* what);

// A contiguous CPU buffer borrowed from a Python object for the duration of a call:
//  - objects with the buffer protocol (numpy arrays, bytes, bytearray, memoryview, mmap), which
//    must be C-contiguous (and writable when `writable`);
//  - objects with data_ptr() and nbytes (torch tensors), which must be contiguous (is_contiguous())
//    and on the CPU (device.type == "cpu").
// Holds the Py_buffer (so the exporter cannot resize or free it) until destroyed; destroy it with
// the GIL held.
class BorrowedBuffer {
 public:
  BorrowedBuffer(nb::handle obj, bool writable, const std::string& what);
  ~BorrowedBuffer();
  BorrowedBuffer(BorrowedBuffer&& other) noexcept;
  BorrowedBuffer(const BorrowedBuffer&) = delete;
  BorrowedBuffer& operator=(const BorrowedBuffer&) = delete;
  BorrowedBuffer& operator=(BorrowedBuffer&&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  Py_buffer view_{};
  bool has_view_ = false;
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

// Seconds (a Python float) to Nanos, in (0, 1 day] (or [0, 1 day] when `zero_ok`); ValueError
// naming `name` otherwise.
Nanos SecondsArg(double s, const char* name, bool zero_ok);

// TLS files (or insecure) of one peer of class `cls` ("ClusterStore"), as keyword arguments
// `<who>_insecure`, `<who>_tls_cert/_key/_ca`, checked by the project's one loader (grpc_tls.h);
// ValueError naming them when they do not load.
GrpcTls TlsArg(const char* cls, const char* who, bool insecure, std::optional<std::string> cert,
               std::optional<std::string> key, std::optional<std::string> ca);

// A batch value's size: ValueError naming `verb` and block #i when it is outside [1, max_bytes].
void CheckValueSize(const char* verb, size_t i, uint64_t size, uint64_t max_bytes);

// The object form of a batch verb (batch_put, batch_get): one buffer per key, each borrowed
// (writable for gets) and its size checked with CheckValueSize. TypeError for a str or bytes
// (one buffer, not a sequence of them) or a non-sequence; ValueError for a count other than nkeys.
std::vector<BorrowedBuffer> BorrowBuffers(const char* verb, size_t nkeys, nb::handle objs,
                                          bool writable, uint64_t max_bytes);

}  // namespace dualpath::python
