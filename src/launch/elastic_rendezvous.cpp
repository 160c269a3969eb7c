#include "lockstep/launch/detail/elastic_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <sstream>
#include <thread>

#include "lockstep/comm/store_client.h"
#include "lockstep/comm/tcp_store_server.h"
#include "lockstep/detail/join.h"
#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using Bytes = comm::StoreClient::Bytes;

// How often join() looks at the store while it waits (the round closing, a round ending).
constexpr milliseconds kJoinPoll{50};

// The store's keys. Job-wide: the current round, failures so far, the job closing. Per round N: under
// "r<N>/".
constexpr const char* kRoundKey = "round";
constexpr const char* kFailuresKey = "failures";
constexpr const char* kClosingKey = "closing";

std::string key(int round, const std::string& name) {
  return "r" + std::to_string(round) + "/" + name;
}
std::string key(int round, const std::string& name, int ticket) {
  return key(round, name) + "/" + std::to_string(ticket);
}

Bytes bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}
std::string text(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

std::string seconds(milliseconds ms) {
  std::ostringstream out;
  out << static_cast<double>(ms.count()) / 1000.0 << " s";
  return out.str();
}

// "<addr> <nproc> <role> <asked_rank> <agent> <host>": how a node announces itself (no field holds a
// space: resolve() checks the role; addresses, ids and host names have none).
std::string encode(const RdzvNode& n) {
  return n.addr + " " + std::to_string(n.nproc) + " " + n.role + " " + std::to_string(n.asked_rank) + " " +
         n.agent + " " + n.host;
}

RdzvNode decode(const std::string& s, int ticket) {
  std::istringstream in(s);
  RdzvNode n;
  n.ticket = ticket;
  if (!(in >> n.addr >> n.nproc >> n.role >> n.asked_rank >> n.agent >> n.host) || n.nproc < 1) {
    throw LaunchError("the rendezvous store holds a malformed announcement of node " +
                      std::to_string(ticket) + ": '" + s + "' (is every node running the same lockstep?)");
  }
  return n;
}

// "<failure 0|1> <status> <reason>".
std::string encode(const RoundEnd& e) {
  return std::string(e.failure ? "1" : "0") + " " + std::to_string(e.status) + " " + e.reason;
}

RoundEnd decode_end(const std::string& s) {
  RoundEnd e;
  std::istringstream in(s);
  int failure = 0;
  in >> failure >> e.status;
  e.failure = failure != 0;
  std::getline(in, e.reason);
  if (!e.reason.empty() && e.reason.front() == ' ') e.reason.erase(0, 1);
  return e;
}

// Ends round `number` with `end` unless it has ended already (compare-and-set: the first end stands),
// counts a failure once, moves the job on to round number + 1 and returns the end that stands. Whoever
// set the end may have died before moving the job on, so everyone moves it (only the first move counts).
RoundEnd end_round_in(comm::StoreClient& store, int number, const RoundEnd& end) {
  const Bytes mine = bytes(encode(end));
  const Bytes standing = store.compare_set(key(number, "end"), {}, mine);
  if (standing == mine && end.failure) store.add(kFailuresKey, 1);
  store.compare_set(kRoundKey, bytes(std::to_string(number)), bytes(std::to_string(number + 1)));
  return decode_end(text(standing));
}

// Whether this host has `host`'s address: a port of it can be bound (find_free_port).
bool address_is_here(const std::string& host) {
  try {
    find_free_port(host);
    return true;
  } catch (const LaunchError&) {
    return false;
  }
}

}  // namespace

std::string RdzvNode::describe() const {
  return addr + " (host " + host + ")";
}

std::string Round::node(int node_rank) const {
  const RdzvNode& n = nodes[static_cast<std::size_t>(node_rank)];
  return "node " + std::to_string(node_rank) + " (" + n.addr + ", host " + n.host + ")";
}

std::string Round::describe() const {
  std::string s = "round " + std::to_string(number) + ": " + std::to_string(nodes.size()) + " node(s):";
  for (std::size_t r = 0; r < nodes.size(); ++r) {
    s += (r == 0 ? " " : ", ") + std::string("node ") + std::to_string(r) + " = " + nodes[r].addr + " (" +
         std::to_string(nodes[r].nproc) + " worker(s), host " + nodes[r].host + ")";
  }
  const auto list = [](const std::vector<std::string>& v) { return lockstep::detail::join(v, ", "); };
  if (!left.empty() || !joined.empty()) {
    s += " (";
    if (!left.empty()) s += "left since round " + std::to_string(number - 1) + ": " + list(left);
    if (!left.empty() && !joined.empty()) s += "; ";
    if (!joined.empty()) s += "joined: " + list(joined);
    s += ")";
  }
  return s;
}

