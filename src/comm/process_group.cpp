#include "lockstep/comm/process_group.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "average.h"
#include "backend.h"
#include "lockstep/comm/process_group_hier.h"
#include "lockstep/comm/process_group_shm.h"
#include "lockstep/comm/rendezvous.h"
#include "progress.h"

namespace lockstep::comm {
namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // summed, then divided on completion
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown ReduceOp");
}

const char* name_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "?";
}

// Backends that average themselves (with detail::divide_for_average, on their own thread).
bool averages_itself(const c10::intrusive_ptr<NativeBackend>& backend) {
  if (!backend) return false;
  const std::string name = backend->getBackendName();
  return name == "shm" || name == "hier" || name == "mpi";
}

}  // namespace

ProcessGroup::ProcessGroup(c10::intrusive_ptr<c10d::ProcessGroup> native,
                           c10::intrusive_ptr<c10d::Store> root_store,
                           c10::intrusive_ptr<c10d::Store> job_store, ProcessGroupOptions options,
                           c10::intrusive_ptr<NativeBackend> host)
    : ProcessGroup(std::move(native), std::move(root_store), std::move(job_store), std::move(options),
                   std::move(host), "", {}, nullptr) {}

ProcessGroup::ProcessGroup(c10::intrusive_ptr<c10d::ProcessGroup> native,
                           c10::intrusive_ptr<c10d::Store> root_store,
                           c10::intrusive_ptr<c10d::Store> job_store, ProcessGroupOptions options,
                           c10::intrusive_ptr<NativeBackend> host, std::string name,
                           std::vector<int> world_ranks, std::shared_ptr<detail::ProcessActivity> activity)
    : native_(std::move(native)),
      backend_(detail::backend_of(native_)),
      host_(std::move(host)),
      root_store_(std::move(root_store)),
      job_store_(std::move(job_store)),
      options_(std::move(options)),
      rank_(options_.rank()),
      size_(options_.world_size()),
      native_average_(averages_itself(backend_)),
      host_average_(averages_itself(host_)),
      shut_down_(false),
      name_(std::move(name)),
      world_ranks_(std::move(world_ranks)) {
  if (native_) {
    // Only the world writes the launcher's heartbeat; a subgroup's collectives reach it through `activity`.
    const int heartbeat_fd = activity ? -1 : detail::Progress::heartbeat_fd_from_env();
    progress_ = std::make_shared<detail::Progress>(job_store_, rank_, size_, options_.progress_interval(),
                                                   heartbeat_fd, std::move(activity), world_ranks_);
    // The shm backend checks signatures and names missing ranks itself, inside the collective (and the
    // hierarchical one is shm inside each node): only the others wait in slices to read the records.
    diagnose_ = size_ > 1 && options_.backend() != Backend::kShm && options_.backend() != Backend::kHier;
  }
}

ProcessGroup::ProcessGroup(ProcessGroup&& other) noexcept {
  *this = std::move(other);
}

ProcessGroup& ProcessGroup::operator=(ProcessGroup&& other) noexcept {
  if (this != &other) {
    native_ = std::move(other.native_);
    backend_ = std::move(other.backend_);
    host_ = std::move(other.host_);
    root_store_ = std::move(other.root_store_);
    job_store_ = std::move(other.job_store_);
    options_ = other.options_;
    rank_ = other.rank_;
    size_ = other.size_;
    sequence_ = other.sequence_;
    native_average_ = other.native_average_;
    host_average_ = other.host_average_;
    shut_down_ = other.shut_down_;
    progress_ = std::move(other.progress_);
    diagnose_ = other.diagnose_;
    name_ = std::move(other.name_);
    world_ranks_ = std::move(other.world_ranks_);
    splits_ = other.splits_;
    other.shut_down_ = true;
  }
  return *this;
}

ProcessGroup::~ProcessGroup() {
  // No check-out wait here: a destructor may run while an exception unwinds, and must not block.
  release_backend();
  job_store_.reset();
  root_store_.reset();
}

