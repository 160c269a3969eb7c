#pragma once

#include <string>
#include <vector>

namespace lockstep::env {

/// Expands a Slurm hostlist, as found in SLURM_JOB_NODELIST / SLURM_STEP_NODELIST, into host names in
/// Slurm's order (the order `scontrol show hostnames` prints).
///
/// Grammar: comma-separated host expressions; each is literal text ([A-Za-z0-9._-]) with any number of
/// bracket groups `[a-b,c,...]` of decimal ranges. A range keeps the width of its lower bound
/// (`n[08-10]` -> n08 n09 n10). Several groups expand as a cartesian product, the first group varying
/// slowest (`a[0-1]b[2-3]` -> a0b2 a0b3 a1b2 a1b3). Duplicates are kept.
///
/// `variable` only names the value in error messages. Throws EnvError for an empty or garbled list
/// (unclosed or nested bracket, empty range, reversed range like `[03-01]`, character that cannot be
/// in a host name, more than 2^20 hosts), e.g.
/// "SLURM_JOB_NODELIST='gpu[03-01]' is not a valid Slurm hostlist: range 03-01 is reversed; ...".
///
/// Example:
///   expand_nodelist("gpu[01-02],login1")  // {"gpu01", "gpu02", "login1"}
std::vector<std::string> expand_nodelist(const std::string& value,
                                         const std::string& variable = "SLURM_JOB_NODELIST");

/// Expands Slurm's compressed tasks-per-node list (SLURM_TASKS_PER_NODE) into one count per node, in
/// node order (the index is SLURM_NODEID).
///
/// Grammar: comma-separated items, each `N` or `N(xK)` meaning K nodes with N tasks each; N >= 0,
/// K >= 1, at most 2^20 nodes in all. `variable` only names the value in error messages; throws
/// EnvError for anything else.
///
/// Example:
///   expand_tasks_per_node("2(x3),1")  // {2, 2, 2, 1}
std::vector<int> expand_tasks_per_node(const std::string& value,
                                       const std::string& variable = "SLURM_TASKS_PER_NODE");

}  // namespace lockstep::env
