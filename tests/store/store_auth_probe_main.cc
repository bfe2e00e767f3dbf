// store_auth_probe: RunAuthProbe (auth_probe.h) against a running store, for the testbed test of
// `cluster up --store`, which runs it inside a node's namespace.
//
//   store_auth_probe --etcd HOST:PORT --cluster NAME --cert C --key K --ca CA
//                    --foreign-cert FC --foreign-key FK
// C/K/CA: the store's client certificate, its key and the store's CA; FC/FK: a client
// certificate of another CA. Prints one line per check; exit 0 when every check passed, 1 when
// one failed, 2 for bad arguments.
#include <cstdio>
#include <map>
#include <string>

#include "auth_probe.h"

int main(int argc, char** argv) {
  using namespace dualpath;
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  for (const char* need :
       {"--etcd", "--cluster", "--cert", "--key", "--ca", "--foreign-cert", "--foreign-key"}) {
    if (args[need].empty() || argc % 2 != 1) {
      std::fprintf(stderr, "store_auth_probe: %s is required (see the file's comment)\n", need);
      return 2;
    }
  }
  Result<GrpcTls> member =
      LoadGrpcTls({.cert = args["--cert"], .key = args["--key"], .ca = args["--ca"]});
  Result<GrpcTls> foreign = LoadGrpcTls(
      {.cert = args["--foreign-cert"], .key = args["--foreign-key"], .ca = args["--ca"]});
  for (const Result<GrpcTls>* r : {&member, &foreign}) {
    if (!r->ok()) {
      std::fprintf(stderr, "store_auth_probe: %s\n", r->status().ToString().c_str());
      return 2;
    }
  }
  const std::vector<store::test::AuthProbeCheck> checks =
      store::test::RunAuthProbe({args["--etcd"], args["--cluster"], *member, *foreign});
  int failed = 0;
  for (const auto& c : checks) {
    std::printf("%s\n", c.Line().c_str());
    failed += c.pass() ? 0 : 1;
  }
  std::printf("store_auth_probe: %zu checks, %d failed\n", checks.size(), failed);
  return failed == 0 ? 0 : 1;
}
