// Issue 17, authenticated endpoints: the scheduler service on TCP with mutual TLS serves a client
// that presents a certificate of the cluster's CA and refuses the handshake of one without a
// certificate, with another CA's certificate, or in plaintext. Certificates are made at test time
// (WriteClusterPki); no private key is in the tree.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "dualpath/common/grpc_tls_pki.h"
#include "dualpath/control/client.h"
#include "dualpath/control/server.h"

namespace dualpath::control {
namespace {

constexpr const char* kSpec = "layers=2,q_heads=2,kv_heads=2,head_dim=16,vocab=512";

class ControlTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/dp_ctls_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(
        WriteClusterPki(dir_ + "/ca", {{"service", {"127.0.0.1"}}, {"client", {"x"}}}).ok());
    ASSERT_TRUE(WriteClusterPki(dir_ + "/other", {{"client", {"x"}}}).ok());
    options_.model_spec = kSpec;
    options_.engines = *ParseEngineList("p0.0:prefill:p0,d0.0:decode:d0");
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  GrpcTls Load(const std::string& pki, const std::string& name, bool with_ca = true) {
    GrpcTlsFiles f;
    if (!name.empty()) {
      f.cert = PkiCertPath(dir_ + "/" + pki, name);
      f.key = PkiKeyPath(dir_ + "/" + pki, name);
    }
    if (with_ca) f.ca = PkiCaPath(dir_ + "/ca");
    Result<GrpcTls> tls = LoadGrpcTls(f);
    EXPECT_TRUE(tls.ok()) << tls.status().ToString();
    return tls.ok() ? *tls : GrpcTls{};
  }
  void StartMutualTls() {
    auto s = ControlServer::Start("127.0.0.1:0", options_, Load("ca", "service"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }
  Status ListWith(const GrpcTls& tls) {
    Client client(server_->address(),
                  ClientOptions{.rpc_timeout = 5 * kNanosPerSecond, .tls = tls});
    return client.ListEngines().status();
  }

  std::string dir_;
  ServiceOptions options_;
  std::unique_ptr<ControlServer> server_;
};

TEST_F(ControlTlsTest, TcpServiceWithoutTlsOrInsecureDoesNotStart) {
  auto s = ControlServer::Start("127.0.0.1:0", options_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--insecure"), std::string::npos) << s.status().ToString();
}

TEST_F(ControlTlsTest, ClientWithTheClusterCertificateIsServed) {
  StartMutualTls();
  Status st = ListWith(Load("ca", "client"));
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST_F(ControlTlsTest, ClientWithoutAValidCertificateIsRejected) {
  StartMutualTls();
  // No certificate, a certificate another CA signed, plaintext: the handshake fails.
  for (const GrpcTls& tls : {Load("ca", ""), Load("other", "client"), GrpcTls{.insecure = true}}) {
    Status st = ListWith(tls);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  }
  // A client that does not trust the service's CA refuses the service (server verification).
  Status st = ListWith(Load("other", "client", /*with_ca=*/false));
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
}

}  // namespace
}  // namespace dualpath::control
