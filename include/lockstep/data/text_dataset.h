#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/data/batch.h"
#include "lockstep/data/dataset.h"

namespace lockstep::data {

/// The text files at `path`: `path` itself when it is a file; for a directory, its regular files whose
/// names have no extension, sorted by name (the layout of Debian's `fortunes` package, whose `.dat`
/// indexes and `.u8` links are skipped). Throws DataError naming the path and the fix when there is none.
std::vector<std::string> text_files(const std::string& path);

/// The bytes of text_files(path), concatenated in that order: a CPU uint8 tensor [N]. Throws DataError
/// (naming the file) when one cannot be read.
at::Tensor read_text(const std::string& path);

/// Byte-level language-modelling windows over a text: window w is bytes [w·seq, w·seq + seq + 1), so every
/// byte after the first is predicted exactly once, up to the last whole window (the (N − 1) mod seq bytes
/// after it are dropped: bytes() says which are kept). A batch is data::Batch with `data` the input ids and
/// `target` the next byte of each position, both int64 [B, seq] (token id = byte value, vocabulary 256).
/// Map-style, so the DistributedSampler shards and shuffles its windows as it does images.
///
/// Example:
///   TextWindows windows(read_text("/usr/share/games/fortunes"), /*seq=*/64, "fortunes");
///   Batch b = windows.get_batch({0, 1}, {});  // b.data [2, 64]; b.target[i][t] == b.data[i][t + 1]
class TextWindows : public Dataset<Batch> {
 public:
  /// Throws std::invalid_argument naming the value unless `bytes` is a CPU uint8 tensor [N] with
  /// N >= seq + 1 and seq >= 1.
  TextWindows(at::Tensor bytes, int64_t seq, std::string description);

  int64_t size() const override { return windows_.size(0); }
  Batch get_batch(c10::ArrayRef<int64_t> indices, const BatchKey& key) const override;
  std::string description() const override { return description_; }
  int64_t seq() const { return windows_.size(1) - 1; }
  /// The bytes the windows cover: [0, size()·seq + 1) of the text given.
  at::Tensor bytes() const;

 private:
  at::Tensor bytes_;
  at::Tensor windows_;  // a view of bytes_, [size, seq + 1]
  std::string description_;
};

/// A text split in two: the first (1 - val_fraction) of its windows train, the rest validate. The two
/// share one byte at the boundary (the last training target is the first validation input), no window.
struct TextSplits {
  std::shared_ptr<const TextWindows> train;
  std::shared_ptr<const TextWindows> val;
};
/// Throws std::invalid_argument, naming the sizes and the fix, when either split would have no window.
TextSplits split_text(const at::Tensor& bytes, int64_t seq, double val_fraction, const std::string& name);

/// Perplexity per byte of `val` (uint8 [M]) when each byte is predicted from its frequency in `train`
/// (uint8 [N], add-one smoothed): the trivial baseline a language model must beat.
double unigram_perplexity(const at::Tensor& train, const at::Tensor& val);

}  // namespace lockstep::data
