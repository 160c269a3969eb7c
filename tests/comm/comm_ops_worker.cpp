// A rank of a real multi-process job (started by `lockstep run`, see tests/e2e) that checks every
// collective of the group's backend (auto: shm for ranks on one host) for every op and dtype at the sizes
// where chunking changes, against results it computes itself from every rank's input, and against a
// second, Gloo group of the same processes. Exits 0 and prints "rank R/W all_ops ok (...)" only if every
// check passed; otherwise prints one line per failed check (op, dtype, size, rank, first bad index and
// both values) and exits 1.
//
// What is checked, for dtypes float32, float64, bfloat16, float16, int32, int64, int8, uint8 and sizes
// n = 0, 1, 1001, one slot (slot_bytes / element size), one slot + 1, and two whole buffers + 7
// (2 x world x slot_bytes / element size + 7: several chunks through both buffers for every collective):
//   all_reduce (lockstep::comm::ProcessGroup) with sum, avg, min, max, product, on ordinary tensors and
//   on slices of a ProcessGroup::new_comm_buffer (shared memory with shm: the copy-free path);
//   broadcast (ProcessGroup) from every root at n = 1001 and the largest n, from ranks 0 and world - 1
//   at the other sizes;
//   all_gather (ProcessGroup) and the native c10d _allgather_base (and the native allgather at n = 0,
//   which ProcessGroup::all_gather turns into a barrier);
//   reduce_scatter and _reduce_scatter_base (native c10d) with sum, min, max;
// plus sums, min and max of non-integer inputs (float dtypes, n = 1001 and the largest size), whose
// results must also have the same bits on every rank; and barrier (no rank passes it before all came).
//
// Inputs are small integers that depend on the rank and the index (sums, averages' sums and products stay
// exact in every dtype), so the expected results are exact: every result must equal them bit for bit
// (averages: the exact sum divided in the dtype, integers truncated, as ProcessGroup documents).
// At the largest n (only there: with 8 ranks on 2 cores a Gloo collective costs ~25 ms) the Gloo group
// runs the same calls on the same inputs: integers, min and max must match exactly; float sums within
// world x eps(dtype) x sum_r |x_r[i]| (absolute, per element; eps = 2^-23, 2^-52, 2^-7, 2^-10), a bound
// on the difference of two summation orders (Gloo sums in the dtype in its ring order, rounding every
// partial sum; shm sums in rank order, bfloat16 and float16 accumulated in float32 and rounded once). The
// non-integer sums are held to the same bound against a float64 reference. Where this LibTorch's Gloo
// rejects a dtype (1.13: bfloat16) or lacks an op (1.13: reduce_scatter), the Gloo side runs on a float32
// copy, or as an all-reduce sliced to this rank's piece; the ok line lists such substitutions.
//
// Environment:
//   COMM_WORKER_BACKEND=auto|shm|hier       backend of the group under test (default auto). (gloo is the
//                                           baseline; as the group under test LibTorch 1.13's Gloo dies of
//                                           SIGFPE on the native calls at n = 0 and rejects bfloat16.)
//   LOCKSTEP_SHM_SLOT_BYTES                 the shm slot size (also read here to choose the sizes)
//   COMM_OPS_WORKER_VERBOSE=1               print every check as it is made (with the time since start)
//   COMM_OPS_WORKER_DTYPES=float32,int8     only these dtypes (default: all)
//   COMM_OPS_WORKER_MAX_BYTES=B             skip sizes above B bytes per rank (default: none skipped)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"
#include "ops_check.h"

namespace {

using lockstep::comm::ProcessGroup;
using lockstep::comm::ReduceOp;
using namespace lockstep::test;  // ops_check.h

std::size_t slot_bytes_from_env() {
  const char* raw = std::getenv("LOCKSTEP_SHM_SLOT_BYTES");
  return raw != nullptr && *raw != '\0' ? std::strtoull(raw, nullptr, 10) : std::size_t{4} << 20;
}

// --- the checks ----------------------------------------------------------------------------------------

class Checker {
 public:
  Checker(ProcessGroup& group, ProcessGroup& gloo, std::size_t slot_bytes)
      : group_(group),
        gloo_(gloo),
        rank_(group.rank()),
        world_(group.size()),
        slot_bytes_(slot_bytes),
        report_(rank_, world_) {}

