// lockstep's checksum trailer: see include/lockstep/train/file_checksum.h.
#include "lockstep/train/file_checksum.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace lockstep::train {
namespace {

constexpr size_t kMagicBytes = 8;
static_assert(sizeof(kChecksumTrailerMagic) == kMagicBytes + 1, "the magic is 8 bytes");

void put_le(unsigned char* out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t get_le(const unsigned char* in, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

uint32_t crc32_of(uint32_t crc, const void* data, size_t size) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), size));
}

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

std::runtime_error write_failure(const std::string& path, int error) {
  return std::runtime_error("cannot write '" + path + "': " + std::strerror(error));
}

}  // namespace

ChecksummedWriter::ChecksummedWriter(const std::string& path) : path_(path), crc_(crc32_of(0, nullptr, 0)) {
  file_ = std::fopen(path.c_str(), "wbe");
  if (file_ == nullptr) throw std::runtime_error("cannot create '" + path + "': " + std::strerror(errno));
}

ChecksummedWriter::~ChecksummedWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void ChecksummedWriter::write(const void* data, size_t size) {
  if (file_ == nullptr) throw std::logic_error("ChecksummedWriter::write after finish() on '" + path_ + "'");
  if (size == 0) return;
  if (std::fwrite(data, 1, size, file_) != size) throw write_failure(path_, errno);
  crc_ = crc32_of(crc_, data, size);
  length_ += size;
}

void ChecksummedWriter::finish() {
  if (file_ == nullptr) throw std::logic_error("ChecksummedWriter::finish called twice on '" + path_ + "'");
  unsigned char trailer[kChecksumTrailerBytes];
  put_le(trailer, length_, 8);
  put_le(trailer + 8, crc_, 4);
  put_le(trailer + 12, kChecksumTrailerFormat, 4);
  std::memcpy(trailer + 16, kChecksumTrailerMagic, kMagicBytes);
  const bool written = std::fwrite(trailer, 1, sizeof(trailer), file_) == sizeof(trailer);
  const int write_error = errno;
  std::FILE* file = file_;
  file_ = nullptr;
  const bool closed = std::fclose(file) == 0;  // flushes: a full disk may show only here
  if (!written) throw write_failure(path_, write_error);
  if (!closed) throw write_failure(path_, errno);
}

std::string read_whole_file(const std::string& path, const std::string& what) {
  std::FILE* file = std::fopen(path.c_str(), "rbe");
  if (file == nullptr) {
    throw std::runtime_error(what + " '" + path + "' cannot be opened: " + std::strerror(errno));
  }
  std::string bytes;
  char buffer[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof(buffer), file)) > 0) bytes.append(buffer, got);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) throw std::runtime_error(what + " '" + path + "' cannot be read: " + std::strerror(error));
  return bytes;
}

bool ends_with_checksum_trailer(const std::string& bytes) {
  return bytes.size() >= kChecksumTrailerBytes &&
         bytes.compare(bytes.size() - kMagicBytes, kMagicBytes, kChecksumTrailerMagic, kMagicBytes) == 0;
}

std::string read_checksummed_file(const std::string& path, const std::string& what, const std::string& fix) {
  std::string bytes = read_whole_file(path, what);
  strip_checksum_trailer(bytes, what + " '" + path + "'", fix);
  return bytes;
}

void strip_checksum_trailer(std::string& bytes, const std::string& name, const std::string& fix) {
  if (!ends_with_checksum_trailer(bytes)) {
    throw std::runtime_error(
        name + " does not end with lockstep's checksum trailer (" + std::to_string(bytes.size()) +
        " bytes): it is truncated (a copy or a write that did not finish), or it was not "
        "written by this lockstep: " +
        fix);
  }
  const auto* trailer =
      reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size() - kChecksumTrailerBytes);
  const uint64_t stored_length = get_le(trailer, 8);
  const auto stored_crc = static_cast<uint32_t>(get_le(trailer + 8, 4));
  const auto format = static_cast<uint32_t>(get_le(trailer + 12, 4));
  const uint64_t length = bytes.size() - kChecksumTrailerBytes;
  if (format != kChecksumTrailerFormat) {
    throw std::runtime_error(name + " has checksum trailer format " + std::to_string(format) +
                             "; this lockstep reads format " + std::to_string(kChecksumTrailerFormat) +
                             " (written by another version of lockstep, or damaged): " + fix);
  }
  if (stored_length != length) {
    throw std::runtime_error(name + " is damaged: lockstep wrote " + std::to_string(stored_length) +
                             " bytes before its checksum trailer, the file holds " + std::to_string(length) +
                             " (bytes were cut out or added after lockstep wrote it): " + fix);
  }
  const uint32_t crc = crc32_of(crc32_of(0, nullptr, 0), bytes.data(), length);
  if (crc != stored_crc) {
    throw std::runtime_error(name + " is damaged: the crc32 of its " + std::to_string(length) + " bytes is " +
                             hex32(crc) + ", lockstep stored " + hex32(stored_crc) +
                             " when it wrote it (the file was changed after lockstep wrote it: disk, copy or "
                             "transfer error): " +
                             fix);
  }
  bytes.resize(length);
}

}  // namespace lockstep::train
