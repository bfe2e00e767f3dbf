// Issue 17, authenticated endpoints: the transfer engine admits only peers that prove they hold
// the cluster's token (peer_auth.h). Engines with the same token connect and transfer; an engine
// with another token, a process that skips the handshake and one that answers the challenge with
// a forged proof are refused, and are never added as peers. The token file must be owner-only.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>
#include <vector>

#include "dualpath/transfer/control_channel.h"
#include "dualpath/transfer/engine.h"
#include "dualpath/transfer/token.h"
#include "dualpath/transfer/wire.h"

namespace dualpath::transfer {
namespace {

constexpr Nanos kGuard = 30 * kNanosPerSecond;  // a hang guard, not a timing assertion

std::unique_ptr<TransferEngine> Make(const std::string& token) {
  EngineConfig cfg;
  cfg.ucx_tls = "tcp";
  cfg.busy_poll = false;
  cfg.token = token;
  auto e = TransferEngine::Create(cfg);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// The next frame from a raw channel (the "stray process" side).
std::string Next(ControlChannel& ch) {
  Result<std::string> m = ch.Receive();
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : std::string();
}

TEST(PeerAuthTest, SameTokenConnectsAndTransfers) {
  auto a = Make("cluster-token-0123456789abcdef");
  auto b = Make("cluster-token-0123456789abcdef");
  Result<std::string> addr = b->Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok()) << addr.status().ToString();
  std::vector<uint8_t> src(4096, 0x5a), dst(4096, 0);
  ASSERT_TRUE(a->RegisterRegion(src.data(), src.size()).ok());
  ASSERT_TRUE(b->RegisterRegion(dst.data(), dst.size()).ok());
  Result<PeerId> peer = a->Connect(*addr);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  ASSERT_EQ(a->RemoteRegions(*peer)->size(), 1u);  // B's region came with its HELLO
  auto done = std::make_shared<std::promise<Status>>();
  Batch batch;
  batch.peer = *peer;
  batch.descs.push_back(Descriptor{reinterpret_cast<uint64_t>(src.data()),
                                   reinterpret_cast<uint64_t>(dst.data()), src.size()});
  batch.on_complete = [done](const Status& s) { done->set_value(s); };
  ASSERT_TRUE(a->Submit(std::move(batch)).ok());
  auto fut = done->get_future();
  ASSERT_EQ(fut.wait_for(std::chrono::nanoseconds(kGuard)), std::future_status::ready);
  EXPECT_TRUE(fut.get().ok());
  EXPECT_EQ(dst, src);
}

TEST(PeerAuthTest, WrongOrMissingTokenIsRefusedAndNeverAdded) {
  auto b = Make("cluster-token-0123456789abcdef");
  Result<std::string> addr = b->Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok());
  for (const char* token : {"another-token-0123456789abcdef", ""}) {
    auto stray = Make(token);
    Result<PeerId> id = stray->Connect(*addr);
    ASSERT_FALSE(id.ok()) << "token '" << token << "' was admitted";
    EXPECT_EQ(id.status().code(), Code::kPermissionDenied) << id.status().ToString();
    EXPECT_NE(id.status().message().find("wrong transfer token"), std::string::npos)
        << id.status().ToString();
    EXPECT_TRUE(stray->Peers().empty());
  }
  // The listener still admits the right token afterwards, and has exactly that one peer.
  auto good = Make("cluster-token-0123456789abcdef");
  ASSERT_TRUE(good->Connect(*addr).ok());
  ASSERT_TRUE(b->WaitForPeers(1, kGuard).ok());
  EXPECT_EQ(b->Peers().size(), 1u);
}

TEST(PeerAuthTest, RawPeerWithoutHandshakeOrWithAForgedProofIsRefused) {
  auto b = Make("cluster-token-0123456789abcdef");
  Result<std::string> addr = b->Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok());
  {
    // A HELLO straight away (an engine of the old protocol, a stray client): refused.
    auto ch = TcpConnect(*addr, -1);
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    Hello hello;
    hello.worker_addrs = {"x", "y"};
    ASSERT_TRUE((*ch)->Send(EncodeHello(hello)).ok());
    Result<std::string> reason = DecodeRefused(Next(**ch));
    ASSERT_TRUE(reason.ok()) << reason.status().ToString();
    EXPECT_NE(reason->find("no transfer token presented"), std::string::npos) << *reason;
  }
  {
    // The challenge, then a proof that is not the token's: refused.
    auto ch = TcpConnect(*addr, -1);
    ASSERT_TRUE(ch.ok());
    const std::string nonce(kAuthNonceBytes, 'n');
    ASSERT_TRUE((*ch)->Send(EncodeAuth(Auth{nonce, ""})).ok());
    Result<Auth> theirs = DecodeAuth(Next(**ch));
    ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
    EXPECT_EQ(theirs->proof.size(), kAuthProofBytes);
    ASSERT_TRUE((*ch)->Send(EncodeAuth(Auth{nonce, std::string(kAuthProofBytes, '\0')})).ok());
    Result<std::string> reason = DecodeRefused(Next(**ch));
    ASSERT_TRUE(reason.ok()) << reason.status().ToString();
    EXPECT_EQ(*reason, "wrong transfer token");
  }
  EXPECT_TRUE(b->Peers().empty());
}

TEST(PeerAuthTest, WireAuthFramesRoundTripAndAreChecked) {
  Auth a{std::string(kAuthNonceBytes, 'a'), std::string(kAuthProofBytes, 'p')};
  Result<Auth> back = DecodeAuth(EncodeAuth(a));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, a);
  EXPECT_FALSE(DecodeAuth(EncodeAuth(Auth{"short", ""})).ok());
  EXPECT_FALSE(DecodeAuth(EncodeRefused("x")).ok());
  EXPECT_EQ(*DecodeRefused(EncodeRefused("why")), "why");
}

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/dp_token_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }
  std::string dir_;
};

TEST_F(TokenFileTest, OwnerOnlyTokenIsReadWithoutItsNewline) {
  Result<std::string> t = ReadTransferToken(Write("t", "0123456789abcdef0123\n", 0600));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, "0123456789abcdef0123");
}

TEST_F(TokenFileTest, BadTokenFilesAreRefusedNamingTheProblem) {
  auto refused = [](const std::string& path, const std::string& want) {
    Result<std::string> t = ReadTransferToken(path);
    ASSERT_FALSE(t.ok()) << path;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
    EXPECT_NE(t.status().message().find(want), std::string::npos) << t.status().ToString();
  };
  refused(Write("open", "0123456789abcdef0123\n", 0644), "must be owner-only");
  refused(Write("group", "0123456789abcdef0123\n", 0640), "must be owner-only");
  refused(Write("short", "abc\n", 0600), "must have 16 to 4096");
  refused(Write("empty", "", 0600), "is empty");
  refused(dir_ + "/missing", "does not exist");
  refused(dir_, "not a regular file");
}

TEST_F(TokenFileTest, WrittenTokenIsOwnerOnlyAndReadsBack) {
  const std::string path = dir_ + "/written";
  ASSERT_TRUE(WriteTransferTokenFile(path).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Result<std::string> t = ReadTransferToken(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->size(), 64u);
  EXPECT_FALSE(WriteTransferTokenFile(path).ok()) << "an existing token file was overwritten";
}

}  // namespace
}  // namespace dualpath::transfer
