#include "lockstep/comm/store_client.h"
#include "lockstep/detail/join.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "job_proof.h"
#include "lockstep/comm/job_secret.h"
#include "seconds_text.h"
#include "tcp_store_protocol.h"

namespace lockstep::comm {
namespace {

using Clock = std::chrono::steady_clock;
using detail::FrameReader;
using detail::FrameWriter;
using detail::Op;
using detail::Status;
using std::chrono::milliseconds;

// How long past a get/wait's own timeout the client waits for the server's kTimeout answer.
constexpr milliseconds kServerGrace{10000};
// The largest reply a client accepts (a value can be at most the server's frame cap).
constexpr uint32_t kMaxReplyBytes = 1u << 30;

using detail::seconds_text;

std::string keys_text(const std::vector<std::string>& keys) {
  return lockstep::detail::join_first(keys, 8, ", ", [](const std::string& key) { return "'" + key + "'"; });
}

// A deadline `ms` from now; none (forever) for a negative `ms`.
std::optional<Clock::time_point> deadline_in(milliseconds ms) {
  if (ms.count() < 0) return std::nullopt;
  return Clock::now() + ms;
}

// Milliseconds poll() may sleep before `deadline` (-1: forever); 0 once it passed.
int poll_ms(const std::optional<Clock::time_point>& deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::duration_cast<milliseconds>(*deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60000));
}

// Thrown by the socket helpers below; the caller turns it into a StoreError with context.
struct IoError {
  std::string why;
  bool timed_out = false;
};

void send_all(int fd, const std::string& data, const std::optional<Clock::time_point>& deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int ms = poll_ms(deadline);
      if (ms == 0 || ::poll(&p, 1, ms) == 0) throw IoError{"the server accepted no data in time", true};
      continue;
    }
    throw IoError{std::string("send failed: ") + std::strerror(errno)};
  }
}

void recv_exactly(int fd, char* out, size_t size, const std::optional<Clock::time_point>& deadline) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, out + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw IoError{"the server closed the connection"};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd, POLLIN, 0};
      int ready = 0;
      do {
        const int ms = poll_ms(deadline);
        if (ms == 0 && deadline) throw IoError{"no answer from the server in time", true};
        ready = ::poll(&p, 1, ms);
      } while (ready == 0 || (ready < 0 && errno == EINTR));
      continue;
    }
    throw IoError{std::string("recv failed: ") + std::strerror(errno)};
  }
}

std::string recv_frame(int fd, const std::optional<Clock::time_point>& deadline) {
  char header[detail::kFrameHeaderBytes];
  recv_exactly(fd, header, sizeof(header), deadline);
  const uint32_t n = detail::frame_length(header);
  if (n == 0 || n > kMaxReplyBytes) {
    throw IoError{"the server sent a frame of " + std::to_string(n) + " bytes: it is not a lockstep store"};
  }
  std::string payload(n, '\0');
  recv_exactly(fd, payload.data(), n, deadline);
  return payload;
}

// Reads the version that starts every handshake answer, after its status.
uint8_t answer_status(FrameReader& r) {
  uint8_t status = 0;
  uint32_t version = 0;
  if (!r.u8(status) || !r.u32(version)) throw IoError{"the server's handshake answer is malformed"};
  return status;
}

