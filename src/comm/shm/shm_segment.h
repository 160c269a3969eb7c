#pragma once

// A POSIX shared-memory segment (shm_open + mmap, mode 0600), owned for the lifetime of the object.
// Private to the shm backend.

#include <cstddef>
#include <string>

namespace lockstep::comm::detail {

class ShmSegment {
 public:
  /// Creates a new segment `name` ("/lockstep-...") of `bytes`, failing if the name exists (O_EXCL).
  /// Throws std::runtime_error naming the segment, the size and errno's text (e.g. /dev/shm full).
  static ShmSegment create(const std::string& name, std::size_t bytes);
  /// Maps an existing segment; its size must be `bytes`. Throws std::runtime_error when it is
  /// missing (the creator is on another host, or already unlinked it) or its size differs.
  static ShmSegment open(const std::string& name, std::size_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  /// Unmaps; unlinks the name too if this object created it and has not unlinked it yet.
  ~ShmSegment();

  /// Removes the name from /dev/shm (the mapping stays valid). Idempotent; never throws.
  void unlink() noexcept;

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void release() noexcept;

  std::string name_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool owns_name_ = false;
};

/// A segment name for `run_id`: "/lockstep-<run id, [A-Za-z0-9_.-] only>-<pid>-<n>", unique on this
/// host (pid of the creating rank and a per-process counter), at most 255 bytes.
std::string shm_segment_name(const std::string& run_id);

}  // namespace lockstep::comm::detail
