// Issue 19, defect 5: a second server on a taken address refuses ("address in use") and the first
// keeps its address: its socket file stays and still answers.
#include "dualpath/common/listen.h"

#include <arpa/inet.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dualpath/common/grpc_server.h"

namespace dualpath {
namespace {

// These servers test the listening rules, not TLS (grpc_tls_test.cc): plaintext on TCP.
const GrpcTls kPlain{.insecure = true};

class ListenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: sun_path holds 107 bytes.
    dir_ = "/tmp/dp_listen_" + std::to_string(getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A raw unix listener on `path` (the stand-in for "another server").
  static int UnixListen(const std::string& path) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << strerror(errno);
    EXPECT_EQ(listen(fd, 4), 0);
    return fd;
  }
  static bool Answers(const std::string& path) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    close(fd);
    return ok;
  }
  std::string dir_;
};

TEST_F(ListenTest, UnixSocketOfALiveServerIsInUse) {
  const std::string path = dir_ + "/s.sock";
  EXPECT_TRUE(CheckListenAddress("unix:" + path).ok());  // nothing there
  const int fd = UnixListen(path);
  Status s = CheckListenAddress("unix:" + path);
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find("address in use"), std::string::npos) << s.ToString();
  EXPECT_EQ(CheckListenAddress("unix://" + path).code(), Code::kAlreadyExists);
  EXPECT_TRUE(Answers(path));
  // Closed without unlinking: a stale file that a new server may replace.
  close(fd);
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_TRUE(CheckListenAddress("unix:" + path).ok());
}

TEST_F(ListenTest, NonSocketAtThePathIsRefusedAndKept) {
  const std::string path = dir_ + "/file";
  std::ofstream(path) << "data";
  Status s = CheckListenAddress("unix:" + path);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
  EXPECT_EQ(std::filesystem::file_size(path), 4u);
}

TEST_F(ListenTest, TakenTcpPortIsInUse) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  const std::string addr = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  Status s = CheckListenAddress(addr);
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(CheckListenAddress("127.0.0.1:0").ok());
  close(fd);
}

// Two gRPC servers, as `control serve` twice: the second refuses on a unix socket and on a TCP
// port (gRPC alone would unlink the first's socket, or share the port with SO_REUSEPORT), and the
// first still serves on its own address.
TEST_F(ListenTest, SecondGrpcServerRefusesAndTheFirstKeepsServing) {
  const std::string unix_addr = "unix:" + dir_ + "/g.sock";
  // gRPC starts no server without a service; a generic one (unanswered) is enough here.
  grpc::CallbackGenericService svc[4];
  grpc::ServerBuilder b1, b2, b3, b4;
  grpc::ServerBuilder* builders[] = {&b1, &b2, &b3, &b4};
  for (int i = 0; i < 4; ++i) builders[i]->RegisterCallbackGenericService(&svc[i]);
  const mode_t umask_before = ::umask(0022);
  Result<GrpcServerStart> first = StartGrpcServer(b1, "first", unix_addr, kPlain, 1 << 20);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  struct stat before {};
  ASSERT_EQ(stat((dir_ + "/g.sock").c_str(), &before), 0);
  // Owner-only, although the process umask (0022) would have left it group/other-readable, and
  // the umask is the caller's again afterwards.
  EXPECT_TRUE(S_ISSOCK(before.st_mode));
  EXPECT_EQ(before.st_mode & 0777, 0600u) << std::oct << (before.st_mode & 0777);
  EXPECT_EQ(::umask(umask_before), 0022u);
  Result<GrpcServerStart> second = StartGrpcServer(b2, "second", unix_addr, kPlain, 1 << 20);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kAlreadyExists) << second.status().ToString();
  EXPECT_NE(second.status().message().find("address in use"), std::string::npos);
  struct stat after {};
  ASSERT_EQ(stat((dir_ + "/g.sock").c_str(), &after), 0) << "the first server's socket is gone";
  EXPECT_EQ(before.st_ino, after.st_ino) << "the first server's socket was replaced";
  EXPECT_TRUE(Answers(dir_ + "/g.sock"));

  Result<GrpcServerStart> tcp = StartGrpcServer(b3, "tcp", "127.0.0.1:0", kPlain, 1 << 20);
  ASSERT_TRUE(tcp.ok()) << tcp.status().ToString();
  ASSERT_GT(tcp->port, 0);
  EXPECT_EQ(tcp->address, "127.0.0.1:" + std::to_string(tcp->port));
  Result<GrpcServerStart> tcp2 = StartGrpcServer(b4, "tcp2", tcp->address, kPlain, 1 << 20);
  ASSERT_FALSE(tcp2.ok());
  EXPECT_EQ(tcp2.status().code(), Code::kAlreadyExists) << tcp2.status().ToString();

  first->server->Shutdown();
  tcp->server->Shutdown();
}

}  // namespace
}  // namespace dualpath
