// Python binding of dualpath's transfer engine (dualpath._core.TransferEngine, exported as
// dualpath.TransferEngine, over dualpath::transfer::TransferEngine,
// include/dualpath/transfer/engine.h; docs/python.md documents it). What an engine connector needs
// to move KV between inference instances: register the paged KV cache's memory, listen and connect
// (the cluster's transfer token proves membership, as for dualpath's own engines), post batches of
// one-sided puts/gets of (local address, remote address, length) descriptors, and exchange small
// messages (notices with a payload) that arrive after a batch's data.
//
// Completions and notices run on the engine's progress thread; they are queued here and handed to
// Python by events(), which the caller polls (or waits on, with the GIL released). No Python code
// ever runs on the progress thread.
//
// Thread safety: every method may be called from any Python thread; close() waits for nothing in
// flight (the engine fails outstanding batches as it stops) and later calls raise ValueError.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/transfer/engine.h"
#include "dualpath/transfer/token.h"
#include "python/convert.h"

namespace dualpath::python {
namespace {

// A completion or a notice, queued by the progress thread for events().
struct Event {
  bool notice = false;
  uint64_t id = 0;   // completion: the batch id submit() returned; notice: the peer id
  int64_t code = 0;  // completion: 0 or the dualpath status code
  uint64_t tag = 0;  // notice
  std::string text;  // completion: the error message; notice: the payload
};

// Shared with the engine's callbacks, which may outlive a closed PyTransferEngine's members.
struct EventQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;

  void Push(Event e) {
    {
      std::lock_guard lock(mu);
      events.push_back(std::move(e));
    }
    cv.notify_all();
  }
};

class PyTransferEngine {
 public:
  PyTransferEngine(std::optional<std::string> token_file, bool insecure, std::string ucx_tls,
                   double peer_timeout, uint64_t low_inflight_bytes)
      : queue_(std::make_shared<EventQueue>()) {
    transfer::EngineConfig cfg;
    cfg.ucx_tls = std::move(ucx_tls);
    cfg.peer_timeout = SecondsArg(peer_timeout, "TransferEngine: peer_timeout", false);
    cfg.low_inflight_bytes = low_inflight_bytes;
    // Unmarked sockets: the engine marks its classes (DSCP) by interposing socket(), which an
    // extension module cannot do (libuct binds to libc's socket()); see ClusterStore.
    for (transfer::ClassConfig& c : cfg.classes) c.dscp = -1;
    // The peer-auth rule of dualpath's engines (docs/transfer.md "Peer authentication"): a token
    // from an owner-only file, or explicitly none.
    if (token_file.has_value() == insecure) {
      RaiseValueError(
          "TransferEngine: give token_file (the cluster's transfer token, an owner-only file) or "
          "insecure=True (no token: only peers without one connect), not both or neither");
    }
    if (token_file.has_value()) {
      Result<std::string> token = transfer::ReadTransferToken(*token_file);
      if (!token.ok()) Raise(token.status(), "TransferEngine: token_file");
      cfg.token = *token;
    }
    Result<std::unique_ptr<transfer::TransferEngine>> e = [&] {
      nb::gil_scoped_release release;
      return transfer::TransferEngine::Create(cfg);
    }();
    if (!e.ok()) Raise(e.status(), "TransferEngine");
    engine_ = std::move(*e);
    std::shared_ptr<EventQueue> q = queue_;
    engine_->SetNoticeHandler([q](transfer::PeerId from, uint64_t tag, std::string_view payload) {
      q->Push(Event{.notice = true, .id = from.value(), .tag = tag, .text = std::string(payload)});
    });
  }

  ~PyTransferEngine() {
    if (engine_ != nullptr && PyGILState_Check()) {
      nb::gil_scoped_release release;
      engine_.reset();
    }
  }

