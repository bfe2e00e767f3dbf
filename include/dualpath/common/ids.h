// Strong id types, so a RequestId cannot be passed where an EngineId is expected (3FS
// STRONG_TYPEDEF). Each id wraps an integer; comparison and hashing are by value.
//
// Thread safety: values.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>

namespace dualpath {

template <typename Tag, typename T = uint64_t>
class StrongId {
 public:
  using ValueType = T;
  constexpr StrongId() = default;
  constexpr explicit StrongId(T v) : v_(v) {}
  constexpr T value() const { return v_; }
  constexpr auto operator<=>(const StrongId&) const = default;

 private:
  T v_{};
};

template <typename Tag, typename T>
std::ostream& operator<<(std::ostream& os, StrongId<Tag, T> id) {
  return os << id.value();
}

using RequestId = StrongId<struct RequestIdTag, uint64_t>;
using SessionId = StrongId<struct SessionIdTag, uint64_t>;
using EngineId = StrongId<struct EngineIdTag, uint32_t>;
using NodeId = StrongId<struct NodeIdTag, uint32_t>;
using LayerIdx = StrongId<struct LayerIdxTag, uint32_t>;

}  // namespace dualpath

template <typename Tag, typename T>
struct std::hash<dualpath::StrongId<Tag, T>> {
  size_t operator()(dualpath::StrongId<Tag, T> id) const noexcept {
    return std::hash<T>{}(id.value());
  }
};
