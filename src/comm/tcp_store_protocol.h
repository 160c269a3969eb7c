#pragma once

// The wire format of lockstep's rendezvous store (tcp_store.h, tcp_store_server.h). Internal.
//
// Every message is a frame: a 4-byte big-endian payload length, then the payload. A request's payload
// starts with a one-byte Op, a reply's with a one-byte Status; the fields that follow are fixed-size
// big-endian integers, or byte strings written as a u32 length and the bytes. The first frame of a
// connection must be kHello (magic, version, run id, world size, rank); the server answers kRefused (with
// its own run id and world size) and closes, or, when the job has no secret, kOk. Anything else (a bad
// magic, an unknown op, a field that runs past its frame, a frame over the size cap) closes the connection.
//
// A job with a secret (job_secret.h) answers a matching kHello with kChallenge and a fresh 32-byte nonce
// instead; the client answers kProof: a nonce of its own and HMAC-SHA-256(secret, "lockstep client" |
// server nonce | run id | world size). A wrong proof gets kDenied and the connection closes; a right one
// gets kOk and the server's own proof, HMAC(secret, "lockstep server" | client nonce | server nonce |
// run id | world size), which the client checks, so that a process posing as the job's store is found
// too. The secret itself never crosses the wire; a client without one sends an empty proof. A client
// with a secret refuses a server that answers kOk without a challenge.
//
// clang-format off
//   kHello      u32 magic, u32 version, str run_id, i32 world_size, i32 rank
//                 -> kOk u32 version | kRefused u32 version, str run_id, i32 world_size
//                  | kChallenge u32 version, str server_nonce
//   kProof      str client_nonce, str proof            -> kOk u32 version, str server_proof | kDenied u32 version
//   kSet        str key, str value                     -> kOk
//   kCompareSet str key, str expected, str desired      -> kOk str value_now
//   kGet        str key, i64 timeout_ms (-1: forever)   -> kOk str value | kTimeout   (waits for the key)
//   kAdd        str key, i64 delta                      -> kOk i64 sum | kError str why
//   kDelete     str key                                 -> kOk u8 existed
//   kCheck      u32 n, n x str key                      -> kOk u8 all_exist
//   kNumKeys                                            -> kOk i64 count
//   kWait       u32 n, n x str key, i64 timeout_ms      -> kOk | kTimeout                (waits for all)
// clang-format on

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "job_proof.h"

namespace lockstep::comm::detail {

constexpr uint32_t kStoreMagic = 0x4c4b5354;  // "LKST"
constexpr uint32_t kStoreVersion = 2;         // 2: the job secret's challenge
constexpr size_t kFrameHeaderBytes = 4;
/// The largest first frame (kHello) a server reads from a connection it does not know yet.
constexpr uint32_t kMaxHelloBytes = 4096;

enum class Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kCompareSet = 3,
  kGet = 4,
  kAdd = 5,
  kDelete = 6,
  kCheck = 7,
  kNumKeys = 8,
  kWait = 9,
  kProof = 10,
};

enum class Status : uint8_t { kOk = 0, kTimeout = 1, kRefused = 2, kError = 3, kChallenge = 4, kDenied = 5 };

/// Bytes of each side's nonce in the job-secret challenge.
constexpr size_t kNonceBytes = 32;

/// The client's proof, over the server's nonce, and the server's, over both (the header above says who
/// sends which): each side computes both, one to send and one to check, so the labels live here only.
inline std::string client_proof(const std::string& secret, const std::string& server_nonce,
                                const std::string& run_id, int32_t world_size) {
  return digest_bytes(hmac_sha256(secret, std::string("lockstep client") + '\0' + server_nonce + run_id +
                                              '\0' + std::to_string(world_size)));
}
inline std::string server_proof(const std::string& secret, const std::string& client_nonce,
                                const std::string& server_nonce, const std::string& run_id,
                                int32_t world_size) {
  return digest_bytes(hmac_sha256(secret, std::string("lockstep server") + '\0' + client_nonce +
                                              server_nonce + run_id + '\0' + std::to_string(world_size)));
}

/// Appends fields to a frame; `finish()` fills in the length prefix.
class FrameWriter {
 public:
  FrameWriter() : data_(kFrameHeaderBytes, '\0') {}
  FrameWriter& u8(uint8_t v) {
    data_.push_back(static_cast<char>(v));
    return *this;
  }
  FrameWriter& u32(uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) data_.push_back(static_cast<char>((v >> shift) & 0xff));
    return *this;
  }
  FrameWriter& i32(int32_t v) { return u32(static_cast<uint32_t>(v)); }
  FrameWriter& i64(int64_t v) {
    const auto u = static_cast<uint64_t>(v);
    u32(static_cast<uint32_t>(u >> 32));
    return u32(static_cast<uint32_t>(u & 0xffffffffu));
  }
  FrameWriter& str(const std::string& s) { return bytes(s.data(), s.size()); }
  FrameWriter& str(const std::vector<uint8_t>& s) {
    return bytes(reinterpret_cast<const char*>(s.data()), s.size());
  }
  /// The whole frame, length prefix included.
  std::string finish() {
    const auto n = static_cast<uint32_t>(data_.size() - kFrameHeaderBytes);
    for (int i = 0; i < 4; ++i) data_[i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
    return std::move(data_);
  }

 private:
  FrameWriter& bytes(const char* p, size_t n) {
    u32(static_cast<uint32_t>(n));
    data_.append(p, n);
    return *this;
  }
  std::string data_;
};

/// Reads fields from one frame's payload. Every read checks the bounds and returns false (leaving the
/// reader failed) when the payload is too short, so malformed input can never read past it.
class FrameReader {
 public:
  FrameReader(const char* data, size_t size) : p_(data), left_(size) {}
  bool u8(uint8_t& v) {
    if (!take(1)) return false;
    v = static_cast<uint8_t>(p_[-1]);
    return true;
  }
  bool u32(uint32_t& v) {
    if (!take(4)) return false;
    const auto* b = reinterpret_cast<const unsigned char*>(p_ - 4);
    v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
    return true;
  }
  bool i32(int32_t& v) {
    uint32_t u = 0;
    if (!u32(u)) return false;
    v = static_cast<int32_t>(u);
    return true;
  }
  bool i64(int64_t& v) {
    uint32_t hi = 0, lo = 0;
    if (!u32(hi) || !u32(lo)) return false;
    v = static_cast<int64_t>((uint64_t{hi} << 32) | lo);
    return true;
  }
  bool str(std::string& s) {
    uint32_t n = 0;
    if (!u32(n) || !take(n)) return false;
    s.assign(p_ - n, n);
    return true;
  }
  bool bytes(std::vector<uint8_t>& s) {
    uint32_t n = 0;
    if (!u32(n) || !take(n)) return false;
    s.assign(reinterpret_cast<const uint8_t*>(p_ - n), reinterpret_cast<const uint8_t*>(p_));
    return true;
  }
  /// True when every byte of the payload was read (trailing bytes make a request malformed).
  bool done() const { return ok_ && left_ == 0; }

 private:
  bool take(size_t n) {
    if (!ok_ || n > left_) {
      ok_ = false;
      return false;
    }
    p_ += n;
    left_ -= n;
    return true;
  }
  const char* p_;
  size_t left_;
  bool ok_ = true;
};

/// The payload length announced by a frame header (4 big-endian bytes at `p`).
inline uint32_t frame_length(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace lockstep::comm::detail