// The job-secret half of the handshake (tcp_store_protocol.h), after the server's kChallenge: proves the
// secret, and checks the server's proof. Without a secret this client sends an empty proof, so that the
// server records the refusal, and throws.
void prove_secret(int fd, FrameReader& challenge, const TcpStoreOptions& o, const std::string& endpoint,
                  Clock::time_point deadline) {
  std::string server_nonce;
  if (!challenge.str(server_nonce) || server_nonce.size() != detail::kNonceBytes) {
    throw IoError{"the server's challenge is malformed"};
  }
  const std::string client_nonce = o.secret().empty() ? "" : detail::random_bytes(detail::kNonceBytes);
  const std::string proof =
      o.secret().empty() ? "" : detail::client_proof(o.secret(), server_nonce, o.run_id(), o.world_size());
  send_all(fd, FrameWriter().u8(static_cast<uint8_t>(Op::kProof)).str(client_nonce).str(proof).finish(),
           deadline);
  if (o.secret().empty()) {
    throw StoreAuthError("refused by the rendezvous store at " + endpoint + ": it serves run id '" +
                         o.run_id() +
                         "' only to processes that know the job's secret, and this process has none: give it "
                         "the job's secret in " +
                         kJobSecretVariable + " (or " + kJobSecretFileVariable + ")");
  }
  const std::string reply = recv_frame(fd, deadline);
  FrameReader r(reply.data(), reply.size());
  const uint8_t status = answer_status(r);
  if (status == static_cast<uint8_t>(Status::kDenied)) {
    throw StoreAuthError("refused by the rendezvous store at " + endpoint + ": this process's job secret (" +
                         kJobSecretVariable + " or " + kJobSecretFileVariable +
                         ") is not the one the store's job has; give every rank and launcher of run id '" +
                         o.run_id() + "' the same one");
  }
  std::string server_proof;
  if (status != static_cast<uint8_t>(Status::kOk) || !r.str(server_proof)) {
    throw IoError{"the server's answer to the proof is malformed"};
  }
  const std::string expected =
      detail::server_proof(o.secret(), client_nonce, server_nonce, o.run_id(), o.world_size());
  if (!detail::equal_in_constant_time(server_proof, expected)) {
    throw StoreAuthError(
        "the rendezvous store at " + endpoint +
        " could not prove it knows the job's secret: the process listening there is not run id '" +
        o.run_id() + "''s store. Check MASTER_ADDR/MASTER_PORT");
  }
}

// The handshake on a connected socket (tcp_store_protocol.h). Returns once the server accepted this
// client; throws StoreRefusedError or StoreAuthError when it will not, IoError when the connection failed.
void handshake(int fd, const TcpStoreOptions& o, const std::string& endpoint, Clock::time_point deadline) {
  send_all(fd,
           FrameWriter()
               .u8(static_cast<uint8_t>(Op::kHello))
               .u32(detail::kStoreMagic)
               .u32(detail::kStoreVersion)
               .str(o.run_id())
               .i32(o.world_size())
               .i32(o.rank())
               .finish(),
           deadline);
  const std::string reply = recv_frame(fd, deadline);
  FrameReader r(reply.data(), reply.size());
  uint8_t status = 0;
  uint32_t version = 0;
  if (!r.u8(status) || !r.u32(version)) throw IoError{"the server's handshake answer is malformed"};
  if (status == static_cast<uint8_t>(Status::kChallenge)) return prove_secret(fd, r, o, endpoint, deadline);
  if (status == static_cast<uint8_t>(Status::kOk)) {
    if (o.secret().empty()) return;
    throw StoreAuthError("the rendezvous store at " + endpoint + " serves run id '" + o.run_id() +
                         "' without a job secret, but this process has one (" + kJobSecretVariable + " or " +
                         kJobSecretFileVariable +
                         "): give every rank and launcher of the job the same secret, or none to any");
  }
  std::string their_run;
  int32_t their_world = 0;
  if (status != static_cast<uint8_t>(Status::kRefused) || !r.str(their_run) || !r.i32(their_world)) {
    throw IoError{"the server's handshake answer is malformed"};
  }
  std::string message = "refused by the rendezvous store at " + endpoint + ": it serves run id '" +
                        their_run + "' with world size " + std::to_string(their_world) +
                        ", but this process has run id '" + o.run_id() + "' and world size " +
                        std::to_string(o.world_size());
  if (version != detail::kStoreVersion) {
    message += " (and the server speaks protocol version " + std::to_string(version) + ", this process " +
               std::to_string(detail::kStoreVersion) + ": use the same lockstep on every rank)";
  }
  throw StoreRefusedError(message, their_run, their_world);
}

}  // namespace

StoreClient::StoreClient(TcpStoreOptions options) : options_(std::move(options)) {
  connect(Clock::now() + options_.connect_timeout());
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string StoreClient::endpoint() const {
  return options_.host() + ":" + std::to_string(options_.port());
}

void StoreClient::set_timeout(milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.timeout(timeout);
}

std::string StoreClient::local_address() const {
  std::lock_guard<std::mutex> lock(mutex_);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (fd_ < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
  } else if (addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof(text));
  }
  return text;
}

