// Copy a block out of shared memory while checksumming it, at close to memcpy speed.
//
// KvStore hands a pool block to the caller only if its bytes still hash to the XXH3-64 stored at
// put time. Done naively (memcpy, then hash the copy) the check halves the copy rate: small
// slices are copied with ordinary stores (a read-for-ownership of every destination line) and the
// hash then runs on top. Here each slice of the source is hashed first (which pulls it into L1/L2)
// and then streamed to the destination with non-temporal stores from cache, so memory sees one read
// of the source and one write of the destination, like a large memcpy, and the hash (AVX2 XXH3
// where the CPU has it) overlaps the memory traffic.
//
// Thread safety: pure function; the caller owns both ranges.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dualpath::python {

// Copies n bytes from src to dst (non-overlapping) and returns the XXH3-64 with `seed` of the
// source bytes: the same value as kv::BlockChecksum(bytes, seed) (KvStore seeds it with the key,
// kv::KeySeed, so a block stored under another key fails the check). The destination is not left
// in the CPU cache.
uint64_t CopyAndChecksum(const std::byte* src, std::byte* dst, uint64_t n, uint64_t seed);

}  // namespace dualpath::python
