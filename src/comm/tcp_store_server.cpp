#include "lockstep/comm/tcp_store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <list>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "job_proof.h"
#include "tcp_store_protocol.h"

namespace lockstep::comm {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// How many refused clients get a line of their own; later ones are counted in the summary line.
constexpr int64_t kMaxRefusedLines = 10;
// Refused clients described under the refused_key (the count goes on): a stranger that connects again and
// again must not grow the job's store without bound.
constexpr int64_t kMaxRefusedRecords = 100;
// Bytes read from one connection per loop turn, so one fast sender cannot starve the others.
constexpr size_t kReadChunk = size_t{64} * 1024;
constexpr size_t kMaxReadPerTurn = 1 << 20;
// A connection whose unsent replies exceed this is not served further until they drain.
constexpr size_t kMaxPendingOutput = 4 << 20;

std::string sockaddr_text(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "?";
}

}  // namespace

// Named, not anonymous: TcpStoreServerLoop (declared in the header, so of external linkage) holds them,
// and gcc warns about that (-Wsubobject-linkage) where this file is not the main one (a unity build).
// A request parked until its keys exist or its deadline passes.
struct StoreWaiter {
  Op op;  // kGet or kWait
  std::vector<std::string> keys;
  std::optional<Clock::time_point> deadline;  // none: forever
};

struct StoreConnection {
  int fd = -1;
  std::string peer;
  Clock::time_point accepted;
  bool greeted = false;
  std::string challenge;  // the nonce sent in kChallenge, while the client's kProof is awaited
  std::string run_id;     // and what its kHello said, for the record of a refusal
  int32_t rank = 0;
  bool closing = false;  // close once `out` is flushed
  bool dead = false;     // close now
  std::string in;        // bytes received, not yet parsed
  std::string out;       // bytes to send
  std::optional<StoreWaiter> waiter;
  std::vector<std::string> live_keys;  // set by this connection, removed when it closes (kLiveKeySuffix)
};

