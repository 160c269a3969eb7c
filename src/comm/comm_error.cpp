#include "lockstep/comm/comm_error.h"

namespace lockstep::comm {
namespace {

std::string prefix(int rank, const std::string& op) {
  std::string who = rank >= 0 ? "rank " + std::to_string(rank) : std::string("lockstep");
  return who + ": " + op + ": ";
}

}  // namespace

CommError::CommError(int rank, std::string op, const std::string& message)
    : std::runtime_error(prefix(rank, op) + message), rank_(rank), op_(std::move(op)) {}

}  // namespace lockstep::comm
