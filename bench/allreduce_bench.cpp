// lockstep-bench-allreduce: all-reduce latency and bandwidth, one rank per process. `lockstep bench
// allreduce` starts it (see `lockstep bench allreduce --help` for the flags); it also runs under any
// torchrun-style launcher with the same flags:
//
//   build/lockstep bench allreduce [--nproc 2] [--backend auto|gloo|shm|...] [--max-size 64M] ...
//   build/lockstep run --nproc-per-node 2 --standalone -- build/lockstep-bench-allreduce [flags]
//
// For each size (--min-size .. --max-size of float32, sum, each --factor times the previous) it times
// two paths in the same run (with --op reduce-scatter the lockstep path is ProcessGroup::reduce_scatter of
// the message, each rank receiving its 1/N, against the baseline's all-reduce of the same message: what a
// reduce-scatter must beat, and what LibTorch 1.13's Gloo, which has none, does instead):
//   lockstep : lockstep::comm::ProcessGroup::all_reduce(t).wait() with --backend (sequence numbers,
//              timeout, CommError); t from ProcessGroup::new_comm_buffer, as DDP's buckets (--buffer
//              comm, the default: shared memory with shm), or at::zeros (--buffer plain)
//   baseline : raw c10d ProcessGroupGloo: native->allreduce({t})->wait(), LibTorch's own call. With
//              --backend gloo, over the same group; otherwise over a second, Gloo group whose rendezvous
//              goes through the first group's store (PrefixStore "baseline": no second port).
// Each path runs warm-up iterations, then timed ones (fewer for big sizes) in up to 5 alternating rounds
// (lockstep, baseline, lockstep, ...) with a barrier before each, so that a drift of the machine hits both
// paths alike; a size's latency is the maximum over ranks of each rank's mean (--json also records the
// median). Bookkeeping collectives (barriers, the reduction of the timings) use the Gloo group.
// Bandwidths follow nccl-tests: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n (the bytes each
// rank's link carries in a ring all-reduce, so it is comparable across world sizes).
//
// Exit status: 0; 1 when a rank fails; 2 for bad flags. With --check-flags the program only checks the
// flags (sizes, the backend name as this LibTorch's lockstep parses it, that --json can be written) and
// exits 0 or 2 without joining any group: the CLI runs that once before it starts the ranks.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"

namespace {

namespace comm = lockstep::comm;

constexpr const char* kName = "lockstep bench allreduce";
constexpr int64_t kMaxBytes = 1LL << 40;

// A bad flag: printed as "lockstep bench allreduce: <message>", exit status 2.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct Args {
  std::string backend_name = "auto";
  comm::Backend backend = comm::Backend::kGloo;  // parse_backend(backend_name), set by parse_args
  int64_t min_size = 4LL << 10;                  // bytes
  int64_t max_size = 64LL << 20;                 // bytes
  int factor = 4;
  int iters = 50;  // timed iterations per path for sizes up to 1 MiB
  std::string json;
  bool comm_buffer = true;      // --buffer comm (ProcessGroup::new_comm_buffer) or plain (at::zeros)
  bool reduce_scatter = false;  // --op reduce-scatter: the lockstep path reduce-scatters the message
  bool check_flags = false;
};

int parse_int(const std::string& flag, const std::string& text, int minimum) {
  const bool digits =
      !text.empty() && text.size() <= 9 && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) throw UsageError(flag + " '" + text + "' is not a whole number");
  const int value = std::stoi(text);
  if (value < minimum) throw UsageError(flag + " must be >= " + std::to_string(minimum) + ", got " + text);
  return value;
}

