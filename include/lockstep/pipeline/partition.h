// Where a pipeline cuts a model: contiguous groups of its forward's stage calls, one group per rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lockstep::pipeline {

/// The first call of each of `stages` contiguous, non-empty groups of calls costing `cost[k]` each, then
/// cost.size(): pipeline stage s runs calls [bounds[s], bounds[s + 1]). Minimises the most costly group's
/// cost (the slowest stage bounds a pipeline's pace); among cuts as good, the later stages take fewer calls
/// (the last one also computes the loss). Throws std::invalid_argument naming the values when stages < 1 or
/// there are fewer calls than stages.
std::vector<size_t> balanced_cut(const std::vector<int64_t>& cost, int stages);

/// The user's cut: `first_calls` names the first call of stages 1 .. P-1 (P - 1 increasing indices in
/// (0, calls)); returns the bounds as balanced_cut does. Throws std::invalid_argument naming the bad value
/// and what would do.
std::vector<size_t> user_cut(const std::vector<size_t>& first_calls, size_t calls, int stages);

}  // namespace lockstep::pipeline