  Report& report() { return report_; }
  // Collectives run on the group under test and seconds spent in them (waits included).
  int collectives() const { return shm_.count; }
  double collective_seconds() const { return shm_.seconds; }
  int gloo_collectives() const { return gloo_time_.count; }
  double gloo_seconds() const { return gloo_time_.seconds; }
  const std::set<std::string>& substitutions() const { return substitutions_; }
  // A buffer from ProcessGroup::new_comm_buffer (shared memory with shm) that all_reduce also reduces
  // slices of: the copy-free path DDP's buckets take. Made once per dtype (it is a collective).
  void use_comm_buffer(at::Tensor buffer) { comm_buffer_ = std::move(buffer); }

  // n = 0, 1, 1001, one slot, one slot + 1, two whole buffers + 7; without those above max_bytes per rank.
  std::vector<int64_t> sizes_for(at::ScalarType type, int64_t max_bytes) const {
    const int64_t slot = static_cast<int64_t>(slot_bytes_) / static_cast<int64_t>(c10::elementSize(type));
    std::vector<int64_t> sizes{0, 1, 1001, slot, slot + 1, int64_t{2} * world_ * slot + 7};
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    const auto elem = static_cast<int64_t>(c10::elementSize(type));
    sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](int64_t n) { return n * elem > max_bytes; }),
                sizes.end());
    return sizes;
  }

  void all_reduce(at::ScalarType type, int64_t n, const OpCase& op, bool with_gloo) {
    const bool product = op.op == ReduceOp::kProduct;
    auto period_of = [&](int rank) {
      return product ? product_factors_period(rank, type) : small_ints_period(rank, type);
    };
    const std::string what = "all_reduce " + std::string(op.name) + " " + type_name(type) +
                             " n=" + std::to_string(n) + " " + slot_text();
    auto got = repeat_to(period_of(rank_), n);
    timed(shm_, [&] { group_.all_reduce(got, op.op).wait(); });

    std::vector<at::Tensor> all;
    for (int r = 0; r < world_; ++r) all.push_back(period_of(r));
    auto want = reduce_all(all, op.native).to(type);
    if (op.op == ReduceOp::kAvg) want = average_of(want, world_);
    report_.exact(what + " vs expected", got, repeat_to(want, n));
    if (comm_buffer_.defined() && comm_buffer_.scalar_type() == type && n + 3 <= comm_buffer_.numel()) {
      // At byte offset 3 elements in, as DDP's per-parameter slices sit inside a bucket.
      auto shared = comm_buffer_.narrow(0, 3, n);
      shared.copy_(repeat_to(period_of(rank_), n));
      timed(shm_, [&] { group_.all_reduce(shared, op.op).wait(); });
      report_.exact(what + " in a comm buffer vs expected", shared, repeat_to(want, n));
    }
    if (!with_gloo) return;

    auto baseline = on_gloo(type, what, [&](at::ScalarType compute) {
      auto t = repeat_to(period_of(rank_), n).to(compute);
      timed(gloo_time_, [&] { gloo_.all_reduce(t, op.op).wait(); });
      return t;
    });
    compare_with_gloo(what, got, baseline, all, op.native);
  }

  // From every root when `every_root`, else from ranks 0 and world - 1.
  void broadcast(at::ScalarType type, int64_t n, bool every_root, bool with_gloo) {
    for (int root = 0; root < world_; ++root) {
      if (!every_root && root != 0 && root != world_ - 1) continue;
      const std::string what = "broadcast from root " + std::to_string(root) + " " + type_name(type) +
                               " n=" + std::to_string(n) + " " + slot_text();
      // Non-roots start from other values, so that a broadcast that moves nothing fails.
      auto start = [&](at::ScalarType compute) {
        return (rank_ == root ? small_ints(root, n, type) : small_ints(rank_, n, type, /*salt=*/1))
            .to(compute);
      };
      auto got = start(type);
      timed(shm_, [&] { group_.broadcast(got, root).wait(); });
      report_.exact(what + " vs expected", got, small_ints(root, n, type));
      if (!with_gloo) continue;
      auto baseline = on_gloo(type, what, [&](at::ScalarType compute) {
        auto t = start(compute);
        timed(gloo_time_, [&] { gloo_.broadcast(t, root).wait(); });
        return t;
      });
      report_.exact(what + " vs gloo", got, baseline);
    }
  }

  void all_gather(at::ScalarType type, int64_t n, bool with_gloo) {
    const std::string suffix = " " + type_name(type) + " n=" + std::to_string(n) + " " + slot_text();
    std::vector<at::Tensor> want;
    for (int r = 0; r < world_; ++r) want.push_back(small_ints(r, n, type));
    const auto want_flat = at::cat(want);
    auto sentinel = [&](at::ScalarType compute) { return at::full({n}, 99, at::TensorOptions(compute)); };

    auto input = small_ints(rank_, n, type);  // through lockstep::comm::ProcessGroup::all_gather
    std::vector<at::Tensor> outputs;
    for (int r = 0; r < world_; ++r) outputs.push_back(sentinel(type));
    timed(shm_, [&] { group_.all_gather(outputs, input).wait(); });
    const auto gathered = at::cat(outputs);
    report_.exact("all_gather" + suffix + " vs expected", gathered, want_flat);
    if (with_gloo) {
      auto baseline = on_gloo(type, "all_gather" + suffix, [&](at::ScalarType compute) {
        auto in = small_ints(rank_, n, type).to(compute);
        std::vector<at::Tensor> outs;
        for (int r = 0; r < world_; ++r) outs.push_back(sentinel(compute));
        timed(gloo_time_, [&] { gloo_.all_gather(outs, in).wait(); });
        return at::cat(outs);
      });
      report_.exact("all_gather" + suffix + " vs gloo", gathered, baseline);
    }
    if (n == 0) {  // native allgather: ProcessGroup::all_gather turns an empty one into a barrier
      // (at other sizes ProcessGroup::all_gather above is this call)
      std::vector<at::Tensor> inputs{small_ints(rank_, n, type)};
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int r = 0; r < world_; ++r) outputs[0].push_back(sentinel(type));
      timed(shm_, [&] { group_.native()->allgather(outputs, inputs)->wait(); });
      report_.exact("native allgather" + suffix + " vs expected", at::cat(outputs[0]), want_flat);
    }
    {  // native _allgather_base
      auto input = small_ints(rank_, n, type);
      auto output = at::full({world_ * n}, 99, at::TensorOptions(type));
      timed(shm_, [&] { group_.native()->_allgather_base(output, input)->wait(); });
      report_.exact("native _allgather_base" + suffix + " vs expected", output, want_flat);
    }
  }

  void reduce_scatter(at::ScalarType type, int64_t n, const OpCase& op, bool with_gloo) {
    const std::string suffix =
        " " + std::string(op.name) + " " + type_name(type) + " n=" + std::to_string(n) + " " + slot_text();
    // Rank q's piece for rank j: small_ints(q * world + j, n) (every (q, j) a different pattern).
    auto pieces_of = [&](int q, at::ScalarType compute) {
      std::vector<at::Tensor> pieces;
      for (int j = 0; j < world_; ++j) pieces.push_back(small_ints(q * world_ + j, n, type).to(compute));
      return pieces;
    };
    std::vector<at::Tensor> mine;  // every rank's piece for this rank (one period)
    for (int q = 0; q < world_; ++q) mine.push_back(small_ints_period(q * world_ + rank_, type));
    const auto want = repeat_to(reduce_all(mine, op.native).to(type), n);
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = op.native;

    std::vector<at::Tensor> outputs{at::full({n}, 99, at::TensorOptions(type))};
    std::vector<std::vector<at::Tensor>> inputs{pieces_of(rank_, type)};
    timed(shm_, [&] { group_.native()->reduce_scatter(outputs, inputs, opts)->wait(); });
    report_.exact("native reduce_scatter" + suffix + " vs expected", outputs[0], want);

    auto output = at::full({n}, 99, at::TensorOptions(type));
    auto flat = at::cat(pieces_of(rank_, type));
    timed(shm_, [&] { group_.native()->_reduce_scatter_base(output, flat, opts)->wait(); });
    report_.exact("native _reduce_scatter_base" + suffix + " vs expected", output, want);
    if (!with_gloo) return;

    auto baseline = on_gloo(type, "reduce_scatter" + suffix, [&](at::ScalarType compute) {
      if (!gloo_lacks_reduce_scatter_) {
        try {
          std::vector<at::Tensor> outs{at::full({n}, 99, at::TensorOptions(compute))};
          std::vector<std::vector<at::Tensor>> ins{pieces_of(rank_, compute)};
          timed(gloo_time_, [&] { gloo_.native()->reduce_scatter(outs, ins, opts)->wait(); });
          return outs[0];
        } catch (const c10::Error& e) {
          // Thrown on every rank alike before anything is sent: the group stays usable.
          if (std::string(e.what()).find("does not support") == std::string::npos) throw;
          gloo_lacks_reduce_scatter_ = true;
        }
      }
      substitutions_.insert("reduce_scatter as all_reduce");
      auto all = at::cat(pieces_of(rank_, compute));
      std::vector<at::Tensor> ts{all};
      c10d::AllreduceOptions ar;
      ar.reduceOp = op.native;
      timed(gloo_time_, [&] { gloo_.native()->allreduce(ts, ar)->wait(); });
      return all.narrow(0, rank_ * n, n).clone();
    });
    compare_with_gloo("reduce_scatter" + suffix, outputs[0], baseline, mine, op.native);
  }

  // Non-integer inputs: the reduction rounds, differently in different summation orders.
  void rounding_sums(at::ScalarType type, int64_t n) {
    for (const auto& op : {kAllReduceOps[0], kAllReduceOps[2], kAllReduceOps[3]}) {
      const std::string what = "all_reduce " + std::string(op.name) + " of non-integers " + type_name(type) +
                               " n=" + std::to_string(n) + " " + slot_text();
      auto got = repeat_to(spread_floats_period(rank_, type), n);
      timed(shm_, [&] { group_.all_reduce(got, op.op).wait(); });
      std::vector<at::Tensor> all;
      for (int r = 0; r < world_; ++r) all.push_back(spread_floats_period(r, type));
      const auto exact = repeat_to(reduce_all(all, op.native), n);
      if (op.op == ReduceOp::kSum) {
        report_.close(what + " vs float64 reference", got, exact, sum_tolerance(type, all, n));
      } else {
        report_.exact(what + " vs expected", got, exact.to(type));
      }
      auto baseline = on_gloo(type, what, [&](at::ScalarType compute) {
        auto t = repeat_to(spread_floats_period(rank_, type), n).to(compute);
        timed(gloo_time_, [&] { gloo_.all_reduce(t, op.op).wait(); });
        return t;
      });
      compare_with_gloo(what, got, baseline, all, op.native);
      same_bits_everywhere(what, got);
    }
  }

  void barrier() {
    check_barrier(group_, report_, [&] { timed(shm_, [&] { group_.barrier(); }); });
  }

 private:
  struct Timer {
    int count = 0;
    double seconds = 0;
  };
  template <class F>
  static void timed(Timer& timer, F&& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    timer.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++timer.count;
  }

  std::string slot_text() const { return "(slot " + std::to_string(slot_bytes_) + " B)"; }

  // Runs `run` on the Gloo group in `type`; if this Gloo rejects the dtype, on float32 (cast back).
  at::Tensor on_gloo(at::ScalarType type, const std::string& what,
                     const std::function<at::Tensor(at::ScalarType)>& run) {
    if (gloo_rejects_.count(type) == 0) {
      try {
        return run(type);
      } catch (const std::exception& e) {
        // Gloo rejects the dtype on every rank alike, before anything is sent: the group stays usable.
        const std::string message = e.what();
        if (message.find("Invalid scalar type") == std::string::npos &&
            message.find("Unsupported") == std::string::npos) {
          throw std::runtime_error("gloo baseline of " + what + ": " + message);
        }
        gloo_rejects_.insert(type);
      }
    }
    substitutions_.insert("gloo on float32 for " + type_name(type));
    return run(at::kFloat).to(type);
  }

  at::Tensor sum_tolerance(at::ScalarType type, const std::vector<at::Tensor>& periods, int64_t n) const {
    return lockstep::test::sum_tolerance(type, periods, n, world_);
  }

  // Integers, min and max exactly; float sums and products within the bound of a different order.
  void compare_with_gloo(const std::string& what, const at::Tensor& got, const at::Tensor& baseline,
                         const std::vector<at::Tensor>& periods, c10d::ReduceOp::RedOpType op) {
    const auto type = got.scalar_type();
    const bool rounds =
        at::isFloatingType(type) && (op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::PRODUCT);
    if (!rounds) {
      report_.exact(what + " vs gloo", got, baseline);
    } else if (op == c10d::ReduceOp::SUM) {
      report_.close(what + " vs gloo", got, baseline, sum_tolerance(type, periods, got.numel()));
    } else {
      const auto product = reduce_all(periods, c10d::ReduceOp::PRODUCT).abs() * (world_ * epsilon(type));
      report_.close(what + " vs gloo", got, baseline, repeat_to(product, got.numel()));
    }
  }

  void same_bits_everywhere(const std::string& what, const at::Tensor& got) {
    lockstep::test::same_bits_everywhere(gloo_, report_, what, got);
  }

  ProcessGroup& group_;
  ProcessGroup& gloo_;
  int rank_;
  int world_;
  std::size_t slot_bytes_;
  Report report_;
  std::set<at::ScalarType> gloo_rejects_;
  bool gloo_lacks_reduce_scatter_ = false;
  Timer shm_;
  Timer gloo_time_;
  std::set<std::string> substitutions_;
  at::Tensor comm_buffer_;
};

