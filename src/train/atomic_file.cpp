#include "lockstep/train/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace lockstep::train {
namespace {

std::runtime_error system_failure(const std::string& what, const std::string& path, int error) {
  return std::runtime_error(what + " '" + path + "': " + std::strerror(error));
}

void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw system_failure("cannot open", path, errno);
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) throw system_failure("cannot fsync", path, error);
}

}  // namespace

void write_atomically(const std::string& path,
                      const std::function<void(const std::string& tmp_path)>& write) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  const std::string tmp =
      (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  try {
    write(tmp);
    fsync_path(tmp, O_RDONLY);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw system_failure("cannot rename onto", path, errno);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  fsync_path(dir.string(), O_RDONLY | O_DIRECTORY);
}

void ensure_writable_dir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    throw std::runtime_error("cannot create directory '" + dir + "': " + error.message() +
                             " (choose another ckpt_dir)");
  }
  const std::string probe =
      (std::filesystem::path(dir) / (".lockstep-probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw std::runtime_error("cannot write into directory '" + dir + "': " + std::strerror(errno) +
                             " (choose another ckpt_dir)");
  }
  ::close(fd);
  std::remove(probe.c_str());
}

}  // namespace lockstep::train
