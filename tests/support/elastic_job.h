// The job the in-place recovery workers train (tests/ddp/elastic_ddp_worker.cpp: a user's own DDP loop;
// tests/train/elastic_accelerator_worker.cpp: the Accelerator), so that both end on the parameters of the
// one single-process reference (elastic_ddp_worker --reference): the data, the model, the optimizer, the
// loss, the saved parameters, and where a rank waits for the test to kill it (--hold).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/serialize.h>

namespace lockstep::testing::elastic_job {

constexpr int64_t kSamples = 300;
constexpr int64_t kBatch = 5;  // per rank
constexpr uint64_t kSamplerSeed = 5;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(12, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

struct Data {
  torch::Tensor x, y;
};

inline Data make_data() {
  torch::manual_seed(3);
  auto x = torch::randn({kSamples, 12}, torch::kDouble);
  auto y = torch::tanh(x.matmul(torch::randn({12, 3}, torch::kDouble)));
  return {x, y};
}

inline Net make_net() {
  torch::manual_seed(1);
  Net net;
  net->to(torch::kDouble);
  return net;
}

inline torch::optim::Adam make_optimizer(Net& net) {
  return torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(0.01));
}

/// A batch's loss: what a rank's step and the reference's share of it descend.
inline torch::Tensor loss_of(const torch::Tensor& output, const torch::Tensor& target) {
  return torch::mse_loss(output, target);
}

inline void save(Net& net, const std::string& path) {
  std::vector<torch::Tensor> parameters;
  for (const auto& p : net->parameters()) parameters.push_back(p.detach().clone());
  torch::save(parameters, path);
}

/// Where a rank waits for the test to kill or stop it (--hold ID:STEP:WHERE:FILE): the rank whose id is ID,
/// once STEP steps are committed, writes its pid to FILE and waits there, so that no clock decides where the
/// fault lands. WHERE: "start" (before the step's forward: the others wait for it in the all-reduce) or
/// "vote" (after its gradients are reduced, before it votes).
struct Hold {
  int id = -1;
  int64_t step = -1;
  std::string where;
  std::string file;
};

inline Hold parse_hold(const std::string& text) {
  std::stringstream in(text);
  Hold h;
  std::string id, step;
  std::getline(in, id, ':');
  std::getline(in, step, ':');
  std::getline(in, h.where, ':');
  std::getline(in, h.file);
  h.id = std::stoi(id);
  h.step = std::stoll(step);
  if (h.where != "start" && h.where != "vote")
    throw std::invalid_argument("--hold WHERE must be start or vote");
  return h;
}

inline void hold_if_due(const std::vector<Hold>& holds, int id, int64_t step, const char* where) {
  for (const Hold& h : holds) {
    if (h.id != id || h.step != step || h.where != where) continue;
    const std::string tmp = h.file + ".tmp";
    if (std::FILE* f = std::fopen(tmp.c_str(), "w")) {
      std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
      std::fclose(f);
      std::rename(tmp.c_str(), h.file.c_str());
    }
    for (;;) ::pause();  // until SIGKILL (or SIGSTOP, then the launcher's SIGKILL)
  }
}

/// The flags both workers take: --epochs E, --out FILE, --hold ID:STEP:WHERE:FILE (repeated),
/// --die-in-reform ID, --wait-for-join STEP:COUNT (the ranks there from the start wait at step STEP until
/// COUNT joiners have announced themselves, so that they are admitted at that step's vote).
struct Flags {
  int epochs = 3;
  std::string out;
  std::vector<Hold> holds;
  int die_in_reform = -1;
  int64_t wait_for_join_step = -1;
  int wait_for_join_count = 0;
};

/// Reads argv[1..], giving each flag that is not one of Flags' to `other(name, value)` (which takes the
/// value it needs by calling value(), and returns false for a flag it does not know either).
template <typename Other>
Flags parse_flags(int argc, char** argv, Other&& other) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--epochs") {
      flags.epochs = std::stoi(value());
    } else if (arg == "--out") {
      flags.out = value();
    } else if (arg == "--hold") {
      flags.holds.push_back(parse_hold(value()));
    } else if (arg == "--die-in-reform") {
      flags.die_in_reform = std::stoi(value());
    } else if (arg == "--wait-for-join") {
      const std::string v = value();
      flags.wait_for_join_step = std::stoll(v.substr(0, v.find(':')));
      flags.wait_for_join_count = std::stoi(v.substr(v.find(':') + 1));
    } else if (!other(arg, value)) {
      throw std::invalid_argument("unknown argument '" + arg + "'");
    }
  }
  if (flags.out.empty()) throw std::invalid_argument("--out FILE is required");
  return flags;
}

/// --wait-for-join: at step `step`, a rank that was there from the start waits (at most 120 s) until the
/// joiners have announced themselves. `World` is comm::ElasticWorld (a template: this header needs no comm).
template <typename World>
void wait_for_joiners(const Flags& flags, World& world, int64_t step) {
  if (step != flags.wait_for_join_step || world.joined()) return;
  for (int i = 0; i < 12000 && world.announced_generation() < world.generation() + flags.wait_for_join_count;
       ++i)
    ::usleep(10000);
}

}  // namespace lockstep::testing::elastic_job
