#include "dualpath/transfer/wire.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cstring>

namespace dualpath::transfer {
namespace {

// Frame: magic u32 | version u16 | type u8 | reserved u8 | payload_len u32 | payload |
//        xxh64(all preceding bytes) u64. All integers little-endian (x86 and arm64 hosts).
constexpr size_t kHeaderBytes = 12;
constexpr size_t kTrailerBytes = 8;

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Raw(&v, sizeof v); }
  void U32(uint32_t v) { Raw(&v, sizeof v); }
  void U64(uint64_t v) { Raw(&v, sizeof v); }
  void Blob(const std::string& b) {
    U32(static_cast<uint32_t>(b.size()));
    out_.append(b);
  }
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U32(uint32_t* v) { return Raw(v, sizeof *v); }
  bool U64(uint64_t* v) { return Raw(v, sizeof *v); }
  bool Blob(std::string* b) {
    uint32_t n = 0;
    if (!U32(&n) || n > kMaxBlobBytes || n > in_.size()) {
      return false;
    }
    b->assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  bool Raw(void* p, size_t n) {
    if (in_.size() < n) {
      return false;
    }
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool empty() const { return in_.empty(); }

 private:
  std::string_view in_;
};

std::string Frame(MsgType type, const std::string& payload) {
  Writer w;
  w.U32(kWireMagic);
  w.U16(kWireVersion);
  w.U8(static_cast<uint8_t>(type));
  w.U8(0);
  w.U32(static_cast<uint32_t>(payload.size()));
  w.str().append(payload);
  w.U64(XXH64(w.str().data(), w.str().size(), 0));
  return std::move(w.str());
}

void PutRegions(Writer& w, const std::vector<RegionAdvert>& regions) {
  w.U32(static_cast<uint32_t>(regions.size()));
  for (const RegionAdvert& r : regions) {
    w.U32(r.id.value());
    w.U64(r.addr);
    w.U64(r.length);
    for (const std::string& k : r.rkeys) {
      w.Blob(k);
    }
  }
}

Status GetRegions(Reader& r, std::vector<RegionAdvert>* out) {
  uint32_t n = 0;
  if (!r.U32(&n) || n > kMaxRegions) {
    return Corruption("control message: bad region count");
  }
  out->clear();
  for (uint32_t i = 0; i < n; ++i) {
    RegionAdvert a;
    uint32_t id = 0;
    if (!r.U32(&id) || !r.U64(&a.addr) || !r.U64(&a.length)) {
      return Corruption(fmt::format("control message: region {} truncated", i));
    }
    a.id = RegionId(id);
    for (std::string& k : a.rkeys) {
      if (!r.Blob(&k)) {
        return Status(Code::kTransferBadRkey,
                      fmt::format("region {}: remote key truncated or oversized", id));
      }
      if (k.empty()) {
        return Status(Code::kTransferBadRkey, fmt::format("region {}: empty remote key", id));
      }
    }
    if (a.length == 0 || a.addr + a.length < a.addr) {
      return InvalidArgument(
          fmt::format("region {}: bad range [{:#x}, +{})", id, a.addr, a.length));
    }
    out->push_back(std::move(a));
  }
  return Status::Ok();
}

Result<std::string_view> Payload(std::string_view frame, MsgType want) {
  ASSIGN_OR_RETURN(MsgType type, CheckFrame(frame));
  if (type != want) {
    return Corruption(fmt::format("control message: type {} where {} was expected",
                                  static_cast<int>(type), static_cast<int>(want)));
  }
  return frame.substr(kHeaderBytes, frame.size() - kHeaderBytes - kTrailerBytes);
}

}  // namespace

std::string EncodeHello(const Hello& h) {
  Writer w;
  w.U64(h.engine_id);
  for (const std::string& a : h.worker_addrs) {
    w.Blob(a);
  }
  w.U64(h.tcp_tx_seg);
  w.U64(h.tcp_rx_seg);
  PutRegions(w, h.regions);
  return Frame(MsgType::kHello, w.str());
}

std::string EncodeRegions(const std::vector<RegionAdvert>& regions) {
  Writer w;
  PutRegions(w, regions);
  return Frame(MsgType::kRegions, w.str());
}

std::string EncodeAuth(const Auth& a) {
  Writer w;
  w.Blob(a.nonce);
  w.Blob(a.proof);
  return Frame(MsgType::kAuth, w.str());
}

std::string EncodeRefused(std::string_view reason) {
  Writer w;
  w.Blob(std::string(reason.substr(0, kMaxRefusalBytes)));
  return Frame(MsgType::kRefused, w.str());
}

Result<MsgType> CheckFrame(std::string_view frame) {
  if (frame.size() < kHeaderBytes + kTrailerBytes) {
    return Corruption(
        fmt::format("control message: {} bytes is shorter than a frame", frame.size()));
  }
  uint32_t magic = 0;
  uint16_t version = 0;
  uint32_t len = 0;
  std::memcpy(&magic, frame.data(), 4);
  std::memcpy(&version, frame.data() + 4, 2);
  std::memcpy(&len, frame.data() + 8, 4);
  if (magic != kWireMagic) {
    return Corruption(fmt::format("control message: bad magic {:#x}", magic));
  }
  if (version != kWireVersion) {
    return Corruption(fmt::format("control message: unsupported version {}", version));
  }
  if (len != frame.size() - kHeaderBytes - kTrailerBytes) {
    return Corruption(fmt::format("control message: payload length {} but frame has {} bytes", len,
                                  frame.size()));
  }
  uint64_t want = 0;
  std::memcpy(&want, frame.data() + frame.size() - kTrailerBytes, 8);
  if (XXH64(frame.data(), frame.size() - kTrailerBytes, 0) != want) {
    return Corruption("control message: checksum mismatch");
  }
  auto type = static_cast<uint8_t>(frame[6]);
  if (type < static_cast<uint8_t>(MsgType::kHello) ||
      type > static_cast<uint8_t>(MsgType::kRefused)) {
    return Corruption(fmt::format("control message: unknown type {}", type));
  }
  return static_cast<MsgType>(type);
}

Result<Hello> DecodeHello(std::string_view frame) {
  ASSIGN_OR_RETURN(std::string_view payload, Payload(frame, MsgType::kHello));
  Reader r(payload);
  Hello h;
  if (!r.U64(&h.engine_id)) {
    return Corruption("hello: truncated");
  }
  for (std::string& a : h.worker_addrs) {
    if (!r.Blob(&a) || a.empty()) {
      return Corruption("hello: bad worker address");
    }
  }
  if (!r.U64(&h.tcp_tx_seg) || !r.U64(&h.tcp_rx_seg)) {
    return Corruption("hello: truncated tcp segment sizes");
  }
  RETURN_IF_ERROR(GetRegions(r, &h.regions));
  if (!r.empty()) {
    return Corruption("hello: trailing bytes");
  }
  return h;
}

Result<std::vector<RegionAdvert>> DecodeRegions(std::string_view frame) {
  ASSIGN_OR_RETURN(std::string_view payload, Payload(frame, MsgType::kRegions));
  Reader r(payload);
  std::vector<RegionAdvert> regions;
  RETURN_IF_ERROR(GetRegions(r, &regions));
  if (!r.empty()) {
    return Corruption("regions: trailing bytes");
  }
  return regions;
}

Result<Auth> DecodeAuth(std::string_view frame) {
  ASSIGN_OR_RETURN(std::string_view payload, Payload(frame, MsgType::kAuth));
  Reader r(payload);
  Auth a;
  if (!r.Blob(&a.nonce) || !r.Blob(&a.proof) || !r.empty()) {
    return Corruption("auth: truncated or trailing bytes");
  }
  if (a.nonce.size() != kAuthNonceBytes ||
      (!a.proof.empty() && a.proof.size() != kAuthProofBytes)) {
    return Corruption(
        fmt::format("auth: nonce of {} bytes, proof of {}", a.nonce.size(), a.proof.size()));
  }
  return a;
}

Result<std::string> DecodeRefused(std::string_view frame) {
  ASSIGN_OR_RETURN(std::string_view payload, Payload(frame, MsgType::kRefused));
  Reader r(payload);
  std::string reason;
  if (!r.Blob(&reason) || !r.empty() || reason.size() > kMaxRefusalBytes) {
    return Corruption("refused: truncated or trailing bytes");
  }
  return reason;
}

}  // namespace dualpath::transfer
