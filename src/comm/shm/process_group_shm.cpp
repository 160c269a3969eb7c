#include "lockstep/comm/process_group_shm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <sys/statvfs.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "../queued_work.h"
#include "../serial_executor.h"
#include "shm_channel.h"
#include "shm_reduce.h"

// How the collectives move data (one worker thread per group runs them in issue order):
//
//   allreduce, per chunk of at most one slot: every rank copies its chunk into its own slot, except
//   its own slice; barrier (with the signature check on the first chunk); each rank reduces its slice
//   [lo, hi) over all ranks (its own slice straight from its tensor) into slot 0 and into its tensor;
//   barrier; each rank copies the other slices of the result from slot 0. Two barriers per chunk.
//   broadcast, per chunk of a whole buffer: root copies in; barrier; the others copy out.
//   allgather, per chunk of a slot: each rank copies into its slot; barrier; each copies every slot out.
//   reduce_scatter, per chunk: each rank copies the pieces meant for the others into its slot (slot /
//   world bytes each); barrier; each rank reduces its piece over all slots into its output.
//
// Chunk s uses buffer s % 2 (ShmChannel::next_buffer). A rank writes buffer b for chunk s + 2 only after
// the first barrier of chunk s + 1, which no rank passes before every rank has finished reading chunk s,
// so one barrier per chunk is enough for the one-barrier collectives and two for allreduce.

namespace lockstep::comm {
namespace detail {

class ShmWork final : public QueuedWork {
 public:
  ShmWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::chrono::milliseconds backstop)
      : QueuedWork(rank, type, std::move(outputs)), backstop_(backstop) {}

  // Every wait inside a collective is bounded by the collective timeout, so a collective always ends;
  // `backstop` (the timeout times the collectives queued ahead of this one, plus a margin) only guards
  // against a bug, and lets the detailed error of the collective itself reach the caller first.
  bool wait(std::chrono::milliseconds timeout) override {
    return c10d::Work::wait(std::max(timeout, backstop_));
  }

 private:
  std::chrono::milliseconds backstop_;
};

}  // namespace detail

namespace {

using detail::Contiguous;
using detail::ShmChannel;
using detail::ShmOpContext;
using detail::ShmReduceOp;
using detail::ShmSignature;

std::size_t slot_bytes_from_env() {
  const char* raw = std::getenv("LOCKSTEP_SHM_SLOT_BYTES");
  if (raw == nullptr || *raw == '\0') return 4u << 20;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(raw, &end, 10);
  if (end == raw || *end != '\0') {
    throw std::invalid_argument(std::string("LOCKSTEP_SHM_SLOT_BYTES='") + raw +
                                "' is not a number of bytes (e.g. 4194304)");
  }
  return static_cast<std::size_t>(value);
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The elements [lo, hi) of `len` that `rank` reduces: equal slices of whole cache lines, in rank order.
struct Slice {
  int64_t lo, hi;
};
Slice slice_of(int64_t len, int world, int rank) {
  const int64_t per = ceil_div(ceil_div(len, world), 16) * 16;
  const int64_t lo = std::min(rank * per, len);
  return {lo, std::min(lo + per, len)};
}

struct Reduction {
  ShmReduceOp op;
  bool average;
  int32_t code;  // c10d's RedOpType, for the signature
};

Reduction to_reduction(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return {ShmReduceOp::kSum, false, op.op_};
    case c10d::ReduceOp::AVG:
      return {ShmReduceOp::kSum, true, op.op_};
    case c10d::ReduceOp::PRODUCT:
      return {ShmReduceOp::kProduct, false, op.op_};
    case c10d::ReduceOp::MIN:
      return {ShmReduceOp::kMin, false, op.op_};
    case c10d::ReduceOp::MAX:
      return {ShmReduceOp::kMax, false, op.op_};
    default:
      throw std::invalid_argument(
          "the shm backend supports the reduce ops sum, avg, product, min and max, got " +
          std::to_string(static_cast<int>(op.op_)));
  }
}

void check_tensor(const at::Tensor& t, const char* op, const char* what) {
  TORCH_CHECK(t.defined(), "shm ", op, ": ", what, " is an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "shm ", op, ": ", what, " is on ", t.device(),
              "; the shm backend moves CPU tensors only (use backend 'nccl' for GPU tensors)");
}

void check_single(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "shm ", op, " takes one tensor per rank, got ", tensors.size(),
              " (flatten them into one, or call once per tensor)");
  check_tensor(tensors[0], op, "the tensor");
}