class TcpStoreServerLoop {
 public:
  explicit TcpStoreServerLoop(TcpStoreServerOptions options) : options_(std::move(options)) {
    listen_on(options_.host(), options_.port());
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      const int err = errno;
      ::close(listen_fd_);
      throw StoreBindError(err, std::string("rendezvous store: pipe2 failed: ") + std::strerror(err));
    }
    wake_read_ = pipe_fds[0];
    wake_write_ = pipe_fds[1];
  }

  ~TcpStoreServerLoop() {
    for (auto& c : connections_) {
      if (c.fd >= 0) ::close(c.fd);
    }
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (wake_read_ >= 0) ::close(wake_read_);
    if (wake_write_ >= 0) ::close(wake_write_);
  }

  void run() {
    while (!stop_.load()) turn();
    report_invalid(/*force=*/true);
  }

  void stop() {
    stop_.store(true);
    const char b = 1;
    [[maybe_unused]] auto n = ::write(wake_write_, &b, 1);
  }

  int port() const { return port_; }
  const std::string& address() const { return address_; }
  int64_t refused() const { return refused_total_.load(); }
  int64_t invalid() const { return invalid_total_.load(); }

 private:
  void listen_on(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const std::string port_text = std::to_string(port);
    const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &found);
    const std::string where =
        (host.empty() ? std::string("all interfaces") : "'" + host + "'") + ", port " + port_text;
    if (rc != 0) {
      throw StoreBindError(EADDRNOTAVAIL, "rendezvous store: cannot resolve the address to listen on, " +
                                              where + ": " + ::gai_strerror(rc));
    }
    // With no host, prefer the IPv4 wildcard (what MASTER_ADDR usually names). The next candidate is tried
    // only when this one's family cannot be used here; a port in use ends the search: a store on IPv6
    // alone, its IPv4 port held by another socket, would refuse every rank that reaches MASTER_ADDR over
    // IPv4 until its rendezvous timeout.
    std::vector<addrinfo*> candidates;
    for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) candidates.push_back(ai);
    std::stable_sort(candidates.begin(), candidates.end(), [](addrinfo* a, addrinfo* b) {
      return a->ai_family == AF_INET && b->ai_family != AF_INET;
    });
    int last_errno = EADDRNOTAVAIL;
    std::string last_call = "bind";
    for (addrinfo* ai : candidates) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
      if (fd < 0) {
        last_errno = errno;
        last_call = "socket";
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (ai->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        last_errno = errno;
        last_call = "bind";
        ::close(fd);
        if (last_errno == EADDRINUSE) break;
        continue;
      }
      if (::listen(fd, 512) != 0) {
        last_errno = errno;
        last_call = "listen";
        ::close(fd);
        // Two sockets with SO_REUSEADDR may both bind a port: the first to listen takes it, and the
        // second learns it here. Taken is taken: the other family's wildcard must not serve instead.
        if (last_errno == EADDRINUSE) break;
        continue;
      }
      sockaddr_storage local{};
      socklen_t len = sizeof(local);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
      const std::string text = sockaddr_text(local);
      const auto colon = text.rfind(':');
      address_ = text.substr(0, colon);
      if (!address_.empty() && address_.front() == '[') address_ = address_.substr(1, address_.size() - 2);
      port_ = std::stoi(text.substr(colon + 1));
      listen_fd_ = fd;
      ::freeaddrinfo(found);
      return;
    }
    ::freeaddrinfo(found);
    std::string hint = last_errno == EADDRINUSE
                           ? "the port is already in use (choose another one: master_port / MASTER_PORT)"
                       : last_errno == EADDRNOTAVAIL
                           ? "the address is not one of this host's (MASTER_ADDR must name rank 0's host)"
                           : "check the address and the port";
    throw StoreBindError(last_errno, "rendezvous store: cannot listen on " + where + ": " + last_call + ": " +
                                         std::strerror(last_errno) + "; " + hint);
  }

  // One poll() and everything it reported.
  void turn() {
    std::vector<pollfd> fds;
    fds.reserve(connections_.size() + 2);
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    std::vector<StoreConnection*> polled;
    polled.reserve(connections_.size());
    for (auto& c : connections_) {
      short events = POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      polled.push_back(&c);
    }
    ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (fds[0].revents != 0) {
      char buf[64];
      while (::read(wake_read_, buf, sizeof(buf)) > 0) {
      }
    }
    for (size_t i = 0; i < polled.size(); ++i) {
      StoreConnection& c = *polled[i];
      const short ev = fds[i + 2].revents;
      if (ev & (POLLIN | POLLHUP | POLLERR)) receive(c);
      if (!c.dead && !c.out.empty() && (ev & (POLLOUT | POLLERR | POLLHUP))) {
        flush(c);
        if (!c.dead && c.out.empty()) parse(c);  // resume a connection held back by unsent output
      }
    }
    if (fds[1].revents & POLLIN) accept_all();
    expire(Clock::now());
    reap();
    report_invalid(/*force=*/false);
  }

  int poll_timeout_ms() const {
    const auto now = Clock::now();
    auto next = now + std::chrono::seconds(1);
    for (const auto& c : connections_) {
      if (!c.greeted) next = std::min(next, c.accepted + options_.hello_timeout());
      if (c.waiter && c.waiter->deadline) next = std::min(next, *c.waiter->deadline);
    }
    if (invalid_pending_ + refused_pending_ > 0)
      next = std::min(next, first_pending_ + options_.report_interval());
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage peer{};
      socklen_t len = sizeof(peer);
      const int fd =
          ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a transient error (EMFILE, ECONNABORTED): try at the next turn
      if (static_cast<int>(live_connections()) >= options_.max_connections() && !evict_one_unknown()) {
        ::close(fd);
        note_invalid(sockaddr_text(peer),
                     "over the connection limit of " + std::to_string(options_.max_connections()));
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      connections_.emplace_back();
      StoreConnection& c = connections_.back();
      c.fd = fd;
      c.peer = sockaddr_text(peer);
      c.accepted = Clock::now();
      receive(c);  // a client sends its handshake right after connecting: take it now
    }
  }

  size_t live_connections() const {
    size_t n = 0;
    for (const auto& c : connections_) n += c.dead ? 0 : 1;
    return n;
  }

  // Closes the oldest connection that has not completed its handshake; false when there is none.
  bool evict_one_unknown() {
    for (auto& c : connections_) {
      if (!c.dead && !c.greeted) {
        drop(c, "evicted before its handshake (connection limit " +
                    std::to_string(options_.max_connections()) + " reached)");
        return true;
      }
    }
    return false;
  }

  void receive(StoreConnection& c) {
    size_t taken = 0;
    char buf[kReadChunk];
    while (!c.dead && taken < kMaxReadPerTurn) {
      const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        taken += static_cast<size_t>(n);
        parse(c);
        // What is left is at most one incomplete frame, unless the client queued requests behind one it
        // waits for (or behind replies it does not read): it may not queue more than a frame.
        if (!c.dead && c.in.size() > size_t{frame_cap(c)} + kFrameHeaderBytes) {
          drop(c, "sent more than one frame ahead of its replies");
        }
        continue;
      }
      if (n == 0) {
        if (!c.greeted && !c.closing) {
          drop(c, c.in.empty() ? "closed without a handshake" : "closed in the middle of its handshake");
        } else {
          close_now(c);
        }
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (!c.greeted && !c.closing) {
        drop(c, std::string("connection error before its handshake: ") + std::strerror(errno));
      } else {
        close_now(c);
      }
      return;
    }
  }

  uint32_t frame_cap(const StoreConnection& c) const {
    return c.greeted ? options_.max_frame_bytes() : kMaxHelloBytes;
  }

  // Handles every complete frame in c.in, unless the connection is parked or must close. Each frame
  // is taken out of the buffer before it is handled, so handlers may re-enter parse() safely.
  void parse(StoreConnection& c) {
    while (!c.dead && !c.closing && !c.waiter && c.out.size() < kMaxPendingOutput) {
      if (c.in.size() < kFrameHeaderBytes) return;
      const uint32_t n = frame_length(c.in.data());
      if (n > frame_cap(c)) {
        drop(c, "announced a frame of " + std::to_string(n) + " bytes (limit " +
                    std::to_string(frame_cap(c)) + ")");
        return;
      }
      if (c.in.size() - kFrameHeaderBytes < n) return;
      const std::string frame = c.in.substr(kFrameHeaderBytes, n);
      c.in.erase(0, kFrameHeaderBytes + n);
      handle(c, frame.data(), frame.size());
    }
  }

  void handle(StoreConnection& c, const char* data, size_t size) {
    FrameReader r(data, size);
    uint8_t op_byte = 0;
    if (!r.u8(op_byte)) return drop(c, "sent an empty frame");
    const auto op = static_cast<Op>(op_byte);
    if (!c.greeted) {
      if (!c.challenge.empty()) {
        if (op != Op::kProof) return drop(c, "sent op " + std::to_string(op_byte) + " instead of its proof");
        return proof(c, r);
      }
      if (op != Op::kHello) return drop(c, "sent op " + std::to_string(op_byte) + " before its handshake");
      return hello(c, r);
    }
    switch (op) {
      case Op::kSet: {
        std::string key;
        std::vector<uint8_t> value;
        if (!r.str(key) || !r.bytes(value) || !r.done()) return drop(c, "sent a malformed set");
        if (is_live_key(key)) claim_live_key(c, key);
        data_[key] = std::move(value);
        reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::kOk)));
        return wake_waiters();
      }
      case Op::kCompareSet: {
        std::string key;
        std::vector<uint8_t> expected, desired;
        if (!r.str(key) || !r.bytes(expected) || !r.bytes(desired) || !r.done()) {
          return drop(c, "sent a malformed compareSet");
        }
        // c10d's semantics: a missing key is created only when `expected` is empty; the answer is the
        // value the key holds afterwards (or `expected` when the key is missing and stays so).
        auto it = data_.find(key);
        bool changed = false;
        std::vector<uint8_t> now;
        if (it == data_.end()) {
          if (expected.empty()) {
            it = data_.emplace(key, std::move(desired)).first;
            changed = true;
            now = it->second;
          } else {
            now = expected;
          }
        } else {
          if (it->second == expected) {
            it->second = std::move(desired);
            changed = true;
          }
          now = it->second;
        }
        reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::kOk)).str(now));
        if (changed) wake_waiters();
        return;
      }
      case Op::kAdd: {
        std::string key;
        int64_t delta = 0;
        if (!r.str(key) || !r.i64(delta) || !r.done()) return drop(c, "sent a malformed add");
        int64_t sum = delta;
        auto it = data_.find(key);
        if (it != data_.end()) {
          std::optional<int64_t> current = parse_integer(it->second);
          if (!current || __builtin_add_overflow(*current, delta, &sum)) {
            return reply(c, FrameWriter()
                                .u8(static_cast<uint8_t>(Status::kError))
                                .str("add(" + std::to_string(delta) + ") on key '" + key +
                                     "': its value is not a 64-bit integer that can take it"));
          }
        }
        const std::string text = std::to_string(sum);
        data_[key] = std::vector<uint8_t>(text.begin(), text.end());
        reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::kOk)).i64(sum));
        return wake_waiters();
      }
      case Op::kDelete: {
        std::string key;
        if (!r.str(key) || !r.done()) return drop(c, "sent a malformed deleteKey");
        const bool existed = data_.erase(key) > 0;
        return reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::kOk)).u8(existed ? 1 : 0));
      }
      case Op::kCheck: {
        std::vector<std::string> keys;
        if (!read_keys(r, keys) || !r.done()) return drop(c, "sent a malformed check");
        return reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::kOk)).u8(all_exist(keys) ? 1 : 0));
      }
      case Op::kNumKeys: {
        if (!r.done()) return drop(c, "sent a malformed getNumKeys");
        return reply(
            c, FrameWriter().u8(static_cast<uint8_t>(Status::kOk)).i64(static_cast<int64_t>(data_.size())));
      }
      case Op::kGet:
      case Op::kWait: {
        StoreWaiter w;
        w.op = op;
        if (op == Op::kGet) {
          std::string key;
          if (!r.str(key)) return drop(c, "sent a malformed get");
          w.keys.push_back(std::move(key));
        } else if (!read_keys(r, w.keys)) {
          return drop(c, "sent a malformed wait");
        }
        int64_t timeout_ms = 0;
        if (!r.i64(timeout_ms) || !r.done()) return drop(c, "sent a malformed get/wait");
        if (timeout_ms >= 0) {
          // Far deadlines are clamped to a day (the client side gives up long before).
          w.deadline = Clock::now() + std::chrono::milliseconds(std::min<int64_t>(timeout_ms, 86400000));
        }
        c.waiter = std::move(w);
        answer_if_ready(c);
        return;
      }
      case Op::kHello:
        return drop(c, "sent a second handshake");
      case Op::kProof:
        return drop(c, "sent a proof outside its handshake");
    }
    drop(c, "sent unknown op " + std::to_string(op_byte));
  }

  void hello(StoreConnection& c, FrameReader& r) {
    uint32_t magic = 0, version = 0;
    std::string run_id;
    int32_t world_size = 0, rank = 0;
    if (!r.u32(magic) || magic != kStoreMagic) return drop(c, "sent a handshake with a wrong magic number");
    if (!r.u32(version) || !r.str(run_id) || !r.i32(world_size) || !r.i32(rank) || !r.done()) {
      return drop(c, "sent a malformed handshake");
    }
    if (version == kStoreVersion && run_id == options_.run_id() && world_size == options_.world_size()) {
      if (options_.secret().empty()) {
        c.greeted = true;
        return reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::kOk)).u32(kStoreVersion));
      }
      try {
        c.challenge = random_bytes(kNonceBytes);
      } catch (const std::exception& e) {
        return drop(c, std::string("could not be challenged: ") + e.what());
      }
      c.run_id = run_id;
      c.rank = rank;
      return reply(
          c, FrameWriter().u8(static_cast<uint8_t>(Status::kChallenge)).u32(kStoreVersion).str(c.challenge));
    }
    std::ostringstream who;
    who << "run id '" << printable(run_id) << "' (this job: '" << printable(options_.run_id())
        << "'), world size " << world_size << " (this job: " << options_.world_size() << "), rank " << rank;
    if (version != kStoreVersion) {
      who << ", protocol version " << version << " (this job: " << kStoreVersion << ")";
    }
    refuse(c, who.str(),
           "Another job is pointed at this job's port " + std::to_string(port_) +
               "; this job goes on (give each job its own master_port).",
           "run id '" + printable(run_id) + "', rank " + std::to_string(rank) + ", from " + c.peer);
    reply(c, FrameWriter()
                 .u8(static_cast<uint8_t>(Status::kRefused))
                 .u32(kStoreVersion)
                 .str(options_.run_id())
                 .i32(options_.world_size()));
  }

  // The client's answer to kChallenge: the right proof makes it one of the job's clients, and the server
  // proves the secret in return; any other is refused like a stranger (no secret in any message).
  void proof(StoreConnection& c, FrameReader& r) {
    std::string client_nonce, proof;
    if (!r.str(client_nonce) || !r.str(proof) || !r.done()) return drop(c, "sent a malformed proof");
    const std::string expected =
        client_proof(options_.secret(), c.challenge, c.run_id, options_.world_size());
    if (client_nonce.size() == kNonceBytes && equal_in_constant_time(proof, expected)) {
      const std::string server_nonce = std::move(c.challenge);
      c.challenge.clear();
      c.greeted = true;
      const std::string answer =
          server_proof(options_.secret(), client_nonce, server_nonce, c.run_id, options_.world_size());
      return reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::kOk)).u32(kStoreVersion).str(answer));
    }
    refuse(c,
           "run id '" + printable(c.run_id) + "', rank " + std::to_string(c.rank) +
               (proof.empty() ? ", which has no job secret" : ", whose proof of the job secret is wrong"),
           "It knows the run id but not this job's secret (LOCKSTEP_JOB_SECRET); this job goes on.",
           "run id '" + printable(c.run_id) + "', rank " + std::to_string(c.rank) + ", from " + c.peer +
               ", without this job's secret");
    reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::kDenied)).u32(kStoreVersion));
  }

  // Closes `c` after the answer its caller sends, and reports and records the refusal: one stderr line for
  // each of the first kMaxRefusedLines, the count and, for the first kMaxRefusedRecords, `record` under the
  // refused_key. Both come before the answer, so that whoever sees the answer also finds the record.
  void refuse(StoreConnection& c, const std::string& who, const std::string& consequence,
              const std::string& record) {
    c.closing = true;
    const int64_t n = ++refused_total_;
    if (n > kMaxRefusedLines) note_refused_quietly();
    if (n <= kMaxRefusedLines) {
      std::cerr << "lockstep: rendezvous store refused a client from " << c.peer << ": " << who << ". "
                << consequence << (n == kMaxRefusedLines ? " Further refusals are only counted." : "")
                << std::endl;
    }
    if (!options_.refused_key().empty()) {
      const std::string count = std::to_string(n);
      data_[options_.refused_key()] = std::vector<uint8_t>(count.begin(), count.end());
      if (n <= kMaxRefusedRecords)
        data_[options_.refused_key() + "/" + count] = std::vector<uint8_t>(record.begin(), record.end());
      wake_waiters();
    }
  }

  // At most 64 characters of `s`, with anything unprintable as '?', for messages.
  static std::string printable(const std::string& s) {
    std::string out = s.substr(0, 64);
    for (auto& ch : out) {
      if (ch < 0x20 || ch > 0x7e) ch = '?';
    }
    return s.size() > 64 ? out + "..." : out;
  }

  static std::optional<int64_t> parse_integer(const std::vector<uint8_t>& v) {
    if (v.empty() || v.size() > 20) return std::nullopt;
    const std::string s(v.begin(), v.end());
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(s.c_str(), &end, 10);
    if (errno != 0 || end != s.c_str() + s.size()) return std::nullopt;
    return static_cast<int64_t>(x);
  }

  static bool read_keys(FrameReader& r, std::vector<std::string>& keys) {
    uint32_t n = 0;
    if (!r.u32(n)) return false;
    for (uint32_t i = 0; i < n; ++i) {
      std::string key;
      if (!r.str(key)) return false;  // a count larger than the frame fails here, before any big allocation
      keys.push_back(std::move(key));
    }
    return true;
  }

  bool all_exist(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) > 0; });
  }

  void answer_if_ready(StoreConnection& c) {
    if (!c.waiter || !all_exist(c.waiter->keys)) return;
    FrameWriter w;
    w.u8(static_cast<uint8_t>(Status::kOk));
    if (c.waiter->op == Op::kGet) w.str(data_.at(c.waiter->keys.front()));
    c.waiter.reset();
    reply(c, w);
  }

  void wake_waiters() {
    for (auto& c : connections_) {
      if (c.dead || !c.waiter) continue;
      answer_if_ready(c);
      if (!c.waiter) parse(c);  // it may have queued its next request behind the answered one
    }
  }

  void expire(Clock::time_point now) {
    for (auto& c : connections_) {
      if (c.dead) continue;
      if (!c.greeted && !c.closing && now - c.accepted >= options_.hello_timeout()) {
        drop(c,
             "sent no complete handshake within " + std::to_string(options_.hello_timeout().count()) + " ms");
        continue;
      }
      if (c.waiter && c.waiter->deadline && now >= *c.waiter->deadline) {
        c.waiter.reset();
        reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::kTimeout)));
        parse(c);
      }
    }
  }

  void reply(StoreConnection& c, FrameWriter& w) {
    c.out += w.finish();
    flush(c);
  }
  void reply(StoreConnection& c, FrameWriter&& w) { reply(c, w); }

  void flush(StoreConnection& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      close_now(c);  // the peer is gone
      return;
    }
    if (c.closing) close_now(c);
  }

  void close_now(StoreConnection& c) { c.dead = true; }

  // Closes `c` for invalid input and counts it for the summary line.
  void drop(StoreConnection& c, const std::string& why) {
    if (c.dead) return;
    c.dead = true;
    note_invalid(c.peer, why);
  }

  void note_invalid(const std::string& peer, const std::string& why) {
    ++invalid_total_;
    if (invalid_pending_++ == 0 && refused_pending_ == 0) first_pending_ = Clock::now();
    last_invalid_ = peer + " " + why;
  }

  void note_refused_quietly() {
    if (refused_pending_++ == 0 && invalid_pending_ == 0) first_pending_ = Clock::now();
  }

  // One summary line for what was not reported line by line, at most one per report_interval.
  void report_invalid(bool force) {
    if (invalid_pending_ == 0 && refused_pending_ == 0) return;
    if (!force && Clock::now() < first_pending_ + options_.report_interval()) return;
    std::ostringstream line;
    line << "lockstep: rendezvous store on port " << port_ << " closed " << invalid_pending_
         << " invalid connection(s) (garbage, half-open or oversized; " << invalid_total_.load() << " in all";
    if (!last_invalid_.empty()) line << "; the last: " << last_invalid_;
    line << ")";
    if (refused_pending_ > 0)
      line << " and refused " << refused_pending_
           << " more client(s) of another job or without the job secret";
    line << "; the job goes on. Is something else sending to this port?";
    std::cerr << line.str() << std::endl;
    invalid_pending_ = 0;
    refused_pending_ = 0;
  }

  static bool is_live_key(const std::string& key) {
    const std::string suffix = kLiveKeySuffix;
    return key.size() >= suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
  }

  // The live key belongs to the connection that set it last.
  void claim_live_key(StoreConnection& c, const std::string& key) {
    for (StoreConnection& other : connections_) {
      auto& keys = other.live_keys;
      keys.erase(std::remove(keys.begin(), keys.end(), key), keys.end());
    }
    c.live_keys.push_back(key);
  }

  void reap() {
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->dead) {
        for (const std::string& key : it->live_keys) data_.erase(key);
        ::close(it->fd);
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }

  TcpStoreServerOptions options_;
  int listen_fd_ = -1;
  int wake_read_ = -1;
  int wake_write_ = -1;
  int port_ = 0;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::list<StoreConnection> connections_;  // stable addresses: turn() keeps pointers across handlers
  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  std::atomic<int64_t> refused_total_{0};
  std::atomic<int64_t> invalid_total_{0};
  int64_t invalid_pending_ = 0;  // invalid connections not yet in a summary line
  int64_t refused_pending_ = 0;  // refusals beyond kMaxRefusedLines not yet in a summary line
  Clock::time_point first_pending_{};
  std::string last_invalid_;
};

}  // namespace detail

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options)
    : loop_(std::make_unique<detail::TcpStoreServerLoop>(std::move(options))) {
  thread_ = std::thread([loop = loop_.get()] { loop->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  loop_->stop();
  thread_.join();
}

int TcpStoreServer::port() const {
  return loop_->port();
}
const std::string& TcpStoreServer::address() const {
  return loop_->address();
}
int64_t TcpStoreServer::refused_clients() const {
  return loop_->refused();
}
int64_t TcpStoreServer::invalid_connections() const {
  return loop_->invalid();
}

}  // namespace lockstep::comm
