// Python binding of kv: the block hasher (byte-exact with vLLM's sha256_cbor) and the model
// presets (dualpath._core.kv; python/dualpath/kv.py re-exports it).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <string>
#include <vector>

#include "dualpath/kv/block_file.h"
#include "dualpath/kv/cbor.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/kv/model.h"
#include "python/convert.h"

namespace dualpath::python {
namespace {

// Extra keys nest at most this deep ((("lora", name, path),) is depth 2).
constexpr int kMaxExtraKeyDepth = 16;

void AppendHead(uint8_t major, uint64_t arg, std::string* out) {
  uint8_t head[kv::cbor::kMaxHeadBytes];
  const size_t n = kv::cbor::WriteHead(static_cast<kv::cbor::Major>(major), arg, head);
  out->append(reinterpret_cast<const char*>(head), n);
}

// Canonical CBOR of a Python value, as cbor2.dumps(value, canonical=True) writes it, for the types
// vLLM puts into block-hash extra keys: None, bool, int (64-bit range), str, bytes, and tuples or
// lists of these. Anything else is a TypeError naming `what`.
void EncodeCbor(PyObject* v, const std::string& what, int depth, std::string* out) {
  if (depth > kMaxExtraKeyDepth) {
    RaiseValueError(what + ": nested deeper than " + std::to_string(kMaxExtraKeyDepth));
  }
  if (v == Py_None) {
    out->push_back(static_cast<char>(0xF6));
  } else if (v == Py_True || v == Py_False) {
    out->push_back(static_cast<char>(v == Py_True ? 0xF5 : 0xF4));
  } else if (PyLong_Check(v)) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow == 0 && x >= 0) {
      AppendHead(0, static_cast<uint64_t>(x), out);
    } else if (overflow == 0) {
      AppendHead(1, static_cast<uint64_t>(-(x + 1)), out);  // -1 - n encodes n
    } else {
      const unsigned long long u = PyLong_AsUnsignedLongLong(v);
      if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
        PyErr_Clear();
        RaiseValueError(what + ": integer outside the 64-bit range");
      }
      AppendHead(0, u, out);
    }
  } else if (PyUnicode_Check(v)) {
    Py_ssize_t len = 0;
    const char* s = PyUnicode_AsUTF8AndSize(v, &len);
    if (s == nullptr) {
      throw nb::python_error();
    }
    AppendHead(3, static_cast<uint64_t>(len), out);
    out->append(s, static_cast<size_t>(len));
  } else if (PyBytes_Check(v)) {
    AppendHead(2, static_cast<uint64_t>(PyBytes_GET_SIZE(v)), out);
    out->append(PyBytes_AS_STRING(v), static_cast<size_t>(PyBytes_GET_SIZE(v)));
  } else if (PyTuple_Check(v) || PyList_Check(v)) {
    nb::object seq = nb::steal(PySequence_Fast(v, "extra keys"));
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
    AppendHead(4, static_cast<uint64_t>(n), out);
    for (Py_ssize_t i = 0; i < n; ++i) {
      EncodeCbor(PySequence_Fast_GET_ITEM(seq.ptr(), i), what + "[" + std::to_string(i) + "]",
                 depth + 1, out);
    }
  } else {
    RaiseTypeError(what +
                   ": extra keys may hold None, bool, int, str, bytes, tuples and lists; got " +
                   Py_TYPE(v)->tp_name);
  }
}

