#include "file_bytes.h"

#include "lockstep/data/data_error.h"

#include <ATen/ATen.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace lockstep::data::detail {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// An uninitialised buffer that grows by doubling (the tensor allocator does not zero-fill, so pages
// are touched only once, by inflate).
struct Buffer {
  at::Tensor tensor;
  uint8_t* data = nullptr;
  size_t size = 0;
  explicit Buffer(size_t n) { resize_keep(n, 0); }
  void resize_keep(size_t n, size_t used) {
    at::Tensor bigger = at::empty({static_cast<int64_t>(n)}, at::kByte);
    if (used > 0) std::memcpy(bigger.data_ptr<uint8_t>(), data, used);
    tensor = std::move(bigger);
    data = tensor.data_ptr<uint8_t>();
    size = n;
  }
};

at::Tensor gunzip(const at::Tensor& compressed, const std::string& path, const std::string& who) {
  const uint8_t* in = compressed.data_ptr<uint8_t>();
  const auto in_size = static_cast<size_t>(compressed.numel());
  // The gzip trailer's last 4 bytes hold the uncompressed size mod 2^32: a good first guess, unless the
  // file is truncated or corrupt (then it is noise: deflate never expands more than ~1032:1).
  size_t guess = in_size * 4 + 4096;
  if (in_size >= 18) {
    const uint8_t* t = in + in_size - 4;
    const size_t isize = static_cast<size_t>(t[0]) | static_cast<size_t>(t[1]) << 8 |
                         static_cast<size_t>(t[2]) << 16 | static_cast<size_t>(t[3]) << 24;
    if (isize > 0 && isize <= in_size * 1032) guess = isize;
  }
  Buffer out(guess);
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  if (inflateInit2(&zs, 15 + 16) != Z_OK) {  // 15 + 16: a gzip wrapper, 32 KiB window
    throw DataError(who + " '" + path + "': cannot initialise zlib");
  }
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, inflateEnd);
  size_t in_pos = 0;
  size_t out_pos = 0;
  for (;;) {
    if (out_pos == out.size) out.resize_keep(out.size * 2 + 4096, out_pos);
    // zlib counts in uInt: feed at most 1 GiB per call.
    const size_t in_chunk = std::min<size_t>(in_size - in_pos, size_t{1} << 30);
    const size_t out_chunk = std::min<size_t>(out.size - out_pos, size_t{1} << 30);
    zs.next_in = const_cast<Bytef*>(in + in_pos);
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = out.data + out_pos;
    zs.avail_out = static_cast<uInt>(out_chunk);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    in_pos += in_chunk - zs.avail_in;
    out_pos += out_chunk - zs.avail_out;
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow (gzip concatenation); trailing zero padding is ignored.
      if (in_size - in_pos >= 2 && in[in_pos] == 0x1f && in[in_pos + 1] == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      break;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_out == 0) continue;  // needs more output space
    if (rc == Z_BUF_ERROR && in_pos == in_size) {
      throw DataError(who + " '" + path + "': the gzip stream ends early after " + std::to_string(in_size) +
                      " compressed bytes (" + std::to_string(out_pos) +
                      " decompressed): the file is truncated; download it again");
    }
    throw DataError(who + " '" + path + "': corrupt gzip data (" + (zs.msg ? zs.msg : "zlib error") +
                    " after " + std::to_string(out_pos) + " decompressed bytes); download the file again");
  }
  return out.tensor.narrow(0, 0, static_cast<int64_t>(out_pos));
}

}  // namespace

at::Tensor read_file_bytes(const std::string& path, const std::string& who, const std::string& missing_hint) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw DataError(who + " '" + path + "' does not exist" +
                    (missing_hint.empty() ? "" : "; " + missing_hint));
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw DataError(who + " '" + path + "' is a directory, not a file");
  }
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    throw DataError(who + " '" + path + "' cannot be opened: " + std::strerror(errno) +
                    " (check its permissions)");
  }
  const auto expected = std::filesystem::file_size(path, ec);
  Buffer bytes(ec ? size_t{1} << 16 : static_cast<size_t>(expected) + 1);  // +1: sees growth at once
  size_t used = 0;
  for (;;) {
    if (used == bytes.size) bytes.resize_keep(bytes.size * 2, used);
    const size_t n = std::fread(bytes.data + used, 1, bytes.size - used, f.get());
    used += n;
    if (n == 0) break;
  }
  if (std::ferror(f.get())) {
    throw DataError(who + " '" + path + "': read error: " + std::strerror(errno));
  }
  const at::Tensor all = bytes.tensor.narrow(0, 0, static_cast<int64_t>(used));
  if (used >= 2 && bytes.data[0] == 0x1f && bytes.data[1] == 0x8b) return gunzip(all, path, who);
  return all;
}

}  // namespace lockstep::data::detail
