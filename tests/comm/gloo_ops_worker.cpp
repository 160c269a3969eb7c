// Gloo on this LibTorch, proven with real processes. LibTorch 2.x ships no gloo headers, so lockstep compiles
// c10d's ProcessGroupGloo.hpp against Debian's libgloo-dev (a 2022 snapshot), not against the gloo commit
// linked inside libtorch: anything that depends on gloo's class layouts can only go wrong at run time. This
// is that run.
//
//   gloo_ops_worker --dump DIR     one rank of a job started by `lockstep run` (tests/e2e: e2e_gloo_ops_*):
//                                  every collective lockstep sends over Gloo, in every dtype it sends,
//                                  through lockstep::comm::ProcessGroup with Backend::kGloo; each result is
//                                  checked against the exact expectation computed from every rank's input,
//                                  and written to DIR/rank<R>.bin. Prints "rank R/W gloo_ops ok (...)" and
//                                  exits 0 only if every check passed; else one line per failed check,
//                                  exit 1.
//   gloo_ops_worker --compare A B  the dumps of one rank from two builds (tests/e2e/gloo_ops.sh: A from the
//                                  reference build, e.g. Debian's LibTorch 1.13, B from this one, e.g. PyPI's
//                                  2.x, same world size): every result both produced must have the same
//                                  bytes, and B must produce every result A does. Results only B produces
//                                  (1.13's Gloo reduces no bfloat16 and has no reduce_scatter) are listed.
//                                  Exit 0 when nothing differs.
//
// What runs, for float32, float64, bfloat16, float16, int32, int64, int8, uint8 at n = 1, 1001, 65543:
//   all_reduce sum, avg, min, max, product of small integers (exact in every dtype: every result must equal
//   the expectation bit for bit; avg: the sum divided in the dtype, integers truncated); for float dtypes
//   also sum, min and max of non-integers, the sum held to world x eps x sum_r |x_r| of a float64 reference
//   and required to have the same bits on every rank. Where Gloo refuses a dtype, ProcessGroup::can_reduce
//   must have said so (and must say yes wherever Gloo reduces);
//   broadcast from every root; all_gather; the c10d front (native()): allreduce, _allgather_base and
//   reduce_scatter (sum), each recorded as unsupported where this Gloo lacks it.
// Once: all_gather_stacked, all_gather of empty tensors (a barrier), all_gather_strings and broadcast_string
// (empty, UTF-8 and NUL-carrying texts of different lengths), barrier ordering.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/version.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"
#include "ops_check.h"

namespace {

using lockstep::comm::ProcessGroup;
using lockstep::comm::ReduceOp;
using namespace lockstep::test;  // ops_check.h

constexpr int64_t kSizes[] = {1, 1001, 65543};
// The reductions of non-integer inputs (sum rounds; min and max must be exact).
constexpr OpCase kFloatOps[] = {kAllReduceOps[0], kAllReduceOps[2], kAllReduceOps[3]};
constexpr const char* kDumpMagic = "lockstep gloo_ops dump v1";

// --- the dump: one record per result -------------------------------------------------------------------

struct Record {
  std::string name;
  bool supported = true;
  std::string bytes;
};

class Dump {
 public:
  void add(const std::string& name, const at::Tensor& result) {
    const at::Tensor flat = result.contiguous();
    const auto* data = static_cast<const char*>(flat.data_ptr());
    records_.push_back({name, true, std::string(data, data + flat.numel() * flat.element_size())});
  }
  void unsupported(const std::string& name) { records_.push_back({name, false, {}}); }

  void write(const std::string& path, int rank, int world) const {
    std::ofstream out(path, std::ios::binary);
    out << kDumpMagic << "\ttorch " << TORCH_VERSION << "\trank " << rank << "\tworld " << world << "\n";
    for (const auto& r : records_) {
      out << r.name << "\t" << (r.supported ? "ok" : "unsupported") << "\t" << r.bytes.size() << "\n"
          << r.bytes;
    }
    if (!out) throw std::runtime_error("cannot write " + path);
  }

