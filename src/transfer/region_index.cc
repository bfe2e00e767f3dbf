#include "dualpath/transfer/region_index.h"

#include <fmt/format.h>

namespace dualpath::transfer {

Status RegionIndex::Insert(RegionRange r) {
  if (r.length == 0) {
    return InvalidArgument(fmt::format("region {} has length 0", r.id.value()));
  }
  if (r.addr + r.length < r.addr) {
    return InvalidArgument(fmt::format("region {} [{:#x}, +{}) wraps the address space",
                                       r.id.value(), r.addr, r.length));
  }
  if (FindId(r.id) != nullptr) {
    return AlreadyExists(fmt::format("region id {} already registered", r.id.value()));
  }
  auto next = by_addr_.lower_bound(r.addr);
  if (next != by_addr_.end() && next->second.addr < r.addr + r.length) {
    return AlreadyExists(fmt::format("region [{:#x}, +{}) overlaps region {}", r.addr, r.length,
                                     next->second.id.value()));
  }
  if (next != by_addr_.begin()) {
    const RegionRange& prev = std::prev(next)->second;
    if (prev.addr + prev.length > r.addr) {
      return AlreadyExists(
          fmt::format("region [{:#x}, +{}) overlaps region {}", r.addr, r.length, prev.id.value()));
    }
  }
  by_addr_.emplace(r.addr, r);
  return Status::Ok();
}

bool RegionIndex::Erase(RegionId id) {
  for (auto it = by_addr_.begin(); it != by_addr_.end(); ++it) {
    if (it->second.id == id) {
      by_addr_.erase(it);
      return true;
    }
  }
  return false;
}

const RegionRange* RegionIndex::Find(uint64_t addr, uint64_t length) const {
  if (length == 0 || addr + length < addr) {
    return nullptr;
  }
  // The candidate is the last region starting at or before addr.
  auto it = by_addr_.upper_bound(addr);
  if (it == by_addr_.begin()) {
    return nullptr;
  }
  const RegionRange& r = std::prev(it)->second;
  // Written to avoid overflow: addr >= r.addr is known.
  if (addr - r.addr > r.length || length > r.length - (addr - r.addr)) {
    return nullptr;
  }
  return &r;
}

const RegionRange* RegionIndex::FindId(RegionId id) const {
  for (const auto& [_, r] : by_addr_) {
    if (r.id == id) {
      return &r;
    }
  }
  return nullptr;
}

std::vector<RegionRange> RegionIndex::All() const {
  std::vector<RegionRange> out;
  out.reserve(by_addr_.size());
  for (const auto& [_, r] : by_addr_) {
    out.push_back(r);
  }
  return out;
}

Status ValidateBatch(std::span<const Descriptor> descs, const RegionIndex& local,
                     const RegionIndex& remote, std::vector<DescriptorRegions>* out) {
  if (descs.empty()) {
    return InvalidArgument("empty batch");
  }
  out->clear();
  out->reserve(descs.size());
  // Batches usually walk one region (a layer's blocks); checking the previous hit first keeps
  // validation O(1) per descriptor in that case.
  const RegionRange* last_local = nullptr;
  const RegionRange* last_remote = nullptr;
  auto contains = [](const RegionRange* r, uint64_t addr, uint64_t len) {
    return r != nullptr && addr >= r->addr && addr - r->addr <= r->length &&
           len <= r->length - (addr - r->addr);
  };
  for (size_t i = 0; i < descs.size(); ++i) {
    const Descriptor& d = descs[i];
    if (d.length == 0) {
      return Status(Code::kTransferBadDescriptor, fmt::format("descriptor {} has length 0", i));
    }
    if (!contains(last_local, d.local_addr, d.length)) {
      last_local = local.Find(d.local_addr, d.length);
      if (last_local == nullptr) {
        return Status(Code::kTransferBadDescriptor,
                      fmt::format("descriptor {}: local [{:#x}, +{}) is outside every registered "
                                  "local region",
                                  i, d.local_addr, d.length));
      }
    }
    if (!contains(last_remote, d.remote_addr, d.length)) {
      last_remote = remote.Find(d.remote_addr, d.length);
      if (last_remote == nullptr) {
        return Status(Code::kTransferBadDescriptor,
                      fmt::format("descriptor {}: remote [{:#x}, +{}) is outside every region "
                                  "the peer advertised",
                                  i, d.remote_addr, d.length));
      }
    }
    out->push_back(DescriptorRegions{last_local->id, last_remote->id});
  }
  return Status::Ok();
}

}  // namespace dualpath::transfer
