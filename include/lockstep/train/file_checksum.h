#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace lockstep::train {

/// lockstep's checksum trailer: the 24 bytes that end every checkpoint (and Accelerator state) lockstep
/// writes, after the LibTorch archive's own bytes (the "payload"):
///
///   offset  size  field
///   0       8     payload length in bytes (uint64, little-endian)
///   8       4     zlib crc32 of the payload (uint32, little-endian)
///   12      4     trailer format, kChecksumTrailerFormat (uint32, little-endian)
///   16      8     magic "LKSTPCRC"
///
/// LibTorch's zip reader does not check the CRCs its archives carry: a flipped bit in a tensor's bytes
/// loads silently as another value. The trailer lets lockstep refuse any change to the file. Zip readers
/// find the archive's directory by scanning from the end, so other readers (Python's torch.jit.load,
/// unzip) still read a file with the trailer; lockstep itself parses only the verified payload.
inline constexpr size_t kChecksumTrailerBytes = 24;
inline constexpr uint32_t kChecksumTrailerFormat = 1;
inline constexpr char kChecksumTrailerMagic[] = "LKSTPCRC";  ///< 8 bytes (the terminating NUL is not written)

/// Writes a file whose last bytes are the checksum trailer of everything written before it.
/// Not thread-safe. Typical use, inside write_atomically:
///
/// Example:
///   ChecksummedWriter out(tmp);
///   archive.save_to([&](const void* data, size_t n) { out.write(data, n); return n; });
///   out.finish();  // the trailer, then close; without it the file has no trailer and does not load
class ChecksummedWriter {
 public:
  /// Creates (truncates) `path`. Throws std::runtime_error naming the path and the system error.
  explicit ChecksummedWriter(const std::string& path);
  ~ChecksummedWriter();
  ChecksummedWriter(const ChecksummedWriter&) = delete;
  ChecksummedWriter& operator=(const ChecksummedWriter&) = delete;

  /// Appends `size` bytes to the payload. Throws std::runtime_error naming the path (disk full, ...).
  void write(const void* data, size_t size);
  /// Appends the trailer and closes the file (not fsync'ed: write_atomically does that). Call once.
  void finish();

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t length_ = 0;
  uint32_t crc_ = 0;
};

/// Reads `path` whole, checks its trailer and returns the payload (the bytes before the trailer).
/// Throws std::runtime_error starting with `what` and the path ("checkpoint 'ck/last.ckpt'") when the
/// file cannot be read; when it has no trailer ("truncated, or not written by this lockstep"); when the
/// trailer's length or crc32 do not match the bytes ("the file was changed after lockstep wrote it",
/// naming the stored and the computed crc32). Every message ends with `fix` (what the user can do).
std::string read_checksummed_file(const std::string& path, const std::string& what, const std::string& fix);

/// What read_checksummed_file does after reading: checks the trailer at the end of `bytes` (a whole
/// file's contents) and removes it. Throws std::runtime_error starting with `name` ("checkpoint 'x'")
/// and ending with `fix`, as read_checksummed_file does.
void strip_checksum_trailer(std::string& bytes, const std::string& name, const std::string& fix);

/// Whether `bytes` end with the trailer's magic (a file lockstep wrote with a trailer, possibly damaged).
bool ends_with_checksum_trailer(const std::string& bytes);

/// Reads `path` whole. Throws std::runtime_error starting with `what` and the path when it cannot.
std::string read_whole_file(const std::string& path, const std::string& what);

}  // namespace lockstep::train