void check_reducible(const at::Tensor& t, const char* op) {
  TORCH_CHECK(detail::shm_reducible(t.scalar_type()), "shm ", op, " cannot reduce ", t.scalar_type(),
              " tensors (it reduces float32, float64, bfloat16, float16, int32, int64, uint8, int8)");
}

char* bytes_of(const at::Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

ShmOpContext context(const char* op, std::uint64_t sequence, std::chrono::milliseconds timeout) {
  ShmOpContext ctx;
  ctx.op = op;
  ctx.sequence = sequence;
  ctx.timeout = timeout;
  ctx.deadline = std::chrono::steady_clock::now() + timeout;
  return ctx;
}

ShmSignature signature(std::uint64_t sequence, c10d::OpType op, const at::Tensor* t, int32_t detail,
                       int64_t chunks, int64_t shared_offset = -1) {
  ShmSignature s;
  s.shared_offset = shared_offset;
  s.sequence = sequence;
  s.op = static_cast<int32_t>(op);
  s.dtype = t ? static_cast<int32_t>(t->scalar_type()) : -1;
  s.numel = t ? t->numel() : 0;
  s.detail = detail;
  s.chunks = static_cast<int32_t>(chunks);
  return s;
}

void run_allreduce(ShmChannel& ch, const ShmOpContext& ctx, at::Tensor& t, const Reduction& r) {
  const int world = ch.world();
  const int rank = ch.rank();
  const auto type = t.scalar_type();
  const int64_t elem = t.element_size();
  const int64_t numel = t.numel();
  const int64_t chunk = static_cast<int64_t>(ch.slot_bytes()) / elem;
  const int64_t chunks = ceil_div(numel, chunk);
  ch.publish(signature(ctx.sequence, c10d::OpType::ALLREDUCE, &t, r.code, chunks));
  if (world == 1) return;
  if (chunks == 0) return ch.barrier(ctx, /*check_signatures=*/true);
  std::vector<const void*> in(world);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t off = c * chunk;
    const int64_t len = std::min(chunk, numel - off);
    const auto [lo, hi] = slice_of(len, world, rank);
    const int buffer = ch.next_buffer();
    char* src = bytes_of(t) + off * elem;
    char* mine = ch.slot(buffer, rank);
    std::memcpy(mine, src, lo * elem);
    std::memcpy(mine + hi * elem, src + hi * elem, (len - hi) * elem);
    ch.barrier(ctx, /*check_signatures=*/c == 0);
    if (hi > lo) {
      for (int j = 0; j < world; ++j) in[j] = (j == rank ? src : ch.slot(buffer, j)) + lo * elem;
      char* out = ch.slot(buffer, 0) + lo * elem;
      detail::shm_reduce(type, r.op, out, in.data(), world, hi - lo);
      if (r.average) detail::shm_divide(type, out, hi - lo, world);
      std::memcpy(src + lo * elem, out, (hi - lo) * elem);
    }
    ch.barrier(ctx, /*check_signatures=*/false);
    const char* result = ch.slot(buffer, 0);
    std::memcpy(src, result, lo * elem);
    std::memcpy(src + hi * elem, result + hi * elem, (len - hi) * elem);
  }
}

