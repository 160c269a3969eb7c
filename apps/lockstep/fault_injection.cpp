// Fault injection for the recovery tests: see fault_injection.h.
#include "fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

#include <ATen/ATen.h>

#include "lockstep/comm/elastic_world.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/preemption.h"
#include "lockstep/train/step_breakdown.h"

namespace lockstep::cli {
namespace {

struct Fault {
  int rank = -1;
  int64_t step = 0;
  std::string kind;  // "" (kill) | ckpt | usr1 | term | nan | stop | hang | extra | slow
  int amount = 0;    // slow: the sleep (ms) in each batch's forward; lag: the step timer's lag added there
                     // (ms); joins: how many joins to wait for
};

class FaultInjection : public train::Callback {
 public:
  explicit FaultInjection(Fault fault) : fault_(std::move(fault)) {}
  std::string state_key() const override { return "FaultInjection"; }

  // "nan": the loss of every batch of optimizer step STEP + 1.
  void on_before_backward(train::TrainerContext& trainer, at::Tensor& loss) override {
    if (fault_.kind == "slow" && trainer.global_step() >= fault_.step)
      std::this_thread::sleep_for(std::chrono::milliseconds(fault_.amount));
    if (fault_.kind == "lag" && trainer.global_step() >= fault_.step)
      train::detail::step_clock_lag() += std::chrono::milliseconds(fault_.amount);
    if (fault_.kind != "nan" || done_ || trainer.rank() != fault_.rank ||
        trainer.global_step() != fault_.step)
      return;
    loss = loss * std::numeric_limits<double>::quiet_NaN();
    nan_given_ = true;
  }

  void on_train_step_end(train::TrainerContext& trainer, const train::BatchEnd& /*batch*/) override {
    if (trainer.rank() != fault_.rank || fault_.kind == "slow" || fault_.kind == "lag") return;
    if (fault_.kind == "nan") {
      done_ = done_ || nan_given_;
      return;
    }
    if (trainer.global_step() < fault_.step) return;
    if (fault_.kind == "usr1" || fault_.kind == "term") {
      if (!done_)
        notify_launcher(fault_.kind == "usr1" ? SIGUSR1 : SIGTERM, !trainer.default_ckpt_dir().empty());
    } else if (fault_.kind == "stop" || fault_.kind == "hang" || fault_.kind == "extra") {
      if (!done_ && fault_.kind == "stop") ::raise(SIGSTOP);
      if (!done_ && fault_.kind == "extra") {
        at::Tensor extra = at::zeros({3});
        trainer.process_group()->all_reduce(extra).wait();
      }
      while (fault_.kind == "hang") ::pause();
    } else if (fault_.kind == "joins") {
      // The joins are admitted at the next step's vote, whenever their launcher got them there: the
      // others wait for this rank in that step's all-reduce.
      comm::ElasticWorld* world = trainer.elastic_world();
      for (int i = 0; !done_ && world && i < 12000 &&
                      world->announced_generation() < world->generation() + fault_.amount;
           ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } else if (fault_.kind == "ckpt") {
      train::detail::checkpoint_written_hook() = [](const std::string&) { ::raise(SIGKILL); };
    } else {
      ::raise(SIGKILL);
    }
    done_ = true;
  }

 private:
  // The launcher forwards the notice to every rank, this one too: wait (at most 10 s) for it to come back,
  // so that the ranks agree on this very step and a test can choose where the notice lands. The Trainer
  // catches notices only with a ckpt_dir.
  static void notify_launcher(int signal, bool caught) {
    ::kill(::getppid(), signal);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (caught && train::preemption_notice() == 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  Fault fault_;
  bool nan_given_ = false;
  bool done_ = false;
};

}  // namespace

std::shared_ptr<train::Callback> fault_injection_from_env(const env::Environment& environment) {
  const char* text = std::getenv("LOCKSTEP_FAULT");
  if (text == nullptr || environment.restart_count > 0) return nullptr;
  Fault fault;
  long long step = 0;
  char kind[32] = {0};
  const int fields = std::sscanf(text, "%d:%lld:%31s", &fault.rank, &step, kind);
  fault.step = step;
  fault.kind = fields == 3 ? kind : "";
  for (const std::string& prefix :
       {std::string("slow"), std::string("lag"), std::string("joins")}) {  // slow or slowMS, ..., joinsN
    if (fault.kind.rfind(prefix, 0) != 0) continue;
    const size_t n = prefix.size();
    char* end = nullptr;
    const long ms = fault.kind.size() > n ? std::strtol(fault.kind.c_str() + n, &end, 10) : 2;
    const bool whole = fault.kind.size() == n || (*end == '\0' && ms > 0 && ms <= 60000);  // or joins
    fault.amount = static_cast<int>(ms);
    fault.kind = whole ? prefix : prefix + "?";
  }
  const std::string known = "|ckpt|usr1|term|nan|stop|hang|extra|slow|lag|joins|";
  if (fields < 2 || (!fault.kind.empty() && known.find("|" + fault.kind + "|") == std::string::npos)) {
    throw std::invalid_argument(
        std::string("LOCKSTEP_FAULT='") + text +
        "' is not RANK:STEP or RANK:STEP:ckpt|usr1|term|nan|stop|hang|extra|slow[MS]|lag[MS]|joins[N]");
  }
  if (environment.rank != fault.rank) return nullptr;
  return std::make_shared<FaultInjection>(std::move(fault));
}

}  // namespace lockstep::cli
