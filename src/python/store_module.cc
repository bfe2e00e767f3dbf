// Python binding of KvStore (dualpath._core.KVStore; python/dualpath/store.py adds the async
// variants and documentation). Arguments are converted and checked with the GIL held, before
// anything is written; the I/O itself runs with the GIL released.
//
// After fork() the object belongs to the parent (fork_guard.h): in a child every call raises
// dualpath.Error naming fork (python/dualpath/store.py opens a new one there instead), and close()
// and destruction abandon the KvStore without touching its threads, rings or pool attachment.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "python/convert.h"
#include "python/fork_guard.h"
#include "python/kv_store.h"

namespace dualpath::python {
namespace {

// Return codes of the batch verbs (Mooncake's convention): >= 0 success (bytes read for gets),
// otherwise minus the dualpath status code (-200 = kStorageMiss).
int64_t ErrorCode(const Status& s) { return -static_cast<int64_t>(s.code()); }

class PyKvStore {
 public:
  PyKvStore(std::optional<std::string> pool_path, std::optional<std::string> store_path,
            uint64_t pool_size, std::string name_space, std::string sync, uint64_t capacity,
            unsigned copy_threads) {
    KvStoreOptions o;
    o.pool_path = pool_path.value_or("");
    o.store_path = store_path.value_or("");
    o.pool_bytes = pool_size;
    o.name_space = std::move(name_space);
    o.store_capacity_bytes = capacity;
    o.copy_threads = copy_threads;
    if (sync == "none") {
      o.sync = storage::SyncMode::kNone;
    } else if (sync == "data") {
      o.sync = storage::SyncMode::kData;
    } else if (sync == "full") {
      o.sync = storage::SyncMode::kFull;
    } else {
      RaiseValueError("sync = '" + sync + "': expected 'none', 'data' or 'full'");
    }
    Result<std::unique_ptr<KvStore>> s = [&] {
      nb::gil_scoped_release release;
      return KvStore::Open(o);
    }();
    if (!s.ok()) {
      Raise(s.status(), "KVStore");
    }
    store_ = std::move(*s);
  }

  ~PyKvStore() {
    if (owner_.forked()) {
      (void)store_.release();  // the parent's: ~KvStore would join threads this process lacks
    }
  }

  // The open store of this process; raises if it is closed or was opened before fork().
  KvStore& Live() {
    if (closed()) {
      Raise(Status(Code::kStorageClosed, "KVStore is closed"));
    }
    if (owner_.forked()) {
      Raise(ForkedError("KVStore", owner_.pid(),
                        "Open a new KVStore in this process (after forking); dualpath.KVStore "
                        "does that by itself on its first call after fork()."));
    }
    return *store_;
  }

  void RegisterBuffer(uint64_t addr, uint64_t size) {
    Status s = Live().RegisterBuffer(addr, size);
    if (!s.ok()) {
      Raise(s);
    }
  }
  void UnregisterBuffer(uint64_t addr) {
    Status s = Live().UnregisterBuffer(addr);
    if (!s.ok()) {
      Raise(s);
    }
  }

  // Checks lengths, sizes and registration of raw (ptr, size) arguments.
  void CheckRaw(const char* verb, size_t nkeys, const std::vector<uint64_t>& ptrs,
                const std::vector<uint64_t>& sizes) {
    if (ptrs.size() != nkeys || sizes.size() != nkeys) {
      RaiseValueError(std::string(verb) + ": keys, ptrs and sizes differ in length (" +
                      std::to_string(nkeys) + ", " + std::to_string(ptrs.size()) + ", " +
                      std::to_string(sizes.size()) + ")");
    }
    for (size_t i = 0; i < nkeys; ++i) {
      CheckValueSize(verb, i, sizes[i], KvStore::kMaxValueBytes);
      Status s = store_->CheckRegistered(ptrs[i], sizes[i]);
      if (!s.ok()) {
        Raise(s, std::string(verb) + ": block #" + std::to_string(i));
      }
    }
  }

  nb::list Put(const std::vector<kv::BlockHash>& keys, const std::vector<ConstBuf>& bufs) {
    std::vector<Status> st;
    {
      nb::gil_scoped_release release;
      st = store_->PutBatch(keys, bufs);
    }
    nb::list out;
    for (const Status& s : st) {
      if (s.code() == Code::kStorageClosed) {
        Raise(s);  // closed while the call waited
      }
      out.append(s.ok() ? 0 : ErrorCode(s));
    }
    return out;
  }