 private:
  std::vector<Record> records_;
};

// --- the checks -----------------------------------------------------------------------------------------

class GlooChecker {
 public:
  explicit GlooChecker(ProcessGroup& group)
      : group_(group), rank_(group.rank()), world_(group.size()), report_(rank_, world_) {}

  Report& report() { return report_; }
  const Dump& dump() const { return dump_; }
  const std::set<std::string>& unsupported() const { return unsupported_; }

  // Every reduction of `type`, or a record of why there is none (checked against can_reduce).
  void all_reduce(at::ScalarType type, int64_t n) {
    const std::string suffix = " " + type_name(type) + " n=" + std::to_string(n);
    if (!reduces(type)) {
      for (const auto& op : kAllReduceOps) dump_.unsupported("all_reduce " + std::string(op.name) + suffix);
      if (!at::isFloatingType(type)) return;
      for (const auto& op : kFloatOps) {
        dump_.unsupported("all_reduce " + std::string(op.name) + " of non-integers" + suffix);
      }
      return;
    }
    for (const auto& op : kAllReduceOps) {
      const bool product = op.op == ReduceOp::kProduct;
      auto period_of = [&](int r) {
        return product ? product_factors_period(r, type) : small_ints_period(r, type);
      };
      auto got = repeat_to(period_of(rank_), n);
      group_.all_reduce(got, op.op).wait();
      std::vector<at::Tensor> all;
      for (int r = 0; r < world_; ++r) all.push_back(period_of(r));
      auto want = reduce_all(all, op.native).to(type);
      if (op.op == ReduceOp::kAvg) want = average_of(want, world_);
      const std::string what = "all_reduce " + std::string(op.name) + suffix;
      report_.exact(what, got, repeat_to(want, n));
      dump_.add(what, got);
    }
    if (!at::isFloatingType(type)) return;
    std::vector<at::Tensor> all;
    for (int r = 0; r < world_; ++r) all.push_back(spread_floats_period(r, type));
    for (const auto& op : kFloatOps) {
      const std::string what = "all_reduce " + std::string(op.name) + " of non-integers" + suffix;
      auto got = repeat_to(spread_floats_period(rank_, type), n);
      group_.all_reduce(got, op.op).wait();
      const auto exact = repeat_to(reduce_all(all, op.native), n);
      if (op.op == ReduceOp::kSum) {
        report_.close(what + " vs float64 reference", got, exact, sum_tolerance(type, all, n, world_));
      } else {
        report_.exact(what, got, exact.to(type));
      }
      same_bits_everywhere(group_, report_, what, got);
      dump_.add(what, got);
    }
  }

  void broadcast(at::ScalarType type, int64_t n) {
    for (int root = 0; root < world_; ++root) {
      const std::string what =
          "broadcast from " + std::to_string(root) + " " + type_name(type) + " n=" + std::to_string(n);
      attempt("broadcast " + type_name(type), what, [&] {
        // Non-roots start from other values, so that a broadcast that moves nothing fails.
        auto got = rank_ == root ? small_ints(root, n, type) : small_ints(rank_, n, type, /*salt=*/1);
        group_.broadcast(got, root).wait();
        report_.exact(what, got, small_ints(root, n, type));
        return got;
      });
    }
  }

  void all_gather(at::ScalarType type, int64_t n) {
    const std::string what = "all_gather " + type_name(type) + " n=" + std::to_string(n);
    attempt("all_gather " + type_name(type), what, [&] {
      std::vector<at::Tensor> want;
      for (int r = 0; r < world_; ++r) want.push_back(small_ints(r, n, type));
      auto input = small_ints(rank_, n, type);
      std::vector<at::Tensor> outputs;
      for (int r = 0; r < world_; ++r) outputs.push_back(at::full({n}, 99, at::TensorOptions(type)));
      group_.all_gather(outputs, input).wait();
      report_.exact(what, at::cat(outputs), at::cat(want));
      return at::cat(outputs);
    });
  }

