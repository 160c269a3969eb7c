// One rank of the DDP benchmarks (bench/ddp_weak_scaling.sh drives it). Trains a model on in-memory
// synthetic data for a fixed number of steps and prints one line of key=value figures:
//   --mode bare : the plain LibTorch loop, no process group, no DDP (the baseline)
//   --mode ddp  : the same loop with lockstep's DistributedDataParallel (run under `lockstep run`)
//   --mode allreduce: no compute: each step all-reduces the gradients in DDP's buckets (one flat tensor
//                 per bucket, issued in bucket order, then all waited on), what a DDP step sends when
//                 nothing overlaps it (run under `lockstep run`)
//   --model mlp : the seeds' MLP 784-256-128-10 (dropout 0.2), batch 64, Adam   (workload W1)
//   --model wide: 11 x Linear(1024, 1024) + head, 11.5M parameters (ResNet18-sized), batch 32, SGD
//   --model resnet18: lockstep::models::ResNet18 (CIFAR form, 11.2M parameters) on 3x32x32, batch 32, SGD
//   --bucket-cap-mb MB|auto: DDP's bucket cap (default auto, as DdpOptions: a 16th of the gradients
//                 within [1, 25] MiB)
//   --backend NAME: the process group's backend (default auto)
//   --bucket-view on|off: DdpOptions::gradient_as_bucket_view (default off; lockstep fit uses on)
//   --device cpu|cuda: where the model and the batches live (cuda: cuda:LOCAL_RANK; the clock stops after
//                 the device has finished the timed steps)
//   --batch N: samples per step (default 64 for mlp, 32 otherwise)
//   --optimizer torch|lockstep: LibTorch's Adam/SGD (default), or what lockstep fit runs (FusedAdam:
//                 ATen's multi-tensor kernel on a GPU; ForeachSgd)
//   --malloc heap|glibc: heap (default) keeps step-sized blocks in glibc's heap, as lockstep-fit does
//                 (lockstep/train/step_memory.h); glibc keeps glibc's defaults
// Besides the step time it prints the CPU time spent per timed step: cpu_ms by this process (user +
// system, all its threads), machine_busy_ms by the whole machine (every core, kernel softirq included,
// from /proc/stat; the other ranks of a local job count there too), and machine_cores.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/nn.h>
#include <torch/optim.h>
#include "lockstep/optim/foreach_sgd.h"
#include "lockstep/optim/fused_adam.h"

#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/env/environment.h"
#include "lockstep/models/resnet18.h"
#include "lockstep/train/device.h"
#include "lockstep/train/step_memory.h"

