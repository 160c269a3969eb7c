#pragma once

#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
}

namespace lockstep::cli {

/// One library option and the flag that sets it: {"max_epochs", "--max-epochs"}.
using OptionFlag = std::pair<std::string, std::string>;

/// The options `app`'s flags set, as the library names them: every long name of a flag, dashes as
/// underscores, maps to the flag's first long name (--rdzv-id,--run-id gives rdzv_id and run_id, both
/// "--rdzv-id").
std::vector<OptionFlag> option_flags(const CLI::App& app);

/// A library error in a command's words. The library names its options (`max_epochs must be >= 1`,
/// `backend 'nccl' is not ...`, `node_rank=2 is out of range for nnodes=2`); a command shows the flags
/// that set them. An option's name is replaced where it stands alone (after the start, a space, '(' or
/// a quote; before the end, a space, punctuation or a quote; never inside a path such as
/// /runs/ckpt_dir/last.ckpt). A one-word name (model, backend, resume) is an English word too, so it is
/// replaced only where it is written as an option: followed by a value (` 'value'` or `=value`), or at
/// the start of the message.
std::string in_flag_words(const std::string& message, const std::vector<OptionFlag>& flags);

}  // namespace lockstep::cli
