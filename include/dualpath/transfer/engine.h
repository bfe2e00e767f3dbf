// TransferEngine: one-sided KV transfers between processes over UCX, in two traffic classes.
//
// What it does (DualPath §4.1, §5; Mooncake's background I/O thread):
//   - registers memory regions with UCX (once per traffic-class context) and advertises them,
//     with their packed remote keys and this engine's worker addresses, to every connected peer
//     over a ControlChannel;
//   - runs batches of (local, remote, length) descriptors as one-sided puts or gets, with one
//     completion per batch, and optionally delivers a notice (a 64-bit tag) to the remote side
//     once the batch's data is visible there (a put batch, an endpoint flush, then an active
//     message, so a prefill engine knows layer i has arrived);
//   - owns a progress thread that alone touches UCP workers: Submit() only validates and queues,
//     so a caller never blocks on the network;
//   - keeps a high class (control, model traffic) and a low class (KV) on separate UCP contexts,
//     workers and endpoints, marked per class (class_config.h), and bounds the low class's bytes
//     in flight (byte_budget.h);
//   - fails instead of hanging: a peer whose endpoint reports an error, whose control channel
//     closes, or which makes no progress for `peer_timeout` while operations are outstanding is
//     declared dead; all its outstanding and queued batches complete with kTransferPeerDead and
//     later submissions to it are rejected. Other peers are unaffected.
//
// Ownership: the engine owns its UCX contexts, workers, endpoints and registrations; the caller
// owns registered memory and must keep it mapped until DeregisterRegion (or engine destruction)
// and until every batch using it has completed.
//
// Thread safety: all public methods may be called from any thread, except from inside a
// completion or notice callback, which run on the progress thread (completions: or inside Submit
// with EngineConfig::post_on_submit) and must not block or call
// Connect/Listen/Register/Deregister/Disconnect (Submit is allowed).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/transfer/class_config.h"
#include "dualpath/transfer/region_index.h"
#include "dualpath/transfer/types.h"

