#include "in_place_store.h"

#include <algorithm>
#include <cerrno>
#include <map>
#include <sstream>
#include <thread>

#include "lockstep/detail/elastic_contract.h"
#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch::detail {
namespace {

std::unique_ptr<comm::StoreClient> connect(const std::string& host, int port, const std::string& run_id,
                                           int world_size, const std::string& secret,
                                           const std::string& server) {
  return std::make_unique<comm::StoreClient>(comm::TcpStoreOptions(host, port, run_id, world_size, 0)
                                                 .connect_timeout(std::chrono::seconds(10))
                                                 .timeout(std::chrono::seconds(10))
                                                 .server_name(server)
                                                 .secret(secret));
}

}  // namespace

InPlaceStore::InPlaceStore(const std::string& run_id, int world_size, const std::string& host, int port,
                           std::chrono::milliseconds heartbeat_timeout, const std::string& secret)
    : run_id_(run_id), world_size_(world_size), heartbeat_timeout_(heartbeat_timeout) {
  const std::string where = host + ":" + std::to_string(port);
  try {
    server_ = std::make_unique<comm::TcpStoreServer>(
        comm::TcpStoreServerOptions(run_id, world_size).host(host).port(port).secret(secret));
  } catch (const comm::StoreBindError& e) {
    // In use here, or an address of another host: the job's store may be there.
    if (port == 0 || (e.error_code() != EADDRINUSE && e.error_code() != EADDRNOTAVAIL))
      throw LaunchError(std::string("in-place recovery: cannot serve the workers' store: ") + e.what());
  } catch (const std::exception& e) {
    throw LaunchError(std::string("in-place recovery: cannot serve the workers' store: ") + e.what());
  }
  try {
    if (server_) {
      endpoint_ = host + ":" + std::to_string(server_->port());
      client_ = connect(host, server_->port(), run_id, world_size, secret, "this launcher");
      thread_ = std::thread([this] { watch_joined(); });
    } else {
      endpoint_ = where;
      client_ =
          connect(host, port, run_id, world_size, secret, "the launcher that serves the job (" + where + ")");
      if (client_->add(key(lockstep::detail::kGenerationKey), 0) < 0) throw LaunchError("unreachable");
    }
  } catch (const std::exception& e) {
    throw LaunchError(
        server_
            ? std::string("in-place recovery: cannot reach this launcher's store: ") + e.what()
            : "in-place recovery: " + where + " is in use, and not by a running job with run id '" + run_id +
                  "' and world size " + std::to_string(world_size) + " that this launcher could join (" +
                  e.what() + "): give a free port, or the running job's endpoint, run id and sizes");
  }
}

InPlaceStore::~InPlaceStore() {
  stop_thread();
  if (joining() && count_ > 0) {
    try {  // this launcher's workers have all ended: nothing more to watch
      // Those that neither finished nor were announced were stopped with this launcher (a signal, a
      // failed start): the others must not wait for them.
      announce_unfinished(first_id_, count_, "its launcher stopped before it finished");
      client_->set(key("launcher/" + std::to_string(first_id_) + "/done"), comm::StoreClient::Bytes{'1'});
    } catch (const std::exception&) {  // the serving launcher is gone already
    }
  }
}

void InPlaceStore::stop_thread() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  thread_.join();
}

std::string InPlaceStore::key(const std::string& name) const {
  return lockstep::detail::elastic_prefix(run_id_) + name;
}

int InPlaceStore::reserve_ids(int count) {
  first_id_ = world_size_ + static_cast<int>(client_->add(key(lockstep::detail::kJoinedKey), count)) - count;
  count_ = count;
  // Named by its address as the store sees it (emulated hosts share one host name).
  const std::string record = std::to_string(first_id_) + " " + std::to_string(count) + " " + host_name() +
                             " (" + client_->local_address() + ")";
  // Removed by the store when this launcher's connection closes (kLiveKeySuffix): the serving launcher
  // learns at once that a killed launcher is gone; set before the registration that makes it watched.
  client_->set(key("launcher/" + std::to_string(first_id_) + comm::kLiveKeySuffix),
               comm::StoreClient::Bytes{'1'});
  const int n = static_cast<int>(client_->add(key("launchers"), 1));
  client_->set(key("launchers/" + std::to_string(n)), comm::StoreClient::Bytes(record.begin(), record.end()));
  thread_ = std::thread([this] { beat(); });
  return first_id_;
}

void InPlaceStore::beat() {
  const std::string beats = key("launcher/" + std::to_string(first_id_) + "/beat");
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    try {
      client_->add(beats, 1);
    } catch (const std::exception&) {  // the serving launcher is gone: the workers will say so
      return;
    }
    stop_.wait_for(lock, std::chrono::seconds(1));
  }
}

