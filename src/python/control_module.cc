// Python binding of the scheduler service's one client (dualpath._core.SchedulerClient over
// dualpath::control::Client, include/dualpath/control/client.h), with the calls a proxy in front of
// inference instances makes in placement mode (`control serve --placement`, docs/control.md
// "Placement"): register an instance, report instances' load and deaths, place a request, report
// its end. Messages cross as plain Python values (dicts, lists, bytes), so the package needs no
// protobuf runtime.
//
// Errors: the client's Status through the extension's one mapping (convert.h): bad input is
// ValueError; an unreachable service, a Place that found no instance pair in time (kUnavailable)
// or a refusal is dualpath.Error with `code` (dualpath.error_name(-code) names it).
//
// Thread safety: control::Client is thread-safe; every call releases the GIL while it waits.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/control/client.h"
#include "python/convert.h"

namespace dualpath::python {
namespace {

namespace v1 = control::v1;

int64_t IntField(nb::handle d, const char* key, int64_t fallback) {
  nb::dict dict = nb::borrow<nb::dict>(d);
  if (!dict.contains(key)) return fallback;
  return nb::cast<int64_t>(dict[key]);
}

// [{"engine_id": .., "unfinished_requests": .., "unfinished_tokens": .., "read_queue_tokens": ..,
//   "hbm_free_tokens": .., "capacity_tokens": ..}, ...]; missing counts are 0.
template <typename Add>
void AddReports(nb::handle reports, Add add) {
  for (nb::handle r : reports) {
    if (!nb::isinstance<nb::dict>(r)) RaiseTypeError("reports: each report must be a dict");
    if (!nb::borrow<nb::dict>(r).contains("engine_id")) {
      RaiseValueError("reports: a report has no engine_id");
    }
    v1::EngineReport* e = add();
    e->set_engine_id(static_cast<uint32_t>(IntField(r, "engine_id", 0)));
    e->set_unfinished_requests(IntField(r, "unfinished_requests", 0));
    e->set_unfinished_tokens(IntField(r, "unfinished_tokens", 0));
    e->set_read_queue_tokens(IntField(r, "read_queue_tokens", 0));
    e->set_hbm_free_tokens(IntField(r, "hbm_free_tokens", 0));
    e->set_capacity_tokens(IntField(r, "capacity_tokens", 0));
  }
}

nb::dict InfoDict(const v1::EngineInfo& e) {
  nb::dict d;
  d["name"] = e.name();
  d["role"] = e.role() == v1::ROLE_DECODE ? "decode" : "prefill";
  d["node"] = e.node();
  d["peer_addr"] = e.peer_addr();
  d["transfer_addr"] = e.transfer_addr();
  return d;
}

class PySchedulerClient {
 public:
  PySchedulerClient(std::string address, bool insecure, std::optional<std::string> tls_cert,
                    std::optional<std::string> tls_key, std::optional<std::string> tls_ca,
                    double rpc_timeout) {
    control::ClientOptions o;
    o.rpc_timeout = SecondsArg(rpc_timeout, "SchedulerClient: rpc_timeout", false);
    if (!IsUnixAddress(address)) {
      o.tls = TlsArg("SchedulerClient", "scheduler", insecure, tls_cert, tls_key, tls_ca);
    }
    client_ = std::make_unique<control::Client>(std::move(address), std::move(o));
  }

  nb::dict Register(const std::string& name, const std::string& role, const std::string& node,
                    const std::string& peer_addr, const std::string& transfer_addr,
                    int64_t hbm_tokens) {
    v1::RegisterEngineRequest req;
    v1::EngineInfo* e = req.mutable_engine();
    e->set_name(name);
    if (role == "prefill") {
      e->set_role(v1::ROLE_PREFILL);
    } else if (role == "decode") {
      e->set_role(v1::ROLE_DECODE);
    } else {
      RaiseValueError("register: role '" + role + "': expected 'prefill' or 'decode'");
    }
    e->set_node(node);
    e->set_peer_addr(peer_addr);
    e->set_transfer_addr(transfer_addr);
    e->set_hbm_tokens(hbm_tokens);
    Result<v1::RegisterEngineReply> r = [&] {
      nb::gil_scoped_release release;
      return client_->RegisterEngine(req);
    }();
    if (!r.ok()) Raise(r.status(), "register " + name);
    nb::dict d;
    d["engine_id"] = r->engine_id();
    d["block_tokens"] = r->block_tokens();
    d["hash_algo"] = r->hash_algo();
    d["hash_seed"] = r->hash_seed();
    d["heartbeat_s"] = r->heartbeat_s();
    d["system"] = r->system();
    return d;
  }

