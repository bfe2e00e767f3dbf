// Python binding of the distributed KV store's client library (dualpath._core.ClusterStore over
// dualpath::store::StoreClient, include/dualpath/store/client.h; python/dualpath/cluster_store.py
// adds the async variants and documentation). The verbs have the shape of dualpath.KVStore's
// (store_module.cc): per-key return codes, >= 0 success (bytes read for gets), otherwise minus the
// dualpath status code; a miss is -200 (kStorageMiss) as for KVStore, so a connector written for
// one works with the other.
//
// Arguments are converted and checked with the GIL held, before anything is sent; the calls to
// the store (etcd, the master, the nodes) run with the GIL released. Raw pointers of the *_from /
// *_into verbs must lie inside a buffer registered with register_buffer (KVStore's rule; the
// registration also lets remote gets land in it without a staging copy).
//
// Lifetime: close() marks the client closed (later calls raise ValueError), waits for the calls in
// flight on other threads, then destroys the StoreClient (its unpin thread, channels, transfer
// engine) with the GIL released.
//
// fork(): a client is the parent's (fork_guard.h). Unlike KVStore's, its state cannot be re-created
// in a child: gRPC's polling engine (one epoll set, shared with the parent across fork) and the
// connections' sockets are inherited, and a child that makes any gRPC call, even on a client of
// its own, polls that set and consumes the parent's events (we saw the parent's next call then
// fail with "Deadline Exceeded", or with HTTP/2 errors when gRPC's fork support was enabled). So in
// a process forked from one that had opened a ClusterStore, using the inherited client and opening
// a new one both raise dualpath.Error naming fork; close() and destruction abandon the client
// without touching its threads, channels or locks. A process that never had a client (a worker
// forked before any was opened) opens its own as usual.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/coord/etcd_client.h"
#include "dualpath/store/client.h"
#include "dualpath/store/types.h"
#include "dualpath/transfer/class_config.h"
#include "dualpath/transfer/token.h"
#include "python/convert.h"
#include "python/fork_guard.h"
#include "python/kv_store.h"

