#include "mpi_runtime.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace lockstep::comm::detail {
namespace {

// A std::timed_mutex so that the exit handler can give up on a worker stuck inside a collective.
std::timed_mutex& call_mutex() {
  static std::timed_mutex mutex;
  return mutex;
}

// Guarded by call_mutex(); read at exit.
bool finalized_by_us = false;
std::atomic<int> calls_in_flight{0};
std::atomic<int> live_groups{0};  // ProcessGroupMpi objects alive (mpi_group_opened/closed)
// Whether two groups have lived at once: from then on for the rest of the process, every collective is
// polled. Never back to blocking calls: a blocking call does not match a non-blocking one of a peer on the
// same communicator, and ranks destroy their groups at unrelated times. The switch itself is the same on
// every rank: the second group is made by a collective of the first (split's all-gather), which that
// group's worker runs after every collective issued before it, on every rank.
std::atomic<bool> several_groups{false};

struct HalfOps {
  MPI_Datatype half = MPI_DATATYPE_NULL;
  MPI_Datatype bfloat16 = MPI_DATATYPE_NULL;
  MPI_Op half_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, product, min, max
  MPI_Op bfloat16_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};
HalfOps half_ops;

// MPI has no 16-bit floats: lockstep reduces them as c10 does, through float, one element at a time (each
// result rounded back to 16 bits after every step, as Gloo's and the shm backend's kernels do).
template <typename T, int kOp>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = static_cast<float>(a[i]);
    const float y = static_cast<float>(b[i]);
    float r;
    if constexpr (kOp == 0)
      r = x + y;
    else if constexpr (kOp == 1)
      r = x * y;
    else if constexpr (kOp == 2)
      r = x < y ? x : y;
    else
      r = x > y ? x : y;
    b[i] = static_cast<T>(r);
  }
}

template <typename T>
void create_16bit(MPI_Datatype& type, MPI_Op (&ops)[4]) {
  mpi_check(MPI_Type_contiguous(2, MPI_BYTE, &type), "MPI_Type_contiguous");
  mpi_check(MPI_Type_commit(&type), "MPI_Type_commit");
  mpi_check(MPI_Op_create(&reduce_16bit<T, 0>, /*commute=*/1, &ops[0]), "MPI_Op_create");
  mpi_check(MPI_Op_create(&reduce_16bit<T, 1>, /*commute=*/1, &ops[1]), "MPI_Op_create");
  mpi_check(MPI_Op_create(&reduce_16bit<T, 2>, /*commute=*/1, &ops[2]), "MPI_Op_create");
  mpi_check(MPI_Op_create(&reduce_16bit<T, 3>, /*commute=*/1, &ops[3]), "MPI_Op_create");
}

// At exit, unless a collective is still running: then MPI_Finalize would wait for it (and for the ranks
// that never joined it) forever, so the process leaves without it and mpirun reports that.
void finalize_at_exit() {
  auto& mutex = call_mutex();
  if (calls_in_flight.load() > 0 || !mutex.try_lock_for(std::chrono::seconds(2))) {
    std::fprintf(stderr,
                 "lockstep mpi: a collective is still in flight at exit; leaving without MPI_Finalize "
                 "(mpirun will report this rank as not finalised)\n");
    return;
  }
  std::lock_guard<std::timed_mutex> lock(mutex, std::adopt_lock);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  finalized_by_us = true;
}

void initialize_once() {
  int initialized = 0;
  mpi_check(MPI_Initialized(&initialized), "MPI_Initialized");
  int finalized = 0;
  mpi_check(MPI_Finalized(&finalized), "MPI_Finalized");
  if (finalized) throw std::runtime_error("MPI was finalised already in this process; it cannot start again");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
  } else {
    mpi_check(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    throw std::runtime_error(
        "MPI offers thread level " + std::to_string(provided) +
        ", below MPI_THREAD_SERIALIZED, which lockstep's MPI backend needs (it calls MPI from a worker "
        "thread). If the program calls MPI_Init itself, call MPI_Init_thread with MPI_THREAD_SERIALIZED.");
  }
  create_16bit<c10::Half>(half_ops.half, half_ops.half_ops);
  create_16bit<c10::BFloat16>(half_ops.bfloat16, half_ops.bfloat16_ops);
}

}  // namespace

