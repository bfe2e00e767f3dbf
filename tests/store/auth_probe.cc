#include "auth_probe.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_status.h"
#include "dualpath/coord/etcd_client.h"
#include "dualpath/coord/leader_election.h"
#include "dualpath/coord/membership.h"
#include "dualpath/store/v1/store.grpc.pb.h"

namespace dualpath::store::test {
namespace {

namespace pb = ::dualpath::store::v1;

// Each refused call gives up after this long (a handshake failure is reported at once; the
// deadline only bounds a server that does not answer at all).
constexpr auto kCallDeadline = std::chrono::seconds(5);

struct Caller {
  std::string name;  // "plaintext", "no-cert", "foreign"
  GrpcTls tls;
};

std::vector<Caller> Intruders(const AuthProbeOptions& o) {
  GrpcTls plaintext;
  plaintext.insecure = true;
  GrpcTls no_cert;
  no_cert.ca_pem = o.member.ca_pem;
  return {{"plaintext", plaintext}, {"no-cert", no_cert}, {"foreign", o.foreign}};
}

void SetDeadline(grpc::ClientContext& ctx) {
  ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
}

// A prefix read of the cluster's keys through the project's etcd client with `tls`.
Status EtcdRange(const AuthProbeOptions& o, const GrpcTls& tls, coord::RangeResult* out) {
  coord::EtcdOptions eo;
  eo.endpoints = o.etcd;
  eo.tls = tls;
  eo.rpc_timeout = 3 * kNanosPerSecond;
  ASSIGN_OR_RETURN(std::unique_ptr<coord::EtcdClient> client, coord::EtcdClient::Connect(eo));
  ASSIGN_OR_RETURN(coord::RangeResult r, client->Range("/dualpath/" + o.cluster + "/"));
  if (out != nullptr) *out = std::move(r);
  return Status::Ok();
}

Status MasterStats(const std::string& addr, const GrpcTls& tls) {
  auto stub = pb::StoreMaster::NewStub(MakeChannel(addr, tls));
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  pb::StatsResponse st;
  return FromGrpc(stub->Stats(&ctx, pb::StatsRequest(), &st), "StoreMaster.Stats");
}

// The forged join: node 1 (registered), another host's name, a file of the attacker's
// choosing as the DRAM tier a same-host client would map read-write.
Status ForgedJoin(const std::string& addr, const GrpcTls& tls) {
  auto stub = pb::StoreMaster::NewStub(MakeChannel(addr, tls));
  pb::JoinNodeRequest req;
  pb::NodeEndpoint* e = req.mutable_endpoint();
  e->set_node(1);
  e->set_host("store-auth-probe");
  e->set_transfer_addr("127.0.0.1:1");
  e->set_rpc_addr("127.0.0.1:1");
  e->set_shm_path("/some/file");
  e->set_dram_bytes(64 << 20);
  req.mutable_dram()->set_capacity(64 << 20);
  req.set_member_name("store-node-1");
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  pb::JoinNodeResponse resp;
  return FromGrpc(stub->JoinNode(&ctx, req, &resp), "StoreMaster.JoinNode");
}

pb::ObjectKey ProbeKey(uint8_t fill) {
  pb::ObjectKey k;
  k.set_model_fingerprint(0xA07Full);
  std::string hash(32, static_cast<char>(fill));
  k.set_hash(hash);
  return k;
}

// The forged record: a well-formed DRAM replica (offset 0, 4 KiB) under a key of the
// probe's; a node that took it would report it to the next leader as a committed object.
Status ForgedRecord(const std::string& addr, const GrpcTls& tls) {
  auto stub = pb::StoreNode::NewStub(MakeChannel(addr, tls));
  pb::RecordRequest req;
  pb::ReportedReplica* r = req.add_replicas();
  *r->mutable_key() = ProbeKey(0xB0);
  r->set_tier(pb::TIER_DRAM);
  r->set_offset(0);
  r->set_size(4096);
  r->set_checksum(0x1234);
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  pb::RecordResponse resp;
  return FromGrpc(stub->Record(&ctx, req, &resp), "StoreNode.Record");
}

// What a member may do without changing anything: forget a key no object has.
Status HarmlessForget(const std::string& addr, const GrpcTls& tls) {
  auto stub = pb::StoreNode::NewStub(MakeChannel(addr, tls));
  pb::ForgetRequest req;
  *req.add_keys() = ProbeKey(0xF0);
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  pb::ForgetResponse resp;
  return FromGrpc(stub->Forget(&ctx, req, &resp), "StoreNode.Forget");
}

}  // namespace

std::string AuthProbeCheck::Line() const {
  return std::string(pass() ? "PASS " : "FAIL ") + what + ": want " +
         (want_served ? "served" : "refused at the TLS handshake (unavailable)") + ", got " +
         (status.ok() ? "served" : status.ToString());
}

std::vector<AuthProbeCheck> RunAuthProbe(const AuthProbeOptions& o) {
  std::vector<AuthProbeCheck> out;
  auto add = [&](std::string what, bool want_served, Status status) {
    out.push_back({std::move(what), want_served, std::move(status)});
  };

  coord::RangeResult keys;
  Status member_read = EtcdRange(o, o.member, &keys);
  add("etcd Range with the store's client certificate", true, member_read);
  for (const Caller& c : Intruders(o))
    add("etcd Range as " + c.name, false, EtcdRange(o, c.tls, nullptr));
  if (!member_read.ok()) return out;

  std::optional<std::string> master;
  std::vector<std::string> nodes;
  const std::string leader_key = coord::LeaderElection::LeaderKey(o.cluster);
  const std::string nodes_prefix = coord::Membership::NodesPrefix(o.cluster);
  for (const coord::KeyValue& kv : keys.kvs) {
    if (kv.key == leader_key) master = kv.value;
    if (kv.key.rfind(nodes_prefix + "store-node-", 0) == 0) nodes.push_back(kv.value);
  }
  if (!master) {
    add("etcd lists a leader master (" + leader_key + ")", true, NotFound("no leader key"));
  } else {
    add("StoreMaster.Stats at " + *master + " with the store's client certificate", true,
        MasterStats(*master, o.member));
    for (const Caller& c : Intruders(o)) {
      add("StoreMaster.Stats at " + *master + " as " + c.name, false, MasterStats(*master, c.tls));
      add("forged StoreMaster.JoinNode (store-node-1, shm_path /some/file) at " + *master + " as " +
              c.name,
          false, ForgedJoin(*master, c.tls));
    }
  }
  if (nodes.empty()) {
    add("etcd lists store nodes (" + nodes_prefix + ")", true, NotFound("no store node"));
  }
  for (const std::string& node : nodes) {
    add("StoreNode.Forget at " + node + " with the store's client certificate", true,
        HarmlessForget(node, o.member));
    for (const Caller& c : Intruders(o)) {
      add("forged StoreNode.Record at " + node + " as " + c.name, false, ForgedRecord(node, c.tls));
    }
  }
  return out;
}

}  // namespace dualpath::store::test
