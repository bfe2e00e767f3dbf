// Pool: the public face, forwarding to PoolImpl (keeps the public header free of internals).
#include "dualpath/pool/pool.h"
#include "pool/pool_impl.h"

namespace dualpath::pool {

uint64_t RegionBytesFor(const Geometry& g, uint64_t chunks) {
  return internal::LayoutFor(g, chunks, g.index_capacity).data_off + chunks * g.chunk_bytes;
}

Pool::Pool(std::unique_ptr<PoolImpl> impl) : impl_(std::move(impl)) {}
Pool::~Pool() = default;

Result<std::unique_ptr<Pool>> Pool::Open(const std::string& path, OpenOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<PoolImpl> impl, PoolImpl::Open(path, std::move(options)));
  return std::unique_ptr<Pool>(new Pool(std::move(impl)));
}
Result<WriteHandle> Pool::Reserve(const BlockHash& hash, uint64_t size, uint64_t user_tag) {
  return impl_->Reserve(hash, size, user_tag);
}
Status Pool::Publish(WriteHandle& handle) { return impl_->Publish(handle, false); }
Status Pool::Publish(WriteHandle& handle, uint64_t user_tag) {
  return impl_->Publish(handle, false, user_tag);
}
Status Pool::Abort(WriteHandle& handle) { return impl_->Abort(handle); }
Status Pool::Put(const BlockHash& hash, std::span<const std::byte> payload, uint64_t user_tag) {
  return impl_->Put(hash, payload, user_tag);
}
bool Pool::Contains(const BlockHash& hash) const { return impl_->Contains(hash); }
size_t Pool::LongestPrefix(std::span<const BlockHash> chain) const {
  return impl_->LongestPrefix(chain);
}
Result<PinnedBlock> Pool::Pin(const BlockHash& hash) { return impl_->Pin(hash); }
Status Pool::Unpin(PinnedBlock& block) { return impl_->Unpin(block); }
Result<uint64_t> Pool::Get(const BlockHash& hash, std::span<std::byte> out, uint64_t* user_tag) {
  return impl_->Get(hash, out, user_tag);
}
Status Pool::Delete(const BlockHash& hash) { return impl_->Delete(hash); }
Result<size_t> Pool::Evict(size_t n) { return impl_->Evict(n); }
Result<std::span<std::byte>> Pool::CreateRoot(std::string_view name, uint64_t size,
                                              RootLifetime lifetime) {
  return impl_->CreateRoot(name, size, lifetime);
}
Result<std::span<std::byte>> Pool::GetRoot(std::string_view name) { return impl_->GetRoot(name); }
Status Pool::DestroyRoot(std::string_view name) { return impl_->DestroyRoot(name); }
Status Pool::Tick() { return impl_->Tick(); }
Status Pool::Recover() { return impl_->Recover(); }
PoolStats Pool::Stats() { return impl_->Stats(); }
const Geometry& Pool::geometry() const { return impl_->geometry(); }
uint64_t Pool::OffsetOf(const void* p) const { return impl_->OffsetOf(p); }
void* Pool::PointerAt(uint64_t offset) const { return impl_->PointerAt(offset); }

}  // namespace dualpath::pool
