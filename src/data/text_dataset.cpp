#include "lockstep/data/text_dataset.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "file_bytes.h"
#include "lockstep/data/data_error.h"

namespace lockstep::data {
namespace {

const char* const kFix =
    ": install Debian's text corpus with `apt-get install fortunes`, or name another text file (or a "
    "directory of them)";

}  // namespace

std::vector<std::string> text_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_regular_file(path, error)) return {path};
  std::vector<std::string> files;
  if (fs::is_directory(path, error)) {
    for (const auto& entry : fs::directory_iterator(path, error)) {
      const fs::path& p = entry.path();
      // Dotfiles (.gitignore) have no extension either; they are not text of the corpus.
      if (entry.is_regular_file(error) && !entry.is_symlink(error) && !p.has_extension() &&
          p.filename().string().rfind('.', 0) != 0)
        files.push_back(p.string());
    }
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) {
    throw DataError(
        "text: " +
        std::string(fs::exists(path, error)
                        ? "no text file (a regular file, not a link, named without an extension) in '"
                        : "no such file or directory '") +
        path + "'" + kFix);
  }
  return files;
}

at::Tensor read_text(const std::string& path) {
  std::vector<at::Tensor> parts;
  for (const std::string& file : text_files(path))
    parts.push_back(detail::read_file_bytes(file, "text: file"));
  return parts.size() == 1 ? parts.front() : at::cat(parts);
}

TextWindows::TextWindows(at::Tensor bytes, int64_t seq, std::string description)
    : bytes_(std::move(bytes)), description_(std::move(description)) {
  if (!bytes_.defined() || bytes_.dim() != 1 || bytes_.scalar_type() != at::kByte ||
      !bytes_.device().is_cpu()) {
    std::ostringstream got;
    if (bytes_.defined()) {
      got << bytes_.scalar_type() << " " << bytes_.sizes() << " on " << bytes_.device();
    } else {
      got << "an undefined tensor";
    }
    throw std::invalid_argument("TextWindows: bytes must be a CPU uint8 tensor [N], got " + got.str());
  }
  if (seq < 1) throw std::invalid_argument("TextWindows: seq must be >= 1, got " + std::to_string(seq));
  if (bytes_.size(0) < seq + 1) {
    throw std::invalid_argument("TextWindows: '" + description_ + "' has " + std::to_string(bytes_.size(0)) +
                                " bytes, fewer than one window of seq + 1 = " + std::to_string(seq + 1) +
                                ": use a longer text or a shorter context");
  }
  bytes_ = bytes_.contiguous();
  windows_ = bytes_.unfold(0, seq + 1, seq);
}

Batch TextWindows::get_batch(c10::ArrayRef<int64_t> indices, const BatchKey& /*key*/) const {
  const at::Tensor rows = windows_.index_select(0, at::tensor(indices, at::kLong)).to(at::kLong);
  const int64_t seq = this->seq();
  return {rows.narrow(1, 0, seq).contiguous(), rows.narrow(1, 1, seq).contiguous()};
}

at::Tensor TextWindows::bytes() const {
  return bytes_.narrow(0, 0, size() * seq() + 1);
}

TextSplits split_text(const at::Tensor& bytes, int64_t seq, double val_fraction, const std::string& name) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0)) {
    throw std::invalid_argument("split_text: val_fraction must be in (0, 1), got " +
                                std::to_string(val_fraction));
  }
  if (seq < 1) throw std::invalid_argument("split_text: seq must be >= 1, got " + std::to_string(seq));
  const int64_t windows = std::max<int64_t>(0, (bytes.numel() - 1) / seq);
  const auto train = static_cast<int64_t>(std::floor(static_cast<double>(windows) * (1.0 - val_fraction)));
  if (train < 1 || windows - train < 1) {
    throw std::invalid_argument(
        "text '" + name + "' has " + std::to_string(bytes.numel()) + " bytes: " + std::to_string(windows) +
        " window(s) of " + std::to_string(seq) +
        " + 1 bytes, too few for a training and a validation split (it needs at least " +
        std::to_string(2 * seq + 1) + " bytes): use a longer text");
  }
  TextSplits out;
  out.train = std::make_shared<TextWindows>(bytes.narrow(0, 0, train * seq + 1), seq, name + " (train)");
  out.val = std::make_shared<TextWindows>(bytes.narrow(0, train * seq, bytes.numel() - train * seq), seq,
                                          name + " (val)");
  return out;
}

double unigram_perplexity(const at::Tensor& train, const at::Tensor& val) {
  const at::Tensor counts = at::bincount(train.to(at::kLong), {}, 256).to(at::kDouble) + 1.0;
  const at::Tensor log_p = (counts / counts.sum()).log();
  const double nll = -log_p.index_select(0, val.to(at::kLong)).mean().item<double>();
  return std::exp(nll);
}

}  // namespace lockstep::data