namespace dualpath::python {
namespace {

// Largest object a verb accepts: KVStore's limit, so a block that one stores the other does too.
constexpr uint64_t kMaxObjectBytes = KvStore::kMaxValueBytes;

// What a process forked from one with a client must do instead (see the file comment).
constexpr std::string_view kForkAdvice =
    "gRPC and the transfer engine cannot be used again in a child forked from a process that used "
    "them (the child would consume the parent's socket events): open the ClusterStore only after "
    "forking, in each worker process and not in the parent, or start the workers with the "
    "'spawn' or 'forkserver' start method.";

// The process that opened this module's first client: its gRPC and transfer engine state is
// then in every process forked from it (0: none yet).
std::atomic<pid_t> g_client_process{0};

int64_t ErrorCode(const Status& s) {
  // "Not in the store" is a miss, the same code as KVStore's (-200).
  if (s.code() == Code::kNotFound) {
    return -static_cast<int64_t>(Code::kStorageMiss);
  }
  return -static_cast<int64_t>(s.code());
}

struct PyClusterOptions {
  std::string cluster;
  std::string etcd;
  uint64_t model_fingerprint = 0;
  bool etcd_insecure = false;
  std::optional<std::string> etcd_tls_cert, etcd_tls_key, etcd_tls_ca;
  bool master_insecure = false;
  std::optional<std::string> master_tls_cert, master_tls_key, master_tls_ca;
  std::optional<std::string> host;
  uint32_t local_node = 0;
  bool local_shm = true;
  std::string shm_dir = "/dev/shm";
  std::string ucx_tls = "tcp";
  std::optional<std::string> transfer_token_file;
  uint32_t replicas = 1;
  double retry_deadline = 15;
  double rpc_timeout = 5;
  double etcd_timeout = 5;
  uint64_t staging_bytes = 4ull << 20;
  bool transfer_poll = true;
  double exists_poll = 1e-3;
};

class PyClusterStore {
 public:
  explicit PyClusterStore(const PyClusterOptions& p) : fingerprint_(p.model_fingerprint) {
    store::ClientOptions o;
    o.cluster = p.cluster;
    if (p.etcd.empty()) {
      RaiseValueError("ClusterStore: etcd = '': expected HOST:PORT[,HOST:PORT...] or unix:PATH");
    }
    o.etcd.endpoints = p.etcd;
    o.etcd.rpc_timeout = SecondsArg(p.etcd_timeout, "ClusterStore: etcd_timeout", false);
    o.etcd.tls = TlsArg("ClusterStore", "etcd", p.etcd_insecure, p.etcd_tls_cert, p.etcd_tls_key,
                        p.etcd_tls_ca);
    o.master_tls = TlsArg("ClusterStore", "master", p.master_insecure, p.master_tls_cert,
                          p.master_tls_key, p.master_tls_ca);
    o.local_node = NodeId(p.local_node);
    o.host = p.host.value_or("");
    o.local_shm = p.local_shm;
    o.shm_dir = p.shm_dir;
    o.transfer.ucx_tls = p.ucx_tls;
    // Unmarked sockets: the engine marks its traffic classes (DSCP) by interposing socket(), which
    // cannot work from an extension module (libuct's calls bind to libc's socket() in the
    // interpreter's global scope), so it would only warn. docs/python.md "Known limits".
    for (transfer::ClassConfig& c : o.transfer.classes) {
      c.dscp = -1;
    }
    if (p.transfer_token_file.has_value()) {
      Result<std::string> token = transfer::ReadTransferToken(*p.transfer_token_file);
      if (!token.ok()) {
        Raise(token.status(), "ClusterStore: transfer_token_file");
      }
      o.transfer.token = *token;
    }
    if (p.replicas < 1 || p.replicas > static_cast<uint32_t>(store::kMaxReplicas)) {
      RaiseValueError("ClusterStore: replicas = " + std::to_string(p.replicas) + ": must be 1 .. " +
                      std::to_string(store::kMaxReplicas));
    }
    o.replicas = p.replicas;
    o.retry_deadline = SecondsArg(p.retry_deadline, "ClusterStore: retry_deadline", true);
    o.rpc_timeout = SecondsArg(p.rpc_timeout, "ClusterStore: rpc_timeout", false);
    if (p.staging_bytes == 0 || p.staging_bytes > kMaxObjectBytes) {
      RaiseValueError("ClusterStore: staging_bytes = " + std::to_string(p.staging_bytes) +
                      ": must be 1 .. " + std::to_string(kMaxObjectBytes));
    }
    o.staging_bytes = p.staging_bytes;
    // ClientOptions::transfer_poll: poll while gets are in flight, or sleep between their events.
    o.transfer_poll = p.transfer_poll;
    o.exists_poll = SecondsArg(p.exists_poll, "ClusterStore: exists_poll", true);
    // Before any gRPC or UCX call: a process forked from one with a client must not start its own.
    const pid_t self = CurrentPid();
    pid_t first = 0;
    if (!g_client_process.compare_exchange_strong(first, self) && first != self) {
      Raise(ForkedError("a ClusterStore", first, kForkAdvice), "ClusterStore");
    }
    Result<std::unique_ptr<store::StoreClient>> c = [&] {
      nb::gil_scoped_release release;
      return store::StoreClient::Create(std::move(o));
    }();
    if (!c.ok()) {
      // Options the C++ client refuses (a bad cluster name, an unparsable etcd endpoint) are bad
      // input; anything else (the transfer engine could not start) is a dualpath.Error.
      Raise(c.status(), "ClusterStore");
    }
    client_ = std::move(*c);
  }

  ~PyClusterStore() {
    if (owner_.forked()) {
      (void)client_.release();  // the parent's: its threads do not exist in this process
      return;
    }
    // Python dropped the object without close(): no call can be in flight (each holds a reference
    // to the object), so destroy the client here, without the GIL when we hold it.
    if (client_ != nullptr) {
      if (PyGILState_Check()) {
        nb::gil_scoped_release release;
        client_.reset();
      } else {
        client_.reset();
      }
    }
  }

  // Marks one call in flight for its lifetime; raises ValueError if the store is closed and
  // dualpath.Error in a process forked from the owner (checked before the mutex, which a copy of
  // a parent thread may hold there). Made and destroyed with the GIL held or not (the mutex is
  // never held across anything that blocks).
  class Use {
   public:
    explicit Use(PyClusterStore* s) : s_(s) {
      if (s_->owner_.forked()) {
        if (s_->closed()) {
          RaiseValueError("ClusterStore is closed");
        }
        Raise(ForkedError("ClusterStore", s_->owner_.pid(), kForkAdvice));
      }
      {
        std::lock_guard lock(s_->mu_);
        if (!s_->closed_) {
          ++s_->inflight_;
          return;
        }
      }
      RaiseValueError("ClusterStore is closed");
    }
    ~Use() {
      std::lock_guard lock(s_->mu_);
      if (--s_->inflight_ == 0) {
        s_->idle_.notify_all();
      }
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    PyClusterStore* s_;
  };

