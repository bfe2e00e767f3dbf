#include "dualpath/transfer/wire.h"

#include <gtest/gtest.h>

#include <random>

namespace dualpath::transfer {
namespace {

Hello Sample() {
  Hello h;
  h.engine_id = 0x1234567890abcdefull;
  h.worker_addrs = {std::string("\x01\x02\x03", 3), std::string(300, 'w')};
  h.tcp_tx_seg = 72 * 1024;
  h.tcp_rx_seg = (1024 + 8) * 1024;
  h.regions.push_back(RegionAdvert{RegionId(1), 0x7f0000000000, 1 << 20, {"rkey-hi", "rkey-lo"}});
  h.regions.push_back(RegionAdvert{RegionId(9), 0x7f0000200000, 4096, {"a", "b"}});
  return h;
}

TEST(WireTest, HelloRoundTrips) {
  Hello h = Sample();
  std::string f = EncodeHello(h);
  EXPECT_EQ(CheckFrame(f).value(), MsgType::kHello);
  Result<Hello> d = DecodeHello(f);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, h);
}

TEST(WireTest, RegionsRoundTripAndTypesAreChecked) {
  Hello h = Sample();
  std::string f = EncodeRegions(h.regions);
  Result<std::vector<RegionAdvert>> d = DecodeRegions(f);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, h.regions);
  EXPECT_EQ(DecodeHello(f).status().code(), Code::kCorruption);
  EXPECT_EQ(DecodeRegions(EncodeHello(h)).status().code(), Code::kCorruption);
}

TEST(WireTest, EveryFlippedByteIsDetected) {
  std::string f = EncodeHello(Sample());
  std::mt19937 rng(42);
  for (size_t i = 0; i < f.size(); ++i) {
    std::string g = f;
    g[i] = static_cast<char>(g[i] ^ (1 + rng() % 255));
    EXPECT_FALSE(DecodeHello(g).ok()) << "byte " << i;
  }
  for (size_t n = 0; n < f.size(); ++n) {
    EXPECT_FALSE(DecodeHello(std::string_view(f).substr(0, n)).ok()) << "truncated to " << n;
  }
}

TEST(WireTest, BadRemoteKeysAreRejected) {
  Hello h = Sample();
  h.regions[1].rkeys[0].clear();
  EXPECT_EQ(DecodeHello(EncodeHello(h)).status().code(), Code::kTransferBadRkey);
  h = Sample();
  h.regions[0].rkeys[1] = std::string(kMaxBlobBytes + 1, 'x');
  EXPECT_EQ(DecodeHello(EncodeHello(h)).status().code(), Code::kTransferBadRkey);
  h = Sample();
  h.regions[0].length = 0;
  EXPECT_EQ(DecodeHello(EncodeHello(h)).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace dualpath::transfer