std::string address_towards(const std::string& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(peer.c_str(), "9", &hints, &found) != 0) return "";
  std::string out;
  for (addrinfo* ai = found; ai != nullptr && out.empty(); ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {0};
      const void* a = local.ss_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (::inet_ntop(local.ss_family, a, buf, sizeof(buf)) != nullptr) out = buf;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return out;
}

bool is_loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1" || address == "localhost";
}

std::chrono::milliseconds KeepAlives::still_for(int ticket, int64_t beats, Clock::time_point now) {
  auto it = seen_.find(ticket);
  if (it == seen_.end() || it->second.first != beats) {
    seen_[ticket] = {beats, now};
    return milliseconds(0);
  }
  return std::chrono::duration_cast<milliseconds>(now - it->second.second);
}

// ---------------------------------------------------------------------------------------------------
// ElasticRendezvous

ElasticRendezvous::ElasticRendezvous(const LaunchConfig& config, Say say)
    : config_(config), say_(std::move(say)), hostname_(host_name()), agent_(random_run_id().substr(0, 8)) {
  const Endpoint& endpoint = config_.rdzv_endpoint;
  const RdzvConf& conf = config_.rdzv_conf;
  int port = endpoint.port;
  const bool try_host = conf.is_host.value_or(address_is_here(endpoint.host));
  if (try_host) {
    try {
      // Every interface, as torchrun's store: the endpoint's name may resolve here to another of this
      // host's addresses (127.0.1.1 for the host name on Debian) than the one the other nodes reach.
      server_ = std::make_unique<comm::TcpStoreServer>(
          comm::TcpStoreServerOptions(config_.run_id, config_.max_nodes)
              .host("")
              .port(port)
              .secret(config_.job_secret));
      port = server_->port();
    } catch (const comm::StoreBindError& e) {
      // In use: another launcher on this host serves it (several nodes on one machine). Unless told to
      // host it, become one of its clients.
      if (conf.is_host || e.error_code() != EADDRINUSE) {
        throw LaunchError("rdzv_endpoint=" + endpoint.host + ":" + std::to_string(endpoint.port) +
                          ": this node cannot host the rendezvous: " + e.what());
      }
    }
  }
  try {
    store_ = std::make_unique<comm::StoreClient>(
        comm::TcpStoreOptions(endpoint.host, port, config_.run_id, config_.max_nodes, 0)
            .connect_timeout(conf.join_timeout)
            .timeout(conf.read_timeout)
            .server_name("the node that hosts the rendezvous")
            .secret(config_.job_secret));
  } catch (const comm::StoreRefusedError& e) {
    throw LaunchError("the rendezvous at " + endpoint.host + ":" + std::to_string(port) +
                      " belongs to another job: rdzv_id '" + e.their_run_id() + "' with nnodes max " +
                      std::to_string(e.their_world_size()) + ", while this node has rdzv_id '" +
                      config_.run_id + "' and nnodes max " + std::to_string(config_.max_nodes) +
                      ": give every node of a job the same rdzv_id and nnodes");
  } catch (const comm::StoreAuthError& e) {
    throw LaunchError(std::string("the rendezvous at rdzv_endpoint: ") + e.what());
  } catch (const comm::StoreError& e) {
    throw LaunchError("cannot reach the rendezvous at rdzv_endpoint=" + endpoint.host + ":" +
                      std::to_string(port) + ": " + e.what());
  }
  address_ = config_.local_addr.empty() ? store_->local_address() : config_.local_addr;
  if (server_) {
    say_("hosting the rendezvous of job '" + config_.run_id + "' on port " + std::to_string(port) +
         " (nnodes " + std::to_string(config_.min_nodes) + ":" + std::to_string(config_.max_nodes) + ")");
  }
}

ElasticRendezvous::~ElasticRendezvous() = default;

std::string ElasticRendezvous::endpoint() const {
  return store_->endpoint();
}

int ElasticRendezvous::current_round() {
  const Bytes now = store_->compare_set(kRoundKey, {}, bytes("0"));
  return std::stoi(text(now));
}

int ElasticRendezvous::failures() {
  try {
    return static_cast<int>(store_->add(kFailuresKey, 0));
  } catch (const comm::StoreError& e) {
    throw lost(e);
  }
}

