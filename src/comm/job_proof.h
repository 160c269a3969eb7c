#pragma once

// The cryptography of the store's job-secret handshake (tcp_store_protocol.h): SHA-256 (FIPS 180-4),
// HMAC-SHA-256 (RFC 2104), a constant-time comparison and random bytes from the kernel. Internal.
//
// Written here rather than taken from OpenSSL so that the store (free of LibTorch, linked into the
// launcher) adds no library to install on any machine, the GPU one included; test_job_secret checks both
// functions against the published vectors (FIPS 180-4's "abc", RFC 4231's cases).

#include <array>
#include <cstdint>
#include <string>

namespace lockstep::comm::detail {

using Digest = std::array<uint8_t, 32>;

Digest sha256(const std::string& message);
Digest hmac_sha256(const std::string& key, const std::string& message);

/// True when `a` and `b` are equal; the time taken depends only on their lengths, not on where they
/// differ (so a peer cannot find a valid proof byte by byte by timing refusals).
bool equal_in_constant_time(const std::string& a, const std::string& b);

/// `n` bytes from getrandom(2). Throws std::runtime_error if the kernel has none to give.
std::string random_bytes(size_t n);

/// The digest as a string of 32 raw bytes (what the protocol sends).
inline std::string digest_bytes(const Digest& d) {
  return std::string(d.begin(), d.end());
}

}  // namespace lockstep::comm::detail
