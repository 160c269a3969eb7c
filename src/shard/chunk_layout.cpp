// The sharded strategies' layout: see the block comment in include/lockstep/shard/chunk_layout.h.
#include "lockstep/shard/chunk_layout.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

namespace lockstep::shard {

ChunkLayout::ChunkLayout(std::vector<int64_t> numels, int world) : world_(world), numels_(std::move(numels)) {
  TORCH_CHECK(world >= 1, "ChunkLayout: world must be >= 1, got ", world);
  for (int64_t n : numels_) {
    TORCH_CHECK(n >= 0, "ChunkLayout: a tensor of ", n, " elements");
    offsets_.push_back(offsets_.back() + (n + world - 1) / world);
  }
}

ChunkRange ChunkLayout::chunk(int64_t numel, int rank, int world) {
  const int64_t size = (numel + world - 1) / world;
  const int64_t begin = std::min(numel, size * rank);
  return {begin, std::min(numel, begin + size) - begin};
}

ChunkLayout ChunkLayout::first(size_t count) const {
  TORCH_CHECK(count <= size(), "ChunkLayout::first(", count, ") of ", size(), " tensors");
  return ChunkLayout(
      std::vector<int64_t>(numels_.begin(), numels_.begin() + static_cast<std::ptrdiff_t>(count)), world_);
}

at::Tensor ChunkLayout::chunk_in(const at::Tensor& row, size_t i, int rank) const {
  return row.narrow(0, offset(i), chunk(i, rank).length);
}

// Whole chunks move as one [whole, stride] block; the last one may be short.
void ChunkLayout::pack(const at::Tensor& rows, size_t i, const at::Tensor& flat) const {
  const int64_t stride = this->stride(i);
  if (stride == 0) return;  // an empty tensor
  at::Tensor to = rows.view({world_, part()}).narrow(1, offset(i), stride);
  const int64_t whole = flat.numel() / stride;
  const int64_t rest = flat.numel() - whole * stride;
  if (whole > 0) to.narrow(0, 0, whole).copy_(flat.narrow(0, 0, whole * stride).view({whole, stride}));
  if (rest > 0) to.select(0, whole).narrow(0, 0, rest).copy_(flat.narrow(0, whole * stride, rest));
}

void ChunkLayout::unpack(const at::Tensor& rows, size_t i, const at::Tensor& flat) const {
  const int64_t stride = this->stride(i);
  if (stride == 0) return;
  const at::Tensor from = rows.view({world_, part()}).narrow(1, offset(i), stride);
  const int64_t whole = flat.numel() / stride;
  const int64_t rest = flat.numel() - whole * stride;
  if (whole > 0) flat.narrow(0, 0, whole * stride).view({whole, stride}).copy_(from.narrow(0, 0, whole));
  if (rest > 0) flat.narrow(0, whole * stride, rest).copy_(from.select(0, whole).narrow(0, 0, rest));
}

}  // namespace lockstep::shard