namespace {

torch::nn::Sequential make_model(const std::string& name) {
  torch::nn::Sequential seq;
  if (name == "resnet18") {
    seq->push_back(lockstep::models::ResNet18());
  } else if (name == "mlp") {
    seq->push_back(torch::nn::Flatten());
    seq->push_back(torch::nn::Linear(784, 256));
    seq->push_back(torch::nn::ReLU());
    seq->push_back(torch::nn::Dropout(0.2));
    seq->push_back(torch::nn::Linear(256, 128));
    seq->push_back(torch::nn::ReLU());
    seq->push_back(torch::nn::Dropout(0.2));
    seq->push_back(torch::nn::Linear(128, 10));
  } else {
    for (int i = 0; i < 11; ++i) {
      seq->push_back(torch::nn::Linear(1024, 1024));
      seq->push_back(torch::nn::ReLU());
    }
    seq->push_back(torch::nn::Linear(1024, 10));
  }
  return seq;
}

long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// User + system CPU seconds of this process so far (all threads).
double process_cpu_s() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Busy CPU seconds of the whole machine so far, summed over cores: every field of /proc/stat's "cpu"
// line but idle and iowait (guest time is already inside user). Kernel softirq work, which no process
// is charged for, counts here.
double machine_busy_s() {
  std::ifstream stat("/proc/stat");
  std::string line;
  std::getline(stat, line);
  std::istringstream fields(line);
  std::string label;
  fields >> label;
  long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  fields >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const long long busy = user + nice + system + irq + softirq + steal;
  return static_cast<double>(busy) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "bare", model_name = "mlp", backend = "auto", malloc_mode = "heap";
  std::string bucket_view = "off", device_name = "cpu", optimizer_name = "torch";
  int64_t batch_flag = 0;
  int steps = 300, warmup = 30;
  std::optional<double> bucket_cap_mb;  // unset: DdpOptions' default
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mode")
      mode = argv[i + 1];
    else if (flag == "--model")
      model_name = argv[i + 1];
    else if (flag == "--steps")
      steps = std::atoi(argv[i + 1]);
    else if (flag == "--warmup")
      warmup = std::atoi(argv[i + 1]);
    else if (flag == "--bucket-cap-mb" && std::strcmp(argv[i + 1], "auto") == 0)
      bucket_cap_mb.reset();
    else if (flag == "--bucket-cap-mb")
      bucket_cap_mb = std::atof(argv[i + 1]);
    else if (flag == "--backend")
      backend = argv[i + 1];
    else if (flag == "--malloc")
      malloc_mode = argv[i + 1];
    else if (flag == "--bucket-view")
      bucket_view = argv[i + 1];
    else if (flag == "--device")
      device_name = argv[i + 1];
    else if (flag == "--batch")
      batch_flag = std::atoll(argv[i + 1]);
    else if (flag == "--optimizer")
      optimizer_name = argv[i + 1];
    else {
      std::fprintf(
          stderr,
          "ddp_bench: unknown flag %s (expected --mode bare|ddp|allreduce, --model "
          "mlp|wide|resnet18, --steps N, --warmup N, --bucket-cap-mb MB|auto, --backend NAME, --malloc "
          "heap|glibc, --bucket-view on|off, --device cpu|cuda, --batch N, --optimizer torch|lockstep)\n",
          flag.c_str());
      return 2;
    }
  }
  if ((mode != "bare" && mode != "ddp" && mode != "allreduce") ||
      (optimizer_name != "torch" && optimizer_name != "lockstep") ||
      (model_name != "mlp" && model_name != "wide" && model_name != "resnet18") || steps < 1 || warmup < 0 ||
      (bucket_cap_mb && !(*bucket_cap_mb > 0)) || (malloc_mode != "heap" && malloc_mode != "glibc") ||
      (bucket_view != "on" && bucket_view != "off") || (device_name != "cpu" && device_name != "cuda") ||
      batch_flag < 0) {
    std::fprintf(
        stderr,
        "ddp_bench: bad --mode '%s' / --model '%s' / --steps %d / --malloc '%s' / --bucket-view '%s' / "
        "--bucket-cap-mb %g (MiB > 0 or auto)\n",
        mode.c_str(), model_name.c_str(), steps, malloc_mode.c_str(), bucket_view.c_str(),
        bucket_cap_mb.value_or(0));
    return 2;
  }
  if (malloc_mode == "heap" && !lockstep::train::keep_step_memory_in_heap()) {
    std::fprintf(stderr,
                 "ddp_bench: the environment sets glibc malloc settings (GLIBC_TUNABLES glibc.malloc.*, "
                 "MALLOC_*_THRESHOLD_); add --malloc glibc to keep them\n");
    return 2;
  }
  try {
    torch::manual_seed(0);
    auto model = make_model(model_name);
    const bool mlp = model_name == "mlp";
    const int64_t batch = batch_flag > 0 ? batch_flag : mlp ? 64 : 32;
    const int64_t features = mlp ? 784 : 1024;
    const auto me = lockstep::env::from_env();
    const c10::Device device =
        lockstep::train::training_device(device_name == "cuda" ? lockstep::train::AcceleratorKind::kGpu
                                                               : lockstep::train::AcceleratorKind::kCpu,
                                         me.local_rank, me.local_world_size, /*share_gpus=*/true);
    lockstep::train::use_device(device);
    model->to(device);
    // 16 distinct in-memory batches, cycled.
    auto xs =
        model_name == "resnet18" ? torch::randn({16, batch, 3, 32, 32}) : torch::randn({16, batch, features});
    auto ys = torch::randint(0, 10, {16, batch}, torch::kLong);
    xs = xs.to(device);
    ys = ys.to(device);
    // The clock reads host time: let the device finish what was queued before it is read.
    auto settle = [&] {
      if (device.is_cuda()) torch::cuda::synchronize();
    };

    std::unique_ptr<lockstep::comm::ProcessGroup> group;
    std::unique_ptr<lockstep::ddp::DistributedDataParallel<torch::nn::Sequential>> ddp;
    if (mode != "bare") {
      const auto env = lockstep::env::from_env();
      group = std::make_unique<lockstep::comm::ProcessGroup>(
          lockstep::comm::init_process_group(lockstep::comm::ProcessGroupOptions::from_environment(env)
                                                 .backend(lockstep::comm::parse_backend(backend))
                                                 .cuda(device.is_cuda())));
      ddp = std::make_unique<lockstep::ddp::DistributedDataParallel<torch::nn::Sequential>>(
          model, *group,
          lockstep::ddp::DdpOptions()
              .bucket_cap_mb(bucket_cap_mb)
              .gradient_as_bucket_view(bucket_view == "on"));
    }
    std::unique_ptr<torch::optim::Optimizer> opt;
    const bool ours = optimizer_name == "lockstep";
    if (mlp && ours)
      opt =
          std::make_unique<lockstep::optim::FusedAdam>(model->parameters(), torch::optim::AdamOptions(1e-3));
    else if (mlp)
      opt = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
    else if (ours)
      opt =
          std::make_unique<lockstep::optim::ForeachSgd>(model->parameters(), torch::optim::SGDOptions(0.01));
    else
      opt = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01));

    // --mode allreduce: one float tensor per bucket, as large as the bucket's gradients.
    std::vector<at::Tensor> bucket_buffers;
    if (mode == "allreduce") {
      const auto params = model->parameters();
      for (const auto& bucket : ddp->reducer().bucket_indices()) {
        int64_t numel = 0;
        for (size_t index : bucket) numel += params.at(index).numel();
        bucket_buffers.push_back(torch::ones({numel}, torch::TensorOptions().device(device)));
      }
    }

    double last_loss = 0;
    auto step = [&](int i) {
      if (mode == "allreduce") {
        std::vector<lockstep::comm::Work> works;
        for (auto& buffer : bucket_buffers) works.push_back(group->all_reduce(buffer));
        for (auto& work : works) work.wait();
        return;
      }
      opt->zero_grad();
      auto x = xs[i % 16];
      auto out = ddp ? ddp->forward(x) : model->forward(x);
      auto loss = torch::nn::functional::cross_entropy(out, ys[i % 16]);
      loss.backward();
      opt->step();
      if (i == steps - 1) last_loss = loss.item<double>();
    };
    for (int i = 0; i < warmup; ++i) step(i);
    settle();
    const double cpu_start = process_cpu_s(), busy_start = machine_busy_s();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step(i);
    settle();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu_ms = 1000.0 * (process_cpu_s() - cpu_start) / steps;
    const double busy_ms = 1000.0 * (machine_busy_s() - busy_start) / steps;

    int64_t grad_bytes = 0;
    for (const auto& p : model->parameters())
      grad_bytes += p.numel() * static_cast<int64_t>(p.element_size());
    const int rank = group ? group->rank() : 0;
    std::printf(
        "mode=%s model=%s rank=%d steps=%d step_ms=%.3f samples_per_s=%.1f grad_bytes=%lld "
        "bucket_bytes=%lld buckets=%zu peak_rss_kib=%ld threads=%d last_loss=%.6f cpu_ms=%.1f "
        "machine_busy_ms=%.1f machine_cores=%ld malloc=%s bucket_view=%s device=%s batch=%lld optimizer=%s\n",
        mode.c_str(), model_name.c_str(), rank, steps, 1000.0 * seconds / steps, steps * batch / seconds,
        static_cast<long long>(grad_bytes), static_cast<long long>(ddp ? ddp->reducer().bucket_bytes() : 0),
        ddp ? ddp->reducer().bucket_indices().size() : size_t{0}, peak_rss_kib(), at::get_num_threads(),
        last_loss, cpu_ms, busy_ms, sysconf(_SC_NPROCESSORS_ONLN), malloc_mode.c_str(), bucket_view.c_str(),
        device.str().c_str(), static_cast<long long>(batch), optimizer_name.c_str());
    ddp.reset();
    if (group) group->shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_bench: %s\n", e.what());
    return 1;
  }
}