// All-reduce of a tensor in a shared buffer (ProcessGroupShm::new_shared_tensor), at byte `offset` of
// every rank's region; rank j's region starts `stride` * (j - rank) bytes from this rank's. After the
// first barrier every rank's data is final; each rank reduces its slice [lo, hi) from all regions (in
// rank order, as the copying path does: the same bits) into rank 0's region and copies it into every
// other region; after the second barrier every region holds the whole result. Nobody touches another
// rank's region outside these two barriers.
void run_allreduce_shared(ShmChannel& ch, const ShmOpContext& ctx, at::Tensor& t, const Reduction& r,
                          std::size_t offset, std::size_t stride) {
  const int world = ch.world();
  const int rank = ch.rank();
  const auto type = t.scalar_type();
  const int64_t elem = t.element_size();
  const int64_t numel = t.numel();
  ch.publish(signature(ctx.sequence, c10d::OpType::ALLREDUCE, &t, r.code, 1, static_cast<int64_t>(offset)));
  if (world == 1) return;
  ch.barrier(ctx, /*check_signatures=*/true);
  const auto [lo, hi] = slice_of(numel, world, rank);
  if (hi > lo) {
    char* mine = bytes_of(t) + lo * elem;
    const auto region = [&](int j) {
      return mine + (static_cast<std::ptrdiff_t>(j) - rank) * static_cast<std::ptrdiff_t>(stride);
    };
    std::vector<const void*> in(world);
    for (int j = 0; j < world; ++j) in[j] = region(j);
    // Into rank 0's region: the kernels may write over their first input, not over a later one.
    char* out = region(0);
    detail::shm_reduce(type, r.op, out, in.data(), world, hi - lo);
    if (r.average) detail::shm_divide(type, out, hi - lo, world);
    for (int j = 1; j < world; ++j) std::memcpy(region(j), out, (hi - lo) * elem);
  }
  ch.barrier(ctx, /*check_signatures=*/false);
}

void run_broadcast(ShmChannel& ch, const ShmOpContext& ctx, at::Tensor& t, int root) {
  const int64_t total = t.numel() * t.element_size();
  const int64_t chunk = static_cast<int64_t>(ch.slot_bytes()) * ch.world();  // the whole buffer
  const int64_t chunks = ceil_div(total, chunk);
  ch.publish(signature(ctx.sequence, c10d::OpType::BROADCAST, &t, root, chunks));
  if (ch.world() == 1) return;
  if (chunks == 0) return ch.barrier(ctx, /*check_signatures=*/true);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t off = c * chunk;
    const int64_t len = std::min(chunk, total - off);
    char* shared = ch.slot(ch.next_buffer(), 0);
    if (ch.rank() == root) std::memcpy(shared, bytes_of(t) + off, len);
    ch.barrier(ctx, /*check_signatures=*/c == 0);
    if (ch.rank() != root) std::memcpy(bytes_of(t) + off, shared, len);
  }
}

void run_allgather(ShmChannel& ch, const ShmOpContext& ctx, std::vector<at::Tensor>& outputs,
                   const at::Tensor& input) {
  const int64_t total = input.numel() * input.element_size();
  const int64_t chunk = static_cast<int64_t>(ch.slot_bytes());
  const int64_t chunks = ceil_div(total, chunk);
  ch.publish(signature(ctx.sequence, c10d::OpType::ALLGATHER, &input, 0, chunks));
  if (chunks == 0) {
    if (ch.world() > 1) ch.barrier(ctx, /*check_signatures=*/true);
    return;
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t off = c * chunk;
    const int64_t len = std::min(chunk, total - off);
    const int buffer = ch.next_buffer();
    if (ch.world() > 1) {
      std::memcpy(ch.slot(buffer, ch.rank()), bytes_of(input) + off, len);
      ch.barrier(ctx, /*check_signatures=*/c == 0);
    }
    for (int j = 0; j < ch.world(); ++j) {
      const char* from = j == ch.rank() ? bytes_of(input) + off : ch.slot(buffer, j);
      char* to = bytes_of(outputs[j]) + off;
      if (to != from) std::memcpy(to, from, len);  // an input inside the output is in its place already
    }
  }
}