void StoreClient::connect(Clock::time_point deadline) {
  std::string last_error = "nothing listened there";
  milliseconds backoff(10);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port_text = std::to_string(options_.port());
    const int rc = ::getaddrinfo(options_.host().c_str(), port_text.c_str(), &hints, &found);
    if (rc != 0 && rc != EAI_AGAIN) {
      throw StoreError("cannot resolve the rendezvous store's host '" + options_.host() +
                       "': " + ::gai_strerror(rc) + " (check MASTER_ADDR / master_addr)");
    }
    if (rc != 0) last_error = std::string("resolving '") + options_.host() + "': " + ::gai_strerror(rc);
    for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
      if (fd < 0) {
        last_error = std::string("socket: ") + std::strerror(errno);
        continue;
      }
      try {
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
          if (errno != EINPROGRESS) throw IoError{std::string("connect: ") + std::strerror(errno)};
          pollfd p{fd, POLLOUT, 0};
          if (::poll(&p, 1, std::max(1, poll_ms(deadline))) <= 0) throw IoError{"connect: timed out", true};
          int err = 0;
          socklen_t len = sizeof(err);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) throw IoError{std::string("connect: ") + std::strerror(err)};
        }
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        handshake(fd, options_, endpoint(), deadline);
        fd_ = fd;
        ::freeaddrinfo(found);
        return;
      } catch (const StoreError&) {  // refused: not retried
        ::close(fd);
        ::freeaddrinfo(found);
        throw;
      } catch (const IoError& e) {
        ::close(fd);
        last_error = e.why;
      } catch (const std::exception& e) {  // no random bytes for the proof's nonce
        ::close(fd);
        ::freeaddrinfo(found);
        throw StoreError("the handshake with the rendezvous store at " + endpoint() + " failed: " + e.what());
      }
    }
    if (found != nullptr) ::freeaddrinfo(found);
    const auto now = Clock::now();
    if (now >= deadline) {
      throw StoreError("could not connect to the rendezvous store at " + endpoint() + " within " +
                       seconds_text(options_.connect_timeout()) + ": " + last_error);
    }
    std::this_thread::sleep_for(std::min(backoff, std::chrono::duration_cast<milliseconds>(deadline - now)));
    backoff = std::min(backoff * 2, milliseconds(500));
  }
}

void StoreClient::fail(const std::string& why) {
  broken_ = why;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  throw StoreError(why);
}

std::string StoreClient::call(const std::string& frame, milliseconds reply_within, const char* op) {
  if (!broken_.empty()) {
    throw StoreError(std::string(op) + " on the rendezvous store at " + endpoint() +
                     ": the connection is unusable since an earlier failure (" + broken_ + ")");
  }
  const auto deadline = deadline_in(reply_within);
  try {
    send_all(fd_, frame, deadline);
    return recv_frame(fd_, deadline);
  } catch (const IoError& e) {
    fail(std::string(op) + " on the rendezvous store at " + endpoint() + " failed: " + e.why +
         (e.timed_out ? " (within " + seconds_text(reply_within) + ")" : "") + ". Is " +
         options_.server_name() + " still running?");
  }
  return {};  // not reached
}

namespace {

// The reply's status, checked to be kOk (or kTimeout where `timeout_ok`); kError throws its message.
Status expect_status(FrameReader& r, bool timeout_ok, const std::string& where) {
  uint8_t s = 0;
  if (!r.u8(s)) throw StoreError(where + ": empty answer from the store");
  const auto status = static_cast<Status>(s);
  if (status == Status::kOk || (timeout_ok && status == Status::kTimeout)) return status;
  std::string why;
  if (status == Status::kError && r.str(why)) throw StoreError(where + ": " + why);
  throw StoreError(where + ": unexpected answer " + std::to_string(s) + " from the store");
}

// How long the client waits for the answer to an operation whose own timeout is `timeout`.
milliseconds with_grace(milliseconds timeout) {
  return timeout.count() < 0 ? milliseconds(-1) : timeout + kServerGrace;
}

}  // namespace

void StoreClient::set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string reply =
      call(FrameWriter().u8(static_cast<uint8_t>(Op::kSet)).str(key).str(value).finish(),
           with_grace(options_.timeout()), "set");
  FrameReader r(reply.data(), reply.size());
  expect_status(r, false, "set('" + key + "')");
}

StoreClient::Bytes StoreClient::compare_set(const std::string& key, const Bytes& expected,
                                            const Bytes& desired) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string reply = call(
      FrameWriter().u8(static_cast<uint8_t>(Op::kCompareSet)).str(key).str(expected).str(desired).finish(),
      with_grace(options_.timeout()), "compareSet");
  FrameReader r(reply.data(), reply.size());
  expect_status(r, false, "compareSet('" + key + "')");
  Bytes now;
  if (!r.bytes(now)) throw StoreError("compareSet('" + key + "'): malformed answer from the store");
  return now;
}