  void RegisterBuffer(uint64_t addr, uint64_t size) {
    Use use(this);
    if (addr == 0 || size == 0) {
      RaiseValueError("register_buffer: ptr " + std::to_string(addr) + ", size " +
                      std::to_string(size) + ": need a non-null pointer and size > 0");
    }
    if (addr + size < addr) {
      RaiseValueError("register_buffer: ptr + size overflows");
    }
    Status s;
    {
      nb::gil_scoped_release release;
      s = client_->RegisterBuffer(reinterpret_cast<void*>(addr), size);
    }
    if (!s.ok()) {
      Raise(s, "register_buffer");
    }
    std::lock_guard lock(mu_);
    registered_[addr] = size;
  }

  void UnregisterBuffer(uint64_t addr) {
    Use use(this);
    Status s;
    {
      nb::gil_scoped_release release;
      s = client_->UnregisterBuffer(reinterpret_cast<void*>(addr));
    }
    if (!s.ok()) {
      Raise(s, "unregister_buffer");  // KeyError: not registered
    }
    std::lock_guard lock(mu_);
    registered_.erase(addr);
  }

  // Lengths, sizes and registration of raw (ptr, size) arguments.
  void CheckRaw(const char* verb, size_t nkeys, const std::vector<uint64_t>& ptrs,
                const std::vector<uint64_t>& sizes) {
    if (ptrs.size() != nkeys || sizes.size() != nkeys) {
      RaiseValueError(std::string(verb) + ": keys, ptrs and sizes differ in length (" +
                      std::to_string(nkeys) + ", " + std::to_string(ptrs.size()) + ", " +
                      std::to_string(sizes.size()) + ")");
    }
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < nkeys; ++i) {
      CheckValueSize(verb, i, sizes[i], kMaxObjectBytes);
      auto it = registered_.upper_bound(ptrs[i]);
      const bool inside = it != registered_.begin() && ptrs[i] + sizes[i] >= ptrs[i] &&
                          ptrs[i] + sizes[i] <= std::prev(it)->first + std::prev(it)->second;
      if (!inside) {
        RaiseValueError(std::string(verb) + ": block #" + std::to_string(i) + " [" +
                        std::to_string(ptrs[i]) + ", +" + std::to_string(sizes[i]) +
                        ") is not inside a registered buffer (register_buffer)");
      }
    }
  }

  std::vector<store::ObjectKey> Keys(nb::handle keys, const char* what) const {
    std::vector<kv::BlockHash> h = KeysToHashes(keys, what);
    std::vector<store::ObjectKey> out(h.size());
    for (size_t i = 0; i < h.size(); ++i) {
      out[i] = store::ObjectKey{fingerprint_, h[i]};
    }
    return out;
  }

  nb::list Put(const char* verb, const std::vector<store::ObjectKey>& keys,
               const std::vector<ConstBuf>& bufs) {
    nb::list out;
    if (keys.empty()) {
      return out;
    }
    std::vector<store::PutItem> items(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      items[i] = store::PutItem{keys[i], std::span<const std::byte>(bufs[i].data, bufs[i].size)};
    }
    Result<std::vector<Status>> r = [&] {
      nb::gil_scoped_release release;
      return client_->Put(items);
    }();
    if (!r.ok()) {
      Raise(r.status(), verb);
    }
    for (const Status& s : *r) {
      out.append(s.ok() ? 0 : ErrorCode(s));
    }
    return out;
  }

  nb::list Get(const char* verb, const std::vector<store::ObjectKey>& keys,
               const std::vector<MutBuf>& bufs) {
    nb::list out;
    if (keys.empty()) {
      return out;
    }
    std::vector<store::GetItem> items(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      items[i] = store::GetItem{keys[i], std::span<std::byte>(bufs[i].data, bufs[i].size)};
    }
    Result<std::vector<store::ReadResult>> r = [&] {
      nb::gil_scoped_release release;
      return client_->GetInto(items);
    }();
    if (!r.ok()) {
      Raise(r.status(), verb);  // the master could not be reached within the retry deadline
    }
    for (size_t i = 0; i < r->size(); ++i) {
      const store::ReadResult& rr = (*r)[i];
      // A buffer smaller than its object is bad input (as in KVStore), although it shows only
      // once the object is found; misses are results.
      if (rr.status.code() == Code::kOutOfRange) {
        Raise(rr.status, std::string(verb) + ": block #" + std::to_string(i));
      }
      out.append(rr.status.ok() ? static_cast<int64_t>(rr.size) : ErrorCode(rr.status));
    }
    return out;
  }