void run_reduce_scatter(ShmChannel& ch, const ShmOpContext& ctx, at::Tensor& output,
                        const std::vector<at::Tensor>& inputs, const Reduction& r) {
  const int world = ch.world();
  const int rank = ch.rank();
  const auto type = output.scalar_type();
  const int64_t elem = output.element_size();
  const int64_t numel = output.numel();
  const int64_t piece = static_cast<int64_t>(ch.slot_bytes()) / world / elem;
  TORCH_CHECK(piece > 0, "shm reduce_scatter: a slot of ", ch.slot_bytes(), " bytes cannot hold ", world,
              " pieces of ", elem, "-byte elements; raise LOCKSTEP_SHM_SLOT_BYTES");
  const int64_t chunks = ceil_div(numel, piece);
  ch.publish(signature(ctx.sequence, c10d::OpType::REDUCE_SCATTER, &output, r.code, chunks));
  if (chunks == 0) {
    if (world > 1) ch.barrier(ctx, /*check_signatures=*/true);
    return;
  }
  std::vector<const void*> in(world);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t off = c * piece;
    const int64_t len = std::min(piece, numel - off);
    const int buffer = ch.next_buffer();
    if (world > 1) {
      char* mine = ch.slot(buffer, rank);
      for (int j = 0; j < world; ++j) {
        if (j != rank) std::memcpy(mine + j * piece * elem, bytes_of(inputs[j]) + off * elem, len * elem);
      }
      ch.barrier(ctx, /*check_signatures=*/c == 0);
    }
    for (int j = 0; j < world; ++j) {
      in[j] = j == rank ? bytes_of(inputs[rank]) + off * elem : ch.slot(buffer, j) + rank * piece * elem;
    }
    char* out = bytes_of(output) + off * elem;
    detail::shm_reduce(type, r.op, out, in.data(), world, len);
    if (r.average) detail::shm_divide(type, out, len, world);
  }
}

bool async_from_env() {
  const char* raw = std::getenv("LOCKSTEP_SHM_ASYNC");
  return raw != nullptr && std::string(raw) == "1";
}

}  // namespace

ShmOptions::ShmOptions() : slot_bytes_(slot_bytes_from_env()), inline_when_idle_(!async_from_env()) {}

void ShmOptions::validate() const {
  if (slot_bytes_ < 256 || slot_bytes_ % 64 != 0 || slot_bytes_ > (std::size_t{1} << 34)) {
    throw std::invalid_argument("shm slot_bytes must be a multiple of 64 in [256, 16 GiB], got " +
                                std::to_string(slot_bytes_) + " (LOCKSTEP_SHM_SLOT_BYTES)");
  }
  if (timeout_.count() <= 0) {
    throw std::invalid_argument("shm timeout must be > 0 ms, got " + std::to_string(timeout_.count()));
  }
}

bool ProcessGroupShm::dev_shm_has_room(std::size_t bytes) {
  struct statvfs fs {};
  return ::statvfs("/dev/shm", &fs) == 0 &&
         static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize) >= static_cast<double>(bytes);
}

std::size_t ProcessGroupShm::segment_bytes(int world, std::size_t slot_bytes) {
  return ShmChannel::segment_bytes(world, slot_bytes);
}

struct ProcessGroupShm::SharedBuffer {
  detail::ShmSegment segment;  // world regions of `stride` bytes, region j for rank j
  std::size_t stride = 0;
};

