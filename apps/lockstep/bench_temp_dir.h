#pragma once

#include <filesystem>
#include <string>

namespace lockstep::cli {

/// A fresh directory under $TMPDIR (else /tmp) for a benchmark's files (metrics, captured output),
/// removed with everything in it when this object goes away. Throws std::runtime_error when it cannot
/// be created.
class BenchTempDir {
 public:
  BenchTempDir();
  ~BenchTempDir();
  BenchTempDir(const BenchTempDir&) = delete;
  BenchTempDir& operator=(const BenchTempDir&) = delete;

  /// The path of `name` inside the directory (the file itself is not created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace lockstep::cli
