// coord::EtcdClient: the one client of etcd in this project (docs/coord.md). It speaks etcd's v3
// gRPC API (the KV, Lease and Watch services of etcd's rpc.proto, generated at build time from
// the .proto files Debian's golang-etcd-server-dev ships; src/coord/CMakeLists.txt) through the
// project's gRPC channel settings and TLS rules (dualpath/common/grpc_channel.h, grpc_tls.h).
//
// What it holds for its callers (Membership, LeaderElection, later the store's master and nodes):
//   - endpoints: "host:port,host:port,..." (the members of one etcd cluster) or "unix:PATH"; a
//     call that cannot reach its endpoint, or gets no answer in time, is tried once on each other
//     endpoint, and the endpoint that answered becomes the one the next call tries first;
//   - deadlines: every unary call gets EtcdOptions::rpc_timeout, within which it waits for the
//     connection (gRPC wait-for-ready, as etcd's Go client does); a lease keep-alive on its
//     stream (KeepAliveStream::KeepAlive) and the creation of a watch get it too (a watchdog
//     cancels the stream when the answer is late); an open watch lives until it is cancelled.
//     A call that timed out may still have been applied by etcd;
//   - errors: gRPC statuses read through the one table (dualpath/common/grpc_status.h) with the
//     call, the key and the endpoint named ("etcd Put /dualpath/c/nodes/a at 127.0.0.1:2379:
//     ..."); an etcd that cannot be reached within the deadline gives kUnavailable, a late answer
//     from a connected one kTimeout; a lease etcd no longer knows gives kCoordLeaseLost; a watch
//     whose history is gone (compacted, or etcd lost its data) ends with kCoordCompacted.
//
// Keys and values are byte strings (std::string may hold any byte). Revisions are etcd's: one
// counter for the whole store, raised by every change; a key's create_revision is 0 when it does
// not exist, which is what the compare-and-set helpers test.
//
// Thread safety: every method may be called from any thread, concurrently (gRPC stubs and channels
// are thread-safe). A KeepAliveStream is used by one thread at a time. A Watch delivers its events
// on a thread of its own, one batch at a time, in revision order; its callbacks must not destroy
// the Watch. The client must outlive the streams and watches it opened.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"

namespace dualpath::coord {

// etcd's lease id; 0 means "no lease".
using LeaseId = int64_t;

struct EtcdOptions {
  // "host:port[,host:port...]" or "unix:PATH". Checked by EtcdClient::Connect.
  std::string endpoints;
  // Deadline of each call (and of a keep-alive's answer, and of a watch's creation). > 0.
  Nanos rpc_timeout = 5 * kNanosPerSecond;
  // TLS towards TCP endpoints (grpc_tls.h rules): the CA that signed etcd's certificate
  // (--trusted-ca-file of etcd), a client certificate when etcd asks for one
  // (--client-cert-auth), or insecure for a plaintext etcd (the default etcd set-up; a warning is
  // printed). Without options: TLS with the system's roots.
  GrpcTls tls;
};

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // the revision that created the key (0: it does not exist)
  int64_t mod_revision = 0;     // the revision of its last change
  int64_t version = 0;          // changes since it was created (1 after the first put)
  LeaseId lease = 0;            // the lease it is attached to (0: none)
};

struct RangeResult {
  std::vector<KeyValue> kvs;  // in key order
  int64_t revision = 0;       // the store's revision the read saw; watch from revision + 1
};

// A compare-and-set transaction's outcome. When it did not succeed, `current` is the key as it
// was at `revision` (nullopt: absent), read in the same transaction.
struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;
  std::optional<KeyValue> current;
};

struct Lease {
  LeaseId id = 0;
  int64_t ttl_seconds = 0;  // what etcd granted (it rounds a short TTL up to its minimum)
};

enum class EventType { kPut, kDelete };

struct WatchEvent {
  EventType type = EventType::kPut;
  KeyValue kv;  // a delete carries the key and the revision of the deletion (mod_revision)
};

struct WatchOptions {
  // Deliver changes from this revision on (0: from now). A watch resumed after a broken stream
  // continues after the last revision it delivered, so no change is lost or repeated.
  int64_t start_revision = 0;
  // A batch of events, in revision order, on the watch's thread.
  std::function<void(const std::vector<WatchEvent>&)> on_events;
  // The watch ended for good: its start revision was compacted (kCoordCompacted), etcd came back
  // without its data, so that revisions went back (kCoordCompacted: the history the watch
  // followed is gone), or etcd cancelled it. The caller re-reads (Range) and watches again. A
  // broken stream (etcd restarting on its data) is not an error: the watch reconnects by itself.
  std::function<void(const Status&)> on_error;
};

