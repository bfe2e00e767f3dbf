// Full Block and Layer Block views over KV-cache bytes (DualPath paper, Appendix A.5).
//
// A Layer Block holds one layer's KV for `tokens` tokens: a byte tensor [1, tokens, bpt] where
// bpt = KV bytes per token per layer. A Full Block holds all layers: [layers, tokens, bpt], i.e.
// the concatenation of its Layer Blocks in layer order. Storage always moves Full Blocks; the
// layerwise prefill pipeline moves Layer Blocks. Because of this layout, the Layer Block of layer
// l is the contiguous byte range [l * tokens * bpt, (l + 1) * tokens * bpt) of the Full Block:
// converting is a view (FullBlockView::Layer) or one memcpy per layer, never a per-element
// transform.
//
// Ownership: views never own memory; the caller keeps the bytes alive while a view is used.
// Thread safety: views are values; concurrent reads are fine, writes follow the buffer's owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dualpath/common/status.h"
#include "dualpath/kv/model.h"

namespace dualpath::kv {

struct BlockShape {
  uint32_t num_layers = 0;
  uint32_t tokens = 0;  // tokens per block (the block size)
  uint64_t bytes_per_token_per_layer = 0;

  static BlockShape For(const ModelGeometry& model, uint32_t tokens) {
    return BlockShape{model.num_layers, tokens, model.kv_bytes_per_token_per_layer};
  }
  uint64_t LayerBytes() const { return uint64_t{tokens} * bytes_per_token_per_layer; }
  uint64_t FullBytes() const { return LayerBytes() * num_layers; }
  // Byte offset of layer `layer`'s Layer Block inside the Full Block.
  uint64_t LayerOffset(uint32_t layer) const { return LayerBytes() * layer; }
  // Byte offset of (layer, token) inside the Full Block.
  uint64_t Offset(uint32_t layer, uint32_t token) const {
    return LayerOffset(layer) + uint64_t{token} * bytes_per_token_per_layer;
  }
  bool operator==(const BlockShape&) const = default;
};

// A Layer Block: [1, tokens, bpt]. `Byte` is `std::byte` (mutable) or `const std::byte`.
template <typename Byte>
class BasicLayerBlockView {
 public:
  BasicLayerBlockView() = default;
  // Precondition (checked): data.size() == tokens * bpt.
  BasicLayerBlockView(std::span<Byte> data, uint32_t tokens, uint64_t bytes_per_token_per_layer);

  std::span<Byte> bytes() const { return data_; }
  uint32_t tokens() const { return tokens_; }
  uint64_t bytes_per_token() const { return bpt_; }
  // The bpt bytes of one token. Precondition (checked): token < tokens().
  std::span<Byte> Token(uint32_t token) const;

  operator BasicLayerBlockView<const std::byte>() const {  // NOLINT(google-explicit-constructor)
    return BasicLayerBlockView<const std::byte>(data_, tokens_, bpt_);
  }

 private:
  std::span<Byte> data_;
  uint32_t tokens_ = 0;
  uint64_t bpt_ = 0;
};

// A Full Block: [layers, tokens, bpt].
template <typename Byte>
class BasicFullBlockView {
 public:
  BasicFullBlockView() = default;

  // kInvalidArgument if data.size() != shape.FullBytes() or the shape has a zero dimension.
  static Result<BasicFullBlockView> Make(std::span<Byte> data, const BlockShape& shape);

  std::span<Byte> bytes() const { return data_; }
  const BlockShape& shape() const { return shape_; }
  // Layer Block of `layer` as a view into this Full Block (no copy). Checked: layer < layers.
  BasicLayerBlockView<Byte> Layer(uint32_t layer) const;

  operator BasicFullBlockView<const std::byte>() const {  // NOLINT(google-explicit-constructor)
    return BasicFullBlockView<const std::byte>(data_, shape_);
  }

 private:
  template <typename>
  friend class BasicFullBlockView;
  BasicFullBlockView(std::span<Byte> data, const BlockShape& shape) : data_(data), shape_(shape) {}
  std::span<Byte> data_;
  BlockShape shape_;
};

using LayerBlockView = BasicLayerBlockView<const std::byte>;
using MutableLayerBlockView = BasicLayerBlockView<std::byte>;
using FullBlockView = BasicFullBlockView<const std::byte>;
using MutableFullBlockView = BasicFullBlockView<std::byte>;

extern template class BasicLayerBlockView<std::byte>;
extern template class BasicLayerBlockView<const std::byte>;
extern template class BasicFullBlockView<std::byte>;
extern template class BasicFullBlockView<const std::byte>;

// Copies one Layer Block into its slot of a Full Block (one memcpy). kInvalidArgument if the
// layer index, token count or bytes per token do not match the Full Block's shape.
Status CopyLayerIntoFull(LayerBlockView layer_block, uint32_t layer, MutableFullBlockView full);

// Concatenates Layer Blocks (in layer order, one per layer) into a Full Block: one memcpy each.
Status AssembleFullBlock(std::span<const LayerBlockView> layers, MutableFullBlockView full);

// Copies layer `layer` of a Full Block out into a Layer Block buffer (one memcpy).
Status CopyLayerFromFull(FullBlockView full, uint32_t layer, MutableLayerBlockView out);

}  // namespace dualpath::kv