void ProcessGroup::abandon() {
  // Its backend's threads may be blocked in a collective with a lost peer: release_backend() leaves it.
  if (progress_) progress_->mark_abandoned();
  leave();
}

void ProcessGroup::leave() {
  if (shut_down_) return;
  shut_down_ = true;
  if (progress_) progress_->stop();
  release_backend();
  job_store_.reset();
  root_store_.reset();
}

void ProcessGroup::release_backend() {
  if (progress_ && progress_->abandoned() && native_) {
    // A wait gave up on a collective still in flight: the backend's threads are blocked in it until its
    // own timeout, and destroying the backend would join them. Leave it to the end of the process.
    (void)native_.release();
    (void)backend_.release();
    (void)host_.release();
  }
  progress_.reset();
  native_.reset();
  backend_.reset();
  host_.reset();
}

void ProcessGroup::check_open(const char* op) const {
  TORCH_CHECK(!shut_down_ && native_, "lockstep::comm::ProcessGroup::", op,
              " called on a process group that was shut down or never initialised");
}

std::string ProcessGroup::describe(const char* op, const std::vector<at::Tensor>& tensors) {
  std::ostringstream out;
  if (!name_.empty()) out << name_ << " ";
  out << op << " #" << ++sequence_ << " (";
  for (size_t i = 0; i < tensors.size() && i < 3; ++i) {
    out << (i ? ", " : "") << tensors[i].scalar_type() << "[" << tensors[i].numel() << "]";
  }
  if (tensors.size() > 3) out << ", ... " << tensors.size() << " tensors";
  out << ")";
  return out.str();
}

ProcessGroup::Route ProcessGroup::route(const std::vector<at::Tensor>& tensors) const {
  const bool on_host = tensors.empty() || tensors.front().device().is_cpu();
  if (host_ && on_host) return {host_.get(), host_average_, false};
  return {backend_.get(), native_average_, !on_host && backend() == Backend::kNccl};
}

Work ProcessGroup::tracked(c10::intrusive_ptr<c10d::Work> native, std::string description,
                           std::function<void()> finish, bool on_stream) {
  if (progress_) progress_->issued(sequence_, description);
  // Its wait will not block the host: the progress thread watches it for the timeout instead; not while a
  // CUDA graph captures it (it runs only when the graph is replayed, and its event is the graph's).
  if (on_stream && progress_ && !detail::capturing_cuda_graph())
    progress_->watch(sequence_, description, native, options_.collective_timeout());
  Work work(std::move(native), std::move(description), world_rank(), options_.collective_timeout(),
            std::move(finish));
  work.track(progress_, sequence_, diagnose_);
  if (options_.interrupt()) work.interrupt_with(options_.interrupt());
  if (on_stream) work.wait_on_stream();
  return work;
}

Work ProcessGroup::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_open("all_reduce");
  std::vector<at::Tensor> tensors{tensor};
  const Route to = route(tensors);
  c10d::AllreduceOptions opts;
  opts.reduceOp = op == ReduceOp::kAvg && to.averages ? c10d::ReduceOp(c10d::ReduceOp::AVG) : to_c10d(op);
  opts.timeout = options_.collective_timeout();
  auto description = describe("allreduce", tensors) + " " + name_of(op);
  std::function<void()> finish;
  if (op == ReduceOp::kAvg && size_ > 1 && !to.averages) {
    finish = [tensor, size = size_]() mutable { detail::divide_for_average(tensor, size); };
  }
  return tracked(to.backend->allreduce(tensors, opts), std::move(description), std::move(finish),
                 to.on_stream);
}

