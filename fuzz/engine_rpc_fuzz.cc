// A decode engine's EnginePeer handlers: a sequence of well-formed request messages in any order
// (fuzz/proto/dualpath/fuzz/v1/calls.proto) into one real decode Engine (reference CPU model, real
// BlockStore in a scratch directory, UCX transfer engine on loopback tcp, its gRPC server) over a
// real gRPC channel, with engine::LocalScheduler standing in for the scheduler service. The engine
// lives for the whole fuzzing run, so its state (buffers, requests waiting for PrefillDone, reads,
// pushes, aborts, timeouts) carries from one input to the next, as a long-running engine's does.
// Every call has a deadline, so an input never hangs. A refusal must carry a message; the engine
// must stay up (a call after each input gets an answer).
//
// PE addresses in StartDecode are kept on loopback: the port and malformed forms are fuzzed, but
// the engine is never pointed at another host.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/common/log.h"
#include "dualpath/engine/engine.h"
#include "dualpath/engine/v1/engine.grpc.pb.h"
#include "dualpath/fuzz/v1/calls.pb.h"
#include "dualpath/kv/hasher.h"
#include "engine/local_scheduler.h"
#include "fuzz_util.h"

using namespace dualpath;
namespace v1 = dualpath::engine::v1;
namespace fv1 = dualpath::fuzz::v1;

namespace {

constexpr const char* kSpec =
    "layers=2,q_heads=2,kv_heads=2,head_dim=16,ffn_dim=32,vocab=512,seed=7";
constexpr uint32_t kBlock = 16;
constexpr std::chrono::seconds kCallDeadline(5);  // a hang guard: a call longer is a finding

struct Harness {
  std::string root;
  std::unique_ptr<engine::LocalScheduler> sched;
  std::unique_ptr<engine::Engine> de;
  std::thread runner;
  std::unique_ptr<v1::EnginePeer::Stub> stub;
  std::unique_ptr<kv::BlockHasher> hasher;
};

Harness* h = nullptr;  // lives until exit (engine threads run between inputs)

void Start() {
  h = new Harness;
  h->root = fuzz::ScratchDir("dualpath_engine_fuzz");
  h->sched = std::make_unique<engine::LocalScheduler>(kSpec, kBlock);
  engine::EngineOptions o;
  o.role = engine::Role::kDecode;
  o.name = "d0.0";
  o.node = "d0";
  o.listen_ip = "127.0.0.1";
  o.tls.insecure = true;  // loopback only, as the engine's unit tests
  o.store_root = h->root;
  o.store_subdir = "sys";
  o.buffer_bytes = 16 << 20;
  o.ucx_tls = "tcp";
  o.fetch_wait_ms = 50;
  o.request_timeout = 2 * kNanosPerSecond;
  o.peer_timeout = 1 * kNanosPerSecond;
  auto e = engine::Engine::Create(o, h->sched->Link());
  if (!e.ok()) {
    std::fprintf(stderr, "engine: %s\n", e.status().ToString().c_str());
    fuzz::Broken("engine creation failed");
  }
  h->de = std::move(e).value();
  engine::Engine* raw = h->de.get();
  h->runner = std::thread([raw] { (void)raw->Run(); });
  h->runner.detach();
  h->stub = v1::EnginePeer::NewStub(
      grpc::CreateChannel(h->de->info().peer_addr(), grpc::InsecureChannelCredentials()));
  auto hasher = kv::BlockHasher::Create(kv::HashAlgo::kSha256Cbor, "0", kBlock);
  if (!hasher.ok()) fuzz::Broken("hasher");
  h->hasher = std::make_unique<kv::BlockHasher>(*hasher);
}

// Keeps a PE transfer address on loopback: "HOST:PORT" becomes "127.0.0.1:PORT"; anything
// without a colon stays as it is (malformed).
std::string Loopback(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return addr;
  return "127.0.0.1" + addr.substr(colon);
}

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  log::SetLevel(log::Level::kOff);
  Start();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fv1::EngineCalls input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return -1;  // not a call sequence
  std::vector<uint32_t> xfer_ids;  // de_xfer_id of each StartDecode reply of this input
  for (const fv1::EngineCall& call : input.calls()) {
    auto ctx = Ctx();
    switch (call.call_case()) {
      case fv1::EngineCall::kStartDecode: {
        v1::StartDecodeRequest req = call.start_decode();
        req.set_pe_transfer_addr(Loopback(req.pe_transfer_addr()));
        if (call.hash_prompt()) {
          const auto& p = req.assignment().request().prompt();
          std::vector<kv::TokenId> prompt(p.begin(), p.end());
          for (kv::TokenId& t : prompt) t &= kv::kMaxTokenId;  // the hasher's precondition
          std::vector<kv::BlockHash> hashes;  // packed as the service and LocalScheduler pack them
          h->hasher->HashBlocks(prompt, &hashes);
          req.mutable_assignment()->set_prompt_block_hashes(
              reinterpret_cast<const char*>(hashes.data()), hashes.size() * sizeof(kv::BlockHash));
        }
        v1::StartDecodeReply reply;
        const grpc::Status s = h->stub->StartDecode(ctx.get(), req, &reply);
        fuzz::CheckRefusal(s);
        if (s.ok()) xfer_ids.push_back(reply.de_xfer_id());
        break;
      }
      case fv1::EngineCall::kPrefillDone: {
        v1::PrefillDoneRequest req = call.prefill_done();
        if (call.xfer_of_reply() > 0 && call.xfer_of_reply() <= xfer_ids.size()) {
          req.set_de_xfer_id(xfer_ids[call.xfer_of_reply() - 1]);
        }
        v1::PrefillDoneReply reply;
        fuzz::CheckRefusal(h->stub->PrefillDone(ctx.get(), req, &reply));
        break;
      }
      case fv1::EngineCall::kAbortDecode: {
        v1::AbortDecodeRequest req = call.abort_decode();
        if (call.xfer_of_reply() > 0 && call.xfer_of_reply() <= xfer_ids.size()) {
          req.set_de_xfer_id(xfer_ids[call.xfer_of_reply() - 1]);
        }
        v1::AbortDecodeReply reply;
        fuzz::CheckRefusal(h->stub->AbortDecode(ctx.get(), req, &reply));
        break;
      }
      case fv1::EngineCall::CALL_NOT_SET:
        break;
    }
  }
  // The engine is still serving: an abort of an unknown request gets an answer (not a transport
  // error).
  auto ctx = Ctx();
  v1::AbortDecodeRequest probe;
  probe.set_request_id(~uint64_t{0});
  probe.set_reason("fuzz liveness probe");
  v1::AbortDecodeReply reply;
  const grpc::Status s = h->stub->AbortDecode(ctx.get(), probe, &reply);
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::fprintf(stderr, "liveness probe: %d %s\n", s.error_code(), s.error_message().c_str());
    fuzz::Broken("the engine stopped answering");
  }
  return 0;
}
