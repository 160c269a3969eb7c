#include "lockstep/data/loader.h"

#include <ATen/ATen.h>

#include <condition_variable>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "lockstep/data/image_dataset.h"
#include "splitmix.h"

namespace lockstep::data {
namespace detail {

// A built batch (nullptr: a stream's epoch ended before it), or the exception thrown while building it.
struct Slot {
  AnyBatch batch;
  std::exception_ptr error;
};

// Everything the consumer and the workers share; guarded by `mutex` except where noted.
//
// Flow control: a worker may claim batch `next_claim` only while next_claim < next_out + capacity, so at
// most `capacity` batches are being built or waiting in `slots` ahead of the consumer. Claims go in
// increasing order, so the batch next() waits for is always claimed or claimable: no deadlock. Every
// epoch (and every cancel) bumps `generation`; a worker that finishes a batch of an older generation
// drops it.
struct LoaderState {
  std::mutex mutex;
  std::condition_variable work_cv;   // workers: a batch became claimable, or stop
  std::condition_variable ready_cv;  // consumer: a slot was filled
  std::vector<std::thread> threads;  // touched by the consumer thread only
  bool stop = false;
  bool started = false;  // start_epoch() was called at least once
  bool finished = true;  // the current epoch has nothing more to give
  uint64_t generation = 0;
  std::shared_ptr<const std::vector<int64_t>> indices;  // null for a stream epoch
  int64_t epoch = 0;
  int64_t num_batches = 0;
  int64_t next_claim = 0;
  int64_t next_out = 0;
  int64_t capacity = 1;
  std::map<int64_t, Slot> slots;
  std::function<void(int64_t)> build_hook;  // tests only; under `mutex`: each build calls its own copy
};

void LoaderTesting::set_build_hook(LoaderCore& core, std::function<void(int64_t batch)> hook) {
  std::function<void(int64_t)> old;  // dies outside the lock; a worker inside it runs its own copy
  std::lock_guard<std::mutex> lock(core.state_->mutex);
  old = std::exchange(core.state_->build_hook, std::move(hook));
}

namespace {

const LoaderOptions& checked(const LoaderOptions& o) {
  auto fail = [](const char* name, int64_t got, const char* accepted) {
    throw std::invalid_argument(std::string("LoaderOptions: ") + name + " must be " + accepted + ", got " +
                                std::to_string(got));
  };
  if (o.batch_size() < 1) fail("batch_size", o.batch_size(), ">= 1");
  if (o.num_workers() < 0)
    fail("num_workers", o.num_workers(), ">= 0 (0 = build batches in the calling thread)");
  if (o.prefetch_factor() < 1) fail("prefetch_factor", o.prefetch_factor(), ">= 1");
  return o;
}

// The largest batch count: a stream epoch without a limit ends when build() returns nullptr.
constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

}  // namespace

LoaderCore::LoaderCore(LoaderOptions options, BuildBatchFn build, int64_t dataset_size,
                       std::string description)
    : options_(checked(options)),
      build_(std::move(build)),
      dataset_size_(dataset_size),
      description_(std::move(description)),
      state_(std::make_unique<LoaderState>()) {
  state_->capacity = options_.num_workers() * options_.prefetch_factor();
}

LoaderCore::~LoaderCore() {
  stop_workers();
}

int64_t LoaderCore::num_batches() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->num_batches;
}

void LoaderCore::start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t first_batch) {
  const int64_t size = dataset_size_;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= size) {
      throw std::out_of_range("Loader::start_epoch: index " + std::to_string(indices[i]) + " at position " +
                              std::to_string(i) + " is outside [0, " + std::to_string(size) +
                              ") for dataset '" + description_ + "' of size " + std::to_string(size) +
                              " (a sampler built for another dataset size?)");
    }
  }
  const auto count = static_cast<int64_t>(indices.size());
  const int64_t b = options_.batch_size();
  const int64_t batches = options_.drop_last() ? count / b : (count + b - 1) / b;
  if (first_batch < 0 || first_batch > batches) {
    throw std::out_of_range("Loader::start_epoch: first batch " + std::to_string(first_batch) +
                            " is outside [0, " + std::to_string(batches) + "] (the epoch has " +
                            std::to_string(batches) + " batches)");
  }
  begin(std::make_shared<const std::vector<int64_t>>(std::move(indices)), epoch, first_batch, batches);
}

void LoaderCore::start_stream(int64_t epoch, int64_t first_batch, int64_t max_batches) {
  const int64_t batches = max_batches < 0 ? kUnbounded : max_batches;
  if (first_batch < 0 || first_batch > batches) {
    throw std::out_of_range("Loader::start_stream: first batch " + std::to_string(first_batch) +
                            " is outside [0, " + std::to_string(batches) + "]");
  }
  begin(nullptr, epoch, first_batch, batches);
}

