#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lockstep/log/logger.h"

namespace lockstep::log {

/// The logger names make_loggers accepts, as its errors list them: "tensorboard, csv, jsonl".
constexpr const char* kLoggerNames = "tensorboard, csv, jsonl";

/// The loggers named in `names`, a comma-separated list of "tensorboard" (TensorBoardLogger), "csv"
/// (CsvLogger) and "jsonl" (JsonlLogger), in that list's order, all writing into `version_dir`
/// (next_version_dir). Spaces around a name are ignored; "" gives no logger. Throws
/// std::invalid_argument naming a bad or repeated name and the accepted ones, e.g.
/// "logger 'wandb' in 'csv,wandb' is not known (expected a comma-separated list of:
/// tensorboard, csv, jsonl)"; std::runtime_error when a file cannot be created.
///
/// Example:
///   auto loggers = make_loggers("tensorboard,csv", next_version_dir(root));
std::vector<std::unique_ptr<Logger>> make_loggers(const std::string& names, const std::string& version_dir);

/// make_loggers' check of `names` alone (no file is made): throws the same std::invalid_argument.
void check_logger_names(const std::string& names);

}  // namespace lockstep::log
