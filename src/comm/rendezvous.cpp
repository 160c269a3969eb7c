#include "lockstep/comm/rendezvous.h"

#include <unistd.h>

#include <cerrno>
#include <memory>

#include <chrono>
#include <exception>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include "lockstep/comm/comm_error.h"
#include "lockstep/comm/network.h"
#include "lockstep/comm/tcp_store.h"
#include "lockstep/comm/tcp_store_server.h"
#include "lockstep/detail/join.h"
#include "seconds_text.h"
#include "store_bytes.h"

namespace lockstep::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kOp = "rendezvous";
constexpr const char* kJobKey = "lockstep/job";
constexpr const char* kRefusedKey = "lockstep/refused";

using detail::bytes;
using detail::seconds_text;
using detail::text;

std::string endpoint(const ProcessGroupOptions& o) {
  return o.master_addr() + ":" + std::to_string(o.master_port());
}

// What a rank publishes / expects as the job's identity: "<run_id>\n<world_size>".
std::string job_token(const ProcessGroupOptions& o) {
  return o.run_id() + "\n" + std::to_string(o.world_size());
}

// A value unique to this process, so a second claim of the same rank can be told apart.
std::string process_nonce() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return std::string(host) + ":pid " + std::to_string(::getpid()) + ":" + std::to_string(rd());
}

milliseconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return left.count() > 1 ? left : milliseconds(1);
}

// The error for a process whose job identity differs from the store's: another run id, or the same run
// with another world size.
CommError refusal(const ProcessGroupOptions& o, const std::string& their_run, const std::string& their_size) {
  if (their_run != o.run_id()) {
    return CommError(o.rank(), kOp,
                     "refused: the rendezvous server at " + endpoint(o) + " belongs to run id '" + their_run +
                         "' (world size " + their_size + ") but this process has run id '" + o.run_id() +
                         "'. Another job is using this port: point MASTER_ADDR/MASTER_PORT at your own "
                         "job's rank 0, or give every rank of one job the same TORCHELASTIC_RUN_ID / "
                         "run_id.");
  }
  return CommError(o.rank(), kOp,
                   "refused: rank 0 of run '" + their_run + "' has WORLD_SIZE=" + their_size +
                       " but this process has WORLD_SIZE=" + std::to_string(o.world_size()) +
                       ": every rank (and every node's launcher) must use the same world size.");
}

// Where rank 0's store listens. A single-node job whose master_addr is local loopback listens on that
// loopback address only: nothing outside this host has any business with it. Otherwise it listens on the
// address master_addr names (its clients connect there), with one exception: a multi-node job whose
// master_addr is a host name that resolves to loopback here (Debian maps the host's own name to
// 127.0.1.1) is reached by the other nodes at this host's real address, so it listens on every interface.
std::string store_listen_host(const ProcessGroupOptions& o) {
  const std::string local = local_address_for(o.master_addr());  // throws, naming the host, if unresolvable
  if (!is_loopback_address(local)) return o.master_addr();
  if (o.num_nodes() == 1 || is_loopback_address(o.master_addr())) return o.master_addr();
  return "";
}

// Step 1: rank 0 starts the store's server; every rank (rank 0 too) connects to it and shows the job's
// token (run id and world size) in its handshake, so a process of another job is refused right here.
c10::intrusive_ptr<c10d::Store> connect_tcp_store(const ProcessGroupOptions& o) {
  std::shared_ptr<TcpStoreServer> server;
  if (o.rank() == 0) {
    std::string host;
    try {
      host = store_listen_host(o);
      server = std::make_shared<TcpStoreServer>(TcpStoreServerOptions(o.run_id(), o.world_size())
                                                    .host(host)
                                                    .port(o.master_port())
                                                    .refused_key(kRefusedKey)
                                                    .secret(o.job_secret()));
    } catch (const StoreBindError& e) {
      if (e.error_code() == EADDRINUSE || !port_is_free(o.master_port())) {
        throw CommError(o.rank(), kOp,
                        "port " + std::to_string(o.master_port()) +
                            " is already in use on this host, so rank 0 cannot serve the rendezvous store "
                            "there. Another job (or a stale process) holds it: stop it, choose another "
                            "port (master_port / MASTER_PORT), or use `lockstep run --standalone` to "
                            "pick a free one. (" +
                            e.what() + ")");
      }
      throw CommError(o.rank(), kOp,
                      "rank 0 could not start the rendezvous store at " + endpoint(o) + " (listening on " +
                          (host.empty() ? std::string("all interfaces") : host) +
                          "): MASTER_ADDR must name this host (rank 0's). (" + e.what() + ")");
    } catch (const std::runtime_error& e) {
      throw CommError(o.rank(), kOp,
                      "rank 0 could not start the rendezvous store at " + endpoint(o) +
                          ": MASTER_ADDR must name this host (rank 0's). (" + e.what() + ")");
    }
  }
  try {
    auto store = c10::make_intrusive<TcpStore>(
        TcpStoreOptions(o.master_addr(), o.master_port(), o.run_id(), o.world_size(), o.rank())
            .connect_timeout(o.rendezvous_timeout())
            .timeout(o.rendezvous_timeout())
            .secret(o.job_secret()));
    store->keep_server(std::move(server));
    return store;
  } catch (const StoreRefusedError& e) {
    throw refusal(o, e.their_run_id(), std::to_string(e.their_world_size()));
  } catch (const StoreAuthError& e) {
    throw CommError(o.rank(), kOp, e.what());
  } catch (const std::exception& e) {
    throw CommError(o.rank(), kOp,
                    "could not reach the rendezvous server at " + endpoint(o) + " within " +
                        seconds_text(o.rendezvous_timeout()) +
                        ". Check that rank 0 is running and listening there: MASTER_ADDR must be rank 0's "
                        "host as this host sees it, MASTER_PORT the same on every rank, and no firewall "
                        "may block the port (raise the wait with LOCKSTEP_RDZV_TIMEOUT). (" +
                        e.what() + ")");
  }
}

