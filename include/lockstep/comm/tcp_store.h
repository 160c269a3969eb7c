#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "lockstep/comm/store_client.h"
#include "lockstep/comm/tcp_store_server.h"

namespace lockstep::comm {

/*
 * The client of lockstep's rendezvous store as a c10d::Store, so that Gloo and the other c10d process
 * groups can use it: a StoreClient (store_client.h: connection, handshake, timeouts, thread-safety) behind
 * c10d's interface. getTimeout() is the client's default timeout; c10d's kNoTimeout means forever.
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
  const TcpStoreOptions& options() const { return client_.options(); }

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
  StoreClient client_;
  std::shared_ptr<TcpStoreServer> server_;
};

}  // namespace lockstep::comm
