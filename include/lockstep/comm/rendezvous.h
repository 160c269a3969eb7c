#pragma once

#include <c10/util/intrusive_ptr.h>

#include "lockstep/comm/process_group_options.h"

namespace lockstep::comm {

/*
 * Rendezvous: how the ranks of one job find each other.
 *
 * 1. Store. Rank 0 serves a c10d::TCPStore on master_port (all interfaces); the other ranks connect
 *    to master_addr:master_port, retrying until rendezvous_timeout. A bind failure on rank 0 and a
 *    connect timeout elsewhere become CommErrors naming host:port and what to check.
 * 2. Token. Rank 0 publishes the job's run id and world size under "lockstep/job". Every other rank
 *    reads them first and refuses to go on when either differs from its own: a process of another
 *    job pointed at the same port is turned away before it can touch this job's keys (and it leaves
 *    its run id under "lockstep/refused/<n>"; a rank whose check-in times out reports those).
 * 3. Check-in. Each rank claims "lockstep/<run_id>/rank/<r>" with compareSet (a second claim of the
 *    same rank is an error naming it) and bumps a counter; every rank waits until all world_size
 *    have checked in, and on timeout names the ranks that never arrived.
 *
 * The result is the raw store and the job's namespace "lockstep/<run_id>/"; init_process_group gives the
 * backend the prefix "lockstep/<run_id>/pg/".
 */
struct RendezvousResult {
  /// The raw store (TCPStore or the one passed in options); keep it alive as long as the group.
  c10::intrusive_ptr<c10d::Store> root_store;
  /// The job's namespace in the store: "lockstep/<run_id>/".
  c10::intrusive_ptr<c10d::Store> job_store;
};

/// Runs the three steps above. Throws CommError on any failure, always within rendezvous_timeout
/// (plus a small margin for the OS to refuse connections).
RendezvousResult rendezvous(const ProcessGroupOptions& options);

}  // namespace lockstep::comm