// Step 2: rank 0 publishes the job's identity; the others check theirs against it.
void check_token(c10d::Store& store, const ProcessGroupOptions& o, Clock::time_point deadline) {
  const std::string mine = job_token(o);
  if (o.rank() == 0) {
    // A store served by rank 0 is new, so the key is normally absent; it is present only when a store
    // is reused (an in-memory store passed in the options). Over TCP the server's handshake has already
    // turned strangers away; this check is what protects a store given in the options.
    const std::string current = store.check({kJobKey}) ? text(store.get(kJobKey)) : mine;
    if (current == mine) store.set(kJobKey, bytes(mine));
    if (current != mine) {
      throw CommError(0, kOp,
                      "the store at " + endpoint(o) + " already belongs to another job (run id '" +
                          current.substr(0, current.find('\n')) + "'); this job's run id is '" + o.run_id() +
                          "'. Use another master_port.");
    }
    return;
  }
  try {
    store.wait({kJobKey}, remaining(deadline));
  } catch (const std::exception& e) {
    throw CommError(o.rank(), kOp,
                    "rank 0 did not open the job at " + endpoint(o) + " within " +
                        seconds_text(o.rendezvous_timeout()) + ": is rank 0 running? (" + e.what() + ")");
  }
  const std::string theirs = text(store.get(kJobKey));
  if (theirs == mine) return;
  const auto split = theirs.find('\n');
  const std::string their_run = theirs.substr(0, split);
  const std::string their_size = split == std::string::npos ? "?" : theirs.substr(split + 1);
  // Leave a trace for rank 0 of the other job, then refuse. (Over TCP the server records refusals
  // under the same keys itself.)
  const auto n = store.add(kRefusedKey, 1);
  store.set(std::string(kRefusedKey) + "/" + std::to_string(n),
            bytes("run id '" + o.run_id() + "', rank " + std::to_string(o.rank())));
  throw refusal(o, their_run, their_size);
}

// Processes of other jobs (or without the job secret) that were refused at this store (step 2 leaves their
// trace), as a sentence.
std::string refused_strangers(c10d::Store& root) {
  try {
    const auto n = root.add(kRefusedKey, 0);
    if (n <= 0) return "";
    const std::string first = text(root.get(std::string(kRefusedKey) + "/1"));
    return " Meanwhile " + std::to_string(n) +
           " process(es) of another job, or without this job's secret, were refused at this port (first: " +
           first + "): is a second job pointed at this MASTER_PORT?";
  } catch (const std::exception&) {
    return "";
  }
}

// Step 3: claim this rank and wait for all ranks.
void check_in(c10d::Store& root, c10d::Store& job, const ProcessGroupOptions& o, Clock::time_point deadline) {
  const std::string rank_key = "rank/" + std::to_string(o.rank());
  const std::string nonce = process_nonce();
  const auto owner = text(job.compareSet(rank_key, {}, bytes(nonce)));
  if (owner != nonce) {
    throw CommError(o.rank(), kOp,
                    "rank " + std::to_string(o.rank()) + " was already claimed by another process (" + owner +
                        "): two processes were started with RANK=" + std::to_string(o.rank()) +
                        "; each rank of a job must be unique.");
  }
  if (job.add("arrived", 1) == o.world_size()) {
    job.set("all_arrived", bytes("1"));
  }
  try {
    job.wait({"all_arrived"}, remaining(deadline));
  } catch (const std::exception& e) {
    std::vector<int> missing;
    for (int r = 0; r < o.world_size(); ++r) {
      try {
        if (!job.check({"rank/" + std::to_string(r)})) missing.push_back(r);
      } catch (const std::exception&) {
        break;  // the store itself is gone; report what we have
      }
    }
    const std::string list =
        lockstep::detail::join_first(missing, 16, ", ", [](int r) { return std::to_string(r); });
    std::string msg = "timed out after " + seconds_text(o.rendezvous_timeout()) + " waiting for all " +
                      std::to_string(o.world_size()) + " ranks at " + endpoint(o) + ": ";
    msg += missing.empty() ? std::string("lost the rendezvous store (") + e.what() + ")"
                           : "rank(s) " + list +
                                 " never arrived. Check that they were started with the same "
                                 "MASTER_ADDR/MASTER_PORT and WORLD_SIZE=" +
                                 std::to_string(o.world_size()) + ".";
    msg += refused_strangers(root);
    throw CommError(o.rank(), kOp, msg);
  }
}

}  // namespace

RendezvousResult rendezvous(const ProcessGroupOptions& options) {
  try {
    options.validate();
  } catch (const std::invalid_argument& e) {
    throw CommError(options.rank(), kOp, e.what());
  }
  const auto deadline = Clock::now() + options.rendezvous_timeout();
  RendezvousResult result;
  result.root_store = options.store() ? options.store() : connect_tcp_store(options);
  result.root_store->setTimeout(options.rendezvous_timeout());
  check_token(*result.root_store, options, deadline);
  result.job_store =
      c10::make_intrusive<c10d::PrefixStore>("lockstep/" + options.run_id(), result.root_store);
  check_in(*result.root_store, *result.job_store, options, deadline);
  return result;
}

}  // namespace lockstep::comm