// Every 100 ms: each joining launcher's live key and beat count. One whose connection closed (its process is
// gone), or whose beats stood still for the heartbeat timeout (its host vanished, or it is stopped), has its
// workers announced as lost, but those that finished or were announced already.
void InPlaceStore::watch_joined() {
  struct Watched {
    int first = 0, count = 0;
    std::string host;
    int64_t beats = -1;
    std::chrono::steady_clock::time_point changed;
    bool over = false;
  };
  std::map<int, Watched> watched;  // by registration number
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    stop_.wait_for(lock, std::chrono::milliseconds(100));
    if (stopping_) return;
    try {
      const int registered = static_cast<int>(client_->add(key("launchers"), 0));
      for (int n = static_cast<int>(watched.size()) + 1; n <= registered; ++n) {
        const auto value = client_->get(key("launchers/" + std::to_string(n)), std::chrono::seconds(10));
        std::istringstream in(std::string(value.begin(), value.end()));
        Watched w;
        in >> w.first >> w.count;
        std::getline(in >> std::ws, w.host);
        w.changed = std::chrono::steady_clock::now();
        watched[n] = w;
      }
      for (auto& [n, w] : watched) {
        if (w.over) continue;
        const std::string prefix = "launcher/" + std::to_string(w.first);
        if (client_->check({key(prefix + "/done")})) {
          w.over = true;
          continue;
        }
        const int64_t beats = client_->add(key(prefix + "/beat"), 0);
        const auto now = std::chrono::steady_clock::now();
        std::string why;
        if (!client_->check({key(prefix + comm::kLiveKeySuffix)})) {
          if (client_->check({key(prefix + "/done")})) {  // it ended normally as its connection closed
            w.over = true;
            continue;
          }
          why = "its launcher on " + w.host + " closed its connection to the store: it is gone";
        } else if (beats != w.beats) {
          w.beats = beats;
          w.changed = now;
          continue;
        } else if (now - w.changed >= heartbeat_timeout_) {
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - w.changed).count();
          why = "its launcher on " + w.host + " sent no heartbeat for " + std::to_string(ms / 1000) + "." +
                std::to_string(ms % 1000 / 100) + " s: the host is gone or cut off";
        } else {
          continue;
        }
        w.over = true;
        announce_unfinished(w.first, w.count, why);
      }
    } catch (const std::exception&) {  // the store is this process's own: only its shutdown ends it
      return;
    }
  }
}

std::vector<int> InPlaceStore::lost_ids() {
  std::vector<int> lost;
  const int changes = static_cast<int>(client_->add(key(lockstep::detail::kGenerationKey), 0));
  for (int n = 1; n <= changes; ++n) {
    const auto value = client_->get(key(lockstep::detail::change_key(n)), std::chrono::seconds(10));
    const auto record = lockstep::detail::parse_membership(std::string(value.begin(), value.end()));
    if (record && !record->joined) lost.push_back(record->id);
  }
  return lost;
}

void InPlaceStore::announce_unfinished(int first, int count, const std::string& reason) {
  const std::vector<int> lost = lost_ids();
  for (int id = first; id < first + count; ++id) {
    if (std::find(lost.begin(), lost.end(), id) != lost.end()) continue;
    if (client_->check({key(lockstep::detail::finished_key(id))})) continue;
    announce_lost(id, reason);
  }
}

int InPlaceStore::announce_lost(int id, const std::string& reason) {
  // The counter first (elastic_contract.h): whoever sees change n then finds the counter at n or above.
  const int n = static_cast<int>(client_->add(key(lockstep::detail::kGenerationKey), 1));
  const std::string record =
      lockstep::detail::format_membership({id, lockstep::detail::unix_ms_now(), reason});
  client_->set(key(lockstep::detail::change_key(n)), comm::StoreClient::Bytes(record.begin(), record.end()));
  return n;
}

int InPlaceStore::unfinished_joined() {
  const int joined = static_cast<int>(client_->add(key(lockstep::detail::kJoinedKey), 0));
  if (joined == 0) return 0;
  const std::vector<int> lost = lost_ids();
  int unfinished = 0;
  for (int id = world_size_; id < world_size_ + joined; ++id) {
    if (std::find(lost.begin(), lost.end(), id) != lost.end()) continue;
    if (!client_->check({key(lockstep::detail::finished_key(id))})) ++unfinished;
  }
  return unfinished;
}

int InPlaceStore::wait_for_joined(std::optional<std::chrono::milliseconds> timeout,
                                  const std::function<bool()>& stop) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const int missing = unfinished_joined();
    if (missing == 0 || (timeout && std::chrono::steady_clock::now() - start >= *timeout)) return missing;
    if (stop && stop()) return missing;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace lockstep::launch::detail
