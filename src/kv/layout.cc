#include "dualpath/kv/layout.h"

#include <cstring>
#include <string>

#include "dualpath/common/check.h"

namespace dualpath::kv {

template <typename Byte>
BasicLayerBlockView<Byte>::BasicLayerBlockView(std::span<Byte> data, uint32_t tokens,
                                               uint64_t bytes_per_token_per_layer)
    : data_(data), tokens_(tokens), bpt_(bytes_per_token_per_layer) {
  DUALPATH_CHECK(data.size() == uint64_t{tokens} * bytes_per_token_per_layer,
                 "layer block buffer size != tokens * bytes_per_token");
}

template <typename Byte>
std::span<Byte> BasicLayerBlockView<Byte>::Token(uint32_t token) const {
  DUALPATH_CHECK(token < tokens_, "layer block token index out of range");
  return data_.subspan(uint64_t{token} * bpt_, bpt_);
}

template <typename Byte>
Result<BasicFullBlockView<Byte>> BasicFullBlockView<Byte>::Make(std::span<Byte> data,
                                                                const BlockShape& shape) {
  if (shape.num_layers == 0 || shape.tokens == 0 || shape.bytes_per_token_per_layer == 0) {
    return InvalidArgument(
        "full block: shape has a zero dimension (layers=" + std::to_string(shape.num_layers) +
        " tokens=" + std::to_string(shape.tokens) +
        " bpt=" + std::to_string(shape.bytes_per_token_per_layer) + ")");
  }
  if (data.size() != shape.FullBytes()) {
    return InvalidArgument("full block: buffer has " + std::to_string(data.size()) +
                           " bytes, shape needs " + std::to_string(shape.FullBytes()));
  }
  return BasicFullBlockView(data, shape);
}

template <typename Byte>
BasicLayerBlockView<Byte> BasicFullBlockView<Byte>::Layer(uint32_t layer) const {
  DUALPATH_CHECK(layer < shape_.num_layers, "full block layer index out of range");
  return BasicLayerBlockView<Byte>(data_.subspan(shape_.LayerOffset(layer), shape_.LayerBytes()),
                                   shape_.tokens, shape_.bytes_per_token_per_layer);
}

template class BasicLayerBlockView<std::byte>;
template class BasicLayerBlockView<const std::byte>;
template class BasicFullBlockView<std::byte>;
template class BasicFullBlockView<const std::byte>;

namespace {

Status CheckLayerFits(LayerBlockView layer_block, uint32_t layer, const BlockShape& shape) {
  if (layer >= shape.num_layers) {
    return InvalidArgument("layer " + std::to_string(layer) + " out of range (full block has " +
                           std::to_string(shape.num_layers) + " layers)");
  }
  if (layer_block.tokens() != shape.tokens ||
      layer_block.bytes_per_token() != shape.bytes_per_token_per_layer) {
    return InvalidArgument("layer block [1, " + std::to_string(layer_block.tokens()) + ", " +
                           std::to_string(layer_block.bytes_per_token()) +
                           "] does not match full block [" + std::to_string(shape.num_layers) +
                           ", " + std::to_string(shape.tokens) + ", " +
                           std::to_string(shape.bytes_per_token_per_layer) + "]");
  }
  return Status::Ok();
}

}  // namespace

Status CopyLayerIntoFull(LayerBlockView layer_block, uint32_t layer, MutableFullBlockView full) {
  RETURN_IF_ERROR(CheckLayerFits(layer_block, layer, full.shape()));
  std::span<std::byte> dst = full.Layer(layer).bytes();
  std::memcpy(dst.data(), layer_block.bytes().data(), dst.size());
  return Status::Ok();
}

Status AssembleFullBlock(std::span<const LayerBlockView> layers, MutableFullBlockView full) {
  if (layers.size() != full.shape().num_layers) {
    return InvalidArgument("assemble full block: got " + std::to_string(layers.size()) +
                           " layer blocks, full block has " +
                           std::to_string(full.shape().num_layers) + " layers");
  }
  for (uint32_t l = 0; l < layers.size(); ++l) {
    RETURN_IF_ERROR(CopyLayerIntoFull(layers[l], l, full));
  }
  return Status::Ok();
}

Status CopyLayerFromFull(FullBlockView full, uint32_t layer, MutableLayerBlockView out) {
  RETURN_IF_ERROR(CheckLayerFits(out, layer, full.shape()));
  std::span<const std::byte> src = full.Layer(layer).bytes();
  std::memcpy(out.bytes().data(), src.data(), src.size());
  return Status::Ok();
}

}  // namespace dualpath::kv
