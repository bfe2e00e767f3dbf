#include "python/convert.h"

#include <nanobind/stl/string.h>

#include <cstring>
#include <utility>

namespace dualpath::python {
namespace {

PyObject* g_error = nullptr;  // dualpath.Error; owned by the module (a new reference kept alive)

std::string TypeName(PyObject* o) { return Py_TYPE(o)->tp_name; }

[[noreturn]] void RaiseWith(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

}  // namespace

void InitErrors(nb::module_& m) {
  g_error = PyErr_NewExceptionWithDoc(
      "dualpath.Error",
      "A dualpath operation failed for a reason other than bad input (I/O, a full tier, ...). "
      "`code` is the dualpath status code.",
      PyExc_RuntimeError, nullptr);
  if (g_error == nullptr) {
    throw nb::python_error();
  }
  m.attr("Error") = nb::handle(g_error);
}

[[noreturn]] void Raise(const Status& status, const std::string& context) {
  const std::string msg = context.empty() ? status.ToString() : context + ": " + status.ToString();
  PyObject* type = g_error;
  switch (status.code()) {
    case Code::kInvalidArgument:
    case Code::kOutOfRange:
    case Code::kKvBadToken:
    case Code::kKvUnknownModel:
    case Code::kStorageClosed:
      type = PyExc_ValueError;
      break;
    case Code::kPermissionDenied:
      type = PyExc_PermissionError;
      break;
    case Code::kNotFound:
    case Code::kStorageMiss:
      type = PyExc_KeyError;
      break;
    default:
      break;
  }
  if (type == g_error) {
    // dualpath.Error(message) with .code set.
    nb::object exc = nb::steal(PyObject_CallOneArg(g_error, nb::str(msg.c_str()).ptr()));
    if (!exc.is_valid()) {
      throw nb::python_error();
    }
    exc.attr("code") = static_cast<int>(status.code());
    PyErr_SetObject(g_error, exc.ptr());
    throw nb::python_error();
  }
  RaiseWith(type, msg);
}

Nanos SecondsArg(double s, const char* name, bool zero_ok) {
  if (!(s >= 0) || (!zero_ok && s == 0) || s > 86400) {
    RaiseValueError(std::string(name) + " = " + std::to_string(s) + ": must be " +
                    (zero_ok ? "0" : "> 0") + " .. 86400 seconds");
  }
  return static_cast<Nanos>(s * 1e9);
}

GrpcTls TlsArg(const char* cls, const char* who, bool insecure, std::optional<std::string> cert,
               std::optional<std::string> key, std::optional<std::string> ca) {
  GrpcTlsFiles f;
  f.insecure = insecure;
  f.cert = cert.value_or("");
  f.key = key.value_or("");
  f.ca = ca.value_or("");
  Result<GrpcTls> tls = LoadGrpcTls(f);
  if (!tls.ok()) {
    Raise(Status(Code::kInvalidArgument, tls.status().message()),
          std::string(cls) + ": " + who + " TLS (" + who + "_insecure or " + who +
              "_tls_cert/_key/_ca)");
  }
  return *tls;
}

[[noreturn]] void RaiseValueError(const std::string& message) {
  RaiseWith(PyExc_ValueError, message);
}
[[noreturn]] void RaiseTypeError(const std::string& message) {
  RaiseWith(PyExc_TypeError, message);
}

kv::BlockHash KeyToHash(PyObject* key, const char* what) {
  kv::BlockHash h;
  const char* data = nullptr;
  Py_ssize_t len = 0;
  if (PyBytes_Check(key)) {
    data = PyBytes_AS_STRING(key);
    len = PyBytes_GET_SIZE(key);
    if (len == 32) {
      std::memcpy(h.bytes.data(), data, 32);
      return h;
    }
  } else if (PyUnicode_Check(key)) {
    data = PyUnicode_AsUTF8AndSize(key, &len);
    if (data == nullptr) {
      PyErr_Clear();  // replaced by an error that names the key
      RaiseWith(
          PyExc_ValueError,
          std::string(what) + ": a str key must have a UTF-8 form (a lone surrogate has none)");
    }
  } else {
    RaiseTypeError(std::string(what) + ": a key must be bytes or str, got " + TypeName(key));
  }
  return kv::Sha256Of(data, static_cast<size_t>(len));
}

std::vector<kv::BlockHash> KeysToHashes(nb::handle keys, const char* what) {
  if (PyUnicode_Check(keys.ptr()) || PyBytes_Check(keys.ptr())) {
    RaiseTypeError(std::string(what) + ": expected a sequence of keys, got one " +
                   TypeName(keys.ptr()));
  }
  nb::object seq = nb::steal(PySequence_Fast(keys.ptr(), "keys must be a sequence"));
  if (!seq.is_valid()) {
    PyErr_Clear();
    RaiseTypeError(std::string(what) + ": expected a sequence of keys, got " +
                   TypeName(keys.ptr()));
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
  std::vector<kv::BlockHash> out(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* k = items[i];
    if (PyBytes_Check(k) && PyBytes_GET_SIZE(k) == 32) {  // the hot path: vLLM block hashes
      std::memcpy(out[i].bytes.data(), PyBytes_AS_STRING(k), 32);
      continue;
    }
    // str keys (SGLang's, Mooncake-style connectors'): the UTF-8 that CPython caches in the str
    // object, hashed in place. No allocation per key: the label naming the key is built only for
    // the error (issue 27: with a label and OpenSSL's one-shot SHA256() per key, str-key exists
    // ran at 0.7x Mooncake's).
    if (PyUnicode_Check(k)) {
      Py_ssize_t len = 0;
      const char* data = PyUnicode_AsUTF8AndSize(k, &len);
      if (data != nullptr) {
        out[i] = kv::Sha256Of(data, static_cast<size_t>(len));
        continue;
      }
      PyErr_Clear();  // KeyToHash raises again, naming the key
    }
    const std::string w = std::string(what) + "[" + std::to_string(i) + "]";
    out[i] = KeyToHash(k, w.c_str());
  }
  return out;
}

std::vector<uint64_t> ToU64s(nb::handle seq_obj, const char* what) {
  nb::object seq = nb::steal(PySequence_Fast(seq_obj.ptr(), "expected a sequence"));
  if (!seq.is_valid()) {
    PyErr_Clear();
    RaiseTypeError(std::string(what) + ": expected a sequence of integers, got " +
                   TypeName(seq_obj.ptr()));
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
  std::vector<uint64_t> out(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* v = items[i];
    if (!PyLong_Check(v)) {
      RaiseTypeError(std::string(what) + "[" + std::to_string(i) + "]: expected an int, got " +
                     TypeName(v));
    }
    const unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (x == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      RaiseValueError(std::string(what) + "[" + std::to_string(i) + "] = " +
                      nb::cast<std::string>(nb::str(nb::handle(v))) + " is outside [0, 2^64-1]");
    }
    out[i] = x;
  }
  return out;
}

BorrowedBuffer::BorrowedBuffer(nb::handle obj, bool writable, const std::string& what) {
  PyObject* o = obj.ptr();
  if (PyObject_CheckBuffer(o)) {
    const int flags = writable ? PyBUF_RECORDS : PyBUF_RECORDS_RO;
    if (PyObject_GetBuffer(o, &view_, flags) != 0) {
      PyErr_Clear();
      if (writable) {
        RaiseValueError(what + ": the buffer is read-only (" + TypeName(o) + ")");
      }
      RaiseValueError(what + ": cannot read the buffer of " + TypeName(o));
    }
    has_view_ = true;
    if (!PyBuffer_IsContiguous(&view_, 'C')) {
      PyBuffer_Release(&view_);  // the destructor does not run when the constructor throws
      has_view_ = false;
      RaiseValueError(what + ": the buffer is not C-contiguous (" + TypeName(o) +
                      "); pass a contiguous copy");
    }
    data_ = static_cast<std::byte*>(view_.buf);
    size_ = static_cast<uint64_t>(view_.len);
    return;
  }
  if (PyObject_HasAttrString(o, "data_ptr") && PyObject_HasAttrString(o, "nbytes")) {
    if (PyObject_HasAttrString(o, "device")) {
      nb::object dev = obj.attr("device");
      nb::object type =
          PyObject_HasAttrString(dev.ptr(), "type") ? nb::object(dev.attr("type")) : nb::str(dev);
      if (nb::cast<std::string>(nb::str(type)) != "cpu") {
        RaiseValueError(what + ": the tensor is on device '" + nb::cast<std::string>(nb::str(dev)) +
                        "'; KVStore copies with the CPU, pass a CPU tensor");
      }
    }
    if (PyObject_HasAttrString(o, "is_contiguous") &&
        !nb::cast<bool>(obj.attr("is_contiguous")())) {
      RaiseValueError(what + ": the tensor is not contiguous; pass tensor.contiguous()");
    }
    data_ = reinterpret_cast<std::byte*>(nb::cast<uintptr_t>(obj.attr("data_ptr")()));
    size_ = nb::cast<uint64_t>(obj.attr("nbytes"));
    if (data_ == nullptr && size_ > 0) {
      RaiseValueError(what + ": data_ptr() is 0");
    }
    return;
  }
  RaiseTypeError(what + ": expected an object with the buffer protocol or data_ptr()/nbytes, got " +
                 TypeName(o));
}

BorrowedBuffer::~BorrowedBuffer() {
  if (has_view_) {
    PyBuffer_Release(&view_);
  }
}

BorrowedBuffer::BorrowedBuffer(BorrowedBuffer&& other) noexcept
    : view_(other.view_), has_view_(other.has_view_), data_(other.data_), size_(other.size_) {
  other.has_view_ = false;
}

void CheckValueSize(const char* verb, size_t i, uint64_t size, uint64_t max_bytes) {
  if (size == 0 || size > max_bytes) {
    RaiseValueError(std::string(verb) + ": block #" + std::to_string(i) + " size " +
                    std::to_string(size) + " is outside [1, " + std::to_string(max_bytes) +
                    "] bytes");
  }
}

std::vector<BorrowedBuffer> BorrowBuffers(const char* verb, size_t nkeys, nb::handle objs,
                                          bool writable, uint64_t max_bytes) {
  if (PyUnicode_Check(objs.ptr()) || PyBytes_Check(objs.ptr())) {
    RaiseTypeError(std::string(verb) + ": expected a sequence of buffers, got one " +
                   Py_TYPE(objs.ptr())->tp_name);
  }
  nb::object seq = nb::steal(PySequence_Fast(objs.ptr(), "expected a sequence"));
  if (!seq.is_valid()) {
    PyErr_Clear();
    RaiseTypeError(std::string(verb) + ": expected a sequence of buffers");
  }
  const size_t n = static_cast<size_t>(PySequence_Fast_GET_SIZE(seq.ptr()));
  if (n != nkeys) {
    RaiseValueError(std::string(verb) + ": " + std::to_string(nkeys) + " keys but " +
                    std::to_string(n) + " buffers");
  }
  std::vector<BorrowedBuffer> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.emplace_back(nb::handle(PySequence_Fast_GET_ITEM(seq.ptr(), i)), writable,
                     std::string(verb) + ": buffer #" + std::to_string(i));
    CheckValueSize(verb, i, out.back().size(), max_bytes);
  }
  return out;
}

}  // namespace dualpath::python
