#pragma once

#include <deque>
#include <string>

#include <ATen/core/Tensor.h>

#include "lockstep/comm/process_group.h"

namespace lockstep::comm {

/*
 * Point-to-point between neighbouring ranks of a group laid out as a chain (a pipeline's stages): rank r
 * sends to r + 1 and r - 1 and receives from them, on every backend (shm, Gloo, MPI, NCCL, hier).
 *
 * ProcessGroup has collectives only, so a link is a 2-rank group and a send is a broadcast from the sender.
 * Each direction has its own links (four split()s: pairs {0,1} {2,3} ... and {1,2} {3,4} ..., once for sends
 * to the next rank and once for sends to the previous one), so that each link carries one direction only:
 * its two ends then issue its transfers in the same order (the order the sender sends, which is the order
 * the receiver receives), whatever order a schedule interleaves the two directions in.
 *
 * A send is posted and not waited for (the sender computes on while the link moves the tensor); a receive
 * blocks until the tensor is there (at most the group's collective timeout, the error naming the link).
 * Every transfer is two broadcasts: a header (dtype and sizes) and the payload, so the receiver needs to
 * know neither the shape nor the dtype; the payload arrives on the device the receiver names.
 *
 * Example (stage s of P):
 *   comm::ChainLinks links(pipeline_group);
 *   if (s > 0) x = links.receive_previous(device);
 *   auto y = stage(x);
 *   if (s + 1 < P) links.send_next(y);
 *   links.wait_sends();   // before reusing or dropping what was sent
 */
class ChainLinks {
 public:
  /// A collective of `chain` (which must outlive the links): its four splits, named `name` + "-next0",
  /// "-next1", "-prev0", "-prev1" in errors.
  ChainLinks(ProcessGroup& chain, const std::string& name);
  ChainLinks(ChainLinks&&) noexcept = default;
  ChainLinks& operator=(ChainLinks&&) noexcept = default;
  ~ChainLinks();

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Posts `tensor` to rank() + 1, which must call receive_previous() for it. The tensor (detached and made
  /// contiguous) is held until wait_sends(). Throws std::logic_error on the last rank.
  void send_next(const at::Tensor& tensor);
  /// Posts `tensor` to rank() - 1, which must call receive_next() for it. Throws std::logic_error on rank 0.
  void send_previous(const at::Tensor& tensor);
  /// The next tensor rank() - 1 sent with send_next(), on `device`. Blocks; throws CommError (naming the link
  /// and its sequence number) after the collective timeout.
  at::Tensor receive_previous(const at::Device& device);
  /// The next tensor rank() + 1 sent with send_previous(), on `device`.
  at::Tensor receive_next(const at::Device& device);

  /// Waits until every posted send has been received, and drops the tensors held for them.
  void wait_sends();
  /// Drops the tensors of the sends already received (rethrowing a failed one's error), without waiting: a
  /// pipeline calls it between passes so that what its neighbours took is not held to the end of the step.
  void release_received();
  /// Sends still held (posted, not yet waited for by wait_sends()).
  size_t pending_sends() const { return pending_.size(); }

  /// wait_sends(), then shuts the links down (ProcessGroup::shutdown), also when a send failed (whose error
  /// it then rethrows). Idempotent.
  void shutdown();

 private:
  struct Pending {
    at::Tensor header;
    at::Tensor payload;
    Work header_work;
    Work payload_work;
  };
  /// The link of `direction` (0: towards rank + 1, 1: towards rank - 1) between ranks `low` and low + 1.
  ProcessGroup& link(int direction, int low);
  void send(ProcessGroup& to, int root, const at::Tensor& tensor);
  static at::Tensor receive(ProcessGroup& from, int root, const at::Device& device);

  int rank_ = 0;
  int size_ = 1;
  ProcessGroup links_[2][2];  // [direction][parity of the link's lower rank]
  std::deque<Pending> pending_;
};

}  // namespace lockstep::comm