LaunchError ElasticRendezvous::lost(const comm::StoreError& e) const {
  return LaunchError("lost the rendezvous at " + store_->endpoint() +
                     " (the node that hosts it is gone or stopped; as under torchrun, the job cannot go on "
                     "without it): " +
                     e.what());
}

void ElasticRendezvous::check_deadline(Clock::time_point deadline, const std::string& waiting_for) {
  if (Clock::now() < deadline) return;
  throw LaunchError("rendezvous at " + endpoint() + ": " + waiting_for + " within join_timeout (" +
                    seconds(config_.rdzv_conf.join_timeout) + ")");
}

void ElasticRendezvous::beat(int number, int ticket) {
  const auto now = Clock::now();
  if (now < next_beat_) return;
  store_->add(key(number, "alive", ticket), 1);
  next_beat_ = now + config_.rdzv_conf.keep_alive_interval;
}

std::optional<RoundEnd> ElasticRendezvous::read_end(int number) {
  const std::optional<std::string> end = store_->try_get_text(key(number, "end"));
  if (!end) return std::nullopt;
  return decode_end(*end);
}

Round ElasticRendezvous::join() {
  const auto deadline = Clock::now() + config_.rdzv_conf.join_timeout;
  try {
    for (;;) {
      if (const auto closing = store_->try_get_text(kClosingKey)) throw JobOver{*closing};
      const int number = current_round();
      if (const auto closed = store_->try_get_text(key(number, "close"))) {
        wait_for_next(number, std::stoi(*closed), deadline);
        continue;
      }
      RdzvNode me;
      me.ticket = static_cast<int>(store_->add(key(number, "arrivals"), 1));
      me.addr = address_;
      me.nproc = config_.nproc_per_node;
      me.role = config_.role;
      me.asked_rank = config_.asked_node_rank.value_or(-1);
      me.host = hostname_;
      me.agent = agent_;
      store_->set(key(number, "node", me.ticket), encode(me));
      say_("joined round " + std::to_string(number) + " as arrival " + std::to_string(me.ticket) +
           "; it starts with " + std::to_string(config_.max_nodes) + " node(s), or with " +
           std::to_string(config_.min_nodes) + " or more once " + std::to_string(config_.min_nodes) +
           " have been in for last_call_timeout (" + seconds(config_.rdzv_conf.last_call_timeout) + ")");
      next_beat_ = Clock::time_point();
      const std::optional<int> members = wait_for_close(number, me.ticket, deadline);
      if (!members) continue;  // the round moved on meanwhile
      if (me.ticket <= *members) {
        try {
          return build_round(number, me.ticket, *members);
        } catch (const RoundEnd& failed) {  // the round could not start: end it, and meet again
          say_("round " + std::to_string(number) + " could not start: " + failed.reason);
          continue;
        }
      }
      say_("round " + std::to_string(number) + " started with " + std::to_string(*members) +
           " node(s) just before this one arrived; waiting for the next round");
      wait_for_next(number, *members, deadline);
    }
  } catch (const comm::StoreError& e) {
    throw lost(e);
  }
}

std::optional<int> ElasticRendezvous::wait_for_close(int number, int ticket, Clock::time_point deadline) {
  const int min = config_.min_nodes, max = config_.max_nodes;
  std::optional<Clock::time_point> enough_since;
  for (;;) {
    if (const auto closed = store_->try_get_text(key(number, "close"))) return std::stoi(*closed);
    if (current_round() != number) return std::nullopt;
    beat(number, ticket);
    const int arrived = static_cast<int>(store_->add(key(number, "arrivals"), 0));
    const auto now = Clock::now();
    if (arrived >= min && !enough_since) enough_since = now;
    if (arrived >= max || (enough_since && now - *enough_since >= config_.rdzv_conf.last_call_timeout)) {
      store_->compare_set(key(number, "close"), {}, bytes(std::to_string(std::min(arrived, max))));
      continue;
    }
    check_deadline(deadline, "only " + std::to_string(arrived) + " of the at least " + std::to_string(min) +
                                 " node(s) of round " + std::to_string(number) + " arrived");
    std::this_thread::sleep_for(kJoinPoll);
  }
}

