#pragma once

// What the multi-process collective checkers share (comm_ops_worker.cpp: shm against Gloo;
// gloo_ops_worker.cpp: Gloo on this LibTorch, dumped for the comparison with another): the ops and dtypes,
// inputs that are deterministic functions of (rank, index) so that every rank can compute every rank's input
// and the exact result, and the report of failed checks (op, dtype, size, rank, first bad index and both
// values).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "lockstep/comm/process_group.h"

namespace lockstep::test {

using comm::ReduceOp;

inline constexpr int kMaxReportedFailures = 40;

struct OpCase {
  const char* name;
  ReduceOp op;
  c10d::ReduceOp::RedOpType native;
};

inline constexpr OpCase kAllReduceOps[] = {{"sum", ReduceOp::kSum, c10d::ReduceOp::SUM},
                                           {"avg", ReduceOp::kAvg, c10d::ReduceOp::SUM},
                                           {"min", ReduceOp::kMin, c10d::ReduceOp::MIN},
                                           {"max", ReduceOp::kMax, c10d::ReduceOp::MAX},
                                           {"product", ReduceOp::kProduct, c10d::ReduceOp::PRODUCT}};
inline constexpr OpCase kReduceScatterOps[] = {{"sum", ReduceOp::kSum, c10d::ReduceOp::SUM},
                                               {"min", ReduceOp::kMin, c10d::ReduceOp::MIN},
                                               {"max", ReduceOp::kMax, c10d::ReduceOp::MAX}};

inline constexpr at::ScalarType kTypes[] = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf,
                                            at::kInt,   at::kLong,   at::kChar,     at::kByte};

inline std::string type_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    default:
      return c10::toString(type);
  }
}

// Machine epsilon (distance from 1 to the next value); 0 for integers, which must match exactly.
inline double epsilon(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return std::ldexp(1.0, -23);
    case at::kDouble:
      return std::ldexp(1.0, -52);
    case at::kBFloat16:
      return std::ldexp(1.0, -7);
    case at::kHalf:
      return std::ldexp(1.0, -10);
    default:
      return 0.0;
  }
}

// --- inputs: deterministic functions of (rank, index), computable by every rank for every rank ---------
// Each repeats with period kPeriod in the index (a prime, larger than every chunk of 4096-byte slots and
// dividing none of the chunk sizes, so a chunk written at a wrong offset cannot look right): the *_period
// functions give one period, repeat_to() the input of n elements. Expected results are computed on one
// period and repeated too (cheap at millions of elements); every element of every result is compared.

inline constexpr int64_t kPeriod = 10007;

inline at::Tensor repeat_to(const at::Tensor& period, int64_t n) {
  const int64_t p = period.numel();
  return period.repeat({(n + p - 1) / p}).narrow(0, 0, n).contiguous();
}

// A pseudo-random non-negative integer per (index in the period, key), as int64.
inline at::Tensor hashed(int64_t key) {
  auto h = (at::arange(kPeriod, at::kLong) * int64_t{2654435761} + key * 40503 + 12345) % 2000003;
  return (h * h + key * 977) % 1000003;
}

// Integers in [-5, 5] ([0, 10] for uint8), different for every rank (and salt): sums over 8 ranks stay
// within [-40, 80], exact in every dtype.
inline at::Tensor small_ints_period(int rank, at::ScalarType type, int salt = 0) {
  auto v = hashed(rank * 16 + salt) % 11 - 5;
  if (type == at::kByte) v = v + 5;
  return v.to(type);
}

inline at::Tensor small_ints(int rank, int64_t n, at::ScalarType type, int salt = 0) {
  return repeat_to(small_ints_period(rank, type, salt), n);
}

// Factors +-1, or +-2 where (index + rank) % 4 == 0 (so at most 2 of 8 ranks): |product| <= 4. uint8: 1 or 2.
inline at::Tensor product_factors_period(int rank, at::ScalarType type) {
  auto magnitude = ((at::arange(kPeriod, at::kLong) + rank) % 4 == 0).to(at::kLong) + 1;
  auto sign = type == at::kByte ? at::ones({kPeriod}, at::kLong) : 1 - 2 * (hashed(rank * 16 + 3) % 2);
  return (magnitude * sign).to(type);
}

// Non-integers in about [-1, 1], rounded to the dtype: sums round, and differently in different orders.
inline at::Tensor spread_floats_period(int rank, at::ScalarType type) {
  return ((hashed(rank * 16 + 5) % 2001 - 1000).to(at::kDouble) / 997.0).to(type);
}

// The element-wise reduction, in float64, of `inputs` (one per rank).
inline at::Tensor reduce_all(const std::vector<at::Tensor>& inputs, c10d::ReduceOp::RedOpType op) {
  std::vector<at::Tensor> as_double;
  for (const auto& t : inputs) as_double.push_back(t.to(at::kDouble));
  auto stacked = at::stack(as_double);
  switch (op) {
    case c10d::ReduceOp::SUM:
      return stacked.sum(0);
    case c10d::ReduceOp::MIN:
      return std::get<0>(stacked.min(0));
    case c10d::ReduceOp::MAX:
      return std::get<0>(stacked.max(0));
    case c10d::ReduceOp::PRODUCT:
      return stacked.prod(0);
    default:
      throw std::logic_error("comm_ops_worker: unexpected reduce op");
  }
}