  // Through the c10d front that lockstep hands out as native() (in 2.x: the dispatcher, then the backend).
  void native(at::ScalarType type, int64_t n) {
    const std::string suffix = " " + type_name(type) + " n=" + std::to_string(n);
    std::vector<at::Tensor> inputs;
    for (int r = 0; r < world_; ++r) inputs.push_back(small_ints_period(r, type));
    const auto sum = repeat_to(reduce_all(inputs, c10d::ReduceOp::SUM).to(type), n);
    if (reduces(type)) {
      std::vector<at::Tensor> ts{small_ints(rank_, n, type)};
      group_.native()->allreduce(ts)->wait();
      report_.exact("native allreduce sum" + suffix, ts[0], sum);
      dump_.add("native allreduce sum" + suffix, ts[0]);
    } else {
      dump_.unsupported("native allreduce sum" + suffix);
    }
    attempt("native _allgather_base", "native _allgather_base" + suffix, [&] {
      auto input = small_ints(rank_, n, type);
      auto output = at::full({world_ * n}, 99, at::TensorOptions(type));
      group_.native()->_allgather_base(output, input)->wait();
      std::vector<at::Tensor> want;
      for (int r = 0; r < world_; ++r) want.push_back(small_ints(r, n, type));
      report_.exact("native _allgather_base" + suffix, output, at::cat(want));
      return output;
    });
    if (!reduces(type)) {
      dump_.unsupported("native reduce_scatter sum" + suffix);
      return;
    }
    attempt("native reduce_scatter", "native reduce_scatter sum" + suffix, [&] {
      // Rank q's piece for rank j: small_ints(q * world + j, n).
      std::vector<std::vector<at::Tensor>> pieces(1);
      for (int j = 0; j < world_; ++j) pieces[0].push_back(small_ints(rank_ * world_ + j, n, type));
      std::vector<at::Tensor> outputs{at::full({n}, 99, at::TensorOptions(type))};
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = c10d::ReduceOp::SUM;
      group_.native()->reduce_scatter(outputs, pieces, opts)->wait();
      std::vector<at::Tensor> mine;
      for (int q = 0; q < world_; ++q) mine.push_back(small_ints_period(q * world_ + rank_, type));
      report_.exact("native reduce_scatter sum" + suffix, outputs[0],
                    repeat_to(reduce_all(mine, c10d::ReduceOp::SUM).to(type), n));
      return outputs[0];
    });
  }

  void once() {
    report_.count_check();
    if (group_.native()->getBackendName() != "gloo") {
      report_.fail("native()->getBackendName()",
                   "got '" + group_.native()->getBackendName() + "', expected 'gloo'");
    }
    const auto mine = small_ints(rank_, 1001, at::kFloat);
    auto stacked = group_.all_gather_stacked(mine);
    std::vector<at::Tensor> want;
    for (int r = 0; r < world_; ++r) want.push_back(small_ints(r, 1001, at::kFloat));
    report_.exact("all_gather_stacked float32 n=1001", stacked, at::stack(want));
    dump_.add("all_gather_stacked float32 n=1001", stacked);

    auto empty = at::empty({0}, at::kFloat);
    std::vector<at::Tensor> empties(world_, at::empty({0}, at::kFloat));
    group_.all_gather(empties, empty).wait();  // ProcessGroup turns it into a barrier (Gloo divides by numel)
    report_.count_check();

    auto text_of = [](int r) {
      std::string text =
          r == 0 ? std::string() : "rank " + std::to_string(r) + " \xE2\x9C\x93 " + std::string(r * 7, 'x');
      if (r % 2 == 1) text += std::string("\0tail", 5);
      return text;
    };
    const auto texts = group_.all_gather_strings(text_of(rank_));
    std::string joined;
    for (int r = 0; r < world_; ++r) {
      report_.count_check();
      if (r >= static_cast<int>(texts.size()) || texts[static_cast<size_t>(r)] != text_of(r)) {
        report_.fail("all_gather_strings", "rank " + std::to_string(r) + "'s text differs");
      }
      joined += std::to_string(r) + ":" +
                (r < static_cast<int>(texts.size()) ? texts[static_cast<size_t>(r)] : "") + "|";
    }
    for (int root = 0; root < world_; ++root) {
      const std::string got =
          group_.broadcast_string(rank_ == root ? text_of(root) : "not " + text_of(rank_), root);
      report_.count_check();
      if (got != text_of(root))
        report_.fail("broadcast_string from " + std::to_string(root), "got '" + got + "'");
      joined += got + "|";
    }
    dump_.add("strings",
              at::from_blob(joined.data(), {static_cast<int64_t>(joined.size())}, at::kByte).clone());
    check_barrier(group_, report_, [&] { group_.barrier(); });
  }