void ElasticRendezvous::wait_for_next(int number, int members, Clock::time_point deadline) {
  const bool room = members < config_.max_nodes;
  say_("the job is running round " + std::to_string(number) + " with " + std::to_string(members) +
       " node(s); " +
       (room ? "asking to join (the running nodes start a new round)"
             : "it has the most nodes allowed (" + std::to_string(config_.max_nodes) +
                   "): waiting for it to end"));
  if (room) store_->add(key(number, "waiting"), 1);
  for (;;) {
    if (const auto closing = store_->try_get_text(kClosingKey)) throw JobOver{*closing};
    if (current_round() != number) return;
    check_deadline(deadline, "round " + std::to_string(number) + " did not end to let this node in");
    std::this_thread::sleep_for(std::max(kJoinPoll, config_.monitor_interval));
  }
}

std::string ElasticRendezvous::my_address(const std::vector<RdzvNode>& nodes, int node_rank) const {
  if (!is_loopback(address_)) return address_;
  // This node reached the store over loopback (it hosts it), but the others must reach it over the
  // network: the address on the route to one of them.
  for (std::size_t r = 0; r < nodes.size(); ++r) {
    if (static_cast<int>(r) == node_rank || is_loopback(nodes[r].addr)) continue;
    std::string towards = address_towards(nodes[r].addr);
    if (!towards.empty()) return towards;
  }
  return address_;
}

// The first `members` nodes to arrive at round `number`, in order of arrival. Throws StoreError when one
// has not announced itself within read_timeout.
std::vector<RdzvNode> ElasticRendezvous::members_of(int number, int members) {
  std::vector<RdzvNode> arrived;
  for (int t = 1; t <= members; ++t) {
    arrived.push_back(decode(store_->get_text(key(number, "node", t), config_.rdzv_conf.read_timeout), t));
  }
  return arrived;
}

// Which nodes of the round before left, and which are new (by launcher id: the same host may come back).
void ElasticRendezvous::compare_with_previous(Round& round) {
  if (round.number == 0) return;
  const auto closed = store_->try_get_text(key(round.number - 1, "close"));
  if (!closed) return;
  const std::vector<RdzvNode> before = members_of(round.number - 1, std::stoi(*closed));
  const auto has = [](const std::vector<RdzvNode>& nodes, const RdzvNode& n) {
    return std::any_of(nodes.begin(), nodes.end(), [&](const RdzvNode& m) { return m.agent == n.agent; });
  };
  for (const RdzvNode& n : before) {
    if (!has(round.nodes, n)) round.left.push_back(n.describe());
  }
  for (const RdzvNode& n : round.nodes) {
    if (!has(before, n)) round.joined.push_back(n.describe());
  }
}

Round ElasticRendezvous::build_round(int number, int ticket, int members) {
  const milliseconds read = config_.rdzv_conf.read_timeout;
  std::vector<RdzvNode> arrived;
  try {
    arrived = members_of(number, members);
  } catch (const comm::StoreError&) {
    Round unstarted;
    unstarted.number = number;
    unstarted.ticket = ticket;
    throw end_round(unstarted,
                    RoundEnd{true, 1,
                             "a node of round " + std::to_string(number) +
                                 " took its place but did not announce itself within " + seconds(read)});
  }
  // Node ranks: a --node-rank wish where it fits and is not taken, the rest in order of arrival.
  Round round;
  round.number = number;
  round.ticket = ticket;
  std::vector<int> slot(static_cast<std::size_t>(members), -1);  // node rank -> index in `arrived`
  for (int i = 0; i < members; ++i) {
    const int asked = arrived[static_cast<std::size_t>(i)].asked_rank;
    if (asked < 0) continue;
    if (asked < members && slot[static_cast<std::size_t>(asked)] < 0) {
      slot[static_cast<std::size_t>(asked)] = i;
    } else if (arrived[static_cast<std::size_t>(i)].ticket == ticket) {
      round.notes.push_back("node_rank=" + std::to_string(asked) + " cannot be given in a round of " +
                            std::to_string(members) + " node(s)" +
                            (asked < members ? " (another node asked for it first)" : "") +
                            ": this node takes the next free one in order of arrival");
    }
  }
  std::vector<bool> placed(static_cast<std::size_t>(members), false);
  for (int s : slot) {
    if (s >= 0) placed[static_cast<std::size_t>(s)] = true;
  }
  std::size_t next = 0;
  for (int i = 0; i < members; ++i) {
    if (placed[static_cast<std::size_t>(i)]) continue;
    while (slot[next] >= 0) ++next;
    slot[next] = i;
  }
  for (int r = 0; r < members; ++r) {
    round.nodes.push_back(arrived[static_cast<std::size_t>(slot[static_cast<std::size_t>(r)])]);
    if (round.nodes.back().ticket == ticket) round.node_rank = r;
  }

  NodeWorld& w = round.world;
  w.node_rank = round.node_rank;
  w.nnodes = members;
  w.restart_count = number;
  long long world = 0, offset = 0, role_world = 0, role_offset = 0;
  for (int r = 0; r < members; ++r) {
    const RdzvNode& n = round.nodes[static_cast<std::size_t>(r)];
    if (r < round.node_rank) offset += n.nproc;
    world += n.nproc;
    if (n.role == config_.role) {
      if (r < round.node_rank) role_offset += n.nproc;
      role_world += n.nproc;
    }
  }
  if (world > INT_MAX) {
    throw end_round(round, RoundEnd{true, 1,
                                    "round " + std::to_string(number) + " would have " +
                                        std::to_string(world) + " workers (more than INT_MAX)"});
  }
  w.rank_offset = static_cast<int>(offset);
  w.world_size = static_cast<int>(world);
  w.role_rank_offset = static_cast<int>(role_offset);
  w.role_world_size = static_cast<int>(role_world);

  // The workers' store: node 0's address and a port free there now.
  const std::string master_key = key(number, "master");
  if (round.node_rank == 0) {
    const std::string addr = my_address(round.nodes, 0);
    store_->set(master_key, addr + " " + std::to_string(find_free_port(addr)));
  }
  try {
    std::istringstream in(store_->get_text(master_key, read));
    in >> w.master_addr >> w.master_port;
  } catch (const comm::StoreError&) {
    throw end_round(round,
                    RoundEnd{true, 1,
                             round.node(0) + " of round " + std::to_string(number) +
                                 " did not publish the workers' master address within " + seconds(read)});
  }
  if (number == 0) {
    round.began_because = "the job started";
  } else if (const auto end = read_end(number - 1)) {
    round.began_because = end->reason;
  }
  compare_with_previous(round);
  return round;
}

