#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/detail/option.h"

namespace lockstep::comm {

/// A failure of the rendezvous store client: it could not connect, the connection broke, or a get/wait
/// timed out. `what()` names the store's address and, for timeouts, the keys and the timeout.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The store belongs to another job: its server answered the handshake with its own identity.
class StoreRefusedError : public StoreError {
 public:
  StoreRefusedError(const std::string& message, std::string their_run_id, int their_world_size)
      : StoreError(message), their_run_id_(std::move(their_run_id)), their_world_size_(their_world_size) {}
  /// The run id of the job that serves the store.
  const std::string& their_run_id() const { return their_run_id_; }
  /// The world size of the job that serves the store.
  int their_world_size() const { return their_world_size_; }

 private:
  std::string their_run_id_;
  int their_world_size_;
};

/// The store and this client disagree on the job secret (job_secret.h): the server refused this client's
/// proof, asked for a secret this client does not have, or could not prove the client's. Not retried.
class StoreAuthError : public StoreError {
 public:
  using StoreError::StoreError;
};

/// Where a store client connects and who it says it is. Required: host and port of the server, the job's
/// run id and world size, and this process's rank (the server checks the first two).
///
/// Example:
///   auto opts = TcpStoreOptions("127.0.0.1", 29500, "job-17", /*world_size=*/8, /*rank=*/3)
///                   .connect_timeout(std::chrono::seconds(30));
class TcpStoreOptions {
 public:
  TcpStoreOptions(std::string host, int port, std::string run_id, int world_size, int rank)
      : host_(std::move(host)),
        port_(port),
        run_id_(std::move(run_id)),
        world_size_(world_size),
        rank_(rank) {}

  LOCKSTEP_OPTION(TcpStoreOptions, std::string, host)
  LOCKSTEP_OPTION(TcpStoreOptions, int, port)
  LOCKSTEP_OPTION(TcpStoreOptions, std::string, run_id)
  LOCKSTEP_OPTION(TcpStoreOptions, int, world_size)
  LOCKSTEP_OPTION(TcpStoreOptions, int, rank)
  /// How long the constructor retries connecting (the server may not be up yet). Default 300 s.
  LOCKSTEP_OPTION(TcpStoreOptions, std::chrono::milliseconds, connect_timeout)
  /// The default timeout of get/wait (and the bound on every other operation's answer). Default 300 s.
  LOCKSTEP_OPTION(TcpStoreOptions, std::chrono::milliseconds, timeout)
  /// Who serves the store, as a broken connection's message asks after it. Default "rank 0 (which
  /// serves the store)".
  LOCKSTEP_OPTION(TcpStoreOptions, std::string, server_name)
  /// The job's secret (job_secret.h), proved in the handshake; the server must prove it too. Empty: none
  /// (then a server that asks for one refuses this client).
  LOCKSTEP_OPTION(TcpStoreOptions, std::string, secret)

 private:
  std::string host_;
  int port_;
  std::string run_id_;
  int world_size_;
  int rank_;
  std::chrono::milliseconds connect_timeout_{300000};
  std::chrono::milliseconds timeout_{300000};
  std::string server_name_ = "rank 0 (which serves the store)";
  std::string secret_;
};

/*
 * One connection to a TcpStoreServer (tcp_store_server.h; wire format in src/comm/tcp_store_protocol.h),
 * free of LibTorch: the launcher's agents meet through it, and TcpStore (tcp_store.h) makes it a
 * c10d::Store for the process groups.
 *
 * The constructor connects, retrying until connect_timeout while nothing listens, and performs the
 * handshake: a server of another job (another run id or world size) answers with its own identity and
 * the constructor throws StoreRefusedError. get() and wait() block in the server until the keys exist or
 * the timeout passes (then StoreError naming the keys and the timeout); the server answers waiters as
 * soon as set, add or compare_set creates their keys. compare_set follows c10d: a missing key is created
 * only when `expected` is empty, and the value the key holds afterwards is returned. A timeout below
 * zero means forever.
 *
 * Thread-safety: every operation takes the client's one mutex, so threads may share a client; a blocking
 * get/wait holds it (other threads' operations wait for it). After a broken connection every operation
 * throws StoreError.
 *
 * Example:
 *   TcpStoreServer server(TcpStoreServerOptions("job-17", 2).port(29500));
 *   StoreClient client(TcpStoreOptions("127.0.0.1", 29500, "job-17", 2, 0));
 *   client.set("k", "v");
 */
class StoreClient {
 public:
  using Bytes = std::vector<uint8_t>;
  static constexpr std::chrono::milliseconds kForever{-1};

  /// Connects and shakes hands; throws StoreError (StoreRefusedError for a store of another job).
  explicit StoreClient(TcpStoreOptions options);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  const TcpStoreOptions& options() const { return options_; }
  /// Changes the default timeout (options().timeout()) of later operations.
  void set_timeout(std::chrono::milliseconds timeout);
  /// "host:port".
  std::string endpoint() const;
  /// The address this end of the connection has, as the server sees it ("10.0.0.7"): the address other
  /// hosts that reach the same server can reach this one at.
  std::string local_address() const;

  void set(const std::string& key, const Bytes& value);
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired);
  /// Waits up to `timeout` for the key, then returns its value.
  Bytes get(const std::string& key, std::chrono::milliseconds timeout);
  /// Adds `value` to the key's integer (a missing key counts as 0) and returns the sum.
  int64_t add(const std::string& key, int64_t value);
  bool delete_key(const std::string& key);
  bool check(const std::vector<std::string>& keys);
  int64_t num_keys();
  /// Waits up to `timeout` for all keys.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  /// The text forms, for keys holding text.
  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_text(const std::string& key, std::chrono::milliseconds timeout);
  /// The key's value, or nullopt when it does not exist (one round trip; does not wait).
  std::optional<std::string> try_get_text(const std::string& key);

 private:
  void connect(std::chrono::steady_clock::time_point deadline);
  // Sends one request frame and returns the reply's payload; `reply_within` bounds the wait (negative:
  // forever). Must hold mutex_.
  std::string call(const std::string& frame, std::chrono::milliseconds reply_within, const char* op);
  void fail(const std::string& why);
  // get with a timeout: nullopt when the key did not appear in time.
  std::optional<Bytes> get_within(const std::string& key, std::chrono::milliseconds timeout);

  TcpStoreOptions options_;
  mutable std::mutex mutex_;
  int fd_ = -1;
  std::string broken_;  // why the connection is unusable; empty while it is fine
};

}  // namespace lockstep::comm