ProcessGroupShm::ProcessGroupShm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                 ShmOptions options)
    : NativeBackend(rank, size), options_(std::move(options)) {
  options_.validate();
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "shm: rank ", rank, " is not in [0, ", size, ")");
  const std::size_t bytes = ShmChannel::segment_bytes(size, options_.slot_bytes());
  const std::string key = "shm/segment";
  if (rank == 0) {
    try {
      segment_name_ = detail::shm_segment_name(options_.run_id());
      channel_ = std::make_unique<ShmChannel>(detail::ShmSegment::create(segment_name_, bytes), rank, size,
                                              options_.slot_bytes(), /*initialise=*/true);
    } catch (const std::exception& e) {
      const std::string text = std::string("!") + e.what();  // the others fail with rank 0's reason
      store->set(key, std::vector<uint8_t>(text.begin(), text.end()));
      throw;
    }
    store->set(key, std::vector<uint8_t>(segment_name_.begin(), segment_name_.end()));
  } else {
    const auto value = store->get(key);
    segment_name_.assign(value.begin(), value.end());
    if (!segment_name_.empty() && segment_name_[0] == '!') {
      throw std::runtime_error("rank 0 could not set up the shared-memory segment: " +
                               segment_name_.substr(1));
    }
    channel_ = std::make_unique<ShmChannel>(detail::ShmSegment::open(segment_name_, bytes), rank, size,
                                            options_.slot_bytes(), /*initialise=*/false);
  }
  channel_->name_ranks(options_.world_ranks());
  if (store->add("shm/attached", 1) == size) store->set("shm/all_attached", std::vector<uint8_t>{'1'});
  if (rank == 0) {
    store->wait({"shm/all_attached"});
    channel_->segment().unlink();  // every rank has it mapped: nothing can be left behind from now on
  }
  init();
  executor_ = std::make_unique<detail::SerialExecutor>("shm", options_.inline_when_idle());
  executor_->start();
}