 private:
  // Whether Gloo reduces `type` here (tried once per dtype, with a sum of one element), checked against
  // ProcessGroup::can_reduce. Gloo refuses on every rank alike before sending anything: the group stays
  // usable.
  bool reduces(at::ScalarType type) {
    auto known = reduces_.find(type);
    if (known != reduces_.end()) return known->second;
    bool ok = true;
    std::string refusal;
    try {
      auto t = at::ones({1}, at::TensorOptions(type));
      group_.all_reduce(t).wait();
    } catch (const std::exception& e) {
      ok = false;
      refusal = e.what();
      unsupported_.insert("all_reduce " + type_name(type));
    }
    report_.count_check();
    if (ok != group_.can_reduce(type)) {
      report_.fail(
          "can_reduce(" + type_name(type) + ")",
          std::string("says ") + (ok ? "no, but Gloo reduced it" : "yes, but Gloo refused: " + refusal));
    }
    return reduces_[type] = ok;
  }

  // Runs `run`, which returns a result to record, or throws where this Gloo lacks the call or the dtype
  // (on every rank alike, before anything is sent: the group stays usable). `label` names the gap.
  template <typename F>
  void attempt(const std::string& label, const std::string& what, F&& run) {
    try {
      dump_.add(what, run());
    } catch (const std::exception& e) {
      const std::string message = e.what();
      if (message.find("does not support") == std::string::npos &&
          message.find("no support") == std::string::npos &&
          message.find("Invalid scalar type") == std::string::npos &&
          message.find("Unsupported") == std::string::npos) {
        throw;
      }
      unsupported_.insert(label);
      dump_.unsupported(what);
    }
  }

  ProcessGroup& group_;
  int rank_;
  int world_;
  Report report_;
  Dump dump_;
  std::map<at::ScalarType, bool> reduces_;
  std::set<std::string> unsupported_;
};

int run_dump(const std::string& dir) {
  namespace comm = lockstep::comm;
  auto group = comm::init_process_group(
      comm::ProcessGroupOptions::from_environment(lockstep::env::from_env()).backend(comm::Backend::kGloo));
  GlooChecker checker(group);
  for (const auto type : kTypes) {
    for (const int64_t n : kSizes) {
      checker.all_reduce(type, n);
      checker.broadcast(type, n);
      checker.all_gather(type, n);
      checker.native(type, n);
    }
  }
  checker.once();
  const int rank = group.rank();
  const int world = group.size();
  group.shutdown();
  checker.dump().write(dir + "/rank" + std::to_string(rank) + ".bin", rank, world);

  const Report& report = checker.report();
  if (report.failures() > 0) {
    std::fprintf(stderr, "rank %d/%d gloo_ops FAILED: %d of %d checks (torch %s)\n", rank, world,
                 report.failures(), report.checks(), TORCH_VERSION);
    return 1;
  }
  // What this LibTorch's Gloo is known to lack; anything else refused is a failure (a refusal must not pass
  // as a gap: 2.x's c10d::Backend refuses whatever a backend does not override).
  const std::set<std::string> known_gaps =
      TORCH_VERSION_MAJOR >= 2
          ? std::set<std::string>{}
          : std::set<std::string>{"all_gather bfloat16", "all_reduce bfloat16", "broadcast bfloat16",
                                  "native _allgather_base", "native reduce_scatter"};
  if (checker.unsupported() != known_gaps) {
    std::string got, want;
    for (const auto& s : checker.unsupported()) got += (got.empty() ? "" : ", ") + s;
    for (const auto& s : known_gaps) want += (want.empty() ? "" : ", ") + s;
    std::fprintf(
        stderr, "rank %d/%d gloo_ops FAILED: this Gloo refused [%s], expected to lack only [%s] (torch %s)\n",
        rank, world, got.c_str(), want.c_str(), TORCH_VERSION);
    return 1;
  }
  std::string notes;
  for (const auto& s : checker.unsupported()) notes += (notes.empty() ? "" : ", ") + s;
  std::printf("rank %d/%d gloo_ops ok (torch %s, %d checks; this Gloo lacks: %s)\n", rank, world,
              TORCH_VERSION, report.checks(), notes.empty() ? "nothing" : notes.c_str());
  return 0;
}

// --- comparing two dumps --------------------------------------------------------------------------------

struct DumpFile {
  std::string header;
  std::vector<Record> records;
};

DumpFile read_dump(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  DumpFile file;
  std::getline(in, file.header);
  if (file.header.rfind(kDumpMagic, 0) != 0) throw std::runtime_error(path + " is not a gloo_ops dump");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Record r;
    std::string status;
    size_t size = 0;
    if (!std::getline(fields, r.name, '\t') || !std::getline(fields, status, '\t') || !(fields >> size)) {
      throw std::runtime_error(path + ": malformed record line '" + line + "'");
    }
    r.supported = status == "ok";
    r.bytes.resize(size);
    if (!in.read(r.bytes.data(), static_cast<std::streamsize>(size)))
      throw std::runtime_error(path + ": truncated");
    file.records.push_back(std::move(r));
  }
  return file;
}