Work ProcessGroup::all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) {
  TORCH_CHECK(!tensors.empty(), "all_reduce: no tensors given");
  if (tensors.size() == 1) return all_reduce(tensors[0], op);
  // c10d's list form means one tensor per device; lockstep's is a list of different tensors: one flat
  // buffer, reduced once, copied back when done.
  at::NoGradGuard no_grad;  // a list of parameters is reduced as their data
  std::vector<at::Tensor> flat_parts;
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type() && t.device() == tensors[0].device(),
                "all_reduce of several tensors: all must have one dtype and device, got ", t.scalar_type(),
                " on ", t.device(), " beside ", tensors[0].scalar_type(), " on ", tensors[0].device());
    flat_parts.push_back(t.reshape({-1}));
  }
  at::Tensor flat = at::cat(flat_parts);
  Work work = all_reduce(flat, op);
  return std::move(work).then(
      [tensors, flat]() mutable {
        at::NoGradGuard no_grad;
        int64_t offset = 0;
        for (at::Tensor& t : tensors) {
          t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
          offset += t.numel();
        }
      },
      " of " + std::to_string(tensors.size()) + " tensors flattened");
}

std::vector<int> ProcessGroup::world_ranks() const {
  if (!world_ranks_.empty()) return world_ranks_;
  std::vector<int> ranks(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) ranks[static_cast<size_t>(r)] = r;
  return ranks;
}

bool ProcessGroup::can_reduce(at::ScalarType dtype) const {
  // The CPU tensors of an nccl group go through its host backend, which may be Gloo.
  const bool gloo_inside = backend() == Backend::kGloo || backend() == Backend::kHier ||
                           (host_ && host_->getBackendName() != "shm" && host_->getBackendName() != "mpi");
  return !gloo_inside || detail::gloo_can_reduce(dtype);
}

at::Tensor ProcessGroup::new_comm_buffer(int64_t numel, const at::TensorOptions& options) {
  check_open("new_comm_buffer");
  if (options.device().is_cpu()) {
    NativeBackend* group = backend_.get();
    if (auto* hier = dynamic_cast<ProcessGroupHier*>(group)) group = hier->local().get();
    if (auto* shm = dynamic_cast<ProcessGroupShm*>(group)) {
      return shm->new_shared_tensor(numel, c10::typeMetaToScalarType(options.dtype()));
    }
  }
  return at::zeros({numel}, options);
}

Work ProcessGroup::broadcast(at::Tensor& tensor, int root) {
  check_open("broadcast");
  TORCH_CHECK(root >= 0 && root < size_, "broadcast root must be in [0, ", size_ - 1, "], got ", root);
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.rootTensor = 0;
  opts.timeout = options_.collective_timeout();
  auto description = describe("broadcast", tensors) + " from rank " + std::to_string(root);
  const Route to = route(tensors);
  return tracked(to.backend->broadcast(tensors, opts), std::move(description), {}, to.on_stream);
}

at::Tensor ProcessGroup::all_gather_stacked(const at::Tensor& input) {
  at::Tensor mine = input.contiguous();
  std::vector<at::Tensor> parts;
  for (int r = 0; r < size_; ++r) parts.push_back(at::empty_like(mine));
  all_gather(parts, mine).wait();
  return at::stack(parts);
}

std::vector<std::string> ProcessGroup::all_gather_strings(const std::string& mine) {
  // Lengths first, then the bytes padded to the longest.
  const at::Tensor lengths = all_gather_stacked(at::full({1}, static_cast<int64_t>(mine.size()), at::kLong));
  const int64_t longest = lengths.max().item<int64_t>();
  auto bytes = at::zeros({std::max<int64_t>(longest, 1)}, at::kByte);
  std::memcpy(bytes.data_ptr<uint8_t>(), mine.data(), mine.size());
  const at::Tensor all = all_gather_stacked(bytes).contiguous();
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) {
    out.emplace_back(reinterpret_cast<const char*>(all[r].data_ptr<uint8_t>()),
                     static_cast<size_t>(lengths[r].item<int64_t>()));
  }
  return out;
}

std::string ProcessGroup::broadcast_string(const std::string& text, int root) {
  auto length = at::full({1}, static_cast<int64_t>(rank_ == root ? text.size() : 0), at::kLong);
  broadcast(length, root).wait();
  const int64_t n = length.item<int64_t>();
  auto bytes = at::zeros({std::max<int64_t>(n, 1)}, at::kByte);
  if (rank_ == root) std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  broadcast(bytes, root).wait();
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(n));
}