  nb::list BatchPutFrom(nb::handle keys, nb::handle ptrs, nb::handle sizes) {
    Use use(this);
    auto k = Keys(keys, "batch_put_from keys");
    auto p = ToU64s(ptrs, "batch_put_from ptrs");
    auto z = ToU64s(sizes, "batch_put_from sizes");
    CheckRaw("batch_put_from", k.size(), p, z);
    std::vector<ConstBuf> bufs(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      bufs[i] = {reinterpret_cast<const std::byte*>(p[i]), z[i]};
    }
    return Put("batch_put_from", k, bufs);
  }

  nb::list BatchGetInto(nb::handle keys, nb::handle ptrs, nb::handle sizes) {
    Use use(this);
    auto k = Keys(keys, "batch_get_into keys");
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
    Use use(this);
    auto k = Keys(keys, "batch_put keys");
    auto held = BorrowBuffers("batch_put", k.size(), values, /*writable=*/false, kMaxObjectBytes);
    std::vector<ConstBuf> bufs(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      bufs[i] = {held[i].data(), held[i].size()};
    }
    return Put("batch_put", k, bufs);
  }

  nb::list BatchGet(nb::handle keys, nb::handle buffers) {
    Use use(this);
    auto k = Keys(keys, "batch_get keys");
    auto held = BorrowBuffers("batch_get", k.size(), buffers, /*writable=*/true, kMaxObjectBytes);
    std::vector<MutBuf> bufs(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      bufs[i] = {held[i].data(), held[i].size()};
    }
    return Get("batch_get", k, bufs);
  }

  Result<store::ExistsReply> Exists(const std::vector<kv::BlockHash>& hashes) {
    nb::gil_scoped_release release;
    return client_->Exists(fingerprint_, hashes);
  }

  uint64_t BatchExists(nb::handle keys) {
    Use use(this);
    auto h = KeysToHashes(keys, "batch_exists keys");
    if (h.empty()) {
      return 0;
    }
    Result<store::ExistsReply> r = Exists(h);
    if (!r.ok()) {
      Raise(r.status(), "batch_exists");
    }
    return r->prefix_hits;
  }

  nb::list BatchIsExist(nb::handle keys) {
    Use use(this);
    auto h = KeysToHashes(keys, "batch_is_exist keys");
    nb::list out;
    if (h.empty()) {
      return out;
    }
    Result<store::ExistsReply> r = Exists(h);
    if (!r.ok()) {
      Raise(r.status(), "batch_is_exist");
    }
    for (bool b : r->found) {
      out.append(b);
    }
    return out;
  }

  uint64_t Remove(nb::handle keys) {
    Use use(this);
    auto k = Keys(keys, "remove keys");
    if (k.empty()) {
      return 0;
    }
    Result<uint64_t> r = [&] {
      nb::gil_scoped_release release;
      return client_->Remove(k);
    }();
    if (!r.ok()) {
      Raise(r.status(), "remove");
    }
    return *r;
  }

  nb::dict Stats() {
    Use use(this);
    const store::ClientStats s = client_->Stats();
    nb::dict d;
    d["puts_ok"] = s.puts_ok;
    d["puts_failed"] = s.puts_failed;
    d["put_aborts"] = s.put_aborts;
    d["hits_local"] = s.hits_local;
    d["hits_remote"] = s.hits_remote;
    d["misses"] = s.misses;
    d["bad_replicas"] = s.bad_replicas;
    d["rejected"] = s.rejected;
    d["shm_refused"] = s.shm_refused;
    d["bytes_written"] = s.bytes_written;
    d["bytes_read"] = s.bytes_read;
    d["retries"] = s.retries;
    d["leader_lookups"] = s.leader_lookups;
    d["pin_renewals"] = s.pin_renewals;
    d["unpins"] = s.unpins;
    d["put_start_ns"] = s.put_start_ns;
    d["put_write_ns"] = s.put_write_ns;
    d["put_commit_ns"] = s.put_commit_ns;
    d["transfer_descs"] = s.transfer_descs;
    d["transfer_ops"] = s.transfer_ops;
    d["leader"] = client_->leader();
    return d;
  }