  nb::list Get(const char* verb, const std::vector<kv::BlockHash>& keys,
               const std::vector<MutBuf>& bufs) {
    std::vector<Result<uint64_t>> res;
    {
      nb::gil_scoped_release release;
      res = store_->GetBatch(keys, bufs);
    }
    nb::list out;
    for (size_t i = 0; i < res.size(); ++i) {
      const auto& r = res[i];
      // A closed store, or a buffer smaller than its block (a wrong size: bad input, although it
      // shows only once the block is found), raise; misses are results.
      if (!r.ok() &&
          (r.status().code() == Code::kStorageClosed || r.status().code() == Code::kOutOfRange)) {
        Raise(r.status(), std::string(verb) + ": block #" + std::to_string(i));
      }
      out.append(r.ok() ? static_cast<int64_t>(*r) : ErrorCode(r.status()));
    }
    return out;
  }

  nb::list BatchPutFrom(nb::handle keys, nb::handle ptrs, nb::handle sizes) {
    Live();
    auto k = KeysToHashes(keys, "batch_put_from keys");
    auto p = ToU64s(ptrs, "batch_put_from ptrs");
    auto z = ToU64s(sizes, "batch_put_from sizes");
    CheckRaw("batch_put_from", k.size(), p, z);
    std::vector<ConstBuf> bufs(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      bufs[i] = {reinterpret_cast<const std::byte*>(p[i]), z[i]};
    }
    return Put(k, bufs);
  }

  nb::list BatchGetInto(nb::handle keys, nb::handle ptrs, nb::handle sizes) {
    Live();
    auto k = KeysToHashes(keys, "batch_get_into keys");
    auto p = ToU64s(ptrs, "batch_get_into ptrs");
    auto z = ToU64s(sizes, "batch_get_into sizes");
    CheckRaw("batch_get_into", k.size(), p, z);
    std::vector<MutBuf> bufs(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      bufs[i] = {reinterpret_cast<std::byte*>(p[i]), z[i]};
    }
    return Get("batch_get_into", k, bufs);
  }

  nb::list BatchPut(nb::handle keys, nb::handle values) {
    Live();
    auto k = KeysToHashes(keys, "batch_put keys");
    auto held =
        BorrowBuffers("batch_put", k.size(), values, /*writable=*/false, KvStore::kMaxValueBytes);
    std::vector<ConstBuf> bufs(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      bufs[i] = {held[i].data(), held[i].size()};
    }
    return Put(k, bufs);
  }

  nb::list BatchGet(nb::handle keys, nb::handle buffers) {
    Live();
    auto k = KeysToHashes(keys, "batch_get keys");
    auto held =
        BorrowBuffers("batch_get", k.size(), buffers, /*writable=*/true, KvStore::kMaxValueBytes);
    std::vector<MutBuf> bufs(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      bufs[i] = {held[i].data(), held[i].size()};
    }
    return Get("batch_get", k, bufs);
  }

  size_t BatchExists(nb::handle keys) {
    Live();
    auto k = KeysToHashes(keys, "batch_exists keys");
    Result<size_t> n = [&] {
      nb::gil_scoped_release release;
      return store_->LeadingHits(k);
    }();
    if (!n.ok()) {
      Raise(n.status());
    }
    return *n;
  }

  nb::list BatchIsExist(nb::handle keys) {
    Live();
    auto k = KeysToHashes(keys, "batch_is_exist keys");
    Result<std::vector<bool>> r = [&] {
      nb::gil_scoped_release release;
      return store_->Exists(k);
    }();
    if (!r.ok()) {
      Raise(r.status());
    }
    nb::list out;
    for (bool b : *r) {
      out.append(b);
    }
    return out;
  }

  void Remove(nb::handle key) {
    Live();
    const kv::BlockHash h = KeyToHash(key.ptr(), "remove key");
    Status s;
    {
      nb::gil_scoped_release release;
      s = store_->Remove(h);
    }
    if (!s.ok()) {
      Raise(s, "remove");
    }
  }

