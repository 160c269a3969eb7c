#pragma once

// Where ZeroOptimizer's chunks live and how the parameters get the stepped values back: one ChunkStore,
// chosen when the optimizer is built (zero_optimizer.h explains the modes).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/shard/chunk_layout.h"
#include "lockstep/shard/shard_checkpoint.h"

namespace lockstep::shard::detail {

/// One parameter as ZeroOptimizer shards it.
struct Slot {
  at::Tensor param;  // the model's
  at::Tensor chunk;  // this rank's part of it (layout().chunk), which the optimizer steps
};

class ChunkStore {
 public:
  virtual ~ChunkStore() = default;
  ChunkStore(const ChunkStore&) = delete;
  ChunkStore& operator=(const ChunkStore&) = delete;

  /// Every parameter, in the optimizer's order.
  const std::vector<Slot>& slots() const { return slots_; }
  /// Of every parameter, in the same order: a rank's row holds its chunks (consolidate's buffer).
  const ChunkLayout& layout() const { return layout_; }
  /// The chunks' dtype and device.
  const at::TensorOptions& options() const { return options_; }

  /// The optimizer has stepped the chunks: the parameters take their values (a collective where they are
  /// gathered).
  virtual void after_step() = 0;
  /// ShardedParameters' (zero_optimizer.h): nothing to do where the parameters are whole between steps.
  virtual void gather_all() {}
  virtual void reshard(bool /*from_parameters*/) {}
  /// What a sharded checkpoint fills for parameter i (ZeroOptimizer::load_shards).
  virtual ShardTarget target(size_t i) const = 0;
  /// Bytes the chunks take besides the parameters.
  virtual int64_t bytes() const { return 0; }
  virtual std::optional<at::ScalarType> param_dtype() const { return std::nullopt; }

 protected:
  /// Parameter `param`'s chunk of the elements `mine`.
  using MakeChunk = std::function<at::Tensor(const at::Tensor& param, ChunkRange mine)>;
  /// Throws std::invalid_argument naming the problem when a parameter is not contiguous, a chunk does not
  /// hold its elements, or the chunks mix dtypes or devices.
  ChunkStore(const std::vector<at::Tensor>& params, comm::ProcessGroup& group, const MakeChunk& make_chunk);

  comm::ProcessGroup& group_;
  std::vector<Slot> slots_;
  ChunkLayout layout_;
  at::TensorOptions options_;
};

/// ZeRO-1 and ZeRO-2: each chunk is a view of its parameter's memory, stepped in place, and after the step
/// every rank's chunks are all-gathered into the parameters (zero_optimizer.h: large parameters straight
/// into their memory, the others packed into buckets).
class ParameterChunks : public ChunkStore {
 public:
  ParameterChunks(const std::vector<at::Tensor>& params, comm::ProcessGroup& group);
  void after_step() override { gather(); }
  ShardTarget target(size_t i) const override;

 protected:
  /// Gathers in `gathered` (the parameters' dtype when they differ from the chunks').
  ParameterChunks(const std::vector<at::Tensor>& params, comm::ProcessGroup& group,
                  const MakeChunk& make_chunk, at::ScalarType gathered);
  /// Every rank's locals_ into the parameters.
  void gather();

  std::vector<at::Tensor> locals_;  // each chunk's place in its parameter's memory

 private:
  /// The packed parameters' gathers: one collective each.
  struct Bucket {
    ChunkLayout layout;
    std::vector<size_t> slots;  // its members' slots, in layout's order
  };
  void plan(const at::TensorOptions& gathered);

  std::vector<size_t> direct_;  // slots gathered straight into their parameter's memory
  std::vector<Bucket> buckets_;
  at::Tensor send_, receive_;  // the largest bucket (or direct chunk), and its gathered size
  bool in_place_ = false;      // the backend gathers a chunk that lies inside the output
};

/// Mixed precision: the chunks are master copies in the parameters' own dtype (float32), and the
/// parameters are cast to `param_dtype` (bfloat16). After a step each master is cast into its place in its
/// parameter's memory, then the parameters are all-gathered in param_dtype. gather_all() makes them whole in
/// the master dtype.
class MasterChunks : public ParameterChunks {
 public:
  /// Throws std::invalid_argument when param_dtype is not a floating-point dtype narrower than a
  /// parameter's.
  MasterChunks(const std::vector<at::Tensor>& params, comm::ProcessGroup& group, at::ScalarType param_dtype);
  void after_step() override;
  void gather_all() override;
  void reshard(bool from_parameters) override;
  ShardTarget target(size_t i) const override;
  int64_t bytes() const override;
  std::optional<at::ScalarType> param_dtype() const override { return param_dtype_; }

 private:
  /// Gives parameter i a new memory of `dtype` (its values cast when `values`), its .grad cast too, and
  /// points locals_[i] at it.
  void retype(size_t i, at::ScalarType dtype, bool values);

  at::ScalarType param_dtype_;
  int holds_ = 0;  // gather_all()s not yet ended by reshard()
};

/// FSDP: the chunks are where FSDP keeps them (`chunks(param)`), and nothing is gathered after a step (FSDP
/// gathers the parameters when they are used).
class HeldChunks : public ChunkStore {
 public:
  HeldChunks(const std::vector<at::Tensor>& params, comm::ProcessGroup& group,
             const std::function<at::Tensor(const at::Tensor& param)>& chunks);
  void after_step() override {}
  ShardTarget target(size_t i) const override;
};

}  // namespace lockstep::shard::detail
