#pragma once

#include <string>

#include "lockstep/log/logger.h"

namespace lockstep::log {

/// Writes `dir`/hparams.yaml: one `key: value` line per entry, in the given order (Lightning's
/// save_hparams_to_yaml sorts them; the caller's order reads better and is kept). Each key and value is a
/// YAML scalar (yaml_scalar): plain when YAML reads it back as written, quoted otherwise. The file is
/// written whole to a temporary name and renamed, so a reader never sees half of it; writing it again
/// (the csv and the tensorboard logger both do) replaces it. Throws std::runtime_error naming the file and
/// the system's reason on an I/O error.
///
/// Example: write_hparams_yaml(dir, {{"model", "mlp"}, {"lr", "0.1"}}) writes "model: mlp\nlr: 0.1\n".
void write_hparams_yaml(const std::string& dir, const Hparams& hparams);

/// `text` as a YAML scalar: plain ("mlp", "0.1", "-3", "a/b"; YAML reads numbers and booleans as what
/// they spell, as a config value means them) unless its syntax would change or break the line (empty,
/// surrounding spaces, a leading indicator such as '-' or '[' that does not begin a number, ": " or " #"
/// inside): then single-quoted with ' doubled. Text with control characters (a newline) is double-quoted
/// with escapes.
std::string yaml_scalar(const std::string& text);

}  // namespace lockstep::log