  nb::dict Place(uint64_t request_id, nb::handle prompt, uint32_t gen_tokens, nb::handle reports,
                 uint32_t wait_ms, uint64_t agent_id, uint32_t turn) {
    v1::PlaceRequest req;
    v1::RequestSpec* spec = req.mutable_request();
    spec->set_request_id(request_id);
    spec->set_agent_id(agent_id);
    spec->set_turn(turn);
    const std::vector<uint64_t> tokens = ToU64s(prompt, "place: prompt");
    spec->mutable_prompt()->Reserve(static_cast<int>(tokens.size()));
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] > UINT32_MAX) {
        RaiseValueError("place: prompt token " + std::to_string(tokens[i]) + " at position " +
                        std::to_string(i) + " is not a token id");
      }
      spec->add_prompt(static_cast<uint32_t>(tokens[i]));
    }
    spec->set_gen_tokens(gen_tokens);
    AddReports(reports, [&] { return req.add_reports(); });
    req.set_wait_ms(wait_ms);
    Result<v1::PlaceReply> r = [&] {
      nb::gil_scoped_release release;
      return client_->Place(req);
    }();
    if (!r.ok()) Raise(r.status());
    const v1::Assignment& a = r->assignment();
    nb::dict d;
    d["request_id"] = a.request().request_id();
    d["prefill_engine"] = a.prefill_engine();
    d["decode_engine"] = a.decode_engine();
    d["prefill"] = InfoDict(a.prefill());
    d["decode"] = InfoDict(a.decode());
    d["side"] = std::string(control::ReadSideName(a.side()));
    d["hit_tokens"] = a.hit_tokens();
    d["prefill_read_tokens"] = a.prefill_read_tokens();
    d["decode_read_tokens"] = a.decode_read_tokens();
    d["prompt_block_hashes"] =
        nb::bytes(a.prompt_block_hashes().data(), a.prompt_block_hashes().size());
    return d;
  }

  std::vector<uint32_t> ReportEngines(nb::handle reports, nb::handle dead,
                                      const std::string& reason) {
    v1::ReportEnginesRequest req;
    AddReports(reports, [&] { return req.add_reports(); });
    for (uint64_t id : ToU64s(dead, "report_engines: dead")) {
      req.add_dead(static_cast<uint32_t>(id));
    }
    req.set_reason(reason);
    Result<v1::ReportEnginesReply> r = [&] {
      nb::gil_scoped_release release;
      return client_->ReportEngines(req);
    }();
    if (!r.ok()) Raise(r.status());
    return {r->dead().begin(), r->dead().end()};
  }

  void Finish(uint64_t request_id, bool ok, const std::string& error) {
    v1::RequestResult result;
    result.set_request_id(request_id);
    result.set_ok(ok);
    result.set_error(error);
    Status s;
    {
      nb::gil_scoped_release release;
      s = client_->ReportResult(result);
    }
    if (!s.ok()) Raise(s, "finish request " + std::to_string(request_id));
  }

  nb::list ListEngines() {
    Result<v1::ListEnginesReply> r = [&] {
      nb::gil_scoped_release release;
      return client_->ListEngines();
    }();
    if (!r.ok()) Raise(r.status());
    nb::list out;
    for (int i = 0; i < r->engines_size(); ++i) {
      nb::dict d = InfoDict(r->engines(i));
      d["engine_id"] = r->engine_ids(i);
      d["alive"] = r->alive(i);
      out.append(d);
    }
    return out;
  }

 private:
  std::unique_ptr<control::Client> client_;
};

}  // namespace

void BindControl(nb::module_& m) {
  nb::class_<PySchedulerClient>(m, "SchedulerClient")
      .def(nb::init<std::string, bool, std::optional<std::string>, std::optional<std::string>,
                    std::optional<std::string>, double>(),
           nb::arg("address"), nb::kw_only(), nb::arg("insecure") = false,
           nb::arg("tls_cert") = nb::none(), nb::arg("tls_key") = nb::none(),
           nb::arg("tls_ca") = nb::none(), nb::arg("rpc_timeout") = 10.0)
      .def("register", &PySchedulerClient::Register, nb::arg("name"), nb::arg("role"),
           nb::arg("node"), nb::arg("peer_addr"), nb::arg("transfer_addr"),
           nb::arg("hbm_tokens") = 0)
      .def("place", &PySchedulerClient::Place, nb::arg("request_id"), nb::arg("prompt"),
           nb::arg("gen_tokens"), nb::arg("reports") = nb::list(), nb::arg("wait_ms") = 10000,
           nb::arg("agent_id") = 0, nb::arg("turn") = 0)
      .def("report_engines", &PySchedulerClient::ReportEngines, nb::arg("reports"),
           nb::arg("dead") = nb::list(), nb::arg("reason") = "")
      .def("finish", &PySchedulerClient::Finish, nb::arg("request_id"), nb::arg("ok"),
           nb::arg("error") = "")
      .def("list_engines", &PySchedulerClient::ListEngines);
}

}  // namespace dualpath::python