void mpi_ensure_initialized(std::chrono::milliseconds timeout) {
  static std::once_flag once;
  static std::shared_future<std::string> failure;  // "" once MPI has started
  std::call_once(once, [] {
    auto promise = std::make_shared<std::promise<std::string>>();
    failure = promise->get_future().share();
    std::thread([promise] {
      std::lock_guard<std::timed_mutex> lock(call_mutex());
      try {
        initialize_once();
        promise->set_value("");
      } catch (const std::exception& e) {
        promise->set_value(e.what());
      }
    }).detach();
  });
  if (timeout != std::chrono::milliseconds::max() && failure.wait_for(timeout) != std::future_status::ready) {
    throw std::runtime_error(
        "MPI_Init_thread did not return within " + std::to_string(timeout.count()) +
        " ms: under mpirun it waits for every rank of the job to start MPI, and one has not (it is stuck "
        "before creating its process group, or was not started by this mpirun)");
  }
  if (!failure.get().empty()) throw std::runtime_error(failure.get());
}

MpiCallScope::MpiCallScope(const std::string& what, std::chrono::milliseconds timeout)
    : lock_(call_mutex(), std::defer_lock) {
  if (timeout == std::chrono::milliseconds::max()) {
    lock_.lock();
  } else if (!lock_.try_lock_for(timeout)) {
    throw std::runtime_error(what + ": MPI stayed busy for " + std::to_string(timeout.count()) +
                             " ms: a collective of another MPI group holds it (a peer of that group has "
                             "exited or is stuck, and MPI cannot cancel the collective)");
  }
  if (finalized_by_us) {
    throw std::runtime_error(what + ": MPI was already finalised (the process is exiting)");
  }
  ++calls_in_flight;
}

MpiCallScope::~MpiCallScope() {
  --calls_in_flight;
}

void mpi_group_opened() {
  if (++live_groups >= 2) several_groups = true;
}
void mpi_group_closed() {
  --live_groups;
}

void mpi_call_and_wait(const char* what, const std::function<int(MPI_Request*)>& call) {
  if (!several_groups.load()) {
    MpiCallScope scope(what);
    mpi_check(call(nullptr), what);
    return;
  }
  struct InFlight {  // from the start to the completion, not only while MPI is held
    InFlight() { ++calls_in_flight; }
    ~InFlight() { --calls_in_flight; }
  } in_flight;
  MPI_Request request = MPI_REQUEST_NULL;
  {
    MpiCallScope scope(what);
    mpi_check(call(&request), what);
  }
  for (int polls = 0;; ++polls) {
    int done = 0;
    {
      MpiCallScope scope(what);
      mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    }
    if (done) return;
    // Spin briefly (a small collective completes within microseconds), then poll every 20 us.
    if (polls < 256) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

int mpi_launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return std::atoi(value);
  }
  const char* pmix_rank = std::getenv("PMIX_RANK");
  return pmix_rank != nullptr && *pmix_rank != '\0' ? 0 : -1;
}

void mpi_check(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    throw std::runtime_error(what + " failed with MPI error code " + std::to_string(code));
  }
  throw std::runtime_error(what + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

MPI_Datatype mpi_reduce_datatype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kByte:
      return MPI_UINT8_T;
    case at::kChar:
      return MPI_INT8_T;
    case at::kHalf:
      return half_ops.half;
    case at::kBFloat16:
      return half_ops.bfloat16;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_reduce_op(c10d::ReduceOp::RedOpType op, at::ScalarType type) {
  int index = -1;
  MPI_Op native = MPI_OP_NULL;
  switch (op) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::AVG:
      index = 0;
      native = MPI_SUM;
      break;
    case c10d::ReduceOp::PRODUCT:
      index = 1;
      native = MPI_PROD;
      break;
    case c10d::ReduceOp::MIN:
      index = 2;
      native = MPI_MIN;
      break;
    case c10d::ReduceOp::MAX:
      index = 3;
      native = MPI_MAX;
      break;
    default:
      throw std::invalid_argument(
          "the mpi backend supports the reduce ops sum, avg, product, min and max, got " +
          std::to_string(static_cast<int>(op)));
  }
  if (type == at::kHalf) return half_ops.half_ops[index];
  if (type == at::kBFloat16) return half_ops.bfloat16_ops[index];
  return native;
}

}  // namespace lockstep::comm::detail