  uint32_t Register(uint64_t ptr, uint64_t size) {
    if (ptr == 0 || size == 0 || ptr + size < ptr) {
      RaiseValueError("register: ptr " + std::to_string(ptr) + ", size " + std::to_string(size) +
                      ": need a non-null pointer, size > 0, no wrap");
    }
    transfer::TransferEngine& e = Engine();
    Result<transfer::RegionId> r = [&] {
      nb::gil_scoped_release release;
      return e.RegisterRegion(reinterpret_cast<void*>(ptr), size);
    }();
    if (!r.ok()) Raise(r.status(), "register");
    return r->value();
  }

  void Deregister(uint32_t region) {
    transfer::TransferEngine& e = Engine();
    Status s;
    {
      nb::gil_scoped_release release;
      s = e.DeregisterRegion(transfer::RegionId(region));
    }
    if (!s.ok()) Raise(s, "deregister");
  }

  std::string Listen(const std::string& addr) {
    transfer::TransferEngine& e = Engine();
    Result<std::string> r = [&] {
      nb::gil_scoped_release release;
      return e.Listen(addr);
    }();
    if (!r.ok()) Raise(r.status(), "listen " + addr);
    return *r;
  }

  uint32_t Connect(const std::string& addr) {
    transfer::TransferEngine& e = Engine();
    Result<transfer::PeerId> r = [&] {
      nb::gil_scoped_release release;
      return e.Connect(addr);
    }();
    if (!r.ok()) Raise(r.status(), "connect " + addr);
    return r->value();
  }

  std::vector<uint32_t> Peers() {
    std::vector<uint32_t> out;
    for (transfer::PeerId p : Engine().Peers()) out.push_back(p.value());
    return out;
  }

  nb::list RemoteRegions(uint32_t peer) {
    Result<std::vector<transfer::RegionRange>> r = Engine().RemoteRegions(transfer::PeerId(peer));
    if (!r.ok()) Raise(r.status(), "remote_regions");
    nb::list out;
    for (const transfer::RegionRange& range : *r)
      out.append(nb::make_tuple(range.addr, range.length));
    return out;
  }

  uint64_t Submit(uint32_t peer, const std::string& op, nb::handle local, nb::handle remote,
                  nb::handle lengths, bool high, std::optional<uint64_t> notice_tag,
                  nb::bytes payload) {
    transfer::Batch b;
    b.peer = transfer::PeerId(peer);
    b.cls = high ? transfer::TrafficClass::kHigh : transfer::TrafficClass::kLow;
    if (op == "put") {
      b.op = transfer::Op::kPut;
    } else if (op == "get") {
      b.op = transfer::Op::kGet;
    } else {
      RaiseValueError("submit: op '" + op + "': expected 'put' or 'get'");
    }
    const std::vector<uint64_t> l = ToU64s(local, "submit: local");
    const std::vector<uint64_t> r = ToU64s(remote, "submit: remote");
    const std::vector<uint64_t> n = ToU64s(lengths, "submit: lengths");
    if (l.size() != r.size() || l.size() != n.size()) {
      RaiseValueError("submit: local, remote and lengths differ in length (" +
                      std::to_string(l.size()) + ", " + std::to_string(r.size()) + ", " +
                      std::to_string(n.size()) + ")");
    }
    b.descs.reserve(l.size());
    for (size_t i = 0; i < l.size(); ++i) b.descs.push_back({l[i], r[i], n[i]});
    b.notify = notice_tag.has_value();
    b.notice_tag = notice_tag.value_or(0);
    b.notice_payload.assign(payload.c_str(), payload.size());
    transfer::TransferEngine& e = Engine();
    const uint64_t id = next_batch_++;
    std::shared_ptr<EventQueue> q = queue_;
    b.on_complete = [q, id](const Status& s) {
      q->Push(Event{.id = id,
                    .code = s.ok() ? 0 : static_cast<int64_t>(s.code()),
                    .text = s.ok() ? std::string() : s.ToString()});
    };
    Status s;
    {
      nb::gil_scoped_release release;
      s = e.Submit(std::move(b));  // validates, queues; never waits for the network
    }
    if (!s.ok()) Raise(s, "submit to peer " + std::to_string(peer));
    return id;
  }