int64_t parse_size(const std::string& flag, const std::string& text) {
  const size_t digits = std::min(text.find_first_not_of("0123456789"), text.size());
  std::string unit = text.substr(digits);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int64_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1LL << 10;
  if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1LL << 20;
  if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1LL << 30;
  if (digits == 0 || digits > 13 || scale == 0) {
    throw UsageError(flag + " '" + text +
                     "' is not a size (expected a byte count with an optional unit B, K, M or G, e.g. 64M)");
  }
  const int64_t bytes = std::stoll(text.substr(0, digits)) * scale;
  if (bytes <= 0 || bytes % 4 != 0) {
    throw UsageError(flag + " " + text + " is not a positive multiple of 4 bytes (float32 elements)");
  }
  if (bytes > kMaxBytes) throw UsageError(flag + " " + text + " is above the limit of 1024G");
  return bytes;
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--check-flags") {
      args.check_flags = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") {
      throw UsageError(
          "this program is one rank of `lockstep bench allreduce`: see `lockstep bench allreduce --help`");
    }
    std::string value;
    if (const auto eq = flag.find('='); eq != std::string::npos && flag.rfind("--", 0) == 0) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw UsageError(flag + " needs a value");
    }
    if (flag == "--backend") {
      args.backend_name = value;
    } else if (flag == "--min-size") {
      args.min_size = parse_size(flag, value);
    } else if (flag == "--max-size") {
      args.max_size = parse_size(flag, value);
    } else if (flag == "--factor") {
      args.factor = parse_int(flag, value, 2);
    } else if (flag == "--iters") {
      args.iters = parse_int(flag, value, 1);
    } else if (flag == "--json") {
      args.json = value;
    } else if (flag == "--op") {
      if (value != "allreduce" && value != "reduce-scatter")
        throw UsageError("--op must be allreduce or reduce-scatter, got '" + value + "'");
      args.reduce_scatter = value == "reduce-scatter";
    } else if (flag == "--buffer") {
      if (value != "comm" && value != "plain")
        throw UsageError("--buffer must be comm or plain, got '" + value + "'");
      args.comm_buffer = value == "comm";
    } else {
      throw UsageError(
          "unknown flag " + flag +
          " (expected --backend, --min-size, --max-size, --factor, --iters, --json, --buffer, --op, "
          "--check-flags)");
    }
  }
  if (args.min_size > args.max_size) {
    throw UsageError("--min-size (" + std::to_string(args.min_size) + " bytes) is larger than --max-size (" +
                     std::to_string(args.max_size) + " bytes)");
  }
  try {
    args.backend = comm::parse_backend(args.backend_name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--") + e.what());  // "backend 'x' is not known ..." names the option
  }
  if (args.backend == comm::Backend::kNccl) {
    throw UsageError(
        "--backend nccl: this benchmark all-reduces CPU tensors, which NCCL cannot "
        "(use --backend gloo, or another CPU backend)");
  }
  return args;
}

// Opens --json for writing; `append` leaves an existing file as it is (the flag check).
std::FILE* open_json(const std::string& path, bool append) {
  std::FILE* file = std::fopen(path.c_str(), append ? "a" : "w");
  if (file == nullptr) {
    throw UsageError("--json " + path + ": cannot open it for writing (" + std::strerror(errno) + ")");
  }
  return file;
}

std::string human(int64_t bytes) {
  char text[32];
  if (bytes >= (1LL << 30) && bytes % (1LL << 30) == 0) {
    std::snprintf(text, sizeof text, "%lld GiB", static_cast<long long>(bytes >> 30));
  } else if (bytes >= (1LL << 20) && bytes % (1LL << 20) == 0) {
    std::snprintf(text, sizeof text, "%lld MiB", static_cast<long long>(bytes >> 20));
  } else if (bytes >= (1LL << 10) && bytes % (1LL << 10) == 0) {
    std::snprintf(text, sizeof text, "%lld KiB", static_cast<long long>(bytes >> 10));
  } else {
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  }
  return text;
}

// Per-call seconds of two ops timed in alternating rounds (A's round, then B's, `rounds` times), so that
// a drift of the machine (another process waking up, frequency changes) hits both paths alike.
struct Timings {
  std::vector<double> a, b;
};

