#pragma once

#include "lockstep/comm/backend.h"
#include "lockstep/detail/option.h"

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace lockstep::env {
struct Environment;
}

namespace lockstep::comm {

/// Everything `init_process_group` needs. Required: rank and world size; the rest has defaults.
///
/// Example:
///   auto opts = ProcessGroupOptions(/*rank=*/0, /*world_size=*/2)
///                   .master_addr("10.0.0.5").master_port(29500).run_id("job-17");
///   auto opts = ProcessGroupOptions::from_environment(lockstep::env::from_env());
class ProcessGroupOptions {
 public:
  ProcessGroupOptions(int rank, int world_size);

  /// Rank, world size, master address/port and run id taken from `environment`. A process started on its
  /// own (env::Source::kSingleProcess, world size 1) gets an in-memory store: it serves no port.
  static ProcessGroupOptions from_environment(const env::Environment& environment);

  /// This process's rank in [0, world_size).
  LOCKSTEP_OPTION(ProcessGroupOptions, int, rank)
  LOCKSTEP_OPTION(ProcessGroupOptions, int, world_size)
  /// Host of rank 0's rendezvous store (lockstep's TcpStoreServer, see rendezvous.h): a single-node job
  /// with a loopback master listens on loopback only, other jobs on the address this names.
  LOCKSTEP_OPTION(ProcessGroupOptions, std::string, master_addr)
  LOCKSTEP_OPTION(ProcessGroupOptions, int, master_port)
  /// Job token: every rank must pass the same one; a process with another is refused at rendezvous.
  LOCKSTEP_OPTION(ProcessGroupOptions, std::string, run_id)
  /// The job's secret (job_secret.h), proved to rank 0's store in the handshake. Default: the secret in
  /// LOCKSTEP_JOB_SECRET or LOCKSTEP_JOB_SECRET_FILE (`lockstep run` sets the first). Empty: none.
  LOCKSTEP_OPTION(ProcessGroupOptions, std::string, job_secret)
  /// Run without a job secret, on purpose, a job that spans nodes (num_nodes > 1) or whose master_addr is
  /// not a loopback address here (its store is reachable from other hosts). Default:
  /// LOCKSTEP_NO_JOB_SECRET=1. Without it such a job is refused by validate(), saying how to give one.
  LOCKSTEP_OPTION(ProcessGroupOptions, bool, no_job_secret)
  /// Default kAuto (see Backend).
  LOCKSTEP_OPTION(ProcessGroupOptions, Backend, backend)
  /// How long rendezvous may take (all ranks connected and checked in). Default: LOCKSTEP_RDZV_TIMEOUT
  /// (seconds) when set, else 300 s.
  LOCKSTEP_OPTION(ProcessGroupOptions, std::chrono::milliseconds, rendezvous_timeout)
  /// How long one collective may take before it fails with a CommError. Default: LOCKSTEP_TIMEOUT
  /// (seconds) when set, else 1800 s (PyTorch's default).
  LOCKSTEP_OPTION(ProcessGroupOptions, std::chrono::milliseconds, collective_timeout)
  /// How often this rank publishes its progress record (store key "progress/<rank>": the collectives it
  /// issued and finished) and, under a launcher, its heartbeat. Ranks read the records to name who is
  /// missing when a collective fails, and to find mismatched collectives. Default 1 s.
  LOCKSTEP_OPTION(ProcessGroupOptions, std::chrono::milliseconds, progress_interval)
  /// Nodes in the job (from the environment). With more than one, Gloo never binds to loopback.
  LOCKSTEP_OPTION(ProcessGroupOptions, int, num_nodes)
  /// Ranks per node (torchrun's LOCAL_WORLD_SIZE): rank = node_rank * local_world_size + local_rank.
  /// 0 (the default): world_size / num_nodes. Used by the hierarchical backend.
  LOCKSTEP_OPTION(ProcessGroupOptions, int, local_world_size)
  /// Gloo worker threads per process group.
  LOCKSTEP_OPTION(ProcessGroupOptions, int, gloo_threads)
  /// The ranks train on CUDA devices, one each (the Trainer's accelerator 'gpu'): Backend::kAuto then
  /// resolves to nccl, and an nccl group gets a host backend beside it for the CPU tensors of the layers
  /// above (metrics, votes, strings): what kAuto would pick on the CPU.
  LOCKSTEP_OPTION(ProcessGroupOptions, bool, cuda)
  /// Use this store instead of connecting to rank 0's TcpStore (tests run ranks as threads over a
  /// c10d::HashStore).
  LOCKSTEP_OPTION(ProcessGroupOptions, c10::intrusive_ptr<c10d::Store>, store)
  /// Network interface for Gloo (like GLOO_SOCKET_IFNAME). Empty: the interface whose address reaches
  /// master_addr (loopback when the master is local). GLOO_SOCKET_IFNAME is read when this is empty.
  LOCKSTEP_OPTION(ProcessGroupOptions, std::string, interface)
  /// Asked between short slices of every wait (collectives, barriers): a non-empty answer gives the wait
  /// up with a MembershipChanged carrying it. ElasticWorld sets it to "has the world changed?". Empty: none.
  LOCKSTEP_OPTION(ProcessGroupOptions, std::function<std::string()>, interrupt)
  /// Every collective runs on the backend's worker thread, never on the caller's (shm and hier otherwise run
  /// one inline when none is queued: ShmOptions::inline_when_idle), so issuing one never waits for the
  /// peers. Point-to-point links need it (comm::ChainLinks: a send is posted while the peer is still
  /// posting one the other way). Default false.
  LOCKSTEP_OPTION(ProcessGroupOptions, bool, asynchronous)

  /// Throws std::invalid_argument naming the field and value when an option is out of range, naming the
  /// variable when LOCKSTEP_RDZV_TIMEOUT / LOCKSTEP_TIMEOUT / the job secret's was malformed, or saying
  /// how to give a job secret when a job spans nodes without one (and without no_job_secret).
  void validate() const;

 private:
  // Rank 0's store would listen on an address other hosts can reach (store_listen_host in rendezvous.cpp).
  bool reachable_from_outside() const;

  int rank_;
  int world_size_;
  std::string master_addr_ = "127.0.0.1";
  int master_port_ = 29500;
  std::string run_id_ = "none";
  std::string job_secret_;
  bool no_job_secret_ = false;
  Backend backend_ = Backend::kAuto;
  std::chrono::milliseconds rendezvous_timeout_;
  std::chrono::milliseconds collective_timeout_;
  std::chrono::milliseconds progress_interval_{1000};
  int num_nodes_ = 1;
  int local_world_size_ = 0;
  int gloo_threads_ = 2;
  bool cuda_ = false;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string interface_;
  std::function<std::string()> interrupt_;
  bool asynchronous_ = false;
  std::string env_error_;  // a malformed timeout or secret variable, reported by validate()
};

}  // namespace lockstep::comm
