#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "lockstep/comm/tcp_store_server.h"
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

/// Where a TcpStore connects and who it says it is. Required: host and port of the server, the job's
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
  /// The store's default timeout for get/wait (c10d::Store::getTimeout). Default 300 s.
  LOCKSTEP_OPTION(TcpStoreOptions, std::chrono::milliseconds, timeout)

 private:
  std::string host_;
  int port_;
  std::string run_id_;
  int world_size_;
  int rank_;
  std::chrono::milliseconds connect_timeout_{300000};
  std::chrono::milliseconds timeout_{300000};
};

/*
 * The client of lockstep's rendezvous store: a c10d::Store (so Gloo and the other c10d process groups can
 * use it) over one TCP connection to a TcpStoreServer (tcp_store_server.h; wire format in
 * src/comm/tcp_store_protocol.h).
 *
 * The constructor connects, retrying until connect_timeout while nothing listens, and performs the
 * handshake: a server of another job (another run id or world size) answers with its own identity and
 * the constructor throws StoreRefusedError. get() and wait() block in the server until the keys exist or
 * the timeout passes (then StoreError naming the keys and the timeout); the server answers waiters as
 * soon as set, add or compareSet creates their keys. compareSet follows c10d: a missing key is created
 * only when `expected` is empty, and the value the key holds afterwards is returned.
 *
 * Thread-safety: every operation takes the client's one mutex, so threads may share a client; a blocking
 * get/wait holds it (other threads' operations wait for it). After a broken connection every operation
 * throws StoreError.
 *
 * Example:
 *   TcpStoreServer server(TcpStoreServerOptions("job-17", 2).port(29500));
 *   auto store = c10::make_intrusive<TcpStore>(TcpStoreOptions("127.0.0.1", 29500, "job-17", 2, 0));
 *   store->set("k", {'v'});
 */
class TcpStore : public c10d::Store {
 public:
  /// Connects and shakes hands; throws StoreError (StoreRefusedError for a store of another job).
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  /// Keeps `server` alive as long as this client (rank 0 owns the job's server through its client).
  void keep_server(std::shared_ptr<TcpStoreServer> server);
  /// The server kept by keep_server, or null.
  const std::shared_ptr<TcpStoreServer>& server() const { return server_; }
  const TcpStoreOptions& options() const { return options_; }

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  /// Waits up to getTimeout() for the key, then returns its value.
  std::vector<uint8_t> get(const std::string& key) override;
  /// Adds `value` to the key's integer (a missing key counts as 0) and returns the sum.
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  /// Waits up to getTimeout() for all keys.
  void wait(const std::vector<std::string>& keys) override;
  /// Waits up to `timeout` (kNoTimeout: forever) for all keys.
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;
  /// A second client of the same server (its own connection, this one's options and current timeout),
  /// sharing the server kept by keep_server. It overrides c10d::Store::clone() where LibTorch has it
  /// (pure virtual since 2.8; c10d_compat.h), and is an ordinary method before.
  c10::intrusive_ptr<c10d::Store> clone();

 private:
  void connect(std::chrono::steady_clock::time_point deadline);
  // Sends one request frame and returns the reply's payload; `reply_within` bounds the wait (negative:
  // forever). Must hold mutex_.
  std::string call(const std::string& frame, std::chrono::milliseconds reply_within, const char* op);
  std::string endpoint() const;
  void fail(const std::string& why);

  TcpStoreOptions options_;
  mutable std::mutex mutex_;
  int fd_ = -1;
  std::string broken_;  // why the connection is unusable; empty while it is fine
  std::shared_ptr<TcpStoreServer> server_;
};

}  // namespace lockstep::comm