// An open watch (EtcdClient::Watch). Destroying it cancels it and joins its thread.
class Watch {
 public:
  virtual ~Watch() = default;
  // Stops delivering; returns after the last callback has returned. Idempotent. Must not be
  // called from a callback of this watch.
  virtual void Cancel() = 0;
  // How many times the stream broke and was re-created (etcd restarted, a connection dropped).
  virtual int64_t reconnects() const = 0;
};

// An open LeaseKeepAlive bidi stream (EtcdClient::OpenKeepAlive).
class KeepAliveStream {
 public:
  virtual ~KeepAliveStream() = default;
  // Sends one keep-alive for `lease` and waits (up to `timeout`; 0: rpc_timeout) for etcd's
  // answer: the lease's TTL in seconds, now restarted. kCoordLeaseLost when etcd no longer knows
  // the lease (expired, revoked, or a fresh etcd); kUnavailable/kTimeout when the stream broke or
  // the answer was late: the stream is then unusable (broken() is true) and a new one must be
  // opened.
  virtual Result<int64_t> KeepAlive(LeaseId lease, Nanos timeout = 0) = 0;
  virtual bool broken() const = 0;
};

class EtcdClient {
 public:
  // Checks the options (kInvalidArgument naming a bad endpoint or timeout) and makes the
  // channels; connects lazily, so an etcd that is not up yet is no error here.
  static Result<std::unique_ptr<EtcdClient>> Connect(const EtcdOptions& options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  const EtcdOptions& options() const;

  // Waits up to `timeout` for some endpoint to answer a read. kUnavailable naming the endpoints.
  Status WaitForReady(Nanos timeout);

  // Writes the key (attached to `lease` unless 0) and returns the new revision.
  Result<int64_t> Put(std::string_view key, std::string_view value, LeaseId lease = 0);
  // The key, or nullopt when absent.
  Result<std::optional<KeyValue>> Get(std::string_view key);
  // Every key starting with `prefix` (non-empty), in key order, and the revision of the read.
  Result<RangeResult> Range(std::string_view prefix);
  // Deletes the key; returns how many keys were deleted (0 or 1).
  Result<int64_t> Delete(std::string_view key);
  // Deletes every key starting with `prefix` (non-empty); returns how many.
  Result<int64_t> DeletePrefix(std::string_view prefix);

  // Compare-and-set transactions (one etcd Txn each):
  // put if the key does not exist (create_revision == 0);
  Result<TxnResult> PutIfAbsent(std::string_view key, std::string_view value, LeaseId lease = 0);
  // put if the key's mod_revision is `mod_revision` (0: if it does not exist);
  Result<TxnResult> PutIfModRevision(std::string_view key, int64_t mod_revision,
                                     std::string_view value, LeaseId lease = 0);
  // delete if the key's mod_revision is `mod_revision`.
  Result<TxnResult> DeleteIfModRevision(std::string_view key, int64_t mod_revision);

  // Drops the history before `revision` (etcd's compaction): watches from an older revision are
  // refused with kCoordCompacted afterwards.
  Status Compact(int64_t revision);

  // A lease of `ttl` (whole seconds, >= 1 s; etcd may grant more). Keys attached to it are
  // deleted when it expires or is revoked.
  Result<Lease> LeaseGrant(Nanos ttl);
  // Revokes the lease and deletes its keys. kCoordLeaseLost if etcd does not know it.
  Status LeaseRevoke(LeaseId lease);
  // The lease's remaining TTL in seconds; kCoordLeaseLost if etcd does not know it.
  Result<int64_t> LeaseTimeToLive(LeaseId lease);
  // Opens a LeaseKeepAlive stream on the endpoint that answered last.
  Result<std::unique_ptr<KeepAliveStream>> OpenKeepAlive();

  // Watches every key starting with `prefix` (non-empty; end it with a separator, "/nodes/", so
  // that "/nodes2" is not included). Returns once etcd confirmed the watch (or with the error).
  // A start revision etcd has compacted away: etcd confirms the watch and then cancels it, so
  // on_error gets kCoordCompacted (the caller re-reads with Range and watches from there).
  Result<std::unique_ptr<Watch>> WatchPrefix(std::string_view prefix, WatchOptions options);
  // Watches exactly one key (same contract as WatchPrefix).
  Result<std::unique_ptr<Watch>> WatchKey(std::string_view key, WatchOptions options);

  struct Impl;

 private:
  explicit EtcdClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The end of etcd's range for a prefix: the prefix with its last byte below 0xff raised by one
// (trailing 0xff bytes dropped); "\0" (every key) when there is no such byte.
std::string PrefixRangeEnd(std::string_view prefix);

}  // namespace dualpath::coord
