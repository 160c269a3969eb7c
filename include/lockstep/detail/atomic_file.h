#pragma once

// lockstep's one atomic file writer: checkpoints and safetensors (train), the DDP timeline (ddp), the run
// directory's metrics.csv and hparams.yaml (log), the CLI's report and bench tables (apps). Header-only and
// torch-free, so every layer can use it without depending on another.
//
// The sequence, and why each step:
//   1. write a temporary file in the target's directory (".NAME.tmp.PID.N": same file system, so the
//      rename is atomic; hidden, so a directory listing or a glob does not pick it up half-written);
//   2. fsync it (its data are on disk before its name can point to them: without this a crash after the
//      rename can leave an empty or torn file under the final name);
//   3. rename it over the target (readers see the old file or the new one, never a mix);
//   4. fsync the directory (the rename itself survives a crash).
// Any failure before the rename removes the temporary file, so a failed write leaves nothing behind and the
// old file untouched.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

namespace lockstep::detail {
namespace atomic_file {

[[noreturn]] inline void fail(const std::string& path, const std::string& step, int error) {
  throw std::runtime_error("cannot write '" + path + "': " + step + ": " + std::strerror(error));
}

// ".NAME.tmp.PID.N" next to `path`: unique per process (PID) and per call (N), so threads of one process
// (ranks as threads in tests) never share one.
inline std::string temp_path_for(const std::string& path) {
  static std::atomic<unsigned long> counter{0};
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  return (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                 std::to_string(counter++)))
      .string();
}

inline void fsync_path(const std::string& target, const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) fail(target, "opening '" + path + "'", errno);
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) fail(target, "fsync of '" + path + "'", error);
}

}  // namespace atomic_file

/// Writes `path` so that a reader sees either the old file or the complete new one, never a torn one:
/// `write(tmp)` fills a temporary file next to `path` (it exists, empty, when `write` is called: open it
/// for writing, truncating), which is then fsync'ed, renamed over `path`, and the directory fsync'ed. If
/// `write` or a step before the rename throws, the temporary file is removed and the exception passes on;
/// `path` is untouched.
///
/// Throws std::runtime_error "cannot write 'PATH': STEP: REASON" when a step fails (no such directory, no
/// permission, a full disk, `path` a directory), e.g. "cannot write 'out/a.csv': creating
/// 'out/.a.csv.tmp.42.0': No such file or directory". Thread-safe for different paths.
///
/// Example:
///   write_atomically("ckpt/final.pt", [&](const std::string& tmp) { archive.save_to(tmp); });
inline void write_atomically(const std::string& path,
                             const std::function<void(const std::string& tmp_path)>& write) {
  const std::string tmp = atomic_file::temp_path_for(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) atomic_file::fail(path, "creating '" + tmp + "'", errno);
  ::close(fd);
  try {
    write(tmp);
    atomic_file::fsync_path(path, tmp, O_RDONLY);
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      atomic_file::fail(path, "renaming '" + tmp + "' onto it", errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  atomic_file::fsync_path(path, parent.empty() ? "." : parent.string(), O_RDONLY | O_DIRECTORY);
}

/// write_atomically with `content` as the whole new file.
///
/// Example:
///   write_file_atomically(dir + "/hparams.yaml", yaml_text);
inline void write_file_atomically(const std::string& path, const std::string& content) {
  write_atomically(path, [&](const std::string& tmp) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) atomic_file::fail(path, "opening '" + tmp + "'", errno);
    std::size_t written = 0;
    while (written < content.size()) {
      const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int error = errno;
        ::close(fd);
        atomic_file::fail(path, "writing '" + tmp + "'", error);
      }
      written += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0) atomic_file::fail(path, "closing '" + tmp + "'", errno);
  });
}

/// Removes from `dir` the temporary files of write_atomically (".NAME.tmp.PID.N") whose process no longer
/// exists: a process killed while writing leaves its temporary file behind (the target itself is whole).
/// Those of live processes, and every other file, stay. Best effort: what cannot be listed or removed is
/// left. Called by the Trainer for its ckpt_dir when it starts.
inline void remove_orphaned_temporaries(const std::string& dir) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const auto mark = name.rfind(".tmp.");
    if (name.empty() || name[0] != '.' || mark == std::string::npos) continue;
    const std::string rest = name.substr(mark + 5);  // "PID.N"
    const std::string pid_text = rest.substr(0, rest.find('.'));
    if (pid_text.empty() || pid_text.size() > 9 ||
        pid_text.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const auto pid = static_cast<pid_t>(std::stol(pid_text));
    if (::kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove(entry.path(), error);
  }
}

}  // namespace lockstep::detail