RoundEnd ElasticRendezvous::end_round(const Round& round, const RoundEnd& end) {
  try {
    return end_round_in(*store_, round.number, end);
  } catch (const comm::StoreError& e) {
    throw lost(e);
  }
}

void ElasticRendezvous::leave(const Round& round, int status, const std::string& reason) {
  try {
    store_->set(key(round.number, "left", round.ticket), reason);
    end_round(round, RoundEnd{true, status, reason});
  } catch (const comm::StoreError&) {
    return;  // the rendezvous is gone as well: nothing to tell
  } catch (const LaunchError&) {
    return;
  }
  serve_others(round, "this node leaves the job; serving the rendezvous until the other nodes have left");
}

void ElasticRendezvous::finish(const Round& round) {
  try {
    store_->set(key(round.number, "done", round.ticket), "1");
    store_->compare_set(
        kClosingKey, {},
        bytes(round.node(round.node_rank) + " finished round " + std::to_string(round.number)));
  } catch (const comm::StoreError&) {
    return;  // the host is gone: nobody to tell
  }
  serve_others(round, "this node's workers finished; serving the rendezvous until the other nodes are done");
}

void ElasticRendezvous::serve_others(const Round& round, const std::string& why) {
  if (!server_ || round.nodes.size() == 1) return;
  say_(why + " (close_timeout " + seconds(config_.rdzv_conf.close_timeout) + ")");
  try {
    wait_for_others(round);
  } catch (const comm::StoreError& e) {
    say_("stopped serving the rendezvous: " + std::string(e.what()));
  }
}

void ElasticRendezvous::wait_for_others(const Round& round) {
  const auto deadline = Clock::now() + config_.rdzv_conf.close_timeout;
  KeepAlives keep_alives;
  for (;;) {
    const auto now = Clock::now();
    std::vector<std::string> waiting;
    for (std::size_t r = 0; r < round.nodes.size(); ++r) {
      const RdzvNode& n = round.nodes[r];
      if (n.ticket == round.ticket) continue;
      if (store_->try_get_text(key(round.number, "done", n.ticket)) ||
          store_->try_get_text(key(round.number, "left", n.ticket))) {
        continue;
      }
      const int64_t beats = store_->add(key(round.number, "alive", n.ticket), 0);
      if (keep_alives.still_for(n.ticket, beats, now) >= config_.rdzv_conf.keep_alive_timeout()) continue;
      waiting.push_back(round.node(static_cast<int>(r)));
    }
    if (waiting.empty()) return;
    if (now >= deadline) {
      const std::string who = lockstep::detail::join(waiting, ", ");
      say_("not serving the rendezvous longer than close_timeout (" +
           seconds(config_.rdzv_conf.close_timeout) + ") for " + who);
      return;
    }
    std::this_thread::sleep_for(std::max(kJoinPoll, config_.monitor_interval));
  }
}

