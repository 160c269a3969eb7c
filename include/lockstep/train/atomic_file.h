#pragma once

#include <functional>
#include <string>

namespace lockstep::train {

/// Writes `path` so that a reader sees either the old file or the complete new one, never a torn one
/// (temporary file, fsync, rename, fsync of the directory; see lockstep/detail/atomic_file.h, which this
/// forwards to). If `write` throws, the temporary file is removed and the exception passes on; `path` is
/// untouched. Throws std::runtime_error "cannot write 'PATH': STEP: REASON" when a step fails.
///
/// Example:
///   write_atomically("ckpt/final.pt", [&](const std::string& tmp) { archive.save_to(tmp); });
void write_atomically(const std::string& path, const std::function<void(const std::string& tmp_path)>& write);

/// Creates `dir` (and its parents) if missing and checks that files can be created in it; throws
/// std::runtime_error naming the directory and the reason otherwise. Run it before training, so that a
/// bad --ckpt-dir fails in the first second rather than after the last epoch.
void ensure_writable_dir(const std::string& dir);

}  // namespace lockstep::train