namespace dualpath::transfer {

// The largest tcp segment a dualpath engine sends (the store client's puts of up to 1 MiB
// objects: 1 MiB of payload plus UCX's headers in one segment) and so the receive segment every
// engine accepts (EngineConfig::tcp_rx_seg_size).
inline constexpr uint64_t kLargeTcpSegBytes = (1024 + 8) * 1024;

struct EngineConfig {
  std::array<ClassConfig, kNumClasses> classes = {DefaultHighClass(), DefaultLowClass()};
  // UCX_TLS for both class contexts; empty keeps UCX's default (and the environment's UCX_TLS).
  std::string ucx_tls;
  // In-process limit on low-class bytes in flight; 0 = unlimited.
  uint64_t low_inflight_bytes = 64ull << 20;
  // A peer with outstanding operations and no completion for this long is declared dead.
  Nanos peer_timeout = 5 * kNanosPerSecond;
  // Batch::coalesce joins descriptors into operations of at most this many bytes (a descriptor
  // larger than this is posted as it is). A peer's liveness is judged by its operations'
  // completions (peer_timeout), so an operation must finish well within it on the slowest link:
  // 4 MiB take 84 ms at 400 Mbit/s.
  uint64_t coalesce_max_bytes = 4ull << 20;
  // Spin on the workers while operations are outstanding (lowest latency, one core busy); when
  // false the progress thread sleeps on the workers' event descriptors between events. Off by
  // default: on a host with fewer cores than busy threads (measured on the 2-core development
  // VM), spinning progress threads starve the peer and cut throughput several-fold.
  bool busy_poll = false;
  // With busy_poll, keep spinning this long after the last event before sleeping.
  Nanos idle_spin = 200 * kNanosPerMicro;
  // Submit posts the batch to UCX itself (on the caller's thread, under the lock the progress
  // thread holds while awake) when the progress thread is asleep and nothing is queued ahead of
  // it; otherwise it queues as usual. This removes the hand-off (an eventfd wake-up and a
  // context switch) per batch, which dominates small batches on shared memory, where a put is a
  // memcpy. Posting never waits for the network (UCX non-blocking calls only). Consequence for
  // callers: a batch that completes while being posted (shared memory) runs its on_complete on
  // the caller's thread before Submit returns, so on_complete must not take a lock the caller
  // holds across Submit. Off by default for that reason.
  bool post_on_submit = false;
  // UCX tcp transport send segment size (UCX_TCP_TX_SEG_SIZE; the receive side is
  // tcp_rx_seg_size below) for both class contexts, when the transport list includes tcp; 0
  // keeps UCX's default (8 KiB), and the environment variables, if set, win. Puts over tcp are
  // active messages cut into segments: with 72 KiB a 64 KiB put (plus headers) travels as one
  // segment instead of nine, which measured 2-4x more 64 KiB puts per CPU second on loopback
  // (docs/transfer.md).
  uint64_t tcp_seg_size = 72 * 1024;
  // The receive side (UCX_TCP_RX_SEG_SIZE), raised to at least tcp_seg_size (both 0: UCX's
  // default). UCX's tcp transport aborts the receiving process when a segment is larger than its
  // receive buffer (assertion at tcp_ep.c:1404, seen with a 1 MiB sender against 72 KiB), so
  // every engine receives segments as large as any dualpath sender sends: the store client sends
  // its puts in segments of kStoreTcpSegBytes (store/client.h, issue 27). Costs memory only
  // where such segments arrive (UCX's receive pool grows by 8 buffers at a time, lazily).
  uint64_t tcp_rx_seg_size = kLargeTcpSegBytes;
  // The cluster's transfer token (dualpath/transfer/token.h): Listen admits and Connect accepts
  // only a peer that proves it holds the same token; others are refused (kPermissionDenied on the
  // connecting side, a warning in the accepting engine's log) before any region is advertised.
  // Empty: the empty token, which matches only peers without a token (tests, --insecure).
  std::string token;
};

// Largest notice payload (Batch::notice_payload): a message, not a data path. Payloads travel as
// one eager active message, which UCX copies into the receiver's bounce buffers.
inline constexpr size_t kMaxNoticePayload = 1 << 20;

struct Batch {
  PeerId peer;
  TrafficClass cls = TrafficClass::kLow;
  Op op = Op::kPut;
  std::vector<Descriptor> descs;
  // Deliver this tag to the peer's notice handler after the data is complete at the peer.
  bool notify = false;
  uint64_t notice_tag = 0;
  // Bytes delivered with the notice (needs `notify`; at most kMaxNoticePayload): a small message
  // that arrives after the batch's data, on the same endpoint. A batch with no descriptors and
  // `notify` set is a message alone (e.g. a block table a peer needs before it can transfer);
  // messages alone are not ordered with earlier batches' data.
  std::string notice_payload;
  // Called exactly once on the progress thread (or, with EngineConfig::post_on_submit, possibly
  // on the submitting thread inside Submit): OK, or why the batch failed.
  std::function<void(const Status&)> on_complete;
  // Descriptors that continue each other on both sides (the next one starts where this one ends,
  // locally and remotely, in the same local and remote regions) go to UCX as one operation of up
  // to EngineConfig::coalesce_max_bytes:
  // the same bytes and the same completion with fewer operations (a store put of 256 objects
  // laid out back to back on both sides is one put). Off: one operation per descriptor (what
  // transfer_bench's per-descriptor cost measures).
  bool coalesce = false;
  // The progress thread polls UCX, without sleeping, while this batch is in flight (whatever
  // EngineConfig::busy_poll says): for a caller that waits on bytes flowing to it, whose segments
  // would otherwise each cost the thread a wake-up (the store client's gets, docs/store.md).
  bool poll = false;
};

// Called on the progress thread when a peer's notice arrives; `payload` is the sender's
// Batch::notice_payload (empty when none), valid only during the call.
using NoticeHandler = std::function<void(PeerId from, uint64_t tag, std::string_view payload)>;

class TransferEngine {
 public:
  static Result<std::unique_ptr<TransferEngine>> Create(const EngineConfig& config,
                                                        Clock& clock = SteadyClock::Default());
  virtual ~TransferEngine() = default;

