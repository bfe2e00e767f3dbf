// `dualpath store master|...`: the distributed KV store's processes (docs/store.md).
#include <signal.h>

#include <iostream>
#include <string>

#include "cli/command.h"
#include "cli/tls_flags.h"
#include "dualpath/common/log.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/store/master_server.h"

namespace dualpath::cli {
namespace {

struct EtcdArgs {
  std::string endpoints;
  GrpcTlsFiles tls;
  double rpc_timeout_s = 5.0;
};

void AddEtcdFlags(CLI::App* app, EtcdArgs* a) {
  app->add_option("--etcd", a->endpoints, "etcd endpoints: HOST:PORT[,HOST:PORT...] or unix:PATH")
      ->required();
  app->add_option("--etcd-tls-cert", a->tls.cert, "client certificate towards etcd (PEM)");
  app->add_option("--etcd-tls-key", a->tls.key, "its private key (PEM, mode 0600)");
  app->add_option("--etcd-tls-ca", a->tls.ca, "CA that signed etcd's certificate (PEM)");
  app->add_flag("--etcd-insecure", a->tls.insecure, "plaintext towards etcd (warned)");
  app->add_option("--etcd-timeout", a->rpc_timeout_s, "deadline of each etcd call, seconds")
      ->capture_default_str();
}

Result<coord::EtcdOptions> LoadEtcd(const EtcdArgs& a) {
  coord::EtcdOptions o;
  o.endpoints = a.endpoints;
  if (!(a.rpc_timeout_s > 0)) return InvalidArgument("--etcd-timeout must be > 0 seconds");
  o.rpc_timeout = static_cast<Nanos>(a.rpc_timeout_s * 1e9);
  Result<GrpcTls> tls = LoadGrpcTls(a.tls);
  if (!tls.ok()) {
    return Status(tls.status().code(), "etcd TLS (--etcd-tls-*): " + tls.status().message());
  }
  o.tls = *tls;
  return o;
}

// Blocks SIGTERM/SIGINT in every thread started after it and waits for one.
class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  }
  int Wait() {
    int sig = 0;
    sigwait(&signals_, &sig);
    return sig;
  }

 private:
  sigset_t signals_;
};

struct MasterArgs {
  std::string cluster;
  EtcdArgs etcd;
  std::string listen;
  std::string advertise;
  GrpcTlsFiles tls;
  GrpcTlsFiles node_tls;
  double election_ttl_s = 10;
  double join_grace_s = 2;
  double put_timeout_s = 30;
  double pin_ttl_s = 10;
};

int Master(const MasterArgs& a) {
  store::MasterServerOptions o;
  o.cluster = a.cluster;
  Result<coord::EtcdOptions> etcd = LoadEtcd(a.etcd);
  if (!etcd.ok()) return ReportError("store master", etcd.status());
  o.etcd = *etcd;
  o.listen = a.listen;
  o.advertise = a.advertise;
  Result<GrpcTls> tls = LoadGrpcTls(a.tls);
  if (!tls.ok()) return ReportError("store master", tls.status());
  o.tls = *tls;
  // Towards the nodes: the same files unless given (--node-tls-*).
  GrpcTlsFiles nf = a.node_tls;
  if (nf.cert.empty() && nf.key.empty() && nf.ca.empty() && !nf.insecure) nf = a.tls;
  Result<GrpcTls> node_tls = LoadGrpcTls(nf);
  if (!node_tls.ok()) return ReportError("store master: node TLS", node_tls.status());
  o.node_tls = *node_tls;
  for (auto [v, name] :
       {std::pair{a.election_ttl_s, "--election-ttl"}, std::pair{a.join_grace_s, "--join-grace"},
        std::pair{a.put_timeout_s, "--put-timeout"}, std::pair{a.pin_ttl_s, "--pin-ttl"}}) {
    if (!(v >= 0) || v > 86400) {
      return ReportError("store master",
                         InvalidArgument(std::string(name) + " must be 0 .. 86400 seconds"));
    }
  }
  o.election_ttl = static_cast<Nanos>(a.election_ttl_s * 1e9);
  o.join_grace = static_cast<Nanos>(a.join_grace_s * 1e9);
  o.state.put_timeout = static_cast<Nanos>(a.put_timeout_s * 1e9);
  o.state.pin_ttl = static_cast<Nanos>(a.pin_ttl_s * 1e9);

  SignalWaiter signals;
  auto server = store::MasterServer::Start(std::move(o));
  if (!server.ok()) return ReportError("store master", server.status());
  std::cout << "listening on " << (*server)->address() << std::endl;
  const int sig = signals.Wait();
  log::Info("store master: signal {}: resigning", sig);
  (*server)->Shutdown();
  return kExitOk;
}

void Register(CLI::App& root, int* exit_code) {
  CLI::App* store = root.add_subcommand(
      "store", "the distributed KV store: master and node processes (docs/store.md)");
  store->require_subcommand(1);

  auto m = std::make_shared<MasterArgs>();
  CLI::App* master = store->add_subcommand(
      "master", "serve StoreMaster; campaign for leadership through etcd (run two or more)");
  master->add_option("--cluster", m->cluster, "cluster name: etcd keys /dualpath/<cluster>/")
      ->required();
  AddEtcdFlags(master, &m->etcd);
  master->add_option("--listen", m->listen, "StoreMaster address: HOST:PORT or unix:PATH")
      ->required();
  master->add_option("--advertise", m->advertise,
                     "address clients dial, written in the leader key (default: the bound one)");
  AddTlsFlags(master, &m->tls, /*serves=*/true);
  master->add_option("--node-tls-cert", m->node_tls.cert, "towards the nodes (default: --tls-*)");
  master->add_option("--node-tls-key", m->node_tls.key, "its key");
  master->add_option("--node-tls-ca", m->node_tls.ca, "CA of the nodes' certificates");
  master->add_flag("--node-insecure", m->node_tls.insecure, "plaintext towards the nodes");
  master->add_option("--election-ttl", m->election_ttl_s, "leader lease TTL, seconds")
      ->capture_default_str();
  master
      ->add_option("--join-grace", m->join_grace_s,
                   "a new leader serves after this long even if listed nodes did not join")
      ->capture_default_str();
  master->add_option("--put-timeout", m->put_timeout_s, "uncommitted puts reclaimed after, s")
      ->capture_default_str();
  master->add_option("--pin-ttl", m->pin_ttl_s, "readers' pins expire after, s")
      ->capture_default_str();
  master->callback([m, exit_code] { *exit_code = Master(*m); });
}

}  // namespace

DUALPATH_CLI_COMMAND(Register);

}  // namespace dualpath::cli
