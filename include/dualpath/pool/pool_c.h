/* C ABI of the shared-memory KV pool (dualpath/pool/pool.h), for engines written in other
 * languages.
 *
 * Every function returning int32_t returns a dualpath status code: 0 on success, otherwise a code
 * from the project's table (e.g. 2 not found, 300 bad magic, 303 pool full, 304 pinned); the
 * message of the last failure on the calling thread is dp_pool_last_error().
 *
 * Ownership: dp_pool_open returns a handle owned by the caller, released by dp_pool_close. A
 * dp_pinned's data pointer is valid until dp_pool_unpin. Root pointers stay valid while the pool
 * is open and the root is not destroyed.
 *
 * Thread safety: a dp_pool* may be used from any number of threads at once. */
#ifndef DUALPATH_POOL_POOL_C_H_
#define DUALPATH_POOL_POOL_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dp_pool dp_pool;

typedef struct dp_block_hash {
  uint8_t bytes[32];
} dp_block_hash;

typedef struct dp_pinned {
  const void* data;
  uint64_t size;
  uint64_t user_tag;
  uint32_t entry; /* internal */
} dp_pinned;

/* model: 0 = coherent, 1 = noncoherent. chunk_bytes 0 = default (4 MiB). */
int32_t dp_pool_create(const char* path, uint64_t region_bytes, uint64_t chunk_bytes,
                       int32_t model);
/* node: this host's node id (non-coherent model). */
int32_t dp_pool_open(const char* path, uint32_t node, dp_pool** out);
void dp_pool_close(dp_pool* pool);
int32_t dp_pool_destroy(const char* path);

int32_t dp_pool_put(dp_pool* pool, const dp_block_hash* hash, const void* data, uint64_t size,
                    uint64_t user_tag);
/* Copies the block into out (capacity bytes); *size receives its size. */
int32_t dp_pool_get(dp_pool* pool, const dp_block_hash* hash, void* out, uint64_t capacity,
                    uint64_t* size, uint64_t* user_tag);
int32_t dp_pool_pin(dp_pool* pool, const dp_block_hash* hash, dp_pinned* out);
int32_t dp_pool_unpin(dp_pool* pool, dp_pinned* block);
int32_t dp_pool_delete(dp_pool* pool, const dp_block_hash* hash);
/* Number of leading hashes of chain[0..n) present. */
uint64_t dp_pool_longest_prefix(dp_pool* pool, const dp_block_hash* chain, uint64_t n);

/* A persistent root: survives until dp_pool_root_destroy. */
int32_t dp_pool_root_create(dp_pool* pool, const char* name, uint64_t size, void** out);
/* An owner-bound root: belongs to this handle and is reclaimed by the pool's recovery sweep once
 * the handle is closed or its process has died (RootLifetime::kProcess). */
int32_t dp_pool_root_create_owned(dp_pool* pool, const char* name, uint64_t size, void** out);
int32_t dp_pool_root_get(dp_pool* pool, const char* name, void** out, uint64_t* size);
int32_t dp_pool_root_destroy(dp_pool* pool, const char* name);

/* Message of the calling thread's last failure ("" if none). Valid until the next call. */
const char* dp_pool_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* DUALPATH_POOL_POOL_C_H_ */
