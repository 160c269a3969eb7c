// A user's own DDP loop that survives lost ranks in place (comm::ElasticWorld, data::ElasticEpoch), and the
// single-process reference it must equal (tests/e2e/elastic_inplace_e2e.sh).
//
//   elastic_ddp_worker --out FILE [--epochs E] [--hold ID:STEP:WHERE:FILE]... [--die-in-reform ID]
//       one rank under `lockstep run --recovery in-place`; prints "step S world W" after each committed
//       step and "membership change at step S: ..." after each re-formation; rank 0 of the last world saves
//       the parameters to FILE. --hold: the rank whose id is ID, once STEP steps are committed, writes its
//       pid to FILE and waits there until it is killed or stopped (the test's cue, so that no clock decides
//       where the fault lands): WHERE is "start" (before the step's forward: the others wait for it in the
//       all-reduce) or "vote" (after its gradients are reduced, before it votes). --die-in-reform: the rank
//       with that id dies (SIGKILL) when it should re-form. --wait-for-join STEP:COUNT: the ranks there
//       from the start wait at step STEP until COUNT joiners have announced themselves, so that they are
//       admitted at that step's vote. A joining rank (started by a second `lockstep run` on the same
//       endpoint) receives the parameters, the optimizer state and the position in the epoch from rank 0 and
//       trains on.
//   elastic_ddp_worker --reference WORLDS --out FILE [--epochs E] [--batch B]
//       one process training on the same global batches as an undisturbed run whose world was W0 from step
//       0, W1 from step S1, ... (WORLDS = "W0@0,W1@S1,..."): each step's loss is the mean of the per-rank
//       losses, which is what DDP's averaged gradients descend. --batch: per rank (default 5; 10 is the
//       reference of the Accelerator's 5 accumulated twice).
//       The job (data, model, optimizer, loss, --hold) is tests/support/elastic_job.h, which
//       tests/train/elastic_accelerator_worker.cpp trains too: this reference is also the Accelerator's.
//   elastic_ddp_worker --compare A B
//       exit 0 when the parameters in A and B agree to 1e-9 (float64 throughout), else 1 naming the worst.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../support/elastic_job.h"
#include "lockstep/comm/elastic_world.h"
#include "lockstep/data/elastic_epoch.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/env/environment.h"

namespace {

using namespace lockstep::testing::elastic_job;

// The loss of `forward` on samples [from, from + n) of `indices`: the same for a rank (through DDP) and for
// the reference (each rank's batch through the plain model).
template <typename Forward>
torch::Tensor loss_on(Forward&& forward, const Data& data, const std::vector<int64_t>& indices, int64_t from,
                      int64_t n) {
  const auto idx = torch::tensor(std::vector<int64_t>(indices.begin() + from, indices.begin() + from + n));
  return loss_of(forward(data.x.index_select(0, idx)), data.y.index_select(0, idx));
}

// Where the job is: what a joining rank receives (share_state). `parts` are this epoch's parts so far
// (elastic_epoch.h): world, consumed, world, consumed, ..., the current world; `done` is its consumed.
struct Position {
  int64_t epoch = 0;
  int64_t step = 0;  // committed steps
  int64_t done = 0;  // samples of the current part this rank trained
  std::vector<int64_t> parts;
};

// This rank's indices in the current part of the epoch.
lockstep::data::ElasticEpoch epoch_part(const Position& pos, int rank) {
  const auto last = pos.parts.size() - 1;
  lockstep::data::ElasticEpoch part(
      kSamples,
      lockstep::data::DistributedSamplerOptions(pos.parts[0], last == 0 ? rank : 0).seed(kSamplerSeed),
      pos.epoch);
  for (std::size_t i = 2; i <= last; i += 2)
    part.reshard(pos.parts[i - 1], pos.parts[i], i == last ? rank : 0);
  return part;
}

// Rank 0's optimizer state and position on every rank (the parameters came with DDP's broadcast).
void share_state(lockstep::comm::ProcessGroup& group, torch::optim::Optimizer& optimizer, Position& pos) {
  std::ostringstream saved;
  if (group.rank() == 0) {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    archive.save_to(saved);
  }
  const std::string state = group.broadcast_string(saved.str());
  std::vector<int64_t> where = {pos.epoch, pos.step, pos.done};
  where.insert(where.end(), pos.parts.begin(), pos.parts.end());
  auto numbers = torch::tensor(where);
  auto count = torch::tensor({numbers.numel()});
  group.broadcast(count, 0).wait();
  numbers.resize_({count.item<int64_t>()});
  group.broadcast(numbers, 0).wait();
  if (group.rank() == 0) return;
  std::istringstream in(state);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer.load(archive);
  const auto* n = numbers.data_ptr<int64_t>();
  pos.epoch = n[0];
  pos.step = n[1];
  pos.done = n[2];
  pos.parts.assign(n + 3, n + numbers.numel());
}

int run_elastic(const Flags& flags) {
  const int epochs = flags.epochs;
  const std::string& out = flags.out;
  const std::vector<Hold>& holds = flags.holds;
  const int die_in_reform = flags.die_in_reform;
  using lockstep::comm::ElasticWorld;
  const Data data = make_data();
  ElasticWorld world(lockstep::comm::ProcessGroupOptions::from_environment(lockstep::env::from_env()));
  Net net = make_net();
  auto ddp = std::make_unique<lockstep::ddp::DistributedDataParallel<Net>>(net, world.group());
  auto optimizer = make_optimizer(net);
  Position pos;
  pos.parts = {world.group().size()};
  if (world.joined()) {
    share_state(world.group(), optimizer, pos);
    std::printf("joined at step %lld as rank %d of %d\n", static_cast<long long>(pos.step),
                world.group().rank(), world.group().size());
    std::fflush(stdout);
  }
  auto part = epoch_part(pos, world.group().rank());
  // After a reform(): DDP over the new group (the joiners get the parameters from its broadcast, and the
  // rest of the state from share_state), and the rest of the epoch dealt over the new world.
  const auto changed = [&](const lockstep::comm::MembershipChange& change) {
    std::printf("membership change at step %lld: %s\n", static_cast<long long>(pos.step),
                change.describe().c_str());
    std::fflush(stdout);
    ddp.reset();
    ddp = std::make_unique<lockstep::ddp::DistributedDataParallel<Net>>(
        net, world.group(), lockstep::ddp::DdpOptions().init_sync(!change.joined.empty()));
    pos.parts.push_back(pos.done);
    pos.parts.push_back(world.group().size());
    pos.done = 0;
    if (!change.joined.empty()) share_state(world.group(), optimizer, pos);
    part = epoch_part(pos, world.group().rank());
  };
  while (pos.epoch < epochs) {
    if (pos.done >= static_cast<int64_t>(part.indices().size())) {
      ++pos.epoch;
      pos.parts = {world.group().size()};
      pos.done = 0;
      part = epoch_part(pos, world.group().rank());
      continue;
    }
    const int64_t n = std::min<int64_t>(kBatch, static_cast<int64_t>(part.indices().size()) - pos.done);
    try {
      hold_if_due(holds, world.id(), pos.step, "start");
      wait_for_joiners(flags, world, pos.step);  // the joins are admitted at this step's vote
      optimizer.zero_grad();
      auto loss =
          loss_on([&](const torch::Tensor& x) { return ddp->forward(x); }, data, part.indices(), pos.done, n);
      loss.backward();  // DDP averages the gradients over the current world
      hold_if_due(holds, world.id(), pos.step, "vote");
      if (!world.should_commit()) {
        throw lockstep::comm::MembershipChanged(world.group().rank(), "should_commit",
                                                "the world changed before every rank voted");
      }
      optimizer.step();
      pos.done += n;
      ++pos.step;
      std::printf("step %lld world %d\n", static_cast<long long>(pos.step), world.group().size());
      std::fflush(stdout);
      if (world.admitting()) changed(world.reform());
    } catch (const lockstep::comm::CommError& e) {
      if (die_in_reform == world.id()) std::raise(SIGKILL);  // lost while the others re-form
      changed(world.reform());
    }
  }
  if (world.group().rank() == 0) save(net, out);
  world.shutdown();
  return 0;
}

// "3@0,2@17" -> {(0, 3), (17, 2)}: (first step, world).
std::vector<std::pair<int64_t, int64_t>> parse_worlds(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> worlds;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto at = item.find('@');
    worlds.emplace_back(std::stoll(item.substr(at + 1)), std::stoll(item.substr(0, at)));
  }
  return worlds;
}