// Token ids from a sequence of ints or a 1-D integer buffer (numpy int32/int64/uint32/...), each
// checked against [0, kMaxTokenId].
std::vector<kv::TokenId> ToTokens(nb::handle obj) {
  std::vector<kv::TokenId> out;
  auto bad = [](size_t i, long long v) {
    RaiseValueError("token #" + std::to_string(i) + " = " + std::to_string(v) + " is outside [0, " +
                    std::to_string(kv::kMaxTokenId) + "]");
  };
  PyObject* o = obj.ptr();
  if (PyObject_CheckBuffer(o) && !PyBytes_Check(o)) {
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_RECORDS_RO) != 0) {
      throw nb::python_error();
    }
    struct Release {
      Py_buffer* v;
      ~Release() { PyBuffer_Release(v); }
    } release{&view};
    const std::string fmt = view.format ? view.format : "B";
    const char code = fmt.empty() ? 'B' : fmt.back();
    const bool is_signed = code == 'b' || code == 'h' || code == 'i' || code == 'l' || code == 'q';
    const bool is_unsigned =
        code == 'B' || code == 'H' || code == 'I' || code == 'L' || code == 'Q';
    if (view.ndim != 1 || (!is_signed && !is_unsigned) || !PyBuffer_IsContiguous(&view, 'C')) {
      RaiseValueError("tokens: expected a 1-D contiguous integer array, got format '" + fmt +
                      "' with " + std::to_string(view.ndim) + " dimensions");
    }
    const size_t n = static_cast<size_t>(view.len / view.itemsize);
    out.resize(n);
    const auto* p = static_cast<const uint8_t*>(view.buf);
    for (size_t i = 0; i < n; ++i) {
      long long v = 0;
      switch (view.itemsize) {
        case 1:
          v = is_signed ? static_cast<int8_t>(p[i]) : p[i];
          break;
        case 2: {
          uint16_t u;
          std::memcpy(&u, p + 2 * i, 2);
          v = is_signed ? static_cast<int16_t>(u) : u;
          break;
        }
        case 4: {
          uint32_t u;
          std::memcpy(&u, p + 4 * i, 4);
          v = is_signed ? static_cast<int32_t>(u) : static_cast<long long>(u);
          break;
        }
        default: {
          uint64_t u;
          std::memcpy(&u, p + 8 * i, 8);
          if (!is_signed && u > kv::kMaxTokenId) {
            bad(i, static_cast<long long>(std::min<uint64_t>(u, INT64_MAX)));
          }
          v = static_cast<long long>(u);
        }
      }
      if (v < 0 || v > kv::kMaxTokenId) {
        bad(i, v);
      }
      out[i] = static_cast<kv::TokenId>(v);
    }
    return out;
  }
  nb::object seq = nb::steal(PySequence_Fast(o, "tokens"));
  if (!seq.is_valid()) {
    PyErr_Clear();
    RaiseTypeError(std::string("tokens: expected a sequence of ints, got ") + Py_TYPE(o)->tp_name);
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  out.resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* t = PySequence_Fast_GET_ITEM(seq.ptr(), i);
    if (!PyLong_Check(t)) {
      RaiseTypeError("token #" + std::to_string(i) + ": expected an int, got " +
                     Py_TYPE(t)->tp_name);
    }
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(t, &overflow);
    if (overflow != 0) {
      bad(static_cast<size_t>(i), overflow > 0 ? INT64_MAX : INT64_MIN);
    }
    if (v < 0 || v > kv::kMaxTokenId) {
      bad(static_cast<size_t>(i), v);
    }
    out[static_cast<size_t>(i)] = static_cast<kv::TokenId>(v);
  }
  return out;
}

nb::bytes HashBytes(const kv::BlockHash& h) {
  return nb::bytes(reinterpret_cast<const char*>(h.bytes.data()), h.bytes.size());
}

kv::BlockHash ParentHash(const kv::BlockHasher& hasher, nb::handle parent) {
  if (parent.is_none()) {
    return hasher.none_hash();
  }
  if (!PyBytes_Check(parent.ptr()) || PyBytes_GET_SIZE(parent.ptr()) != 32) {
    RaiseValueError("parent: expected None or 32 bytes (a block hash)");
  }
  kv::BlockHash h;
  std::memcpy(h.bytes.data(), PyBytes_AS_STRING(parent.ptr()), 32);
  return h;
}

class PyBlockHasher {
 public:
  PyBlockHasher(const std::string& seed, int64_t block_size, const std::string& algo) {
    Result<kv::HashAlgo> a = kv::ParseHashAlgo(algo);
    if (!a.ok()) {
      Raise(a.status(), "algo");
    }
    if (block_size < 1 || block_size > kv::kMaxBlockSize) {
      RaiseValueError("block_size = " + std::to_string(block_size) + " is outside [1, " +
                      std::to_string(kv::kMaxBlockSize) + "]");
    }
    Result<kv::BlockHasher> h =
        kv::BlockHasher::Create(*a, seed, static_cast<uint32_t>(block_size));
    if (!h.ok()) {
      Raise(h.status());
    }
    hasher_.emplace(std::move(*h));
  }

  // One hash per full block; `extra_keys` is None or one entry per full block (None or a tuple).
  nb::list HashBlocks(nb::handle tokens, nb::handle parent, nb::handle extra_keys) {
    const kv::BlockHasher& h = *hasher_;
    std::vector<kv::TokenId> t = ToTokens(tokens);
    const size_t full = t.size() / h.block_size();
    kv::BlockHash prev = ParentHash(h, parent);
    std::vector<kv::BlockHash> out;
    if (extra_keys.is_none()) {
      nb::gil_scoped_release release;
      h.HashBlocks(prev, t, &out);
    } else {
      nb::object seq = nb::steal(PySequence_Fast(extra_keys.ptr(), "extra_keys"));
      if (!seq.is_valid()) {
        PyErr_Clear();
        RaiseTypeError("extra_keys: expected None or a sequence with one entry per full block");
      }
      if (static_cast<size_t>(PySequence_Fast_GET_SIZE(seq.ptr())) != full) {
        RaiseValueError("extra_keys: " + std::to_string(PySequence_Fast_GET_SIZE(seq.ptr())) +
                        " entries for " + std::to_string(full) + " full blocks");
      }
      std::vector<std::string> enc(full);
      for (size_t b = 0; b < full; ++b) {
        PyObject* e = PySequence_Fast_GET_ITEM(seq.ptr(), b);
        if (e != Py_None) {
          EncodeCbor(e, "extra_keys[" + std::to_string(b) + "]", 0, &enc[b]);
        }
      }
      nb::gil_scoped_release release;
      out.reserve(full);
      for (size_t b = 0; b < full; ++b) {
        const auto tok =
            std::span<const kv::TokenId>(t).subspan(b * h.block_size(), h.block_size());
        prev = h.HashBlockCborExtra(
            prev, tok, std::span(reinterpret_cast<const uint8_t*>(enc[b].data()), enc[b].size()));
        out.push_back(prev);
      }
    }
    nb::list l;
    for (const auto& x : out) {
      l.append(HashBytes(x));
    }
    return l;
  }

