// All-reduce latency and bandwidth, one rank of it per process under `lockstep run`:
//
//   build/lockstep run --nproc-per-node 2 --standalone -- build/bench/allreduce_bench [--iters N]
//       [--max-size 64M] [--json FILE]
//
// For each size (4 KiB .. 64 MiB of float32, sum) it times two paths over the same Gloo group:
//   lockstep : lockstep::comm::ProcessGroup::all_reduce(t).wait()  (sequence numbers, timeout, CommError)
//   raw c10d : group.native()->allreduce({t})->wait()               (the baseline: LibTorch's own call)
// Each path runs warm-up iterations, then timed ones (fewer for big sizes) in up to 5 alternating rounds
// (lockstep, raw, lockstep, ...) with a barrier before each; a size's latency is the maximum over ranks
// of each rank's mean (--json also records the median).
// Bandwidths follow nccl-tests: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n (the bytes each
// rank's link carries in a ring all-reduce, so it is comparable across world sizes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"

namespace {

struct Args {
  int iters = 50;                 // timed iterations for sizes up to 1 MiB
  int64_t max_size = 64LL << 20;  // bytes
  std::string json;
};

int64_t parse_size(const std::string& text) {
  size_t used = 0;
  const long long value = std::stoll(text, &used);
  std::string unit = text.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int64_t scale = 1;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB")
    scale = 1LL << 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB")
    scale = 1LL << 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB")
    scale = 1LL << 30;
  else
    throw std::invalid_argument("--max-size: unknown unit '" + unit + "' in '" + text + "' (use B, K, M, G)");
  if (value <= 0) throw std::invalid_argument("--max-size must be > 0, got '" + text + "'");
  return value * scale;
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument("flag " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--iters")
      args.iters = std::stoi(value);
    else if (flag == "--max-size")
      args.max_size = parse_size(value);
    else if (flag == "--json")
      args.json = value;
    else
      throw std::invalid_argument("unknown flag " + flag +
                                  " (expected --iters N, --max-size BYTES[K|M], --json FILE)");
  }
  if (args.iters < 1) throw std::invalid_argument("--iters must be >= 1, got " + std::to_string(args.iters));
  return args;
}

std::string human(int64_t bytes) {
  if (bytes >= (1LL << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1LL << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
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

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    const auto environment = lockstep::env::from_env();
    auto group = lockstep::comm::init_process_group(
        lockstep::comm::ProcessGroupOptions::from_environment(environment));
    const int world = group.size();
    const auto& native = group.native();

    // Both paths must agree before anything is timed.
    {
      auto a = at::full({1024}, static_cast<float>(group.rank() + 1));
      auto b = a.clone();
      group.all_reduce(a).wait();
      std::vector<at::Tensor> bs{b};
      native->allreduce(bs)->wait();
      const float expected = world * (world + 1) / 2.0f;
      if (!a.eq(expected).all().item<bool>() || !b.eq(expected).all().item<bool>()) {
        throw std::runtime_error("all_reduce check failed: expected every element to be " +
                                 std::to_string(expected));
      }
    }

    struct Row {
      int64_t bytes;
      int iters;
      double lockstep_s, raw_s;          // max over ranks of the mean
      double lockstep_p50_s, raw_p50_s;  // max over ranks of the median
    };
    std::vector<Row> rows;
    for (int64_t bytes = 4LL << 10; bytes <= args.max_size; bytes *= 4) {
      // Zeros stay zeros under repeated sums (no overflow to inf over the iterations).
      auto tensor = at::zeros({bytes / static_cast<int64_t>(sizeof(float))}, at::kFloat);
      std::vector<at::Tensor> tensors{tensor};
      const int iters =
          bytes <= (1LL << 20) ? args.iters : std::max(5, static_cast<int>(args.iters * (1LL << 20) / bytes));
      const int warmup = std::max(2, iters / 10);
      const auto timings = time_alternating([&] { group.all_reduce(tensor).wait(); },
                                            [&] { native->allreduce(tensors)->wait(); },
                                            [&] { group.barrier(); }, warmup, iters, std::min(iters, 5));
      // The slowest rank's mean (and median) is the collective's latency.
      auto stats =
          at::tensor({mean(timings.a), mean(timings.b), median(timings.a), median(timings.b)}, at::kDouble);
      group.all_reduce(stats, lockstep::comm::ReduceOp::kMax).wait();
      const auto s = stats.accessor<double, 1>();
      rows.push_back({bytes, iters, s[0], s[1], s[2], s[3]});
    }

    if (group.rank() == 0) {
      const double bus_factor = 2.0 * (world - 1) / world;
      std::printf("all_reduce sum float32, %d ranks (Gloo); latency = max over ranks of the mean\n", world);
      std::printf("%10s %7s %13s %15s %13s %13s %8s\n", "size", "iters", "lockstep us", "algbw GB/s",
                  "busbw GB/s", "raw c10d us", "ratio");
      std::FILE* json = args.json.empty() ? nullptr : std::fopen(args.json.c_str(), "w");
      if (!args.json.empty() && json == nullptr) throw std::runtime_error("cannot write --json " + args.json);
      for (const auto& row : rows) {
        const double algbw = row.bytes / row.lockstep_s / 1e9;
        const double busbw = algbw * bus_factor;
        const double ratio = row.lockstep_s / row.raw_s;
        std::printf("%10s %7d %13.1f %15.3f %13.3f %13.1f %8.3f\n", human(row.bytes).c_str(), row.iters,
                    row.lockstep_s * 1e6, algbw, busbw, row.raw_s * 1e6, ratio);
        if (json) {
          std::fprintf(json,
                       "{\"bytes\": %lld, \"world_size\": %d, \"iters\": %d, \"lockstep_us\": %.3f, "
                       "\"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"raw_c10d_us\": %.3f, "
                       "\"raw_algbw_gbps\": %.4f, \"ratio\": %.4f, \"lockstep_p50_us\": %.3f, "
                       "\"raw_c10d_p50_us\": %.3f}\n",
                       static_cast<long long>(row.bytes), world, row.iters, row.lockstep_s * 1e6, algbw,
                       busbw, row.raw_s * 1e6, row.bytes / row.raw_s / 1e9, ratio, row.lockstep_p50_s * 1e6,
                       row.raw_p50_s * 1e6);
        }
      }
      std::printf("ratio = lockstep / raw c10d latency (1.0 = no overhead)\n");
      if (json) std::fclose(json);
    }
    group.shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
}
