/* The C ABI, compiled as C: create, open, put, get, pin, prefix, roots, errors, destroy. */
#include "dualpath/pool/pool_c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
              dp_pool_last_error());                                               \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

static dp_block_hash Hash(uint8_t seed) {
  dp_block_hash h;
  for (int i = 0; i < 32; ++i) h.bytes[i] = (uint8_t)(seed * 31 + i * 7);
  return h;
}

static int Run(const char* path, int32_t model) {
  CHECK(dp_pool_create(path, 4u << 20, 64u << 10, model) == 0);
  CHECK(dp_pool_create(path, 4u << 20, 64u << 10, model) == 3); /* kAlreadyExists */
  dp_pool* pool = NULL;
  CHECK(dp_pool_open(path, 0, &pool) == 0);

  char data[5000];
  for (int i = 0; i < (int)sizeof(data); ++i) data[i] = (char)(i * 13);
  dp_block_hash a = Hash(1), b = Hash(2);
  CHECK(dp_pool_put(pool, &a, data, sizeof(data), 77) == 0);

  char out[8192];
  uint64_t size = 0, tag = 0;
  CHECK(dp_pool_get(pool, &a, out, sizeof(out), &size, &tag) == 0);
  CHECK(size == sizeof(data) && tag == 77 && memcmp(out, data, size) == 0);
  CHECK(dp_pool_get(pool, &b, out, sizeof(out), &size, &tag) == 2); /* kNotFound */
  CHECK(strstr(dp_pool_last_error(), "not present") != NULL);

  dp_pinned pin;
  CHECK(dp_pool_pin(pool, &a, &pin) == 0);
  CHECK(pin.size == sizeof(data) && memcmp(pin.data, data, sizeof(data)) == 0);
  CHECK(dp_pool_delete(pool, &a) == 304); /* kPoolPinned */
  CHECK(dp_pool_unpin(pool, &pin) == 0);

  dp_block_hash chain[2] = {a, b};
  CHECK(dp_pool_longest_prefix(pool, chain, 2) == 1);

  void* root = NULL;
  uint64_t root_size = 0;
  CHECK(dp_pool_root_create(pool, "index", 100, &root) == 0);
  memcpy(root, "hello", 6);
  void* again = NULL;
  CHECK(dp_pool_root_get(pool, "index", &again, &root_size) == 0);
  CHECK(again == root && root_size == 100 && strcmp((const char*)again, "hello") == 0);
  CHECK(dp_pool_root_destroy(pool, "index") == 0);

  /* An owner-bound root goes with the handle that made it; a persistent one stays. */
  dp_pool* other = NULL;
  CHECK(dp_pool_open(path, 0, &other) == 0);
  CHECK(dp_pool_root_create_owned(other, "engine/x", 4096, &root) == 0);
  CHECK(dp_pool_root_create(other, "kept", 64, &root) == 0);
  CHECK(dp_pool_root_get(pool, "engine/x", &again, &root_size) == 0 && root_size == 4096);
  dp_pool_close(other);
  CHECK(dp_pool_root_get(pool, "engine/x", &again, &root_size) == 2); /* kNotFound */
  CHECK(dp_pool_root_get(pool, "kept", &again, &root_size) == 0 && root_size == 64);
  CHECK(dp_pool_root_destroy(pool, "kept") == 0);

  CHECK(dp_pool_delete(pool, &a) == 0);
  CHECK(dp_pool_open(NULL, 0, &pool) == 1); /* kInvalidArgument */
  dp_pool_close(pool);
  CHECK(dp_pool_destroy(path) == 0);
  CHECK(access(path, F_OK) != 0);
  return 0;
}

int main(void) {
  char dir[] = "/dev/shm/dpctest-XXXXXX";
  if (mkdtemp(dir) == NULL) return 1;
  char path[256];
  snprintf(path, sizeof(path), "%s/coherent", dir);
  int rc = Run(path, 0);
  if (rc == 0) {
    snprintf(path, sizeof(path), "%s/noncoherent", dir);
    rc = Run(path, 1);
  }
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  if (rc == 0) printf("pool C ABI: ok\n");
  return rc;
}
