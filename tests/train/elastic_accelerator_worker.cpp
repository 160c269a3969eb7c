// The Accelerator's loop that survives lost ranks in place (AcceleratorOptions().elastic(true),
// Accelerator::recover), as a user writes it (docs/elastic.md, "The Accelerator"); tests/e2e:
// e2e_elastic_accel_*.
//
//   elastic_accelerator_worker --out FILE [--epochs E] [--accumulate K] [--hold ID:STEP:WHERE:FILE]...
//                              [--die-in-reform ID] [--wait-for-join STEP:COUNT]
//       one rank under `lockstep run --recovery in-place`, with the arguments and output of
//       tests/ddp/elastic_ddp_worker.cpp: "step S world W" after each committed step, "membership change
//       at step S: ..." after each recovery, the last world's rank 0 saves the parameters to FILE. It
//       trains the same job (tests/support/elastic_job.h) through a prepared loader of the same samples
//       (the Accelerator's seed is the sampler's), so `elastic_ddp_worker --reference` is its reference too.
//       Steps count optimizer steps. The hold's "start" is before the first micro-batch of a step, its
//       "vote" after the last one's backward, before the optimizer's step votes. --accumulate K: K
//       micro-batches of 5 per step, whose reference is `--reference ... --batch 5K` where every pass's
//       rest splits into whole steps (the shorter last group of a pass is the shorter last batch there).

#include <csignal>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "../support/elastic_job.h"
#include "lockstep/comm/elastic_world.h"
#include "lockstep/train/accelerator.h"

namespace {

using namespace lockstep::testing::elastic_job;
using lockstep::train::Accelerator;
using lockstep::train::AcceleratorOptions;

// Each membership change once, as rank 0 of its world says it (recover()'s and the admissions').
void print_changes(Accelerator& accelerator, std::size_t& printed) {
  const auto& changes = accelerator.membership_changes();
  for (; printed < changes.size(); ++printed) {
    std::printf("membership change at step %lld: %s\n", static_cast<long long>(accelerator.step()),
                changes[printed].describe().c_str());
    std::fflush(stdout);
  }
}

int run(const Flags& flags, int64_t accumulate) {
  Accelerator accelerator(
      AcceleratorOptions().elastic(true).seed(kSamplerSeed).gradient_accumulation_steps(accumulate));
  lockstep::comm::ElasticWorld& world = *accelerator.elastic_world();
  const int id = world.id();  // the holds' id: the generation-0 rank, or a joiner's
  const Data data = make_data();
  const auto rows = lockstep::data::make_dataset(
      kSamples, [x = data.x, y = data.y](int64_t i) { return std::make_tuple(x[i], y[i]); });
  Net net = make_net();
  auto [model, optimizer, loader] =
      accelerator.prepare(net, make_optimizer(net),
                          lockstep::data::DataSource<std::tuple<torch::Tensor, torch::Tensor>>(
                              rows, lockstep::data::LoaderOptions(kBatch)));
  std::size_t printed = 0;  // membership changes said
  bool step_begins = true;  // the next micro-batch is a step's first
  // A joining rank starts in the epoch it was admitted in, with the others' state.
  const int64_t first_epoch = accelerator.first_epoch();
  if (world.joined()) {
    std::printf("joined at step %lld as rank %d of %d\n", static_cast<long long>(accelerator.step()),
                accelerator.process_index(), accelerator.num_processes());
    std::fflush(stdout);
  }
  for (int64_t epoch = first_epoch; epoch < flags.epochs; ++epoch) {
    loader.set_epoch(epoch);
    for (auto& [x, y] : loader) {
      print_changes(accelerator, printed);  // an admission happens as the loader moves on
      try {
        const int64_t committed = accelerator.step();  // optimizer steps so far
        if (step_begins) {
          hold_if_due(flags.holds, id, committed, "start");
          wait_for_joiners(flags, world, committed);  // the joins are admitted at this step's vote
        }
        step_begins = false;
        auto scope = accelerator.accumulate(model);
        accelerator.backward(loss_of(model(x), y));
        if (scope.sync_gradients()) hold_if_due(flags.holds, id, committed, "vote");
        optimizer.step();  // on a sync step it votes first: comm::MembershipChanged when the world changed
        optimizer.zero_grad();
        if (!scope.sync_gradients()) continue;
        step_begins = true;
        std::printf("step %lld world %d\n", static_cast<long long>(accelerator.step()),
                    accelerator.num_processes());
        std::fflush(stdout);
      } catch (const lockstep::comm::CommError&) {
        if (flags.die_in_reform == id) std::raise(SIGKILL);  // lost while the others re-form
        accelerator.recover();                               // rethrows when no rank was lost
        step_begins = true;  // the dropped step's micro-batches are dealt again
        print_changes(accelerator, printed);
      }
    }
  }
  print_changes(accelerator, printed);
  if (accelerator.is_main_process()) save(net, flags.out);
  accelerator.end_training();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t accumulate = 1;
    const Flags flags = parse_flags(argc, argv, [&](const std::string& arg, const auto& value) {
      if (arg != "--accumulate") return false;
      accumulate = std::stoll(value());
      return true;
    });
    return run(flags, accumulate);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_accelerator_worker: %s\n", e.what());
    return 1;
  }
}
