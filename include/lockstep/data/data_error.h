#pragma once

#include <stdexcept>

namespace lockstep::data {

/// Thrown when a dataset file or directory is missing, unreadable or malformed. The message names the
/// path, what was expected and what was found, and how to fix it (which package to install, which flag
/// to pass). Caller mistakes in arguments (bad shapes, bad options) are std::invalid_argument instead.
///
/// Example:
///   try { auto train = IdxDataset::from_dir(dir, Split::kTrain); }
///   catch (const DataError& e) { std::cerr << e.what() << "\n"; return 1; }
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace lockstep::data