Timings time_alternating(const std::function<void()>& a, const std::function<void()>& b,
                         const std::function<void()>& sync, int warmup, int iters, int rounds) {
  for (int i = 0; i < warmup; ++i) a();
  for (int i = 0; i < warmup; ++i) b();
  Timings timings;
  const auto run = [&](const std::function<void()>& op, int count, std::vector<double>& out) {
    sync();
    for (int i = 0; i < count; ++i) {
      const auto start = std::chrono::steady_clock::now();
      op();
      out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  };
  for (int r = 0; r < rounds; ++r) {
    const int count = iters / rounds + (r < iters % rounds ? 1 : 0);
    run(a, count, timings.a);
    run(b, count, timings.b);
  }
  return timings;
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (const double x : v) sum += x;
  return v.empty() ? 0.0 : sum / v.size();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Both paths must agree before anything is timed.
void check_sum(comm::ProcessGroup& group, const c10::intrusive_ptr<c10d::ProcessGroup>& baseline) {
  const int world = group.size();
  auto a = at::full({1024}, static_cast<float>(group.rank() + 1));
  auto b = a.clone();
  group.all_reduce(a).wait();
  std::vector<at::Tensor> bs{b};
  baseline->allreduce(bs)->wait();
  const float expected = world * (world + 1) / 2.0f;
  if (!a.eq(expected).all().item<bool>() || !b.eq(expected).all().item<bool>()) {
    throw std::runtime_error("all_reduce check failed: expected every element to be " +
                             std::to_string(expected) + ", got " + std::to_string(a[0].item<float>()) +
                             " (lockstep) and " + std::to_string(b[0].item<float>()) + " (baseline)");
  }
}

int run(const Args& args) {
  const auto environment = lockstep::env::from_env();
  const bool printer = environment.rank == 0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> json(
      printer && !args.json.empty() ? open_json(args.json, /*append=*/false) : nullptr, &std::fclose);

  auto group = comm::init_process_group(
      comm::ProcessGroupOptions::from_environment(environment).backend(args.backend));
  // init_process_group resolves kAuto; group.backend() is what it chose.
  const comm::Backend backend = group.backend();
  if (backend == comm::Backend::kNccl) {
    throw std::runtime_error("--backend " + args.backend_name +
                             " chose nccl, but this benchmark all-reduces CPU tensors: pass --backend gloo "
                             "(or another CPU backend)");
  }
  std::optional<comm::ProcessGroup> gloo_group;
  if (backend != comm::Backend::kGloo) {
    // The baseline's own Gloo group, rendezvoused through the first group's store (no second port).
    auto options = comm::ProcessGroupOptions::from_environment(environment)
                       .backend(comm::Backend::kGloo)
                       .store(c10::make_intrusive<c10d::PrefixStore>("baseline", group.store()));
    gloo_group = comm::init_process_group(options);
  }
  comm::ProcessGroup& gloo = gloo_group ? *gloo_group : group;
  const auto& baseline = gloo.native();
  const int world = group.size();
  check_sum(group, baseline);

  const char* backend_name = comm::to_string(backend);
  const std::string chosen = args.backend_name == backend_name ? "" : ", from " + args.backend_name;
  const std::string baseline_name = gloo_group ? "c10d gloo" : "c10d gloo (same group)";
  const char* op = args.reduce_scatter ? "reduce_scatter" : "all_reduce";
  if (printer) {
    std::printf(
        "%s sum float32, %d rank(s); lockstep: ProcessGroup (%s%s); baseline: raw %s%s; message: %s\n", op,
        world, backend_name, chosen.c_str(), baseline_name.c_str(),
        args.reduce_scatter ? " all_reduce of the same message" : "",
        args.comm_buffer ? "new_comm_buffer" : "at::zeros");
    std::printf("| %9s | %5s | %12s | %10s | %10s | %12s | %10s | %10s | %6s |\n", "size", "iters",
                "lockstep us", "algbw GB/s", "busbw GB/s", "baseline us", "algbw GB/s", "busbw GB/s",
                "ratio");
    std::printf("|%s:|%s:|%s:|%s:|%s:|%s:|%s:|%s:|%s:|\n", std::string(10, '-').c_str(),
                std::string(6, '-').c_str(), std::string(13, '-').c_str(), std::string(11, '-').c_str(),
                std::string(11, '-').c_str(), std::string(13, '-').c_str(), std::string(11, '-').c_str(),
                std::string(11, '-').c_str(), std::string(7, '-').c_str());
    std::fflush(stdout);
  }
  // nccl-tests' bus bandwidth factors: a ring all-reduce moves 2(n-1)/n of the message over each rank's link,
  // a reduce-scatter (n-1)/n.
  const double bus_factor = 2.0 * (world - 1) / world;
  const double lockstep_bus_factor = args.reduce_scatter ? bus_factor / 2 : bus_factor;
  for (int64_t bytes = args.min_size; bytes <= args.max_size;) {
    // Zeros stay zeros under repeated sums (no overflow to inf over the iterations).
    const int64_t numel = bytes / static_cast<int64_t>(sizeof(float));
    auto tensor =
        args.comm_buffer ? group.new_comm_buffer(numel, at::kFloat) : at::zeros({numel}, at::kFloat);
    std::vector<at::Tensor> tensors{tensor};
    // --op reduce-scatter: each rank receives its 1/N of the reduced message (sizes a multiple of N).
    const int64_t chunk = numel / world;
    auto output = at::zeros({chunk}, at::kFloat);
    auto input = tensor.narrow(0, 0, chunk * world);
    const std::function<void()> lockstep_op = [&] {
      if (args.reduce_scatter) {
        group.reduce_scatter(output, input).wait();
      } else {
        group.all_reduce(tensor).wait();
      }
    };
    const int iters =
        bytes <= (1LL << 20)
            ? args.iters
            : std::min(args.iters, std::max(5, static_cast<int>(args.iters * (1LL << 20) / bytes)));
    const int warmup = std::max(2, iters / 10);
    const auto timings = time_alternating(
        lockstep_op, [&] { baseline->allreduce(tensors)->wait(); }, [&] { gloo.barrier(); }, warmup, iters,
        std::min(iters, 5));
    // The slowest rank's mean (and median) is the collective's latency.
    auto stats =
        at::tensor({mean(timings.a), mean(timings.b), median(timings.a), median(timings.b)}, at::kDouble);
    gloo.all_reduce(stats, comm::ReduceOp::kMax).wait();
    const auto s = stats.accessor<double, 1>();
    if (printer) {
      const double algbw = bytes / s[0] / 1e9;
      const double base_algbw = bytes / s[1] / 1e9;
      const double ratio = s[0] / s[1];
      std::printf("| %9s | %5d | %12.1f | %10.3f | %10.3f | %12.1f | %10.3f | %10.3f | %6.3f |\n",
                  human(bytes).c_str(), iters, s[0] * 1e6, algbw, algbw * lockstep_bus_factor, s[1] * 1e6,
                  base_algbw, base_algbw * bus_factor, ratio);
      std::fflush(stdout);
      if (json) {
        std::fprintf(
            json.get(),
            "{\"bytes\": %lld, \"world_size\": %d, \"backend\": \"%s\", \"baseline\": \"%s\", "
            "\"iters\": %d, \"lockstep_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, "
            "\"raw_c10d_us\": %.3f, \"raw_algbw_gbps\": %.4f, \"raw_busbw_gbps\": %.4f, "
            "\"ratio\": %.4f, \"lockstep_p50_us\": %.3f, \"raw_c10d_p50_us\": %.3f, \"buffer\": \"%s\", "
            "\"op\": \"%s\"}\n",
            static_cast<long long>(bytes), world, backend_name, baseline_name.c_str(), iters, s[0] * 1e6,
            algbw, algbw * lockstep_bus_factor, s[1] * 1e6, base_algbw, base_algbw * bus_factor, ratio,
            s[2] * 1e6, s[3] * 1e6, args.comm_buffer ? "comm" : "plain", op);
      }
    }
    if (bytes > args.max_size / args.factor) break;
    bytes *= args.factor;
  }
  if (printer) {
    std::printf(
        "latency: the slowest rank's mean per call; algbw = size / latency; busbw = algbw * 2(n-1)/n\n"
        "(a reduce-scatter's: (n-1)/n);\n"
        "ratio = lockstep latency / baseline latency (below 1: lockstep is faster)\n");
    std::fflush(stdout);
  }
  if (gloo_group) gloo_group->shutdown();
  group.shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
    if (args.check_flags) {
      if (!args.json.empty()) std::fclose(open_json(args.json, /*append=*/true));
      return 0;
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the flags.\n", kName, e.what(), kName);
    return 2;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kName, e.what());
    return 1;
  }
}