Work ProcessGroup::empty_gather(std::string description) {
  // Gloo's all-gather divides by the element count (SIGFPE on empty tensors): with nothing to move, a
  // barrier is the same synchronisation (every rank passes an empty input, as sizes must match).
  c10d::BarrierOptions barrier;
  barrier.timeout = options_.collective_timeout();
  return tracked(route({}).backend->barrier(barrier), std::move(description) + " (empty: barrier)");
}

Work ProcessGroup::all_gather(std::vector<at::Tensor>& outputs, at::Tensor& input) {
  check_open("all_gather");
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "all_gather needs one output tensor per rank (",
              size_, "), got ", outputs.size());
  std::vector<std::vector<at::Tensor>> out{outputs};
  std::vector<at::Tensor> in{input};
  const Route to = route(in);
  if (input.numel() == 0) return empty_gather(describe("allgather", in));
  c10d::AllgatherOptions opts;
  opts.timeout = options_.collective_timeout();
  auto description = describe("allgather", in);
  return tracked(to.backend->allgather(out, in, opts), std::move(description), {}, to.on_stream);
}

namespace {

// `flat` as size() contiguous chunks of `n` elements (views).
std::vector<at::Tensor> chunks_of(const at::Tensor& flat, int64_t n, int world) {
  std::vector<at::Tensor> out;
  for (int r = 0; r < world; ++r) out.push_back(flat.narrow(0, r * n, n));
  return out;
}

void check_flat(const at::Tensor& many, const at::Tensor& one, int world, const char* op,
                const char* many_name, const char* one_name) {
  TORCH_CHECK(many.is_contiguous() && one.is_contiguous() && many.dim() == 1 && one.dim() == 1, op, ": ",
              many_name, " and ", one_name, " must be contiguous 1-D tensors");
  TORCH_CHECK(many.numel() == one.numel() * world && many.scalar_type() == one.scalar_type(), op, ": ",
              many_name, " must hold world size (", world, ") x ", one_name, "'s ", one.numel(),
              " elements of its dtype, got ", many.scalar_type(), "[", many.numel(), "] and ",
              one.scalar_type(), "[", one.numel(), "]");
}

// Backends whose flat collectives lockstep uses as they are; Gloo and hier take lists of chunk views.
bool has_flat_collectives(const NativeBackend& backend) {
  const std::string name = backend.getBackendName();
  return name == "shm" || name == "mpi" || name == "nccl";
}

}  // namespace

Work ProcessGroup::all_gather_into(at::Tensor& output, at::Tensor& input) {
  check_open("all_gather_into");
  check_flat(output, input, size_, "all_gather_into", "output", "input");
  std::vector<at::Tensor> in{input};
  const Route to = route(in);
  c10d::AllgatherOptions opts;
  opts.timeout = options_.collective_timeout();
  auto description = describe("allgather_into", in);
  if (input.numel() == 0) return empty_gather(std::move(description));
  if (has_flat_collectives(*to.backend))
    return tracked(to.backend->_allgather_base(output, input, opts), std::move(description), {},
                   to.on_stream);
  std::vector<std::vector<at::Tensor>> out{chunks_of(output, input.numel(), size_)};
  return tracked(to.backend->allgather(out, in, opts), std::move(description), {}, to.on_stream);
}