int run_reference(int epochs, int64_t batch, const std::string& worlds_text, const std::string& out) {
  const auto worlds = parse_worlds(worlds_text);
  const Data data = make_data();
  Net net = make_net();
  auto optimizer = make_optimizer(net);
  int64_t step = 0;
  std::size_t next = 1;  // the next world change
  int64_t world = worlds.front().second;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::vector<lockstep::data::ElasticEpoch> ranks;
    for (int64_t r = 0; r < world; ++r)
      ranks.emplace_back(kSamples, lockstep::data::DistributedSamplerOptions(world, r).seed(kSamplerSeed),
                         epoch);
    int64_t done = 0;
    for (;;) {
      if (next < worlds.size() && worlds[next].first == step) {  // the world changes before this step
        const lockstep::data::ElasticEpoch before = ranks.front();
        world = worlds[next++].second;
        ranks.assign(static_cast<std::size_t>(world), before);
        for (int64_t r = 0; r < world; ++r) ranks[static_cast<std::size_t>(r)].reshard(done, world, r);
        done = 0;
      }
      const auto left = static_cast<int64_t>(ranks.front().indices().size()) - done;
      if (left <= 0) break;
      const int64_t n = std::min(batch, left);
      optimizer.zero_grad();
      torch::Tensor loss = torch::zeros({}, torch::kDouble);
      for (const auto& part : ranks) {
        loss = loss + loss_on([&](const torch::Tensor& x) { return net->forward(x); }, data, part.indices(),
                              done, n);
      }
      (loss / static_cast<double>(world)).backward();
      optimizer.step();
      done += n;
      ++step;
    }
  }
  save(net, out);
  std::printf("reference: %lld steps, worlds %s\n", static_cast<long long>(step), worlds_text.c_str());
  return 0;
}

int compare(const std::string& a, const std::string& b) {
  std::vector<torch::Tensor> x, y;
  torch::load(x, a);
  torch::load(y, b);
  if (x.size() != y.size()) {
    std::fprintf(stderr, "compare: %zu parameters against %zu\n", x.size(), y.size());
    return 1;
  }
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, (x[i] - y[i]).abs().max().item<double>());
  std::printf("compare: largest difference %.3g over %zu parameters\n", worst, x.size());
  return worst <= 1e-9 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::string(argv[1]) == "--compare") return compare(argv[2], argv[3]);
    int64_t batch = kBatch;
    std::string reference;
    const Flags flags = parse_flags(argc, argv, [&](const std::string& arg, const auto& value) {
      if (arg == "--batch") {
        batch = std::stoll(value());
      } else if (arg == "--reference") {
        reference = value();
      } else {
        return false;
      }
      return true;
    });
    return reference.empty() ? run_elastic(flags) : run_reference(flags.epochs, batch, reference, flags.out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_ddp_worker: %s\n", e.what());
    return 1;
  }
}
