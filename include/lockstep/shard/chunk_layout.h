#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace lockstep::shard {

/// The elements [begin, begin + length) of a tensor, counted flat.
struct ChunkRange {
  int64_t begin = 0;
  int64_t length = 0;
};

/*
 * How the sharded strategies cut tensors among the ranks and lay them out for one collective: ZeroOptimizer's
 * chunks and gathers, ShardedReducer's buckets and FSDP's units all use it.
 *
 * A tensor of n elements is cut into `world` chunks of stride = ceil(n / world) elements: rank r holds
 * elements [r * stride, min(n, (r + 1) * stride)), so the last ranks' chunks may be shorter, or empty
 * (n = 5, world = 4: stride 2, chunks [0, 2) [2, 4) [4, 5) [5, 5)).
 *
 * A layout of several tensors is a buffer of `world` rows of part() elements, rank-major: row r is what rank
 * r sends (an all-gather) or receives (a reduce-scatter). Tensor i takes the columns [offset(i), offset(i) +
 * stride(i)) of every row, the tensors one after the other in the list's order (part() is the sum of the
 * strides), so row r holds chunk r of every tensor, each padded to its stride. One collective over the
 * buffer then moves every tensor's chunks. Sizes {5, 4} over world 2: strides {3, 2}, offsets {0, 3}, part
 * 5; row 0 is t0[0:3] t1[0:2], row 1 is t0[3:5] (pad) t1[2:4].
 */
class ChunkLayout {
 public:
  /// No tensors, one rank.
  ChunkLayout() = default;
  /// Tensors of `numels` elements (each >= 0) over `world` ranks (>= 1).
  ChunkLayout(std::vector<int64_t> numels, int world);

  /// The elements of a tensor of `numel` elements that chunk `rank` of `world` covers.
  static ChunkRange chunk(int64_t numel, int rank, int world);

  size_t size() const { return numels_.size(); }
  int world() const { return world_; }
  int64_t numel(size_t i) const { return numels_.at(i); }
  /// ceil(numel(i) / world): the columns tensor i takes in each row.
  int64_t stride(size_t i) const { return offsets_.at(i + 1) - offsets_.at(i); }
  /// Where tensor i's columns start in a row.
  int64_t offset(size_t i) const { return offsets_.at(i); }
  /// Elements of one row (one rank's part); the buffer holds world() * part().
  int64_t part() const { return offsets_.back(); }
  /// The elements of tensor i that chunk `rank` covers.
  ChunkRange chunk(size_t i, int rank) const { return chunk(numel(i), rank, world_); }
  /// The layout of the first `count` tensors (their offsets unchanged; part() their strides' sum).
  ChunkLayout first(size_t count) const;

  /// Chunk `rank` of tensor i (unpadded) within `row`, one row of part() elements: a view.
  at::Tensor chunk_in(const at::Tensor& row, size_t i, int rank) const;
  /// Copies `flat` (tensor i's elements) into its chunks' places in `rows` (world() * part() elements).
  void pack(const at::Tensor& rows, size_t i, const at::Tensor& flat) const;
  /// The inverse: `flat` (tensor i's elements) receives its chunks from their places in `rows`.
  void unpack(const at::Tensor& rows, size_t i, const at::Tensor& flat) const;

 private:
  int world_ = 1;
  std::vector<int64_t> numels_;
  std::vector<int64_t> offsets_{0};  // offset of each tensor, then part()
};

}  // namespace lockstep::shard
