#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "lockstep/detail/option.h"

namespace lockstep::comm {

/// Raised when the store server cannot listen: `error_code()` is the errno of the failing call
/// (EADDRINUSE for a port that is taken), `what()` names the address, the port and the fix.
class StoreBindError : public std::runtime_error {
 public:
  StoreBindError(int error_code, const std::string& message)
      : std::runtime_error(message), error_code_(error_code) {}
  int error_code() const { return error_code_; }

 private:
  int error_code_;
};

/// What a TcpStoreServer serves and to whom. Required: the job's run id and world size (every client
/// must present both in its handshake); the rest has defaults.
///
/// Example:
///   auto opts = TcpStoreServerOptions("job-17", /*world_size=*/8).host("127.0.0.1").port(29500);
class TcpStoreServerOptions {
 public:
  TcpStoreServerOptions(std::string run_id, int world_size)
      : run_id_(std::move(run_id)), world_size_(world_size) {}

  LOCKSTEP_OPTION(TcpStoreServerOptions, std::string, run_id)
  LOCKSTEP_OPTION(TcpStoreServerOptions, int, world_size)
  /// Address (or host name, resolved) to listen on. Empty: every interface. Default "127.0.0.1".
  LOCKSTEP_OPTION(TcpStoreServerOptions, std::string, host)
  /// TCP port; 0 lets the kernel pick one (read it back with TcpStoreServer::port()).
  LOCKSTEP_OPTION(TcpStoreServerOptions, int, port)
  /// Largest frame accepted from a client that passed the handshake (bytes); a connection announcing
  /// a larger one is closed. Before the handshake the cap is 4 KiB.
  LOCKSTEP_OPTION(TcpStoreServerOptions, uint32_t, max_frame_bytes)
  /// Most open connections. At the cap a new connection first evicts the oldest one that has not
  /// completed its handshake; when there is none, the new one is closed.
  LOCKSTEP_OPTION(TcpStoreServerOptions, int, max_connections)
  /// A connection that has not completed its handshake this long after it was accepted is closed.
  LOCKSTEP_OPTION(TcpStoreServerOptions, std::chrono::milliseconds, hello_timeout)
  /// Invalid connections (garbage, half-open, oversized frames) are reported as one summary line on
  /// stderr at most this long after the first one not yet reported.
  LOCKSTEP_OPTION(TcpStoreServerOptions, std::chrono::milliseconds, report_interval)
  /// When not empty, each refused client is also recorded in the store itself: the counter
  /// `<refused_key>` is incremented (to n) and, for the first 100, `<refused_key>/<n>` describes the
  /// client, so that any client can report strangers (rendezvous uses "lockstep/refused").
  LOCKSTEP_OPTION(TcpStoreServerOptions, std::string, refused_key)
  /// The job's secret (job_secret.h). When not empty, a client is served only once it proves it knows the
  /// same secret, and the server proves it in return; one that cannot is refused as a stranger is.
  LOCKSTEP_OPTION(TcpStoreServerOptions, std::string, secret)

 private:
  std::string run_id_;
  int world_size_;
  std::string host_ = "127.0.0.1";
  int port_ = 0;
  uint32_t max_frame_bytes_ = 64u << 20;
  int max_connections_ = 1024;
  std::chrono::milliseconds hello_timeout_{10000};
  std::chrono::milliseconds report_interval_{5000};
  std::string refused_key_;
  std::string secret_;
};

namespace detail {
class TcpStoreServerLoop;
}

/*
 * The server side of lockstep's rendezvous store (the client is TcpStore, tcp_store.h).
 *
 * One background thread owns every socket and the key-value map; it sleeps in poll() on the listening
 * socket, a wake-up pipe and all connections, which are non-blocking. Each connection has an input
 * buffer: bytes are appended as they arrive and a request is handled only once its whole frame is there
 * (tcp_store_protocol.h), so a partial frame or a silent peer costs nothing but its buffer and never
 * delays other clients. A request that waits for keys (get, wait) parks its connection until a set, add
 * or compareSet creates the keys, or until the request's own deadline, when the server answers kTimeout.
 *
 * The first frame must be a handshake carrying the job's run id and world size: a client of another job
 * is answered with this job's identity and disconnected, and stderr gets one line naming it. With a job
 * secret, a client must then prove it knows the secret (an HMAC challenge, tcp_store_protocol.h), or it
 * is refused the same way. Invalid
 * input of any kind (bad magic, unknown op, truncated fields, a frame over the cap, a handshake that
 * never completes) closes that connection; these are summarised on stderr, one line per
 * report_interval at most. The job's clients are not affected by either.
 *
 * A key whose name ends in kLiveKeySuffix ("/live") lives as long as the connection that last set it: when
 * that connection closes (its process ended, its host reset it), the server removes the key, so that
 * whoever watches it learns at once that the client is gone (ZooKeeper's ephemeral nodes; the in-place
 * launcher's joined launchers, src/launch/in_place_store.cpp).
 *
 * Thread-safety: the constructor starts the thread and returns once the socket listens; the accessors
 * may be called from any thread; the destructor stops the thread and closes every connection.
 */
inline constexpr const char* kLiveKeySuffix = "/live";

class TcpStoreServer {
 public:
  /// Binds and listens; throws StoreBindError naming the address and port when it cannot.
  explicit TcpStoreServer(TcpStoreServerOptions options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  /// The port it listens on (the kernel's choice when options.port() was 0).
  int port() const;
  /// The address it listens on, as text ("127.0.0.1", "0.0.0.0", "::1", ...).
  const std::string& address() const;
  /// Clients of another job (or protocol version) refused so far.
  int64_t refused_clients() const;
  /// Connections closed for invalid input so far (garbage, oversized frames, incomplete handshakes).
  int64_t invalid_connections() const;

 private:
  std::unique_ptr<detail::TcpStoreServerLoop> loop_;
  std::thread thread_;
};

}  // namespace lockstep::comm
