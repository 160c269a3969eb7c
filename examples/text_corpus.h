#pragma once

// A text corpus of files read as one byte string, and the trivial baseline a language model must beat: the
// examples' language models (char_lm.cpp, tp_gpt.cpp) train on the `fortunes` package's text with them.

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/data/text_dataset.h"

namespace examples {

/// The corpus: the package's text files (lockstep::data::text_files: the ones without an extension, sorted),
/// read as one byte string, a piece at a time (the examples stream it; `lockstep fit` reads it whole).
class Corpus {
 public:
  /// Throws lockstep::data::DataError naming `dir` and the fix when it holds no text file.
  explicit Corpus(const std::string& dir) {
    for (const std::string& path : lockstep::data::text_files(dir))
      files_.push_back({path, static_cast<int64_t>(std::filesystem::file_size(path))});
    for (const File& f : files_) size_ += f.size;
  }
  int64_t size() const { return size_; }

  /// Reads bytes [offset, offset + count) of the concatenated files into `out`.
  void read(int64_t offset, int64_t count, uint8_t* out) const {
    int64_t start = 0;
    for (const File& f : files_) {
      if (count == 0) return;
      if (offset < start + f.size) {
        const int64_t in_file = offset - start;
        const int64_t take = std::min(count, f.size - in_file);
        std::ifstream in(f.path, std::ios::binary);
        in.seekg(in_file);
        if (!in.read(reinterpret_cast<char*>(out), take)) throw std::runtime_error("cannot read " + f.path);
        out += take;
        offset += take;
        count -= take;
      }
      start += f.size;
    }
    if (count != 0) throw std::out_of_range("read past the end of the corpus");
  }

 private:
  struct File {
    std::string path;
    int64_t size;
  };
  std::vector<File> files_;
  int64_t size_ = 0;
};

/// Perplexity per byte of the corpus's bytes [val_begin, val_begin + val_bytes) when each byte is predicted
/// from its frequency in bytes [0, train_bytes): lockstep::data::unigram_perplexity, the trivial baseline.
inline double unigram_perplexity(const Corpus& corpus, int64_t train_bytes, int64_t val_begin,
                                 int64_t val_bytes) {
  at::Tensor train = at::empty({train_bytes}, at::kByte);
  at::Tensor val = at::empty({val_bytes}, at::kByte);
  corpus.read(0, train_bytes, train.data_ptr<uint8_t>());
  corpus.read(val_begin, val_bytes, val.data_ptr<uint8_t>());
  return lockstep::data::unigram_perplexity(train, val);
}

}  // namespace examples
