// Whole-file writes through a temporary file and rename(2) (text_file.h).
#include "lockstep/log/text_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace lockstep::log {

void write_file_atomically(const std::filesystem::path& path, const std::string& content) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto fail = [&path](const std::string& reason) {
    throw std::runtime_error("cannot write " + path.string() + ": " + reason);
  };
  if (fs::is_directory(path, ec)) fail("it is a directory");
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const fs::path tmp = dir / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()));
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) fail("cannot create a file in " + dir.string() + " (" + std::strerror(errno) + ")");
  const bool written = std::fwrite(content.data(), 1, content.size(), file) == content.size();
  const int write_errno = errno;
  if (std::fclose(file) != 0 || !written) {
    const std::string reason = std::strerror(written ? errno : write_errno);
    fs::remove(tmp, ec);
    fail(reason);
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string reason = ec.message();
    fs::remove(tmp, ec);
    fail(reason);
  }
}

}  // namespace lockstep::log