Work ProcessGroup::reduce_scatter(at::Tensor& output, at::Tensor& input, ReduceOp op) {
  check_open("reduce_scatter");
  check_flat(input, output, size_, "reduce_scatter", "input", "output");
  std::vector<at::Tensor> in{input};
  const Route to = route(in);
  auto description = describe("reduce_scatter", in) + " " + name_of(op);
  // Only the flat collectives average themselves; the others sum, and the average divides afterwards.
  const bool flat = has_flat_collectives(*to.backend);
  const bool native_average = flat && to.averages;
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = op == ReduceOp::kAvg && native_average ? c10d::ReduceOp(c10d::ReduceOp::AVG) : to_c10d(op);
  opts.timeout = options_.collective_timeout();
  const bool average_after = op == ReduceOp::kAvg && size_ > 1 && !native_average;
  std::function<void()> finish;
  if (average_after) finish = [output, size = size_]() mutable { detail::divide_for_average(output, size); };
  if (flat) {
    return tracked(to.backend->_reduce_scatter_base(output, input, opts), std::move(description),
                   std::move(finish), to.on_stream);
  }
  if (TORCH_VERSION_MAJOR >= 2) {  // Gloo, and hier (whose reduce-scatter is its flat Gloo group's)
    std::vector<at::Tensor> out{output};
    std::vector<std::vector<at::Tensor>> ins{chunks_of(input, output.numel(), size_)};
    return tracked(to.backend->reduce_scatter(out, ins, opts), std::move(description), std::move(finish),
                   to.on_stream);
  }
  // LibTorch 1.13's Gloo has none: all-reduce a copy, keep this rank's chunk.
  std::vector<at::Tensor> scratch{input.clone()};
  c10d::AllreduceOptions all;
  all.reduceOp = to_c10d(op);
  all.timeout = options_.collective_timeout();
  auto keep = [output, scratch, rank = rank_, average_after, size = size_]() mutable {
    output.copy_(scratch[0].narrow(0, rank * output.numel(), output.numel()));
    if (average_after) detail::divide_for_average(output, size);
  };
  return tracked(to.backend->allreduce(scratch, all), description + " (as an all-reduce: Gloo 1.x)",
                 std::move(keep));
}

void ProcessGroup::barrier() {
  check_open("barrier");
  c10d::BarrierOptions opts;
  opts.timeout = options_.collective_timeout();
  auto description = describe("barrier", {});
  tracked(route({}).backend->barrier(opts), std::move(description)).wait();  // on the host
}

void ProcessGroup::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (progress_) progress_->stop();
  // The clean end only (not the destructor, which may run while an exception unwinds: NCCL's shutdown
  // waits for the collectives in flight, and a peer that is gone would hold it forever).
  if (backend_ && backend() == Backend::kNccl && !(progress_ && progress_->abandoned())) {
    try {
      detail::shutdown_nccl(*backend_);
    } catch (const std::exception&) {
      // A broken communicator: destroying it (release_backend) is all that is left to do.
    }
  }
  release_backend();
  if (job_store_) {
    // Rank 0 serves the TCPStore: it leaves last, so no rank loses the store mid-operation.
    try {
      if (job_store_->add("checked_out", 1) == size_)
        job_store_->set("all_checked_out", std::vector<uint8_t>{'1'});
      if (rank_ == 0) job_store_->wait({"all_checked_out"}, options_.rendezvous_timeout());
    } catch (const std::exception& e) {
      job_store_.reset();
      root_store_.reset();
      throw CommError(world_rank(), "shutdown",
                      std::string("not every rank checked out of the job's store: ") + e.what());
    }
  }
  job_store_.reset();
  root_store_.reset();
}

namespace {

c10::intrusive_ptr<NativeBackend> make_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                               const ProcessGroupOptions& resolved,
                                               const std::vector<int>& world_ranks = {}) {
  switch (resolved.backend()) {
    case Backend::kGloo:
      return detail::make_gloo(store, resolved);
    case Backend::kShm:
      return detail::make_shm(store, resolved, world_ranks);
    case Backend::kHier:
      return detail::make_hier(store, resolved, world_ranks);
    case Backend::kNccl:
      return detail::make_nccl(store, resolved);
    case Backend::kMpi:
      return detail::make_mpi(store, resolved, world_ranks);
    case Backend::kAuto:
      break;
  }
  TORCH_INTERNAL_ASSERT(false, "resolve_backend returned auto");
}

