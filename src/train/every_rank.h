// One rank's share of a save or a load, and every rank learning how all shares went.
#pragma once

#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"

namespace lockstep::train::detail {

/// Runs `work` on this rank, then gathers every rank's outcome (one all_gather_strings) in place of a
/// barrier: no rank waits for one that threw, and none carries on as if a failed rank had succeeded.
/// Returns each rank's `work()` result, by rank. Rethrows this rank's own exception; when only another
/// rank failed, throws "<what>: rank R: <its error>", a std::invalid_argument when that rank's was one
/// (bad input stays bad input on every rank), else a std::runtime_error. Collective over `group`.
inline std::vector<std::string> on_every_rank(comm::ProcessGroup& group, const std::string& what,
                                              const std::function<std::string()>& work) {
  std::exception_ptr failure;
  std::string mine;
  try {
    mine = "+" + work();
  } catch (const std::invalid_argument& e) {
    failure = std::current_exception();
    mine = std::string("?") + e.what();
  } catch (const std::exception& e) {
    failure = std::current_exception();
    mine = std::string("!") + e.what();
  }
  std::vector<std::string> outcomes = group.all_gather_strings(mine);
  if (failure) std::rethrow_exception(failure);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    if (outcomes[r].empty() || outcomes[r][0] != '+') {
      const std::string message = what + ": rank " + std::to_string(r) + ": " + outcomes[r].substr(1);
      if (!outcomes[r].empty() && outcomes[r][0] == '?') throw std::invalid_argument(message);
      throw std::runtime_error(message);
    }
    outcomes[r].erase(0, 1);
  }
  return outcomes;
}

}  // namespace lockstep::train::detail
