#pragma once

// What one source says about this process, before defaults, and how it becomes an Environment
// (internal to lockstep::env).

#include <lockstep/env/environment.h>

#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace lockstep::env::detail {

constexpr int kIntMax = std::numeric_limits<int>::max();

/// One value and where it came from, so that an error can name it: `name` is the variable
/// ("RANK"), the option ("EnvOptions::rank") or the field ("local_world_size") when it is derived, and
/// `note` (optional) says how it was derived ("from SLURM_TASKS_PER_NODE='2(x2)' at SLURM_NODEID=1").
template <typename T>
struct Field {
  std::optional<T> value;
  std::string name;
  std::string note;

  bool has() const { return value.has_value(); }
  const T& get() const { return *value; }

  void set(T v, std::string from, std::string how = {}) {
    value = std::move(v);
    name = std::move(from);
    note = std::move(how);
  }
  /// Sets the value only if none is set yet.
  void fill(T v, std::string from, std::string how = {}) {
    if (!has()) set(std::move(v), std::move(from), std::move(how));
  }
  /// "RANK=4", "MASTER_ADDR='node1'".
  std::string brief() const;
  /// brief() plus the note: "local_world_size=2 (from SLURM_TASKS_PER_NODE='2(x2)' at SLURM_NODEID=1)".
  std::string describe() const { return note.empty() ? brief() : brief() + " (" + note + ")"; }
};

template <>
inline std::string Field<int>::brief() const {
  return name + "=" + std::to_string(get());
}
template <>
inline std::string Field<std::string>::brief() const {
  return name + "='" + get() + "'";
}

/// What a source reported; unset fields are derived or defaulted by resolve().
struct Layout {
  Source source = Source::kSingleProcess;
  Field<int> rank, local_rank, world_size, local_world_size, node_rank, num_nodes;
  Field<std::string> master_addr;
  Field<int> master_port, restart_count;
  Field<std::string> run_id;
};

/// Sets `field` from variable `name` when it is set, parsed strictly in [lo, hi]. Returns whether it
/// was set.
bool read_int(const EnvLookup& lookup, const std::string& name, Field<int>& field, int lo, int hi = kIntMax);

/// Sets `field` from variable `name` when it is set.
bool read_string(const EnvLookup& lookup, const std::string& name, Field<std::string>& field);

/// The value of `name`, which a launcher always sets together with `selector` (already known to be
/// set). Throws "RANK is set (RANK=1) but WORLD_SIZE is not: torchrun sets both; set WORLD_SIZE".
std::string require(const EnvLookup& lookup, const std::string& name, const std::string& selector,
                    const std::string& launcher);

/// MASTER_ADDR and MASTER_PORT, when set, override whatever master the source derived.
void read_master_override(const EnvLookup& lookup, Layout& layout);

/// Fills unset fields (see from_env for the rules), checks every invariant of Environment, and
/// returns the result. Throws EnvError naming the fields involved.
Environment resolve(Layout layout);

}  // namespace lockstep::env::detail
