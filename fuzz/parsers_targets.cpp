// The LibTorch-free fuzz targets (fuzz_target.h): the rendezvous store's protocol, the environment's
// variables (torchrun, SLURM_*, OMPI_*, TF_CONFIG), `lockstep fit`'s YAML config, `lockstep report`'s
// metrics CSV/JSONL and hparams.yaml readers, and the workers' heartbeat lines.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../src/comm/tcp_store_protocol.h"
#include "fit_flags.h"  // apps/lockstep
#include "fuzz_target.h"
#include "lockstep/comm/store_client.h"
#include "lockstep/comm/tcp_store_server.h"
#include "lockstep/detail/worker_contract.h"
#include "lockstep/env/environment.h"
#include "report_csv.h"  // apps/lockstep
#include "report_hparams.h"
#include "report_metrics.h"

namespace lockstep::fuzz {
namespace {

using namespace std::chrono_literals;

std::string text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// --- store: bytes from a stranger on the store's port --------------------------------------------------

constexpr const char* kRunId = "fuzz";
constexpr const char* kSecret = "the-fuzzed-store-secret-0123456789";

// One server without and one with a job secret, for the whole run, and a client of the job that checks
// after each input that its server still answers.
struct Stores {
  comm::TcpStoreServer open{comm::TcpStoreServerOptions(kRunId, 2)
                                .max_frame_bytes(1 << 16)
                                .report_interval(std::chrono::hours(1))
                                .hello_timeout(std::chrono::seconds(2))};
  comm::TcpStoreServer secret{comm::TcpStoreServerOptions(kRunId, 2)
                                  .max_frame_bytes(1 << 16)
                                  .report_interval(std::chrono::hours(1))
                                  .hello_timeout(std::chrono::seconds(2))
                                  .secret(kSecret)};
  comm::StoreClient open_client{
      comm::TcpStoreOptions("127.0.0.1", open.port(), kRunId, 2, 0).connect_timeout(5s).timeout(5s)};
  comm::StoreClient secret_client{comm::TcpStoreOptions("127.0.0.1", secret.port(), kRunId, 2, 0)
                                      .connect_timeout(5s)
                                      .timeout(5s)
                                      .secret(kSecret)};
};

Stores& stores() {
  static auto* s = new Stores();  // never destroyed: the servers outlive every input
  return *s;
}

std::string hello() {
  return comm::detail::FrameWriter()
      .u8(static_cast<uint8_t>(comm::detail::Op::kHello))
      .u32(comm::detail::kStoreMagic)
      .u32(comm::detail::kStoreVersion)
      .str(std::string(kRunId))
      .i32(2)
      .i32(1)
      .finish();
}

// Sends `bytes` on a new connection to `port`, closes its sending half and reads until the server closes
// (it must: every input ends in EOF) or 2 s pass.
void send_and_drain(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // libFuzzer's timer signals interrupt a blocking connect, which then goes on in the background.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    if (err == EINTR) {
      pollfd p{fd, POLLOUT, 0};
      while (::poll(&p, 1, 2000) < 0 && errno == EINTR) {
      }
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) {
      std::fprintf(stderr, "fuzz store: cannot connect to the server: %s\n", std::strerror(err));
      std::abort();  // the server stopped listening: a finding
    }
  }
  // Closed with a reset at the end: a connection per input must not leave TIME_WAIT behind, or the
  // ephemeral ports run out within seconds (what the first run of this target found).
  const linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server may close first: its right
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (::recv(fd, buf, sizeof(buf), 0) <= 0) break;
  }
  ::close(fd);
}

// The first byte picks what comes before the input: 0 nothing (the handshake itself is fuzzed), 1 a valid
// hello to the store without a secret (the operations are fuzzed), 2 a valid hello to the store with a
// secret (the proof is fuzzed). The job's client must be served afterwards.
void store(const uint8_t* data, size_t size) {
  if (size == 0) return;
  Stores& s = stores();
  const int mode = data[0] % 3;
  const std::string input = text(data + 1, size - 1);
  send_and_drain(mode == 2 ? s.secret.port() : s.open.port(), (mode == 0 ? "" : hello()) + input);
  comm::StoreClient& client = mode == 2 ? s.secret_client : s.open_client;
  client.set("fuzz/alive", "yes");
  if (client.get_text("fuzz/alive", 5s) != "yes") std::abort();
}

// --- env: a process's environment --------------------------------------------------------------------

// Lines NAME=VALUE are the environment; from_env reads torchrun's, Slurm's, Open MPI's variables and
// TF_CONFIG from it.
void env(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> vars;
  const std::string all = text(data, size);
  size_t start = 0;
  while (start <= all.size()) {
    const size_t end = std::min(all.find('\n', start), all.size());
    const std::string line = all.substr(start, end - start);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
    start = end + 1;
  }
  const env::EnvLookup lookup = [&vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  std::vector<std::string> names;  // an error names one of the variables it read
  for (const auto& entry : vars) names.push_back(entry.first);
  expect_named_error(names, [&] { (void)env::from_env(env::EnvOptions(), lookup); });
}

// --- fit_config: `lockstep fit --config FILE` ----------------------------------------------------------

// parse_fit_flags answers bad input with a message and the exit status 2: an exception escaping it is the
// finding (it would end `lockstep fit` with std::terminate).
void fit_config(const uint8_t* data, size_t size) {
  const std::string path = write_input_file("config.yaml", data, size);
  std::vector<std::string> args = {"lockstep fit", "--config", path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  train::FitConfig config;
  (void)cli::parse_fit_flags(static_cast<int>(argv.size()), argv.data(), config);
}

// --- lockstep report's readers --------------------------------------------------------------------------

void metrics_csv(const uint8_t* data, size_t size) {
  expect_named_error({"metrics.csv"},
                     [&] { (void)cli::metrics_from_csv(cli::parse_csv(text(data, size), "metrics.csv")); });
}

void metrics_jsonl(const uint8_t* data, size_t size) {
  expect_named_error({"metrics.jsonl"},
                     [&] { (void)cli::parse_metrics_jsonl(text(data, size), "metrics.jsonl"); });
}

void hparams_yaml(const uint8_t* data, size_t size) {
  expect_named_error({"hparams.yaml"},
                     [&] { (void)cli::parse_hparams_yaml(text(data, size), "hparams.yaml"); });
}

// --- heartbeat: a worker's lines to its launcher --------------------------------------------------------

// Each line parses or is skipped; a line that parses is what format_heartbeat writes for its beat, up to
// the waiting flag (what follows is the collective's free text).
void heartbeat(const uint8_t* data, size_t size) {
  const std::string all = text(data, size);
  size_t start = 0;
  while (start < all.size()) {
    const size_t end = std::min(all.find('\n', start), all.size());
    const std::string line = all.substr(start, end - start);
    const auto beat = lockstep::detail::parse_heartbeat(line);
    if (beat && !beat->bye) {
      const std::string again = lockstep::detail::format_heartbeat(*beat);
      const size_t flag = again.find(' ', again.find(' ') + 1) + 1;
      if (line.compare(0, flag + 1, again, 0, flag + 1) != 0) std::abort();
    }
    start = end + 1;
  }
}

}  // namespace

const Target kTargets[] = {
    {"store", store},
    {"env", env},
    {"fit_config", fit_config},
    {"metrics_csv", metrics_csv},
    {"metrics_jsonl", metrics_jsonl},
    {"hparams_yaml", hparams_yaml},
    {"heartbeat", heartbeat},
};
const size_t kTargetCount = sizeof(kTargets) / sizeof(kTargets[0]);

}  // namespace lockstep::fuzz