// ---------------------------------------------------------------------------------------------------
// RoundWatch

RoundWatch::RoundWatch(ElasticRendezvous& rendezvous, const Round& round)
    : rendezvous_(rendezvous), round_(round) {
  const LaunchConfig& config = rendezvous_.config();
  const comm::TcpStoreOptions& options = rendezvous_.store_->options();
  store_ = std::make_unique<comm::StoreClient>(comm::TcpStoreOptions(options)
                                                   .connect_timeout(config.rdzv_conf.read_timeout)
                                                   .timeout(config.rdzv_conf.heartbeat_timeout));
  if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw LaunchError(std::string("cannot create a pipe for the round's watch: ") + error_text(errno));
  }
  thread_ = std::thread([this] { run(); });
}

RoundWatch::~RoundWatch() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

std::optional<RoundEnd> RoundWatch::end() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return end_;
}

void RoundWatch::ended(RoundEnd end) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    end_ = std::move(end);
  }
  const char byte = 1;
  (void)!::write(pipe_[1], &byte, 1);
}

void RoundWatch::run() {
  const LaunchConfig& config = rendezvous_.config();
  auto next_beat = Clock::now();
  while (!stop_) {
    const auto now = Clock::now();
    try {
      if (now >= next_beat) {
        store_->add(key(round_.number, "alive", round_.ticket), 1);
        next_beat = now + config.rdzv_conf.keep_alive_interval;
      }
      if (look(now)) return;
    } catch (const comm::StoreError& e) {
      if (closing_) return;  // the job is finishing and its host left: let the workers finish too
      ended(RoundEnd{true, 1,
                     "lost the rendezvous at " + store_->endpoint() +
                         " (the node that hosts it is gone or stopped): " + e.what()});
      return;
    }
    std::this_thread::sleep_for(config.monitor_interval);
  }
}

// One look at the round; true once it has ended.
bool RoundWatch::look(Clock::time_point now) {
  const LaunchConfig& config = rendezvous_.config();
  const int number = round_.number;
  const std::string round_now = text(store_->compare_set(kRoundKey, {}, bytes("0")));
  if (std::stoi(round_now) != number) {
    const auto end = store_->try_get_text(key(number, "end"));
    ended(end ? decode_end(*end) : RoundEnd{false, 0, "the job moved on to round " + round_now});
    return true;
  }
  if (!closing_ && store_->try_get_text(kClosingKey)) closing_ = true;
  if (closing_) return false;  // finishing: no new rounds, nobody is waited for
  const auto end_with = [&](const RoundEnd& end) {
    ended(end_round_in(*store_, number, end));
    return true;
  };
  if (static_cast<int>(round_.nodes.size()) < config.max_nodes) {
    const int64_t waiting = store_->add(key(number, "waiting"), 0);
    if (waiting > 0) {
      return end_with(RoundEnd{false, 0, std::to_string(waiting) + " node(s) asked to join"});
    }
  }
  // The others' keep-alives: a read per node, so once every keep_alive_interval rather than every look
  // (a job of N nodes then costs the store N x N reads per interval, not per monitor_interval).
  if (now < next_scan_) return false;
  next_scan_ = now + config.rdzv_conf.keep_alive_interval;
  for (std::size_t r = 0; r < round_.nodes.size(); ++r) {
    const RdzvNode& n = round_.nodes[r];
    if (n.ticket == round_.ticket) continue;
    if (store_->try_get_text(key(number, "done", n.ticket))) continue;
    const int64_t beats = store_->add(key(number, "alive", n.ticket), 0);
    const milliseconds still = keep_alives_.still_for(n.ticket, beats, now);
    if (still >= config.rdzv_conf.keep_alive_timeout()) {
      return end_with(RoundEnd{true, 1,
                               round_.node(static_cast<int>(r)) + " stopped answering: no keep-alive for " +
                                   seconds(still) + " (keep_alive_interval x keep_alive_max_attempt = " +
                                   seconds(config.rdzv_conf.keep_alive_timeout()) + ")"});
    }
  }
  return false;
}

}  // namespace lockstep::launch::detail
