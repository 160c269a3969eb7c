#pragma once

#include <string>
#include <vector>

#include "flag_words.h"
#include "lockstep/train/fit_config.h"

namespace lockstep::cli {

/// Parses `lockstep fit`'s flags (argv[0] is the command name) into a validated FitConfig. Shared by the
/// CLI (which checks them before starting any rank) and the rank program `lockstep-fit`, so both read
/// the same flags the same way.
///
/// Returns -1 with `config` filled and validated, or the exit status to return at once: 0 after --help
/// (printed to stdout), 2 after a usage error (printed to stderr, naming the flag and the fix).
int parse_fit_flags(int argc, char** argv, train::FitConfig& config);

/// The library options `lockstep fit`'s flags set (FitConfig's and TrainerOptions'), with their flags.
const std::vector<OptionFlag>& fit_option_flags();

/// A library error in the words of `lockstep fit`: the option names (on_nan, gradient_clip_val, model
/// 'cnn') become the flags that set them (--on-nan, --gradient-clip-val, --model 'cnn'); see
/// cli::in_flag_words. Only apps/ speaks of flags; the library names its options.
std::string in_flag_words(const std::string& message);

}  // namespace lockstep::cli