std::optional<StoreClient::Bytes> StoreClient::get_within(const std::string& key, milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string reply = call(FrameWriter()
                                     .u8(static_cast<uint8_t>(Op::kGet))
                                     .str(key)
                                     .i64(timeout.count() < 0 ? -1 : timeout.count())
                                     .finish(),
                                 with_grace(timeout), "get");
  FrameReader r(reply.data(), reply.size());
  if (expect_status(r, true, "get('" + key + "')") == Status::kTimeout) return std::nullopt;
  Bytes value;
  if (!r.bytes(value)) throw StoreError("get('" + key + "'): malformed answer from the store");
  return value;
}

StoreClient::Bytes StoreClient::get(const std::string& key, milliseconds timeout) {
  std::optional<Bytes> value = get_within(key, timeout);
  if (!value) {
    throw StoreError(
        "timed out after " + seconds_text(timeout) + " waiting for key '" + key +
        "' (get) in the rendezvous store at " + endpoint() +
        ": the process that sets it may have failed or be slow (raise the timeout if it is slow)");
  }
  return std::move(*value);
}

std::string StoreClient::get_text(const std::string& key, milliseconds timeout) {
  const Bytes value = get(key, timeout);
  return std::string(value.begin(), value.end());
}

std::optional<std::string> StoreClient::try_get_text(const std::string& key) {
  const std::optional<Bytes> value = get_within(key, milliseconds(0));
  if (!value) return std::nullopt;
  return std::string(value->begin(), value->end());
}

int64_t StoreClient::add(const std::string& key, int64_t value) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string reply =
      call(FrameWriter().u8(static_cast<uint8_t>(Op::kAdd)).str(key).i64(value).finish(),
           with_grace(options_.timeout()), "add");
  FrameReader r(reply.data(), reply.size());
  expect_status(r, false, "add('" + key + "')");
  int64_t sum = 0;
  if (!r.i64(sum)) throw StoreError("add('" + key + "'): malformed answer from the store");
  return sum;
}

bool StoreClient::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string reply = call(FrameWriter().u8(static_cast<uint8_t>(Op::kDelete)).str(key).finish(),
                                 with_grace(options_.timeout()), "deleteKey");
  FrameReader r(reply.data(), reply.size());
  expect_status(r, false, "deleteKey('" + key + "')");
  uint8_t existed = 0;
  if (!r.u8(existed)) throw StoreError("deleteKey('" + key + "'): malformed answer from the store");
  return existed != 0;
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  FrameWriter w;
  w.u8(static_cast<uint8_t>(Op::kCheck)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  const std::string reply = call(w.finish(), with_grace(options_.timeout()), "check");
  FrameReader r(reply.data(), reply.size());
  expect_status(r, false, "check(" + keys_text(keys) + ")");
  uint8_t all = 0;
  if (!r.u8(all)) throw StoreError("check: malformed answer from the store");
  return all != 0;
}

int64_t StoreClient::num_keys() {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string reply = call(FrameWriter().u8(static_cast<uint8_t>(Op::kNumKeys)).finish(),
                                 with_grace(options_.timeout()), "getNumKeys");
  FrameReader r(reply.data(), reply.size());
  expect_status(r, false, "getNumKeys");
  int64_t n = 0;
  if (!r.i64(n)) throw StoreError("getNumKeys: malformed answer from the store");
  return n;
}

void StoreClient::wait(const std::vector<std::string>& keys, const milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  FrameWriter w;
  w.u8(static_cast<uint8_t>(Op::kWait)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.i64(timeout.count() < 0 ? -1 : timeout.count());
  const std::string reply = call(w.finish(), with_grace(timeout), "wait");
  FrameReader r(reply.data(), reply.size());
  if (expect_status(r, true, "wait(" + keys_text(keys) + ")") == Status::kTimeout) {
    throw StoreError(
        "timed out after " + seconds_text(timeout) + " waiting for key(s) " + keys_text(keys) +
        " in the rendezvous store at " + endpoint() +
        ": the process that sets them may have failed or be slow (raise the timeout if it is slow)");
  }
}

}  // namespace lockstep::comm
