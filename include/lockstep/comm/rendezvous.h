#pragma once

#include <c10/util/intrusive_ptr.h>

#include "lockstep/comm/process_group_options.h"

namespace lockstep::comm {

/*
 * Rendezvous: how the ranks of one job find each other.
 *
 * 1. Store. Rank 0 serves lockstep's own store (TcpStoreServer, tcp_store_server.h) on master_port; every
 *    rank, rank 0 too, connects to master_addr:master_port with a TcpStore (tcp_store.h), retrying until
 *    rendezvous_timeout. A single-node job whose master_addr is local loopback listens on loopback only;
 *    otherwise the store listens on the address master_addr names (on every interface when a multi-node
 *    job's master_addr is a host name that resolves to loopback here, as Debian's own host name does).
 *    A taken port, an address that is not this host's, and a connect timeout become CommErrors naming
 *    host:port and what to check. The server serves every client from one poll() thread with
 *    non-blocking sockets: garbage, half-open connections and oversized frames close only their own
 *    connection (summarised on stderr, rate-limited) and never stall the job's clients.
 * 2. Token. Each connection's handshake carries the job's run id and world size: the server refuses a
 *    client whose differ (a process of another job pointed at this port) before it can touch any key,
 *    prints one line naming it on rank 0's stderr, and records it under "lockstep/refused/<n>" (a rank
 *    whose check-in times out reports those); the refused process fails with a CommError naming both
 *    run ids (or both world sizes). Rank 0 also publishes the token under "lockstep/job" and the other
 *    ranks check it: the same protection for a store passed in the options (ProcessGroupOptions::store).
 * 3. Check-in. Each rank claims "lockstep/<run_id>/rank/<r>" with compareSet (a second claim of the
 *    same rank is an error naming it) and bumps a counter; every rank waits until all world_size
 *    have checked in, and on timeout names the ranks that never arrived.
 *
 * The result is the raw store and the job's namespace "lockstep/<run_id>/"; init_process_group gives the
 * backend the prefix "lockstep/<run_id>/pg/".
 */
struct RendezvousResult {
  /// The raw store (a TcpStore, which on rank 0 also owns the server, or the one passed in options);
  /// keep it alive as long as the group.
  c10::intrusive_ptr<c10d::Store> root_store;
  /// The job's namespace in the store: "lockstep/<run_id>/".
  c10::intrusive_ptr<c10d::Store> job_store;
};

/// Runs the three steps above. Throws CommError on any failure, always within rendezvous_timeout
/// (plus a small margin for the OS to refuse connections).
RendezvousResult rendezvous(const ProcessGroupOptions& options);

}  // namespace lockstep::comm
