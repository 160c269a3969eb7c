#pragma once

#include <string>

namespace lockstep::log {

/// The next version directory of a run, as Lightning numbers them: `root`/lightning_logs/version_N, where
/// N is one more than the largest N of the existing `version_N` directories there (0 when none; names
/// that are not version_<digits>, such as version_x, are ignored; Lightning would fail on them). Creates
/// it, with its parents; if another process takes that N first, the next free one is used. All loggers of
/// one run share this one directory (Lightning gives each logger its own version when their names
/// differ).
///
/// Throws std::runtime_error naming the path and the system's reason when it cannot be created.
///
/// Example: next_version_dir("runs") == "runs/lightning_logs/version_0", then ".../version_1".
std::string next_version_dir(const std::string& root);

}  // namespace lockstep::log