int run() {
  namespace comm = lockstep::comm;
  const auto environment = lockstep::env::from_env();
  const char* backend = std::getenv("COMM_WORKER_BACKEND");
  auto group = comm::init_process_group(comm::ProcessGroupOptions::from_environment(environment)
                                            .backend(comm::parse_backend(backend ? backend : "auto")));
  // The Gloo baseline: a second group of the same processes, rendezvoused through the first one's store.
  std::optional<ProcessGroup> gloo_group;
  if (group.backend() != comm::Backend::kGloo) {
    gloo_group = comm::init_process_group(
        comm::ProcessGroupOptions::from_environment(environment)
            .backend(comm::Backend::kGloo)
            .store(c10::make_intrusive<c10d::PrefixStore>("all_ops_gloo", group.store())));
  }
  ProcessGroup& gloo = gloo_group ? *gloo_group : group;
  const char* max_raw = std::getenv("COMM_OPS_WORKER_MAX_BYTES");
  const int64_t max_bytes = max_raw != nullptr && *max_raw != '\0' ? std::atoll(max_raw) : INT64_MAX;

  const auto start = std::chrono::steady_clock::now();
  Checker checker(group, gloo, slot_bytes_from_env());
  const char* only = std::getenv("COMM_OPS_WORKER_DTYPES");
  for (const auto type : kTypes) {
    if (only != nullptr && *only != '\0' &&
        ("," + std::string(only) + ",").find("," + type_name(type) + ",") == std::string::npos) {
      continue;
    }
    const auto sizes = checker.sizes_for(type, max_bytes);
    checker.use_comm_buffer(group.new_comm_buffer(sizes.back() + 3, type));
    for (const int64_t n : sizes) {
      // Every size is checked against the expectation; broadcast goes from every root at n = 1001 and the
      // largest n (else from ranks 0 and world - 1), and Gloo runs the same calls at the largest n only:
      // with 8 ranks on 2 cores each collective costs ~10 ms (Gloo's ~25 ms), and the full product would
      // take a minute.
      const bool largest = n == sizes.back();
      for (const auto& op : kAllReduceOps) checker.all_reduce(type, n, op, /*with_gloo=*/largest);
      checker.broadcast(type, n, /*every_root=*/largest || n == 1001, /*with_gloo=*/largest);
      checker.all_gather(type, n, /*with_gloo=*/largest);
      for (const auto& op : kReduceScatterOps) checker.reduce_scatter(type, n, op, /*with_gloo=*/largest);
    }
    if (at::isFloatingType(type)) {
      checker.rounding_sums(type, 1001);
      checker.rounding_sums(type, sizes.back());
    }
  }
  checker.barrier();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const int rank = group.rank();
  const int world = group.size();
  const std::string used = comm::to_string(group.backend());
  if (gloo_group) gloo_group->shutdown();
  group.shutdown();

  const Report& report = checker.report();
  if (report.failures() > 0) {
    std::fprintf(stderr, "rank %d/%d all_ops FAILED: %d of %d checks (backend %s)\n", rank, world,
                 report.failures(), report.checks(), used.c_str());
    return 1;
  }
  std::string notes;
  for (const auto& s : checker.substitutions()) notes += (notes.empty() ? "" : "; ") + s;
  std::printf(
      "rank %d/%d all_ops ok (backend %s, slot %zu B, %d checks in %.2f s: %d collectives %.2f s, "
      "%d gloo %.2f s; gloo: %s)\n",
      rank, world, used.c_str(), slot_bytes_from_env(), report.checks(), seconds, checker.collectives(),
      checker.collective_seconds(), checker.gloo_collectives(), checker.gloo_seconds(),
      notes.empty() ? "every op and dtype" : notes.c_str());
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_ops_worker: %s\n", e.what());
    return 1;
  }
}
