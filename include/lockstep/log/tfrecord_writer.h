#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace lockstep::log {

/*
 * TFRecord framing (TensorFlow's record file, which TensorBoard's event files are). Each record is
 *
 *   uint64  length            little-endian, of `data`
 *   uint32  masked_crc32c(length's 8 bytes)
 *   byte    data[length]
 *   uint32  masked_crc32c(data)
 *
 * with the uint32s little-endian too (crc32c.h). Nothing precedes the first record and nothing follows the
 * last, so a file cut after any whole record is valid: a reader of a running job sees every record
 * flushed so far.
 */

/// One record framed as above: 8 + 4 + data.size() + 4 bytes. Pure, for tests and for TfRecordWriter.
std::string encode_tfrecord(std::string_view data);

/// Writes records to a new file. Not thread-safe: one thread writes.
///
/// Example:
///   TfRecordWriter writer("/tmp/x.tfrecord");
///   writer.write(encode_scalar_event("loss", 0.5F, /*step=*/1, /*wall_time=*/1.7e9));
///   writer.flush();
class TfRecordWriter {
 public:
  /// Creates `path`, which must not exist (never overwrites another run's file). Throws
  /// std::runtime_error naming the path and the system's reason when it cannot be created.
  explicit TfRecordWriter(std::string path);

  /// Appends one record (buffered until flush()). Throws std::runtime_error naming the file on a write
  /// error.
  void write(std::string_view data);
  /// Hands every written record to the operating system, so that readers see it.
  void flush();
  const std::string& path() const { return path_; }

 private:
  struct CloseFile {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, CloseFile> file_;
};

}  // namespace lockstep::log
