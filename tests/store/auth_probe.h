// The store's authentication checked from outside (issue 25 item 1, docs/store.md "Security"):
// what a caller on the network gets from a running store's etcd, leader master and store nodes.
// Used by store_auth_test (processes on localhost) and, through the `store_auth_probe` program,
// by the testbed test of `cluster up --store` (tests/testbed/cluster_store_auth_test.sh).
//
// With the store's own client certificate the probe reads the leader key and the nodes'
// registrations from etcd (which gives it the master's and the nodes' addresses), asks the
// leader's Stats and sends each node a harmless Forget: these must be served, which shows the
// addresses are right. Then, for each of etcd, the leader master and every node, it calls as
//   plaintext   no TLS at all (what any process on the network can do);
//   no-cert     TLS that trusts the store's CA, but presents no client certificate;
//   foreign     TLS with a client certificate of another CA;
// and every one of these calls must be refused at the transport (gRPC UNAVAILABLE: the TLS
// handshake failed, the call never reached a handler). The master and node calls are the forged
// ones of the reproduction, written so that a store without authentication would accept
// them: a JoinNode as the registered store-node-1 with the probe's host name and
// shm_path=/some/file, and a Record of a DRAM replica at offset 0.
//
// Thread safety: one call at a time.
#pragma once

#include <string>
#include <vector>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"

namespace dualpath::store::test {

struct AuthProbeOptions {
  std::string etcd;     // the store's etcd, HOST:PORT
  std::string cluster;  // the store cluster's name
  GrpcTls member;       // a client certificate of the store's CA (and the CA)
  GrpcTls foreign;      // a client certificate of another CA, trusting the store's CA
};

struct AuthProbeCheck {
  std::string what;  // "etcd Range as plaintext", ...
  bool want_served = false;
  Status status;  // what the call returned

  // Served when wanted; refused at the transport (kUnavailable) when not.
  bool pass() const { return want_served ? status.ok() : status.code() == Code::kUnavailable; }
  // One line: PASS/FAIL, what, want, got.
  std::string Line() const;
};

// Runs every check (see above). The master and node checks need the member certificate's etcd
// read to succeed; without it they are reported as one failed check.
std::vector<AuthProbeCheck> RunAuthProbe(const AuthProbeOptions& options);

}  // namespace dualpath::store::test
