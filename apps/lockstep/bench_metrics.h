#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockstep::cli {

/// The JSON objects of a JSONL file (one per line: `lockstep fit --metrics-file`, or the Python peer's
/// output). With `line_prefix`, only the lines that start with it count and the prefix is dropped (e.g.
/// "[rank 0] " for a worker's stdout under `lockstep run`); lines that then do not start with '{' are
/// skipped. Throws std::runtime_error naming the file and line when it cannot be read or parsed.
std::vector<nlohmann::json> read_jsonl(const std::string& path, const std::string& line_prefix = "");

/// Field `key` of each object, as numbers. Throws std::runtime_error naming `source` (a file, a program)
/// and the line when an object lacks it or it is not a number.
std::vector<double> numeric_field(const std::vector<nlohmann::json>& objects, const std::string& key,
                                  const std::string& source);

/// The median (the mean of the two middle values for an even count); 0 for no values.
double median(std::vector<double> values);

}  // namespace lockstep::cli
