#pragma once

#include <stdexcept>
#include <string>

namespace lockstep::comm {

/// A failure of rendezvous or of a collective. `what()` names this rank, the operation and, where known,
/// the peer or the address involved, and says what to check, e.g.
///   "rank 1: rendezvous: could not reach the rendezvous server at 10.0.0.5:29500 within 30 s: ..."
class CommError : public std::runtime_error {
 public:
  CommError(int rank, std::string op, const std::string& message);

  /// The rank that raised the error (this process), or -1 when it is not known yet.
  int rank() const { return rank_; }
  /// The operation that failed: "rendezvous", "init_process_group", "shutdown", or a collective's
  /// description such as "allreduce #3 (Float[1000]) sum".
  const std::string& op() const { return op_; }

 private:
  int rank_;
  std::string op_;
};

/// A wait given up because the members of an elastic world changed (ElasticWorld): a rank was lost while
/// this one waited in a collective, a vote or a re-formation. The group it waited in is abandoned; the
/// caller drops the step and calls ElasticWorld::reform().
class MembershipChanged : public CommError {
 public:
  using CommError::CommError;
};

}  // namespace lockstep::comm
