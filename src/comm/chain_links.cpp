#include "lockstep/comm/chain_links.h"

#include <exception>
#include <stdexcept>
#include <utility>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

namespace lockstep::comm {

namespace {

// A header: dtype, number of dimensions, then the sizes; room for kMaxDims of them.
constexpr int64_t kMaxDims = 8;
constexpr int64_t kHeaderLength = 2 + kMaxDims;

at::Tensor header_of(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.dim() <= kMaxDims, "ChainLinks: a tensor of ", tensor.dim(),
              " dimensions cannot be sent (at most ", kMaxDims, ")");
  at::Tensor header = at::zeros({kHeaderLength}, at::kLong);
  auto* h = header.data_ptr<int64_t>();
  h[0] = static_cast<int64_t>(tensor.scalar_type());
  h[1] = tensor.dim();
  for (int64_t d = 0; d < tensor.dim(); ++d) h[2 + d] = tensor.size(d);
  return header;
}

}  // namespace

ChainLinks::ChainLinks(ProcessGroup& chain, const std::string& name)
    : rank_(chain.rank()), size_(chain.size()) {
  // Link {r, r + 1} belongs to split `parity` = r % 2 with color r / 2; a rank is in one link of each parity
  // (or alone at an end of the chain, where its color is unique).
  const char* directions[] = {"-next", "-prev"};
  for (int direction = 0; direction < 2; ++direction) {
    for (int parity = 0; parity < 2; ++parity) {
      links_[direction][parity] = chain.split(
          (rank_ + parity) / 2, name + directions[direction] + std::to_string(parity), /*asynchronous=*/true);
    }
  }
}

ChainLinks::~ChainLinks() = default;

ProcessGroup& ChainLinks::link(int direction, int low) {
  // Ranks low and low + 1 share a color, (r + parity) / 2, in the split whose parity is low % 2.
  return links_[direction][low % 2];
}

void ChainLinks::send(ProcessGroup& to, int root, const at::Tensor& tensor) {
  Pending p;
  p.payload = tensor.detach().contiguous();
  p.header = header_of(p.payload);
  p.header_work = to.broadcast(p.header, root);
  p.payload_work = to.broadcast(p.payload, root);
  pending_.push_back(std::move(p));
}

at::Tensor ChainLinks::receive(ProcessGroup& from, int root, const at::Device& device) {
  at::Tensor header = at::zeros({kHeaderLength}, at::kLong);
  from.broadcast(header, root).wait();
  const auto* h = header.data_ptr<int64_t>();
  TORCH_CHECK(h[1] >= 0 && h[1] <= kMaxDims, "ChainLinks: a damaged header (", h[1], " dimensions)");
  std::vector<int64_t> sizes(h + 2, h + 2 + h[1]);
  at::Tensor payload =
      at::empty(sizes, at::TensorOptions().dtype(static_cast<at::ScalarType>(h[0])).device(device));
  from.broadcast(payload, root).wait();
  return payload;
}

void ChainLinks::send_next(const at::Tensor& tensor) {
  if (rank_ + 1 >= size_) throw std::logic_error("ChainLinks::send_next on the last rank of the chain");
  ProcessGroup& to = link(0, rank_);
  send(to, to.rank(), tensor);
}

void ChainLinks::send_previous(const at::Tensor& tensor) {
  if (rank_ == 0) throw std::logic_error("ChainLinks::send_previous on rank 0 of the chain");
  ProcessGroup& to = link(1, rank_ - 1);
  send(to, to.rank(), tensor);
}

at::Tensor ChainLinks::receive_previous(const at::Device& device) {
  if (rank_ == 0) throw std::logic_error("ChainLinks::receive_previous on rank 0 of the chain");
  return receive(link(0, rank_ - 1), 0, device);
}

at::Tensor ChainLinks::receive_next(const at::Device& device) {
  if (rank_ + 1 >= size_) throw std::logic_error("ChainLinks::receive_next on the last rank of the chain");
  return receive(link(1, rank_), 1, device);
}

void ChainLinks::wait_sends() {
  while (!pending_.empty()) {
    pending_.front().header_work.wait();
    pending_.front().payload_work.wait();
    pending_.pop_front();
  }
}

void ChainLinks::release_received() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->header_work.is_completed() && it->payload_work.is_completed()) {
      it->header_work.wait();  // returns at once; rethrows a failure
      it->payload_work.wait();
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void ChainLinks::shutdown() {
  std::exception_ptr failure;
  try {
    wait_sends();
  } catch (...) {
    failure = std::current_exception();
    pending_.clear();
  }
  for (auto& direction : links_) {
    for (auto& group : direction) group.shutdown();
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace lockstep::comm
