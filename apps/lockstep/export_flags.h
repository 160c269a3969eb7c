#pragma once

#include <string>

namespace lockstep::cli {

/// What `lockstep export` is asked to do.
struct ExportFlags {
  std::string input;   ///< a checkpoint (last.ckpt, a --save-top-k file) or final.pt
  std::string output;  ///< "" = the input with .safetensors instead of its extension
};

/// Parses `lockstep export`'s arguments (argv[0] is the command name). Shared by the CLI (which answers
/// --help and usage errors without loading LibTorch) and the program `lockstep-export`, which converts.
///
/// Returns -1 with `flags` filled, or the exit status to return at once: 0 after --help (printed to
/// stdout), 2 after a usage error (printed to stderr, naming the problem and the fix).
int parse_export_flags(int argc, char** argv, ExportFlags& flags);

}  // namespace lockstep::cli