// Every collective ends within its timeout: the executor's running one is waited for, queued ones fail.
ProcessGroupShm::~ProcessGroupShm() {
  executor_->stop(std::chrono::milliseconds::max());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                        std::function<void(std::uint64_t)> run) {
  c10::intrusive_ptr<detail::ShmWork> work;
  executor_->submit([&](std::uint64_t sequence, std::size_t queued_ahead) {
    const auto backstop =
        options_.timeout() * static_cast<int64_t>(queued_ahead + 1) + std::chrono::seconds(10);
    work = c10::make_intrusive<detail::ShmWork>(getRank(), type, std::move(outputs), backstop);
    detail::SerialExecutor::Entry entry;
    // No label: nothing asks the shm executor what runs (its errors name the collective themselves).
    entry.job = [this, work, run = std::move(run), sequence] {
      try {
        run(sequence);
        work->complete(nullptr);
      } catch (const std::exception& e) {
        channel_->record_failure(e.what());  // no-op when another rank failed first
        work->complete(std::current_exception());
      }
    };
    entry.abandon = [work, sequence] {
      work->complete(std::make_exception_ptr(std::runtime_error(
          "shm collective #" + std::to_string(sequence) + " never ran: its process group was destroyed")));
    };
    return entry;
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  check_single(tensors, "allreduce");
  check_reducible(tensors[0], "allreduce");
  const Reduction reduction = to_reduction(opts.reduceOp);
  auto tensor = std::make_shared<Contiguous>(tensors[0]);
  return enqueue(c10d::OpType::ALLREDUCE, tensors, [this, tensor, reduction](std::uint64_t seq) {
    const auto ctx = context("allreduce", seq, options_.timeout());
    const auto [shared, offset] = find_shared(tensor->work);
    if (shared != nullptr) {
      run_allreduce_shared(*channel_, ctx, tensor->work, reduction, offset, shared->stride);
    } else {
      run_allreduce(*channel_, ctx, tensor->work, reduction);
    }
    tensor->write_back();
  });
}

std::pair<const ProcessGroupShm::SharedBuffer*, std::size_t> ProcessGroupShm::find_shared(
    const at::Tensor& t) const {
  if (shared_buffers_.empty() || t.numel() == 0) return {nullptr, 0};
  const auto* begin = static_cast<const char*>(t.data_ptr());
  const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  for (const auto& buffer : shared_buffers_) {
    const char* region = static_cast<const char*>(buffer->segment.data()) + getRank() * buffer->stride;
    if (begin >= region && begin + bytes <= region + buffer->stride) {
      return {buffer.get(), static_cast<std::size_t>(begin - region)};
    }
  }
  return {nullptr, 0};
}

at::Tensor ProcessGroupShm::new_shared_tensor(int64_t numel, at::ScalarType dtype) {
  TORCH_CHECK(numel >= 0, "shm new_shared_tensor: numel must be >= 0, got ", numel);
  TORCH_CHECK(detail::shm_reducible(dtype), "shm new_shared_tensor: the shm backend cannot reduce ", dtype,
              " tensors (float32, float64, bfloat16, float16, int32, int64, uint8, int8)");
  if (getSize() == 1) return at::zeros({numel}, at::TensorOptions().dtype(dtype));  // nothing to share
  const std::size_t page = 4096;
  const std::size_t bytes = static_cast<std::size_t>(numel) * c10::elementSize(dtype);
  const std::size_t stride = std::max<std::size_t>(page, (bytes + page - 1) / page * page);
  auto result = std::make_shared<at::Tensor>();
  std::vector<at::Tensor> none;
  auto work = enqueue(c10d::OpType::UNKNOWN, none, [this, numel, dtype, stride, result](std::uint64_t seq) {
    auto& ch = *channel_;
    const auto ctx = context("new_shared_tensor", seq, options_.timeout());
    ShmSignature sig;
    sig.sequence = seq;
    sig.op = detail::kShmNewSharedTensorOp;
    sig.dtype = static_cast<int32_t>(dtype);
    sig.numel = numel;
    sig.chunks = 1;
    ch.publish(sig);
    const std::size_t total = stride * static_cast<std::size_t>(getSize());
    // Rank 0 creates the segment and passes its name (empty: no room) through its slot.
    char* name_slot = ch.slot(ch.next_buffer(), 0);
    std::shared_ptr<SharedBuffer> buffer;
    if (getRank() == 0) {
      std::string name;
      if (dev_shm_has_room(2 * total)) {
        name = detail::shm_segment_name(options_.run_id());
        buffer =
            std::make_shared<SharedBuffer>(SharedBuffer{detail::ShmSegment::create(name, total), stride});
      } else {
        std::fprintf(
            stderr,
            "lockstep shm: /dev/shm has no room for a %.1f MiB shared buffer (twice that must be free); "
            "using private memory, whose all-reduces copy through the segment (slower)\n",
            static_cast<double>(total) / (1024.0 * 1024.0));
      }
      std::memset(name_slot, 0, 256);  // at most 255 bytes of name follow: the slot stays NUL-terminated
      std::copy_n(name.data(), std::min<std::size_t>(name.size(), 255), name_slot);
    }
    if (getSize() > 1) ch.barrier(ctx, /*check_signatures=*/true);
    if (getRank() != 0) {
      const std::string name(name_slot, strnlen(name_slot, 255));
      if (!name.empty()) {
        buffer = std::make_shared<SharedBuffer>(SharedBuffer{detail::ShmSegment::open(name, total), stride});
      }
    }
    if (getSize() > 1) ch.barrier(ctx, /*check_signatures=*/false);  // every rank has it mapped
    if (!buffer) {
      *result = at::zeros({numel}, at::TensorOptions().dtype(dtype));
      return;
    }
    buffer->segment.unlink();
    char* mine = static_cast<char*>(buffer->segment.data()) + getRank() * stride;
    // The tensor keeps the mapping alive after the group is gone (the group keeps it for the peers).
    *result = at::from_blob(
        mine, {numel}, [buffer](void*) {}, at::TensorOptions().dtype(dtype));
    shared_buffers_.push_back(std::move(buffer));
  });
  work->wait();
  return *result;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  check_single(tensors, "broadcast");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "shm broadcast: root rank ", opts.rootRank,
              " is not in [0, ", getSize(), ")");
  TORCH_CHECK(opts.rootTensor == 0, "shm broadcast: rootTensor must be 0 (one tensor per rank), got ",
              opts.rootTensor);
  auto tensor = std::make_shared<Contiguous>(tensors[0]);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, tensors, [this, tensor, root](std::uint64_t seq) {
    run_broadcast(*channel_, context("broadcast", seq, options_.timeout()), tensor->work, root);
    tensor->write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& /*opts*/) {
  check_single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "shm allgather takes one output list per rank, got ", outputs.size());
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == getSize(),
              "shm allgather needs one output tensor per rank (", getSize(), "), got ", outputs[0].size());
  for (const auto& out : outputs[0]) {
    check_tensor(out, "allgather", "an output");
    TORCH_CHECK(out.numel() == inputs[0].numel() && out.scalar_type() == inputs[0].scalar_type(),
                "shm allgather: every output must match the input (", inputs[0].scalar_type(), "[",
                inputs[0].numel(), "]), got ", out.scalar_type(), "[", out.numel(), "]");
  }
  auto input = std::make_shared<Contiguous>(inputs[0]);
  auto outs = std::make_shared<std::vector<Contiguous>>();
  std::vector<at::Tensor> results;
  for (const auto& out : outputs[0]) {
    outs->emplace_back(out);
    results.push_back(out);
  }
  return enqueue(c10d::OpType::ALLGATHER, results, [this, input, outs](std::uint64_t seq) {
    std::vector<at::Tensor> targets;
    for (auto& o : *outs) targets.push_back(o.work);
    run_allgather(*channel_, context("allgather", seq, options_.timeout()), targets, input->work);
    for (auto& o : *outs) o.write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                const c10d::AllgatherOptions& opts) {
  check_tensor(output, "_allgather_base", "the output");
  TORCH_CHECK(output.is_contiguous() && output.numel() == input.numel() * getSize(),
              "shm _allgather_base: the output must be contiguous with world size x the input's elements (",
              input.numel() * getSize(), "), got ", output.numel());
  std::vector<std::vector<at::Tensor>> outputs(1);
  auto flat = output.view({-1});
  for (int r = 0; r < getSize(); ++r) outputs[0].push_back(flat.narrow(0, r * input.numel(), input.numel()));
  std::vector<at::Tensor> inputs{input.reshape({-1})};
  return allgather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                               std::vector<std::vector<at::Tensor>>& inputs,
                                                               const c10d::ReduceScatterOptions& opts) {
  check_single(outputs, "reduce_scatter");
  check_reducible(outputs[0], "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "shm reduce_scatter needs one list of ", getSize(), " input tensors (one per rank)");
  for (const auto& in : inputs[0]) {
    check_tensor(in, "reduce_scatter", "an input");
    TORCH_CHECK(in.numel() == outputs[0].numel() && in.scalar_type() == outputs[0].scalar_type(),
                "shm reduce_scatter: every input must match the output (", outputs[0].scalar_type(), "[",
                outputs[0].numel(), "]), got ", in.scalar_type(), "[", in.numel(), "]");
  }
  const Reduction reduction = to_reduction(opts.reduceOp);
  auto output = std::make_shared<Contiguous>(outputs[0]);
  auto ins = std::make_shared<std::vector<at::Tensor>>();
  for (const auto& in : inputs[0]) ins->push_back(in.contiguous());
  return enqueue(c10d::OpType::REDUCE_SCATTER, outputs, [this, output, ins, reduction](std::uint64_t seq) {
    run_reduce_scatter(*channel_, context("reduce_scatter", seq, options_.timeout()), output->work, *ins,
                       reduction);
    output->write_back();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "_reduce_scatter_base", "the input");
  TORCH_CHECK(input.numel() == output.numel() * getSize(),
              "shm _reduce_scatter_base: the input must hold world size x the output's elements (",
              output.numel() * getSize(), "), got ", input.numel());
  std::vector<std::vector<at::Tensor>> inputs(1);
  auto flat = input.reshape({-1});
  for (int r = 0; r < getSize(); ++r) inputs[0].push_back(flat.narrow(0, r * output.numel(), output.numel()));
  std::vector<at::Tensor> outputs{output};
  return reduce_scatter(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::barrier(const c10d::BarrierOptions& /*opts*/) {
  return enqueue(c10d::OpType::BARRIER, {}, [this](std::uint64_t seq) {
    const auto ctx = context("barrier", seq, options_.timeout());
    channel_->publish(signature(seq, c10d::OpType::BARRIER, nullptr, 0, 0));
    channel_->barrier(ctx, /*check_signatures=*/true);
  });
}

}  // namespace lockstep::comm
