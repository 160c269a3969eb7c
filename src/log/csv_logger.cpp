#include "lockstep/log/csv_logger.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "files.h"
#include "lockstep/detail/atomic_file.h"
#include "lockstep/detail/join.h"
#include "lockstep/log/hparams_yaml.h"

namespace lockstep::log {
namespace {

// A cell as Python's csv module writes it (QUOTE_MINIMAL): quoted, with quotes doubled, only when it holds
// a comma, a quote or a line break.
std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (const char c : text) out += (c == '"') ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

CsvLogger::CsvLogger(std::string dir)
    : dir_(std::move(dir)), path_((std::filesystem::path(dir_) / "metrics.csv").string()) {
  detail::create_log_dir(dir_);
}

void CsvLogger::log_hyperparams(const Hparams& hparams) {
  write_hparams_yaml(dir_, hparams);
}

void CsvLogger::log_metrics(const Metrics& metrics, std::int64_t step) {
  Row row;
  for (const auto& [key, value] : metrics) row[key] = detail::shortest_text(value);
  row["step"] = std::to_string(step);  // the call's step wins over a metric named "step" (logger.h)
  const bool widened = widen_header(row);
  rows_.push_back(std::move(row));
  if (widened) {
    rewrite_file();
  } else {
    append_row(rows_.back());
  }
}

void CsvLogger::flush() {
  if (!out_.is_open()) return;
  out_.flush();
  if (!out_) detail::throw_io_error("writing", path_);
}

bool CsvLogger::widen_header(const Row& row) {
  bool widened = false;
  for (const auto& entry : row) {
    if (!std::binary_search(keys_.begin(), keys_.end(), entry.first)) {
      keys_.insert(std::upper_bound(keys_.begin(), keys_.end(), entry.first), entry.first);
      widened = true;
    }
  }
  return widened;
}

void CsvLogger::rewrite_file() {
  out_.close();
  std::string text = lockstep::detail::join(keys_, ",", csv_cell) + "\n";
  for (const Row& row : rows_) text += row_text(row);
  lockstep::detail::write_file_atomically(path_, text);
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) detail::throw_io_error("opening", path_);
}

void CsvLogger::append_row(const Row& row) {
  out_ << row_text(row);
  flush();
}

std::string CsvLogger::row_text(const Row& row) const {
  std::string text;
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (i) text += ",";
    const auto cell = row.find(keys_[i]);
    if (cell != row.end()) text += csv_cell(cell->second);
  }
  return text + "\n";
}

}  // namespace lockstep::log