int run_compare(const std::string& path_a, const std::string& path_b) {
  const DumpFile a = read_dump(path_a);
  const DumpFile b = read_dump(path_b);
  std::map<std::string, const Record*> in_b;
  for (const auto& r : b.records) in_b[r.name] = &r;
  int identical = 0;
  int differ = 0;
  std::vector<std::string> only_a, only_b;
  for (const auto& ra : a.records) {
    auto it = in_b.find(ra.name);
    if (it == in_b.end()) {
      std::fprintf(stderr, "FAIL %s: missing from %s\n", ra.name.c_str(), path_b.c_str());
      ++differ;
      continue;
    }
    const Record& rb = *it->second;
    in_b.erase(it);
    if (!ra.supported || !rb.supported) {
      if (ra.supported) only_a.push_back(ra.name);
      if (rb.supported) only_b.push_back(rb.name);
      continue;
    }
    if (ra.bytes == rb.bytes) {
      ++identical;
      continue;
    }
    size_t at = 0;
    while (at < ra.bytes.size() && at < rb.bytes.size() && ra.bytes[at] == rb.bytes[at]) ++at;
    std::fprintf(stderr, "FAIL %s: %zu vs %zu bytes, first difference at byte %zu\n", ra.name.c_str(),
                 ra.bytes.size(), rb.bytes.size(), at);
    ++differ;
  }
  for (const auto& [name, r] : in_b) {
    std::fprintf(stderr, "FAIL %s: missing from %s\n", name.c_str(), path_a.c_str());
    ++differ;
  }
  std::printf("A: %s\nB: %s\n%d results identical, %d differ; only in A: %zu, only in B: %zu\n",
              a.header.c_str(), b.header.c_str(), identical, differ, only_a.size(), only_b.size());
  for (const auto& name : only_a) std::printf("  only in A: %s\n", name.c_str());
  for (const auto& name : only_b) std::printf("  only in B: %s\n", name.c_str());
  // B (this build) must give every result A (the reference) gives.
  for (const auto& name : only_a)
    std::fprintf(stderr, "FAIL %s: only the reference produced it\n", name.c_str());
  return differ == 0 && only_a.empty() && identical > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::strcmp(argv[1], "--dump") == 0) return run_dump(argv[2]);
    if (argc == 4 && std::strcmp(argv[1], "--compare") == 0) return run_compare(argv[2], argv[3]);
    std::fprintf(stderr, "usage: gloo_ops_worker --dump DIR | --compare DUMP_A DUMP_B\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_ops_worker: %s\n", e.what());
    return 1;
  }
}
