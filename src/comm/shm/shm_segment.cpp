#include "shm_segment.h"

#include "lockstep/detail/shm_names.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace lockstep::comm::detail {
namespace {

std::string errno_text(int error) {
  return std::string(std::strerror(error));
}

std::string size_text(std::size_t bytes) {
  return std::to_string(bytes) + " bytes (" + std::to_string(bytes >> 20) + " MiB)";
}

}  // namespace

std::string shm_segment_name(const std::string& run_id) {
  static std::atomic<unsigned> counter{0};
  return "/" + lockstep::detail::shm_segment_prefix(run_id, ::getpid()) + std::to_string(counter++);
}

ShmSegment ShmSegment::create(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    const int error = errno;
    throw std::runtime_error("cannot create shared-memory segment " + name + ": " + errno_text(error));
  }
  ShmSegment segment;
  segment.name_ = name;
  segment.owns_name_ = true;
  // posix_fallocate, not ftruncate: it reserves every page now, so a full /dev/shm is an error here
  // instead of a SIGBUS in the middle of a collective.
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    ::close(fd);
    throw std::runtime_error("cannot reserve " + size_text(bytes) + " for shared-memory segment " + name +
                             ": " + errno_text(rc) + " (is /dev/shm large enough? `df -h /dev/shm`)");
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  ::close(fd);
  if (data == MAP_FAILED) {
    throw std::runtime_error("cannot map shared-memory segment " + name + " of " + size_text(bytes) + ": " +
                             errno_text(error));
  }
  segment.data_ = data;
  segment.size_ = bytes;
  return segment;
}

ShmSegment ShmSegment::open(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    const int error = errno;
    throw std::runtime_error("cannot open shared-memory segment " + name +
                             " created by rank 0: " + errno_text(error) +
                             (error == ENOENT ? " (is this rank on another host than rank 0? the shm backend "
                                                "needs every rank on one node: use backend 'gloo' or 'hier')"
                                              : ""));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || static_cast<std::size_t>(info.st_size) != bytes) {
    ::close(fd);
    throw std::runtime_error("shared-memory segment " + name + " has " + std::to_string(info.st_size) +
                             " bytes, expected " + size_text(bytes) +
                             " (ranks were given different shm slot sizes?)");
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  ::close(fd);
  if (data == MAP_FAILED) {
    throw std::runtime_error("cannot map shared-memory segment " + name + ": " + errno_text(error));
  }
  ShmSegment segment;
  segment.name_ = name;
  segment.data_ = data;
  segment.size_ = bytes;
  return segment;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept {
  *this = std::move(other);
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owns_name_ = std::exchange(other.owns_name_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  release();
}

void ShmSegment::unlink() noexcept {
  if (owns_name_) {
    ::shm_unlink(name_.c_str());
    owns_name_ = false;
  }
}

void ShmSegment::release() noexcept {
  unlink();
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace lockstep::comm::detail
