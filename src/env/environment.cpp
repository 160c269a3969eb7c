#include <lockstep/env/environment.h>

#include <cstdlib>

#include "layout.h"
#include "sources.h"

namespace lockstep::env {
namespace {

bool is_blank(const std::string& text) {
  return text.find_first_not_of(" \t\r\n") == std::string::npos;
}

// A task that srun started. sbatch's batch script (and an salloc shell) has SLURM_PROCID=0 and the job's
// SLURM_NTASKS too, but no SLURM_STEP_ID: a program run there directly is one process, not rank 0 of
// the job's tasks (which would wait for ranks that never come).
bool started_by_srun(const EnvLookup& lookup) {
  return lookup("SLURM_PROCID") && (lookup("SLURM_STEP_ID") || !lookup("SLURM_JOB_ID"));
}

// The first launcher whose selector variable is set, read; an empty Layout (one process) if none.
detail::Layout read_selected_source(const EnvLookup& lookup) {
  if (lookup("RANK")) return detail::read_torchrun(lookup);
  if (started_by_srun(lookup)) return detail::read_slurm(lookup);
  if (lookup("OMPI_COMM_WORLD_RANK")) return detail::read_openmpi(lookup);
  // TensorFlow itself treats an empty TF_CONFIG as unset.
  if (const auto tf_config = lookup("TF_CONFIG"); tf_config && !is_blank(*tf_config)) {
    return detail::read_tf_config(lookup);
  }
  return {};
}

template <typename T>
void override_field(detail::Field<T>& field, const std::optional<T>& option, const char* name) {
  if (option) field.set(*option, std::string("EnvOptions::") + name);
}

void apply(const EnvOptions& options, detail::Layout& layout) {
  override_field(layout.rank, options.rank(), "rank");
  override_field(layout.local_rank, options.local_rank(), "local_rank");
  override_field(layout.world_size, options.world_size(), "world_size");
  override_field(layout.local_world_size, options.local_world_size(), "local_world_size");
  override_field(layout.node_rank, options.node_rank(), "node_rank");
  override_field(layout.num_nodes, options.num_nodes(), "num_nodes");
  override_field(layout.master_addr, options.master_addr(), "master_addr");
  override_field(layout.master_port, options.master_port(), "master_port");
  override_field(layout.restart_count, options.restart_count(), "restart_count");
  override_field(layout.run_id, options.run_id(), "run_id");
  if (options.rank() || options.world_size()) layout.source = Source::kExplicit;
}

}  // namespace

const char* to_string(Source source) {
  switch (source) {
    case Source::kExplicit:
      return "explicit";
    case Source::kTorchrun:
      return "torchrun";
    case Source::kSlurm:
      return "slurm";
    case Source::kOpenMpi:
      return "openmpi";
    case Source::kTfConfig:
      return "tf_config";
    case Source::kSingleProcess:
      return "single_process";
  }
  return "unknown";
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    if (const char* value = std::getenv(name.c_str())) return std::string(value);
    return std::nullopt;
  };
}

Environment from_env(const EnvOptions& options, const EnvLookup& lookup) {
  if (!lookup) throw EnvError("from_env: lookup is empty; pass process_env() or a table lookup");
  detail::Layout layout = read_selected_source(lookup);
  apply(options, layout);
  return detail::resolve(std::move(layout));
}

}  // namespace lockstep::env