// Beside nccl, which moves only CUDA tensors: what kAuto picks on the CPU, under its own store prefix.
c10::intrusive_ptr<NativeBackend> make_host_backend(const c10::intrusive_ptr<c10d::Store>& job_store,
                                                    const ProcessGroupOptions& options) {
  auto store = c10::make_intrusive<c10d::PrefixStore>("pg_host", job_store);
  ProcessGroupOptions host = options;
  host.cuda(false).backend(Backend::kAuto);
  host.backend(detail::resolve_backend(store, host));
  return make_backend(store, host);
}

}  // namespace

ProcessGroup ProcessGroup::split(int color, const std::string& name, bool asynchronous) {
  check_open("split");
  // Every rank learns every color and name first, so that a bad one fails on all ranks alike instead of
  // leaving the others waiting in a collective.
  const at::Tensor colors = all_gather_stacked(at::full({1}, color, at::kLong)).reshape({-1});
  const std::vector<std::string> names = all_gather_strings(name);
  std::vector<int> members;  // this group's ranks that share this rank's color
  int sub_rank = -1;
  std::string negative;
  for (int r = 0; r < size_; ++r) {
    const int64_t theirs = colors[r].item<int64_t>();
    if (theirs < 0)
      negative += (negative.empty() ? "" : ", ") + std::to_string(r) + " (" + std::to_string(theirs) + ")";
    if (theirs != color) continue;
    if (r == rank_) sub_rank = static_cast<int>(members.size());
    members.push_back(r);
  }
  if (!negative.empty()) {
    throw std::invalid_argument("ProcessGroup::split: a color must be >= 0, but ranks " + negative +
                                " gave a negative one: give every rank the color of the group it joins");
  }
  for (int r = 0; r < size_; ++r) {
    const std::string& theirs = names[static_cast<size_t>(r)];
    if (theirs.empty()) {
      throw std::invalid_argument("ProcessGroup::split: rank " + std::to_string(r) +
                                  " gave no name: give the subgroup a name (\"tp\", \"dp\"), the same on "
                                  "every rank: errors name its collectives by it");
    }
    if (theirs != names[0]) {
      throw std::invalid_argument("ProcessGroup::split: rank 0 named the subgroup '" + names[0] +
                                  "' but rank " + std::to_string(r) + " '" + theirs +
                                  "': every rank must split alike");
    }
  }
  std::vector<int> world(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    world[i] = world_ranks_.empty() ? members[i] : world_ranks_[static_cast<size_t>(members[i])];
  }
  auto store = c10::make_intrusive<c10d::PrefixStore>(
      "split" + std::to_string(++splits_) + "/" + std::to_string(color), job_store_);
  auto pg_store = c10::make_intrusive<c10d::PrefixStore>("pg", store);
  ProcessGroupOptions sub = detail::subgroup_options(options_, members, sub_rank);
  sub.asynchronous(asynchronous || options_.asynchronous());
  c10::intrusive_ptr<NativeBackend> native = make_backend(pg_store, sub, world);
  c10::intrusive_ptr<NativeBackend> host;
  if (sub.backend() == Backend::kNccl) host = make_host_backend(store, sub);
  TORCH_INTERNAL_ASSERT(progress_, "an open group has progress records");
  return ProcessGroup(detail::as_process_group(native, pg_store, host), root_store_, store, sub, host, name,
                      std::move(world), progress_->activity());
}

ProcessGroup init_process_group(const ProcessGroupOptions& options) {
  RendezvousResult rdzv = rendezvous(options);
  auto pg_store = c10::make_intrusive<c10d::PrefixStore>("pg", rdzv.job_store);
  ProcessGroupOptions resolved = options;
  resolved.backend(detail::resolve_backend(pg_store, options));
  c10::intrusive_ptr<NativeBackend> native = make_backend(pg_store, resolved);
  c10::intrusive_ptr<NativeBackend> host;
  if (resolved.backend() == Backend::kNccl) host = make_host_backend(rdzv.job_store, resolved);
  return ProcessGroup(detail::as_process_group(native, pg_store, host), std::move(rdzv.root_store),
                      std::move(rdzv.job_store), resolved, host);
}

}  // namespace lockstep::comm
