#include "cli/tls_flags.h"

namespace dualpath::cli {

void AddTlsFlags(CLI::App* app, GrpcTlsFiles* files, bool serves) {
  app->add_option("--tls-cert", files->cert,
                  serves ? "PEM certificate of the TCP listener (also this process's client "
                           "certificate towards other servers)"
                         : "PEM client certificate, for a server that requires mutual TLS");
  app->add_option("--tls-key", files->key, "PEM private key of --tls-cert (owner-only file)");
  app->add_option("--tls-ca", files->ca,
                  serves ? "PEM CA: clients must present a certificate it signed (mutual TLS); "
                           "also verifies the servers this process calls"
                         : "PEM CA that verifies the server (default: the system's roots)");
  app->add_flag("--insecure", files->insecure,
                "Plaintext gRPC on TCP, without authentication (prints a warning)");
}

void AddPeerTlsFlags(CLI::App* app, GrpcTlsFiles* files, const std::string& peer,
                     const std::string& whom) {
  files->flag_prefix = peer + "-";
  app->add_option(files->Flag("tls-cert"), files->cert,
                  "PEM client certificate towards " + whom + " (default: --tls-cert)");
  app->add_option(files->Flag("tls-key"), files->key,
                  "its PEM private key (owner-only; default: --tls-key)");
  app->add_option(files->Flag("tls-ca"), files->ca,
                  "PEM CA that verifies " + whom + " (default: --tls-ca)");
  app->add_flag(files->Flag("insecure"), files->insecure,
                "plaintext towards " + whom + " (warned; default: --insecure)");
}

}  // namespace dualpath::cli