  nb::dict Stats() {
    KvStore& live = Live();  // raises with the GIL held
    Result<KvStoreStats> r = [&] {
      nb::gil_scoped_release release;
      return live.Stats();
    }();
    if (!r.ok()) {
      Raise(r.status());
    }
    const KvStoreStats& s = *r;
    nb::dict d;
    d["puts"] = s.puts;
    d["put_errors"] = s.put_errors;
    d["gets"] = s.gets;
    d["pool_hits"] = s.pool_hits;
    d["store_hits"] = s.store_hits;
    d["misses"] = s.misses;
    d["corrupt"] = s.corrupt;
    d["bytes_put"] = s.bytes_put;
    d["bytes_got"] = s.bytes_got;
    d["removes"] = s.removes;
    if (s.has_pool) {
      nb::dict p;
      p["region_bytes"] = s.pool.region_bytes;
      p["used_bytes"] = s.pool.used_bytes;
      p["ready_entries"] = s.pool.ready_entries;
      p["pinned_entries"] = s.pool.pinned_entries;
      p["evictions"] = s.pool.evictions;
      p["live_procs"] = s.pool.live_procs;
      d["pool"] = p;
    }
    if (s.has_store) {
      nb::dict t;
      t["reads"] = s.store.reads;
      t["hits"] = s.store.hits;
      t["misses"] = s.store.misses;
      t["corrupt"] = s.store.corrupt;
      t["writes"] = s.store.writes;
      t["write_dedup"] = s.store.write_dedup;
      t["write_errors"] = s.store.write_errors;
      t["evictions"] = s.store.evictions;
      t["bytes_read"] = s.store.bytes_read;
      t["bytes_written"] = s.store.bytes_written;
      d["store"] = t;
    }
    return d;
  }

  void Close() {
    if (owner_.forked()) {
      // A child of the owner: abandon the parent's store (its close lock may be held by a copy
      // of a parent thread's call, and closing would unregister the parent's pool attachment).
      (void)store_.release();
      return;
    }
    nb::gil_scoped_release release;  // waits for calls in flight on other threads
    store_->Close();
  }
  bool closed() const { return store_ == nullptr || store_->closed(); }

 private:
  OwnerProcess owner_;
  std::unique_ptr<KvStore> store_;  // null once abandoned in a forked child
};

}  // namespace

void BindStore(nb::module_& m) {
  m.attr("MAX_VALUE_BYTES") = KvStore::kMaxValueBytes;
  // The code of the error a store used in a forked child raises (python/dualpath/store.py raises
  // it too, for a batch still in flight at fork()).
  m.attr("FORKED_CODE") = static_cast<int>(Code::kFailedPrecondition);
  m.def(
      "error_name", [](int64_t code) { return std::string(CodeName(static_cast<Code>(-code))); },
      nb::arg("code"), "Name of a negative return code of the batch verbs (-200: 'kStorageMiss').");
  nb::class_<PyKvStore>(m, "KVStore")
      .def(nb::init<std::optional<std::string>, std::optional<std::string>, uint64_t, std::string,
                    std::string, uint64_t, unsigned>(),
           nb::arg("pool_path").none() = nb::none(), nb::arg("store_path").none() = nb::none(),
           nb::arg("pool_size") = uint64_t{1} << 30, nb::arg("namespace") = "default",
           nb::arg("sync") = "data", nb::arg("capacity") = 0, nb::arg("copy_threads") = 0u)
      .def("register_buffer", &PyKvStore::RegisterBuffer, nb::arg("ptr"), nb::arg("size"))
      .def("unregister_buffer", &PyKvStore::UnregisterBuffer, nb::arg("ptr"))
      .def("batch_put_from", &PyKvStore::BatchPutFrom, nb::arg("keys"), nb::arg("ptrs"),
           nb::arg("sizes"))
      .def("batch_get_into", &PyKvStore::BatchGetInto, nb::arg("keys"), nb::arg("ptrs"),
           nb::arg("sizes"))
      .def("batch_put", &PyKvStore::BatchPut, nb::arg("keys"), nb::arg("values"))
      .def("batch_get", &PyKvStore::BatchGet, nb::arg("keys"), nb::arg("buffers"))
      .def("batch_exists", &PyKvStore::BatchExists, nb::arg("keys"))
      .def("batch_is_exist", &PyKvStore::BatchIsExist, nb::arg("keys"))
      .def("remove", &PyKvStore::Remove, nb::arg("key"))
      .def("stats", &PyKvStore::Stats)
      .def("close", &PyKvStore::Close)
      .def_prop_ro("closed", &PyKvStore::closed);
}

}  // namespace dualpath::python
