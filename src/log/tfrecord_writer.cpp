#include "lockstep/log/tfrecord_writer.h"

#include <cstdint>
#include <utility>

#include "files.h"
#include "lockstep/log/crc32c.h"

namespace lockstep::log {
namespace {

void append_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFU));
}

}  // namespace

std::string encode_tfrecord(std::string_view data) {
  std::string record;
  record.reserve(8 + 4 + data.size() + 4);
  append_le(record, data.size(), 8);
  append_le(record, masked_crc32c(record), 4);  // of the 8 length bytes alone
  record.append(data);
  append_le(record, masked_crc32c(data), 4);
  return record;
}

TfRecordWriter::TfRecordWriter(std::string path) : path_(std::move(path)) {
  file_.reset(std::fopen(path_.c_str(), "wbx"));  // x: fail rather than overwrite
  if (!file_) detail::throw_io_error("creating the event file", path_);
}

void TfRecordWriter::write(std::string_view data) {
  const std::string record = encode_tfrecord(data);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size()) {
    detail::throw_io_error("writing", path_);
  }
}

void TfRecordWriter::flush() {
  if (std::fflush(file_.get()) != 0) detail::throw_io_error("flushing", path_);
}

}  // namespace lockstep::log