  // One block of any length (vLLM hashes full blocks only; callers pass block_size tokens).
  nb::bytes HashBlock(nb::handle parent, nb::handle tokens, nb::handle extra_keys) {
    const kv::BlockHasher& h = *hasher_;
    std::vector<kv::TokenId> t = ToTokens(tokens);
    std::string enc;
    if (!extra_keys.is_none()) {
      EncodeCbor(extra_keys.ptr(), "extra_keys", 0, &enc);
    }
    return HashBytes(
        h.HashBlockCborExtra(ParentHash(h, parent), t,
                             std::span(reinterpret_cast<const uint8_t*>(enc.data()), enc.size())));
  }

  nb::bytes NoneHash() const { return HashBytes(hasher_->none_hash()); }
  uint32_t block_size() const { return hasher_->block_size(); }
  std::string seed() const { return hasher_->seed(); }
  std::string algo() const { return std::string(kv::HashAlgoName(hasher_->algo())); }

 private:
  std::optional<kv::BlockHasher> hasher_;
};

nb::dict ModelDict(const kv::ModelGeometry& m) {
  nb::dict d;
  d["name"] = m.name;
  d["display_name"] = m.display_name;
  d["num_layers"] = m.num_layers;
  d["hidden_size"] = m.hidden_size;
  d["attention"] = std::string(kv::AttentionKindName(m.attention));
  d["num_heads"] = m.num_heads;
  d["num_kv_heads"] = m.num_kv_heads;
  d["head_dim"] = m.head_dim;
  d["v_head_dim"] = m.v_head_dim;
  d["kv_lora_rank"] = m.kv_lora_rank;
  d["qk_rope_head_dim"] = m.qk_rope_head_dim;
  d["kv_dtype"] = std::string(kv::KvDtypeName(m.kv_dtype));
  d["kv_bytes_per_token_per_layer"] = m.kv_bytes_per_token_per_layer;
  d["kv_bytes_per_token"] = m.KvBytesPerToken();
  d["params_total"] = m.params_total;
  d["params_active"] = m.params_active;
  // Block files' and ClusterStore object keys' model half (kv::ModelFingerprint).
  d["fingerprint"] = kv::ModelFingerprint(m);
  return d;
}

}  // namespace

void BindKv(nb::module_& m) {
  nb::module_ kv = m.def_submodule("kv", "Block hashing (vLLM sha256_cbor) and model presets.");
  kv.attr("MAX_TOKEN_ID") = kv::kMaxTokenId;
  kv.attr("MAX_BLOCK_SIZE") = kv::kMaxBlockSize;
  nb::class_<PyBlockHasher>(kv, "BlockHasher")
      .def(nb::init<const std::string&, int64_t, const std::string&>(), nb::arg("seed"),
           nb::arg("block_size"), nb::arg("algo") = "sha256_cbor")
      .def("hash_blocks", &PyBlockHasher::HashBlocks, nb::arg("tokens"),
           nb::arg("parent").none() = nb::none(), nb::arg("extra_keys").none() = nb::none())
      .def("hash_block", &PyBlockHasher::HashBlock, nb::arg("parent").none(), nb::arg("tokens"),
           nb::arg("extra_keys").none() = nb::none())
      .def_prop_ro("none_hash", &PyBlockHasher::NoneHash)
      .def_prop_ro("block_size", &PyBlockHasher::block_size)
      .def_prop_ro("seed", &PyBlockHasher::seed)
      .def_prop_ro("algo", &PyBlockHasher::algo);
  kv.def("models", [] {
    nb::list l;
    for (const auto& m : kv::ModelPresets()) {
      l.append(ModelDict(m));
    }
    return l;
  });
  kv.def(
      "model",
      [](const std::string& spec) {
        Result<kv::ModelGeometry> r = kv::ResolveModel(spec);
        if (!r.ok()) {
          Raise(r.status());
        }
        return ModelDict(*r);
      },
      nb::arg("name_or_json_path"));
}

}  // namespace dualpath::python