// What ProcessGroup::all_reduce(kAvg) promises: the sum divided by the world size in the tensor's dtype
// (floats exactly, integers truncated).
inline at::Tensor average_of(const at::Tensor& sum, int world) {
  return at::isFloatingType(sum.scalar_type()) ? sum.div(world) : sum.div(world, /*rounding_mode=*/"trunc");
}

// --- reporting ----------------------------------------------------------------------------------------

class Report {
 public:
  Report(int rank, int world) : rank_(rank), world_(world) {}

  // got must equal want element by element (and in dtype and shape).
  void exact(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
    ++checks_;
    trace(what);
    if (!same_layout(what, got, want)) return;
    compare(what, got, want, got.reshape({-1}).ne(want.reshape({-1})));
  }

  // |got - want| <= tolerance element by element (want and tolerance: any dtype, shaped like got).
  void close(const std::string& what, const at::Tensor& got, const at::Tensor& want,
             const at::Tensor& tolerance) {
    ++checks_;
    trace(what);
    if (!same_layout(what, got, want.to(got.scalar_type()))) return;
    auto diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().reshape({-1});
    compare(what, got, want, diff.gt(tolerance.reshape({-1})), &tolerance);
  }

  void fail(const std::string& what, const std::string& detail) {
    ++failures_;
    if (failures_ <= kMaxReportedFailures) {
      std::fprintf(stderr, "rank %d/%d FAIL %s: %s\n", rank_, world_, what.c_str(), detail.c_str());
    }
  }

  void count_check() { ++checks_; }
  int checks() const { return checks_; }
  int failures() const { return failures_; }

 private:
  void trace(const std::string& what) const {
    if (!verbose_) return;
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "rank %d/%d %.3f s: %s\n", rank_, world_, t, what.c_str());
  }

  bool same_layout(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
    if (got.scalar_type() != want.scalar_type() || got.sizes() != want.sizes()) {
      std::ostringstream out;
      out << "got " << got.scalar_type() << got.sizes() << ", expected " << want.scalar_type()
          << want.sizes();
      fail(what, out.str());
      return false;
    }
    return true;
  }

  void compare(const std::string& what, const at::Tensor& got, const at::Tensor& want, const at::Tensor& bad,
               const at::Tensor* tolerance = nullptr) {
    const int64_t count = bad.sum().item<int64_t>();
    if (count == 0) return;
    const int64_t index = bad.nonzero().reshape({-1})[0].item<int64_t>();
    std::ostringstream out;
    out.precision(17);
    out << count << " of " << got.numel() << " elements differ, first at index " << index << ": got "
        << got.reshape({-1})[index].item<double>() << ", expected "
        << want.reshape({-1})[index].item<double>();
    if (tolerance != nullptr) out << " (tolerance " << tolerance->reshape({-1})[index].item<double>() << ")";
    fail(what, out.str());
  }

  int rank_;
  int world_;
  bool verbose_ = std::getenv("COMM_OPS_WORKER_VERBOSE") != nullptr;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int checks_ = 0;
  int failures_ = 0;
};

// world x eps(type) x sum_r |x_r[i]|: bounds the difference between two summation orders of the ranks'
// values (periods: one period of each rank's input; the result is repeated to n elements).
inline at::Tensor sum_tolerance(at::ScalarType type, const std::vector<at::Tensor>& periods, int64_t n,
                                int world) {
  std::vector<at::Tensor> magnitudes;
  for (const auto& t : periods) magnitudes.push_back(t.to(at::kDouble).abs());
  return repeat_to(at::stack(magnitudes).sum(0) * (world * epsilon(type)), n);
}

// Gathers every rank's `got` (as raw bytes, over `group`) and requires them to be identical to this rank's.
inline void same_bits_everywhere(comm::ProcessGroup& group, Report& report, const std::string& what,
                                 const at::Tensor& got) {
  if (got.numel() == 0) return;
  auto bits = got.contiguous().view(at::kByte);  // (1.13's Gloo has no int16 for 2-byte types)
  std::vector<at::Tensor> outputs;
  for (int r = 0; r < group.size(); ++r) outputs.push_back(at::empty_like(bits));
  group.all_gather(outputs, bits).wait();
  for (int r = 0; r < group.size(); ++r) {
    report.exact(what + ": bits of rank " + std::to_string(r) + " vs this rank's", outputs[r], bits);
  }
}

// No rank may leave `barrier` (group's barrier, however timed) before every rank entered it: each rank marks
// its arrival in the group's store just before the barrier (one rank late, a different one each round), and
// after it every mark must be there.
inline void check_barrier(comm::ProcessGroup& group, Report& report, const std::function<void()>& barrier) {
  const auto& store = group.store();
  const int rank = group.rank();
  const int world = group.size();
  for (int round = 0; round < std::min(world, 3); ++round) {
    const int late = (round * 5 + world - 1) % world;
    if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string prefix = "ops_check_barrier/" + std::to_string(round) + "/";
    store->set(prefix + std::to_string(rank), std::vector<uint8_t>{'1'});
    barrier();
    report.count_check();
    for (int r = 0; r < world; ++r) {
      if (!store->check({prefix + std::to_string(r)})) {
        report.fail("barrier round " + std::to_string(round), "passed the barrier before rank " +
                                                                  std::to_string(r) + " arrived (late rank " +
                                                                  std::to_string(late) + ")");
      }
    }
  }
}

}  // namespace lockstep::test
