#include "lockstep/train/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "lockstep/detail/atomic_file.h"

namespace lockstep::train {

void write_atomically(const std::string& path,
                      const std::function<void(const std::string& tmp_path)>& write) {
  lockstep::detail::write_atomically(path, write);
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
