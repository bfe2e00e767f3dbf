#include "dualpath/kv/layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace dualpath::kv {
namespace {

std::vector<std::byte> Pattern(size_t n, uint8_t salt) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + salt) & 0xFF);
  return v;
}

TEST(BlockShapeTest, SizesAndOffsets) {
  const BlockShape s{3, 4, 10};
  EXPECT_EQ(s.LayerBytes(), 40u);
  EXPECT_EQ(s.FullBytes(), 120u);
  EXPECT_EQ(s.LayerOffset(2), 80u);
  EXPECT_EQ(s.Offset(1, 3), 40u + 30u);
  const BlockShape ds = BlockShape::For(*FindModel("ds660b"), 64);
  EXPECT_EQ(ds, (BlockShape{61, 64, 656}));
  EXPECT_EQ(ds.FullBytes(), 61u * 64 * 656);
}

TEST(FullBlockViewTest, MakeChecksSize) {
  std::vector<std::byte> buf(120);
  EXPECT_TRUE(FullBlockView::Make(std::span<const std::byte>(buf), BlockShape{3, 4, 10}).ok());
  EXPECT_EQ(
      FullBlockView::Make(std::span<const std::byte>(buf), BlockShape{3, 4, 11}).status().code(),
      Code::kInvalidArgument);
  EXPECT_EQ(
      MutableFullBlockView::Make(std::span<std::byte>(buf), BlockShape{0, 4, 10}).status().code(),
      Code::kInvalidArgument);
}

// A Full Block is the concatenation of its Layer Blocks: Layer(l) is a view, not a copy.
TEST(FullBlockViewTest, LayerIsAViewIntoTheFullBlock) {
  std::vector<std::byte> buf = Pattern(120, 7);
  MutableFullBlockView full = *MutableFullBlockView::Make(buf, BlockShape{3, 4, 10});
  EXPECT_EQ(full.bytes().data(), buf.data());
  for (uint32_t l = 0; l < 3; ++l) {
    MutableLayerBlockView layer = full.Layer(l);
    EXPECT_EQ(layer.bytes().data(), buf.data() + 40 * l);
    EXPECT_EQ(layer.bytes().size(), 40u);
    EXPECT_EQ(layer.tokens(), 4u);
    EXPECT_EQ(layer.bytes_per_token(), 10u);
    EXPECT_EQ(layer.Token(2).data(), buf.data() + 40 * l + 20);
  }
  // Writing through a layer view writes the full block.
  full.Layer(1).Token(0)[0] = std::byte{0xEE};
  EXPECT_EQ(buf[40], std::byte{0xEE});
  // Views convert to const.
  FullBlockView cf = full;
  LayerBlockView cl = cf.Layer(2);
  EXPECT_EQ(cl.bytes().data(), buf.data() + 80);
}

TEST(LayoutCopyTest, AssembleAndSplitRoundTrip) {
  const BlockShape shape{5, 16, 24};
  std::vector<std::vector<std::byte>> layers;
  std::vector<LayerBlockView> views;
  for (uint32_t l = 0; l < shape.num_layers; ++l) {
    layers.push_back(Pattern(shape.LayerBytes(), static_cast<uint8_t>(l)));
  }
  for (auto& l : layers) views.emplace_back(std::span<const std::byte>(l), 16, 24);
  std::vector<std::byte> full_buf(shape.FullBytes());
  MutableFullBlockView full = *MutableFullBlockView::Make(full_buf, shape);
  ASSERT_TRUE(AssembleFullBlock(views, full).ok());
  // Byte-for-byte concatenation.
  std::vector<std::byte> concat;
  for (auto& l : layers) concat.insert(concat.end(), l.begin(), l.end());
  EXPECT_EQ(full_buf, concat);
  // And back out, layer by layer.
  for (uint32_t l = 0; l < shape.num_layers; ++l) {
    std::vector<std::byte> out(shape.LayerBytes());
    ASSERT_TRUE(CopyLayerFromFull(full, l, MutableLayerBlockView(out, 16, 24)).ok());
    EXPECT_EQ(out, layers[l]) << l;
  }
}

TEST(LayoutCopyTest, CopyIntoFullSingleLayer) {
  const BlockShape shape{2, 2, 3};
  std::vector<std::byte> full_buf(shape.FullBytes(), std::byte{0});
  std::vector<std::byte> layer = Pattern(6, 1);
  MutableFullBlockView full = *MutableFullBlockView::Make(full_buf, shape);
  ASSERT_TRUE(CopyLayerIntoFull(LayerBlockView(layer, 2, 3), 1, full).ok());
  EXPECT_TRUE(std::all_of(full_buf.begin(), full_buf.begin() + 6,
                          [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_TRUE(std::equal(layer.begin(), layer.end(), full_buf.begin() + 6));
}

TEST(LayoutCopyTest, MismatchesAreErrors) {
  const BlockShape shape{2, 4, 8};
  std::vector<std::byte> full_buf(shape.FullBytes());
  MutableFullBlockView full = *MutableFullBlockView::Make(full_buf, shape);
  std::vector<std::byte> layer(32);
  std::vector<std::byte> wrong(24);
  EXPECT_EQ(CopyLayerIntoFull(LayerBlockView(layer, 4, 8), 2, full).code(), Code::kInvalidArgument);
  EXPECT_EQ(CopyLayerIntoFull(LayerBlockView(wrong, 3, 8), 0, full).code(), Code::kInvalidArgument);
  EXPECT_EQ(CopyLayerFromFull(full, 0, MutableLayerBlockView(wrong, 4, 6)).code(),
            Code::kInvalidArgument);
  const LayerBlockView one[] = {LayerBlockView(layer, 4, 8)};
  EXPECT_EQ(AssembleFullBlock(one, full).code(), Code::kInvalidArgument);
}

TEST(LayoutDeathTest, OutOfRangeIndexAborts) {
  std::vector<std::byte> buf(24);
  FullBlockView full = *FullBlockView::Make(std::span<const std::byte>(buf), BlockShape{2, 3, 4});
  EXPECT_DEATH((void)full.Layer(2), "layer index out of range");
  EXPECT_DEATH((void)full.Layer(0).Token(3), "token index out of range");
  EXPECT_DEATH(LayerBlockView(std::span<const std::byte>(buf), 5, 5), "buffer size");
}

}  // namespace
}  // namespace dualpath::kv
