#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace lockstep::data {

/// One pass over an IterableDataset: its samples in order.
template <typename S>
class SampleStream {
 public:
  virtual ~SampleStream() = default;
  /// The next sample; std::nullopt once the pass is over.
  virtual std::optional<S> next() = 0;
  /// Skips up to `count` samples and returns how many it skipped (fewer at the end of the pass). The
  /// default reads and drops them; override it where the source can seek (a file of fixed-size records).
  virtual int64_t skip(int64_t count) {
    int64_t skipped = 0;
    while (skipped < count && next()) ++skipped;
    return skipped;
  }
};

/// A dataset without random access (torch.utils.data.IterableDataset): a file read from the start, a
/// generator, a socket. Each rank opens its own stream and keeps the samples at its positions (rank r of
/// R: positions r, r + R, r + 2R, ...), so the R ranks together read the stream's first samples in order:
/// global batch k of R ranks x B/R is the same samples as batch k of one rank x B. Training gives every
/// rank the same number of batches by dropping the stream's last (fewer than R) samples that not every
/// rank can get; validation keeps every sample once. A resumed epoch re-opens the stream and skips what
/// was consumed (skip()), also on another world size.
///
/// open() must give the same samples in the same order on every rank and every time it is called for
/// the same epoch (shuffle inside it from the epoch if you like, with a seed of your own).
///
/// Example (the lines of a text file):
///   struct Lines : IterableDataset<std::string> { ... open() returns a stream reading `path` ... };
///   DataSource<MyBatch>(std::make_shared<Lines>(path), LoaderOptions(32), my_collate);
template <typename S>
class IterableDataset {
 public:
  using SampleType = S;
  virtual ~IterableDataset() = default;
  /// A new pass over the data of `epoch`, from its first sample.
  virtual std::unique_ptr<SampleStream<S>> open(int64_t epoch) const = 0;
  /// The samples a pass yields, when known without reading it: the Trainer then knows each epoch's
  /// batch count (progress, schedules, limit_train_batches as a fraction). std::nullopt: unknown.
  virtual std::optional<int64_t> size() const { return std::nullopt; }
  virtual std::string description() const { return "an iterable dataset"; }
};

}  // namespace lockstep::data