  void Close() {
    if (owner_.forked()) {
      closed_ = true;
      (void)client_.release();  // abandon the parent's client (see ~PyClusterStore)
      return;
    }
    {
      std::lock_guard lock(mu_);
      if (closed_) {
        return;
      }
      closed_ = true;
    }
    nb::gil_scoped_release release;  // calls in flight on other threads need the GIL to finish
    std::unique_lock lock(mu_);
    idle_.wait(lock, [&] { return inflight_ == 0; });
    std::unique_ptr<store::StoreClient> c = std::move(client_);
    lock.unlock();
    c.reset();  // stops the unpin thread (a last Unpin try), closes channels and the engine
  }

  // Lock-free, so that a forked child can read it (see Use).
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  uint64_t model_fingerprint() const { return fingerprint_; }

 private:
  const uint64_t fingerprint_;
  OwnerProcess owner_;
  std::unique_ptr<store::StoreClient> client_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::atomic<bool> closed_{false};  // written under mu_ (but in a forked child), read freely
  int inflight_ = 0;                 // guarded by mu_
  std::map<uint64_t, uint64_t> registered_;  // guarded by mu_: address -> size
};

}  // namespace

void BindClusterStore(nb::module_& m) {
  nb::class_<PyClusterOptions>(m, "_ClusterOptions")
      .def(nb::init<>())
      .def_rw("cluster", &PyClusterOptions::cluster)
      .def_rw("etcd", &PyClusterOptions::etcd)
      .def_rw("model_fingerprint", &PyClusterOptions::model_fingerprint)
      .def_rw("etcd_insecure", &PyClusterOptions::etcd_insecure)
      .def_rw("etcd_tls_cert", &PyClusterOptions::etcd_tls_cert)
      .def_rw("etcd_tls_key", &PyClusterOptions::etcd_tls_key)
      .def_rw("etcd_tls_ca", &PyClusterOptions::etcd_tls_ca)
      .def_rw("master_insecure", &PyClusterOptions::master_insecure)
      .def_rw("master_tls_cert", &PyClusterOptions::master_tls_cert)
      .def_rw("master_tls_key", &PyClusterOptions::master_tls_key)
      .def_rw("master_tls_ca", &PyClusterOptions::master_tls_ca)
      .def_rw("host", &PyClusterOptions::host)
      .def_rw("local_node", &PyClusterOptions::local_node)
      .def_rw("local_shm", &PyClusterOptions::local_shm)
      .def_rw("shm_dir", &PyClusterOptions::shm_dir)
      .def_rw("ucx_tls", &PyClusterOptions::ucx_tls)
      .def_rw("transfer_token_file", &PyClusterOptions::transfer_token_file)
      .def_rw("replicas", &PyClusterOptions::replicas)
      .def_rw("retry_deadline", &PyClusterOptions::retry_deadline)
      .def_rw("rpc_timeout", &PyClusterOptions::rpc_timeout)
      .def_rw("etcd_timeout", &PyClusterOptions::etcd_timeout)
      .def_rw("staging_bytes", &PyClusterOptions::staging_bytes)
      .def_rw("transfer_poll", &PyClusterOptions::transfer_poll)
      .def_rw("exists_poll", &PyClusterOptions::exists_poll);
  nb::class_<PyClusterStore>(m, "ClusterStore")
      .def(nb::init<const PyClusterOptions&>(), nb::arg("options"))
      .def("register_buffer", &PyClusterStore::RegisterBuffer, nb::arg("ptr"), nb::arg("size"))
      .def("unregister_buffer", &PyClusterStore::UnregisterBuffer, nb::arg("ptr"))
      .def("batch_put_from", &PyClusterStore::BatchPutFrom, nb::arg("keys"), nb::arg("ptrs"),
           nb::arg("sizes"))
      .def("batch_get_into", &PyClusterStore::BatchGetInto, nb::arg("keys"), nb::arg("ptrs"),
           nb::arg("sizes"))
      .def("batch_put", &PyClusterStore::BatchPut, nb::arg("keys"), nb::arg("values"))
      .def("batch_get", &PyClusterStore::BatchGet, nb::arg("keys"), nb::arg("buffers"))
      .def("batch_exists", &PyClusterStore::BatchExists, nb::arg("keys"))
      .def("batch_is_exist", &PyClusterStore::BatchIsExist, nb::arg("keys"))
      .def("remove", &PyClusterStore::Remove, nb::arg("keys"))
      .def("stats", &PyClusterStore::Stats)
      .def("close", &PyClusterStore::Close)
      .def_prop_ro("closed", &PyClusterStore::closed)
      .def_prop_ro("model_fingerprint", &PyClusterStore::model_fingerprint);
}

}  // namespace dualpath::python
