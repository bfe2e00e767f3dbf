// `dualpath store node`: runs one store node (dualpath/store/node.h; docs/store.md "Store node and
// client") until SIGTERM or SIGINT, then deregisters from etcd and removes its DRAM tier file.
#include <pthread.h>
#include <signal.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/tls_flags.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/log.h"
#include "dualpath/common/numeric.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/store/node.h"
#include "dualpath/transfer/token.h"

namespace dualpath::cli {
namespace {

struct NodeArgs {
  std::string cluster;
  std::string etcd;
  uint32_t id = 0;
  std::string host;
  uint64_t dram_mib = 0;
  double high_watermark = 0;
  double low_watermark = 0;
  std::string shm_dir = "/dev/shm";
  std::string transfer_listen;
  std::string listen;
  std::string ucx_tls = "tcp";
  double ttl_s = 10;
  std::string transfer_token_file;
  GrpcTlsFiles tls;
};

int RunNode(const NodeArgs& a) {
  constexpr char kWhat[] = "store node";
  store::NodeOptions o;
  o.cluster = a.cluster;
  o.etcd.endpoints = a.etcd;
  o.id = NodeId(a.id);
  o.host = a.host;
  if (Status s = CheckCountRange("--dram-mib", a.dram_mib, 1, uint64_t{1} << 30, "MiB"); !s.ok()) {
    return ReportError(kWhat, s);
  }
  o.dram_bytes = a.dram_mib << 20;
  o.high_watermark = a.high_watermark;
  o.low_watermark = a.low_watermark;
  o.shm_dir = a.shm_dir;
  o.transfer_listen = a.transfer_listen;
  o.rpc_listen = a.listen;
  o.transfer.ucx_tls = a.ucx_tls;
  if (Status s = CheckRange("--ttl-s", a.ttl_s, 1, 3600, "s"); !s.ok()) {
    return ReportError(kWhat, s);
  }
  o.membership_ttl = FromSeconds(a.ttl_s);
  if (a.transfer_token_file.empty() && !a.tls.insecure) {
    return ReportError(kWhat,
                       InvalidArgument("--transfer-token-file is required unless --insecure"));
  }
  Result<GrpcTls> tls = LoadGrpcTls(a.tls);
  if (!tls.ok()) return ReportError(kWhat, tls.status());
  // One set of TLS options for the node's listener, its calls to the master, and etcd.
  o.rpc_tls = *tls;
  o.master_tls = *tls;
  o.etcd.tls = *tls;
  if (!a.transfer_token_file.empty()) {
    Result<std::string> token = transfer::ReadTransferToken(a.transfer_token_file);
    if (!token.ok()) return ReportError(kWhat, token.status());
    o.transfer.token = std::move(*token);
  }

  // SIGTERM / SIGINT: blocked in every thread (threads inherit the mask), taken by sigwait here.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto node = store::StoreNode::Start(o);
  if (!node.ok()) return ReportError(kWhat, node.status());
  const store::NodeAddress& addr = (*node)->address();
  std::cout << "store node " << a.id << " rpc " << addr.rpc_addr << " transfer "
            << addr.transfer_addr << " shm " << addr.shm_path << std::endl;
  int sig = 0;
  while (sigwait(&set, &sig) != 0 || (sig != SIGTERM && sig != SIGINT)) {
  }
  RequestStop(sig);
  log::Info("store node {}: signal {}: stopping", a.id, sig);
  Status down = (*node)->Shutdown();
  if (!down.ok()) log::Warn("store node {}: shutdown: {}", a.id, down.ToString());
  node->reset();
  std::cerr << "dualpath store node: stopped by " << StopSignalName(sig) << "\n";
  return StopExitCode(sig);
}

void Register(CLI::App& root, int* exit_code) {
  CLI::App* group = GetOrAddGroup(root, "store", "The distributed KV store (docs/store.md)");
  CLI::App* sub = group->add_subcommand("node", "Run a store node: contribute a DRAM tier");
  auto a = std::make_shared<NodeArgs>();
  sub->add_option("--cluster", a->cluster, "store cluster name ([A-Za-z0-9._-], 1..64)")
      ->required();
  sub->add_option("--etcd", a->etcd, "etcd endpoints, HOST:PORT[,HOST:PORT...]")->required();
  sub->add_option("--id", a->id, "node id (>= 1)")->required()->check(CLI::Range(1u, 1u << 30));
  sub->add_option("--dram-mib", a->dram_mib, "DRAM tier size in MiB")->required();
  sub->add_option("--host", a->host, "host name same-host clients match (default: hostname)");
  sub->add_option("--high-watermark", a->high_watermark,
                  "evict above this fraction of the tier (0: the master's default)");
  sub->add_option("--low-watermark", a->low_watermark,
                  "evict down to this fraction (0: the master's default)");
  sub->add_option("--shm-dir", a->shm_dir, "directory of the DRAM tier file (default /dev/shm)");
  sub->add_option("--transfer-listen", a->transfer_listen,
                  "transfer engine listener HOST:PORT (port 0: any)")
      ->required();
  sub->add_option("--listen", a->listen, "StoreNode gRPC listener HOST:PORT or unix:PATH")
      ->required();
  sub->add_option("--ucx-tls", a->ucx_tls, "UCX_TLS of the transfer engine (default tcp)");
  sub->add_option("--ttl-s", a->ttl_s, "etcd membership lease TTL in seconds (default 10)");
  sub->add_option("--transfer-token-file", a->transfer_token_file,
                  "The cluster's transfer token (owner-only file; required unless --insecure)");
  AddTlsFlags(sub, &a->tls, /*serves=*/true);
  sub->callback([a, exit_code] { *exit_code = RunNode(*a); });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