  // Registers [addr, addr + length) in every class context and advertises it to all peers
  // (current and future). AlreadyExists if it overlaps a registered region.
  virtual Result<RegionId> RegisterRegion(void* addr, uint64_t length) = 0;
  // Allocates `length` bytes through UCX and registers them like RegisterRegion; the engine owns
  // the memory (freed by DeregisterRegion or the destructor). The low (KV) class's context
  // allocates, so on shared memory the pages come from a segment a peer can map and a put
  // becomes a memcpy into that mapping instead of a cross-process copy syscall or an active
  // message; the high class registers the same pages as ordinary memory.
  virtual Result<std::pair<RegionId, void*>> AllocateRegion(uint64_t length) = 0;
  // NotFound for an unknown id. Peers learn about it asynchronously; batches already submitted
  // against the region must have completed.
  virtual Status DeregisterRegion(RegionId id) = 0;

  // Accepts peers on "ADDR:PORT" (port 0: any) in a background thread; returns the bound address.
  virtual Result<std::string> Listen(const std::string& addr_port) = 0;
  // Connects to a listening engine, exchanges HELLOs and creates endpoints for both classes.
  // Blocks for the handshake (control plane, not data path).
  virtual Result<PeerId> Connect(const std::string& addr_port) = 0;
  // Blocks until at least `n` peers have ever connected (either direction), or `timeout` passes
  // (kTimeout). For servers and tests that must know a peer has arrived.
  virtual Status WaitForPeers(size_t n, Nanos timeout) = 0;
  virtual std::vector<PeerId> Peers() const = 0;
  // Declares `peer` dead now, as its peer timeout would: its outstanding and queued batches fail
  // with kTransferPeerDead naming `why`, its endpoints and control channel are closed, later
  // submissions to it are refused. Returns once its endpoints are closed (the progress thread did
  // it): nothing of it lands in our memory after that. For a caller that knows the peer is gone
  // before the transfer engine can (no batch outstanding, so no timeout runs; the engines' probes
  // over the compute network, docs/engine.md "Failures"). Ok if it is already dead; NotFound for
  // an unknown peer. Not from a completion or notice callback.
  virtual Status Disconnect(PeerId peer, const std::string& why) = 0;
  // Disconnect for every live peer on `host` (an IP address), whichever side connected: a peer
  // that connected to us is known by the host only (its port is ephemeral), and one-sided puts it
  // makes into our memory travel over its connection, not ours. Returns how many.
  virtual int DisconnectHost(const std::string& host, const std::string& why) = 0;
  // The regions a peer advertised (NotFound for an unknown peer).
  virtual Result<std::vector<RegionRange>> RemoteRegions(PeerId peer) const = 0;

  // Validates the batch against the local and the peer's registered ranges and queues it.
  // Returns an error (and never calls on_complete) when the batch is rejected: an unknown or
  // dead peer (kTransferPeerDead / NotFound), an empty batch without a notice, a payload without
  // `notify` or over kMaxNoticePayload (kInvalidArgument), or a descriptor outside the
  // registered ranges (kTransferBadDescriptor). Nothing of a rejected batch is sent.
  virtual Status Submit(Batch batch) = 0;

  virtual void SetNoticeHandler(NoticeHandler handler) = 0;

  // Counters for benchmarks and tests.
  struct Stats {
    uint64_t batches_completed = 0;
    uint64_t batches_failed = 0;
    uint64_t ops_posted = 0;
    uint64_t low_bytes_in_flight = 0;
    uint64_t low_bytes_in_flight_max = 0;
    uint64_t low_batches_deferred = 0;  // batches that waited for the in-flight budget
    // Time the progress thread spent posting descriptors to UCX (put/get calls and the batch's
    // flush), for the per-descriptor submission cost (DualPath §5.2: ~1 us per RDMA work
    // request).
    uint64_t post_nanos = 0;
    uint64_t descs_posted = 0;  // descriptors posted (ops_posted counts UCX operations)
    // Batches Submit posted on the caller's thread (post_on_submit), not via the progress thread.
    uint64_t batches_posted_inline = 0;
    // Times the progress thread went to sleep on its workers' event descriptors (each costs a
    // wake-up; busy_poll and Batch::poll avoid them).
    uint64_t progress_sleeps = 0;
  };
  virtual Stats GetStats() const = 0;
};

}  // namespace dualpath::transfer