void LoaderCore::begin(std::shared_ptr<const std::vector<int64_t>> indices, int64_t epoch,
                       int64_t first_batch, int64_t batches) {
  const bool workers = options_.num_workers() > 0;
  if (workers && !options_.persistent_workers()) stop_workers();  // the cancelled epoch's, if any
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    ++state_->generation;  // in-flight batches of a cancelled epoch are dropped
    state_->slots.clear();
    state_->indices = std::move(indices);
    state_->epoch = epoch;
    state_->num_batches = batches;
    state_->next_claim = first_batch;
    state_->next_out = first_batch;
    state_->finished = first_batch == batches;
    state_->started = true;
  }
  if (workers && state_->threads.empty() && (batches > 0 || options_.persistent_workers())) start_workers();
  state_->work_cv.notify_all();
}

AnyBatch LoaderCore::next() {
  LoaderState& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.started) throw std::logic_error("Loader::next: call start_epoch(indices, epoch) before next()");
  if (s.finished) return nullptr;
  const int64_t k = s.next_out;
  if (options_.num_workers() == 0) {
    const std::shared_ptr<const std::vector<int64_t>> indices = s.indices;
    const int64_t epoch = s.epoch;
    ++s.next_out;
    s.finished = s.next_out == s.num_batches;
    try {
      lock.unlock();
      AnyBatch batch = build(indices.get(), k, epoch);
      if (!batch) finish_epoch();  // a stream that ended
      return batch;
    } catch (...) {
      lock.lock();
      s.finished = true;
      throw;
    }
  }
  s.ready_cv.wait(lock, [&] { return s.slots.count(k) != 0; });
  auto node = s.slots.extract(k);
  ++s.next_out;
  const bool last = s.next_out == s.num_batches;
  lock.unlock();
  s.work_cv.notify_all();  // the window moved: one more batch may be claimed
  if (node.mapped().error || !node.mapped().batch || last) finish_epoch();
  if (node.mapped().error) std::rethrow_exception(node.mapped().error);
  return std::move(node.mapped().batch);
}

void LoaderCore::finish_epoch() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->finished = true;
    ++state_->generation;
    state_->slots.clear();
  }
  if (!options_.persistent_workers()) stop_workers();
}

void LoaderCore::pin_with(PinBatchFn pin) {
  stop_workers();  // they read pin_ without a lock: restarted by the next epoch
  pin_ = std::move(pin);
}

AnyBatch LoaderCore::build(const std::vector<int64_t>* indices, int64_t batch, int64_t epoch) const {
  AnyBatch built = build_unpinned(indices, batch, epoch);
  return built && pin_ ? pin_(built) : built;
}

AnyBatch LoaderCore::build_unpinned(const std::vector<int64_t>* indices, int64_t batch, int64_t epoch) const {
  std::function<void(int64_t)> hook;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    hook = state_->build_hook;
  }
  if (hook) hook(batch);
  // The batch's randomness depends on (seed, epoch, batch) only: the same bytes whichever thread builds it.
  const BatchKey key{
      epoch, batch,
      mix(mix(mix(options_.seed()) ^ static_cast<uint64_t>(epoch)) + static_cast<uint64_t>(batch))};
  if (!indices) return build_({}, key);
  const int64_t b = options_.batch_size();
  const int64_t begin = batch * b;
  const int64_t end = std::min<int64_t>(begin + b, static_cast<int64_t>(indices->size()));
  return build_(c10::ArrayRef<int64_t>(indices->data() + begin, static_cast<size_t>(end - begin)), key);
}

void LoaderCore::start_workers() {
  for (int64_t i = 0; i < options_.num_workers(); ++i)
    state_->threads.emplace_back([this] { worker_loop(); });
}

void LoaderCore::stop_workers() {
  LoaderState& s = *state_;
  if (s.threads.empty()) return;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stop = true;
  }
  s.work_cv.notify_all();
  for (std::thread& t : s.threads) t.join();
  s.threads.clear();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stop = false;
}

void LoaderCore::worker_loop() {
  LoaderState& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.work_cv.wait(lock, [&] {
      return s.stop ||
             (!s.finished && s.next_claim < s.num_batches && s.next_claim < s.next_out + s.capacity);
    });
    if (s.stop) return;
    const int64_t k = s.next_claim++;
    const uint64_t generation = s.generation;
    const std::shared_ptr<const std::vector<int64_t>> indices = s.indices;
    const int64_t epoch = s.epoch;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = build(indices.get(), k, epoch);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    if (generation != s.generation) continue;  // a cancelled epoch's batch
    s.slots.emplace(k, std::move(slot));
    s.ready_cv.notify_one();
  }
}

}  // namespace detail

Loader::Loader(std::shared_ptr<const TensorDataset> dataset, LoaderOptions options)
    : BasicLoader<Batch>(
          std::make_shared<ImageDataset>(std::move(dataset), options.transform(), options.augment()),
          options) {}

}  // namespace lockstep::data
