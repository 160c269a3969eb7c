#pragma once

// A text corpus of files read as one byte string, and the trivial baseline a language model must beat: the
// examples' language models (char_lm.cpp, tp_gpt.cpp) train on the `fortunes` package's text with them.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace examples {

/// The corpus: the package's text files (the ones without an extension), sorted, read as one byte string.
class Corpus {
 public:
  explicit Corpus(const std::string& dir) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && !entry.is_symlink() && name.find('.') == std::string::npos)
        files_.push_back({entry.path().string(), static_cast<int64_t>(entry.file_size())});
    }
    if (error || files_.empty()) {
      throw std::runtime_error("no text files in '" + dir +
                               "': install the corpus with `apt-get install fortunes`" +
                               " or name another directory with --data-dir");
    }
    std::sort(files_.begin(), files_.end(), [](const File& a, const File& b) { return a.path < b.path; });
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
/// from its frequency in bytes [0, train_bytes) (add-one smoothing): the trivial baseline.
inline double unigram_perplexity(const Corpus& corpus, int64_t train_bytes, int64_t val_begin,
                                 int64_t val_bytes) {
  std::vector<double> counts(256, 1.0);
  std::vector<uint8_t> bytes(static_cast<size_t>(train_bytes));
  corpus.read(0, train_bytes, bytes.data());
  for (uint8_t b : bytes) counts[b] += 1.0;
  double total = 0;
  for (double c : counts) total += c;
  std::vector<uint8_t> val(static_cast<size_t>(val_bytes));
  corpus.read(val_begin, val_bytes, val.data());
  double nll = 0;
  for (uint8_t b : val) nll -= std::log(counts[b] / total);
  return std::exp(nll / static_cast<double>(val.size()));
}

}  // namespace examples