  // Completions ("done", batch id, code, message) and notices ("notice", peer, tag, payload) in
  // arrival order; waits up to `timeout` seconds (None: for ever) for the first when none is
  // queued. An empty list after the timeout.
  nb::list Events(std::optional<double> timeout) {
    std::deque<Event> got;
    {
      nb::gil_scoped_release release;
      std::unique_lock lock(queue_->mu);
      auto ready = [&] { return !queue_->events.empty(); };
      if (!timeout.has_value()) {
        queue_->cv.wait(lock, ready);
      } else if (*timeout > 0) {
        queue_->cv.wait_for(lock, std::chrono::duration<double>(*timeout), ready);
      }
      got.swap(queue_->events);
    }
    nb::list out;
    for (Event& e : got) {
      if (e.notice) {
        out.append(nb::make_tuple("notice", e.id, e.tag, nb::bytes(e.text.data(), e.text.size())));
      } else {
        out.append(nb::make_tuple("done", e.id, e.code, e.text));
      }
    }
    return out;
  }

  nb::dict Stats() {
    const transfer::TransferEngine::Stats s = Engine().GetStats();
    nb::dict d;
    d["batches_completed"] = s.batches_completed;
    d["batches_failed"] = s.batches_failed;
    d["ops_posted"] = s.ops_posted;
    d["low_bytes_in_flight_max"] = s.low_bytes_in_flight_max;
    d["low_batches_deferred"] = s.low_batches_deferred;
    return d;
  }

  void Close() {
    if (engine_ == nullptr) return;
    std::unique_ptr<transfer::TransferEngine> e = std::move(engine_);
    nb::gil_scoped_release release;
    e.reset();  // fails outstanding batches (their completions are queued) and stops threads
  }

  bool closed() const { return engine_ == nullptr; }

 private:
  transfer::TransferEngine& Engine() {
    if (engine_ == nullptr) RaiseValueError("TransferEngine is closed");
    return *engine_;
  }

  std::shared_ptr<EventQueue> queue_;
  std::unique_ptr<transfer::TransferEngine> engine_;
  uint64_t next_batch_ = 1;  // guarded by the GIL (submit holds it while numbering)
};

}  // namespace

void BindTransfer(nb::module_& m) {
  m.attr("MAX_NOTICE_PAYLOAD") = transfer::kMaxNoticePayload;
  nb::class_<PyTransferEngine>(m, "TransferEngine")
      .def(nb::init<std::optional<std::string>, bool, std::string, double, uint64_t>(),
           nb::kw_only(), nb::arg("token_file") = nb::none(), nb::arg("insecure") = false,
           nb::arg("ucx_tls") = "tcp", nb::arg("peer_timeout") = 5.0,
           nb::arg("low_inflight_bytes") = uint64_t{64} << 20)
      .def("register", &PyTransferEngine::Register, nb::arg("ptr"), nb::arg("size"))
      .def("deregister", &PyTransferEngine::Deregister, nb::arg("region"))
      .def("listen", &PyTransferEngine::Listen, nb::arg("addr"))
      .def("connect", &PyTransferEngine::Connect, nb::arg("addr"))
      .def("peers", &PyTransferEngine::Peers)
      .def("remote_regions", &PyTransferEngine::RemoteRegions, nb::arg("peer"))
      .def("submit", &PyTransferEngine::Submit, nb::arg("peer"), nb::arg("op"), nb::arg("local"),
           nb::arg("remote"), nb::arg("lengths"), nb::kw_only(), nb::arg("high") = false,
           nb::arg("notice_tag") = nb::none(), nb::arg("payload") = nb::bytes(""))
      .def("events", &PyTransferEngine::Events, nb::arg("timeout") = 0.0)
      .def("stats", &PyTransferEngine::Stats)
      .def("close", &PyTransferEngine::Close)
      .def_prop_ro("closed", &PyTransferEngine::closed);
}

}  // namespace dualpath::python
