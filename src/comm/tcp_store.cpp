#include "lockstep/comm/tcp_store.h"

namespace lockstep::comm {
namespace {

// c10d's "no timeout" (zero) as StoreClient's (negative).
std::chrono::milliseconds client_timeout(std::chrono::milliseconds timeout) {
  return timeout == c10d::Store::kNoTimeout ? StoreClient::kForever : timeout;
}

TcpStoreOptions with_client_timeout(TcpStoreOptions options) {
  options.timeout(client_timeout(options.timeout()));
  return options;
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options)
    : c10d::Store(options.timeout()), client_(with_client_timeout(std::move(options))) {}

TcpStore::~TcpStore() = default;

void TcpStore::keep_server(std::shared_ptr<TcpStoreServer> server) {
  server_ = std::move(server);
}

c10::intrusive_ptr<c10d::Store> TcpStore::clone() {
  TcpStoreOptions options = client_.options();
  options.timeout(getTimeout());
  auto copy = c10::make_intrusive<TcpStore>(std::move(options));
  copy->keep_server(server_);
  return copy;
}

void TcpStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  client_.set(key, value);
}

std::vector<uint8_t> TcpStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                          const std::vector<uint8_t>& desired) {
  return client_.compare_set(key, expected, desired);
}

std::vector<uint8_t> TcpStore::get(const std::string& key) {
  return client_.get(key, client_timeout(getTimeout()));
}

int64_t TcpStore::add(const std::string& key, int64_t value) {
  return client_.add(key, value);
}

bool TcpStore::deleteKey(const std::string& key) {
  return client_.delete_key(key);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return client_.check(keys);
}

int64_t TcpStore::getNumKeys() {
  return client_.num_keys();
}

void TcpStore::wait(const std::vector<std::string>& keys) {
  client_.wait(keys, client_timeout(getTimeout()));
}

void TcpStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  client_.wait(keys, client_timeout(timeout));
}

void TcpStore::setTimeout(const std::chrono::milliseconds& timeout) {
  c10d::Store::setTimeout(timeout);
  client_.set_timeout(client_timeout(timeout));
}

}  // namespace lockstep::comm
