#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/process_group_options.h"
#include "lockstep/detail/elastic_contract.h"

namespace lockstep::comm {

/// What one re-formation changed (ElasticWorld::reform).
struct MembershipChange {
  int generation = 0;             ///< the new generation's number
  std::vector<int> left;          ///< ids of the ranks that left since the last generation this rank was in
  std::vector<std::string> why;   ///< the launcher's reason for each of `left`
  std::vector<int> joined;        ///< ids of the ranks admitted: they need the others' training state
  int old_size = 0;               ///< world size before
  int new_size = 0;               ///< world size after
  int new_rank = 0;               ///< this process's rank in the new world
  double seconds_since_seen = 0;  ///< from the first change's announcement to the new group being ready

  /// "rank(s) 1 left (exited with status 137); world 3 -> 2 (generation 1); training again 0.21 s after the
  /// change was announced", or "rank(s) 3 joined; world 3 -> 4 ...".
  std::string describe() const;
};

/*
 * A data-parallel world that loses ranks without a restart (docs/elastic.md, "In place"): the launcher
 * (`lockstep run --recovery in-place`) serves the store and announces each rank it loses; the survivors
 * form the next generation's process group inside the same processes and go on.
 *
 * Each generation is a ProcessGroup of the members still alive, under its own store prefix ("g<N>/"), so
 * nothing of an old generation is read in a new one. A rank's id is its generation-0 rank, for life;
 * its rank in a generation is its place among the members' ids.
 *
 * Every wait of a generation's group (collectives, barriers) is cut into 20 ms slices: between them the
 * rank looks for the next generation, and when it exists the wait gives up with MembershipChanged. A
 * collective that fails (a peer's socket closed) throws CommError. Either way the caller drops the step
 * and calls reform().
 *
 * A rank joins a running job by announcing itself (kElasticJoinVariable names its id) and waiting in the
 * generation its announcement made. A join interrupts nothing: the members admit it at the next commit
 * vote, whose deciding voter writes the newest generation into the decision ("commit <g>"), so every
 * member reads the same step boundary; they apply that step, then reform() to the generation with the
 * joiner (admitting()), and pass it their training state (MembershipChange::joined, joined()).
 *
 * The commit vote: no rank may apply an optimizer step that another survivor did not. should_commit() is
 * called by every member once its gradients are synchronised, before the optimizer steps. Each vote is
 * counted in the store; the voter that completes the count writes "commit" to the vote's decision key,
 * and a rank that sees a new generation first writes "abort" there; both with compare-and-set, so the first
 * word stands and every rank reads the same one. A lost rank that voted last never writes "commit", so a
 * late vote cannot turn a decided "abort" around.
 *
 * Thread-safety: one thread per rank calls everything.
 *
 * Example (a user's own loop; docs/elastic.md has it whole):
 *   lockstep::comm::ElasticWorld world(ProcessGroupOptions::from_environment(lockstep::env::from_env()));
 *   auto ddp = std::make_unique<DistributedDataParallel<Net>>(net, world.group());
 *   ...
 *   try {
 *     optimizer.zero_grad(); loss(ddp->forward(x), y).backward();
 *     if (!world.should_commit()) throw lockstep::comm::MembershipChanged(world.group().rank(), "vote", "");
 *     optimizer.step();
 *     if (world.admitting()) world.reform();  // then as below, and the state sent to the joiners
 *   } catch (const lockstep::comm::CommError&) {
 *     world.reform();  // then a new DDP over world.group(), init_sync off, and the epoch re-sharded
 *   }
 */
class ElasticWorld {
 public:
  /// Connects to the launcher's store (or `options.store()`, which tests pass), and forms generation 0 of
  /// options' world: rank and world size as given. Backend kAuto becomes gloo; another backend is refused
  /// (std::invalid_argument naming it): only Gloo's collectives can be abandoned safely. Collective.
  /// With `join_as` (by default the id kElasticJoinVariable names), joins the running job instead as that
  /// id: announces itself and returns once admitted (options' world size must be the job's first size);
  /// throws CommError when the job ends first or nothing admits it within the rendezvous timeout.
  explicit ElasticWorld(ProcessGroupOptions options, std::optional<int> join_as = joining_id());
  ~ElasticWorld();
  ElasticWorld(const ElasticWorld&) = delete;
  ElasticWorld& operator=(const ElasticWorld&) = delete;

  /// The current generation's group.
  ProcessGroup& group() { return *group_; }
  /// This process's generation-0 rank.
  int id() const { return id_; }
  int generation() const { return generation_; }
  /// The current members' ids, in rank order.
  const std::vector<int>& members() const { return members_; }

  /// The commit vote (above): true when every member voted (apply the step), false when the world changed
  /// first (drop the step and reform()). Throws CommError when neither happens within the collective
  /// timeout.
  bool should_commit();

  /// Waits (up to the rendezvous timeout) for the next generation the launcher announces, forms its group
  /// and returns what changed; generations announced meanwhile are skipped to the newest. Throws CommError
  /// when none is announced in time (the failure that led here was not a lost rank), or when this rank was
  /// itself declared lost.
  MembershipChange reform();

  /// The newest generation the launcher has announced.
  int announced_generation();

  /// This process joined a running job: it must receive the training state from the others (they send it
  /// when their reform() reports it in MembershipChange::joined).
  bool joined() const { return joined_; }
  /// The last vote committed and admits joining ranks: after the optimizer step, call reform().
  bool admitting() const { return admit_to_ > generation_; }
  /// Makes later joiners fail at once (CommError quoting `why`) rather than be admitted: for a program
  /// that cannot send them its state.
  void refuse_joins(const std::string& why);
  /// The id kElasticJoinVariable names (std::nullopt when unset); std::invalid_argument when malformed.
  static std::optional<int> joining_id();

  /// Leaves the current group at the end of training (ProcessGroup::leave): no check-out, since a rank
  /// lost after the last step would hold the others there. Counts this rank as finished in the store.
  void shutdown();

 private:
  /// "" while no rank was lost since `generation` (joins wait for the vote), else who was.
  std::string changed_since(int generation);
  /// Announces this process (id_) as joining; returns the generation its announcement made.
  int announce_join();
  /// Forms generation `generation`'s group (by `deadline`); false when a newer one was announced meanwhile.
  bool form(int generation, std::chrono::steady_clock::time_point deadline);
  /// The members of `generation`.
  std::vector<int> members_of(int generation);
  /// The reason that changes 1..`generation` give for losing `id` ("" when none lost it).
  std::string reason_lost(int id, int generation);
  /// Membership change `n` (1-based), read once.
  const lockstep::detail::MembershipRecord& record(int n);

  ProcessGroupOptions options_;
  c10::intrusive_ptr<c10d::Store> root_;     // the launcher's store
  c10::intrusive_ptr<c10d::Store> elastic_;  // its "lockstep/<run id>/elastic/" keys
  c10::intrusive_ptr<c10d::Store> store_;    // the current generation's keys ("g<N>/")
  std::unique_ptr<ProcessGroup> group_;
  std::vector<std::unique_ptr<ProcessGroup>> abandoned_;  // their backends may still wait on lost peers
  std::vector<lockstep::detail::MembershipRecord> records_;
  int id_ = 0;
  int initial_size_ = 1;
  int generation_ = 0;
  std::vector<int> members_;
  int64_t votes_ = 0;  // votes cast in this generation
  bool joined_ = false;
  bool finished_ = false;  // shutdown() ran
  int admit_to_ = 0;       // the generation the last committed vote admits
};

}  // namespace lockstep::comm
