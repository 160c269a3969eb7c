#include "lockstep/launch/detail/output_forwarder.h"

#include <unistd.h>

#include <cerrno>
#include <string>

namespace lockstep::launch::detail {
namespace {

// Writes all of `bytes` to `fd`; gives up quietly on errors (a full disk must not stop the job).
void write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

std::string rank_prefix(int rank) {
  return "[rank " + std::to_string(rank) + "] ";
}

OutputForwarder::OutputForwarder(std::string prefix, std::ostream* sink, int log_fd, std::size_t tail_lines)
    : prefix_(std::move(prefix)), sink_(sink), log_fd_(log_fd), tail_lines_(tail_lines) {}

OutputForwarder::OutputForwarder(int rank, std::ostream& sink, int log_fd, std::size_t tail_lines)
    : OutputForwarder(rank_prefix(rank), &sink, log_fd, tail_lines) {}

void OutputForwarder::duplicate_to(int fd, const std::vector<std::string>* filters) {
  duplicate_fd_ = fd;
  filters_ = filters;
}

void OutputForwarder::feed(std::string_view bytes) {
  if (log_fd_ >= 0) write_all(log_fd_, bytes);
  splitter_.feed(bytes, [this](std::string_view line) { emit(line); });
}

void OutputForwarder::finish() {
  splitter_.finish([this](std::string_view line) { emit(line); });
}

void OutputForwarder::emit(std::string_view line) {
  buffer_.assign(prefix_);
  buffer_.append(line);
  buffer_.push_back('\n');
  if (sink_ != nullptr) sink_->write(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  if (duplicate_fd_ >= 0) {
    for (const std::string& filter : *filters_) {
      if (line.find(filter) == std::string_view::npos) continue;
      write_all(duplicate_fd_, buffer_);
      break;
    }
  }
  if (tail_lines_ == 0) return;
  if (tail_.size() == tail_lines_) tail_.pop_front();
  tail_.emplace_back(line.substr(0, kMaxTailLineBytes));
}

}  // namespace lockstep::launch::detail
