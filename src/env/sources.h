#pragma once

// One reader per launcher (internal to lockstep::env). Each is called only when its selector variable
// is set (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, a non-blank TF_CONFIG) and reads that launcher's
// variables into a Layout, validating each one and their consistency with each other.

#include <lockstep/env/environment.h>

#include "layout.h"

namespace lockstep::env::detail {

Layout read_torchrun(const EnvLookup& lookup);   // torchrun_source.cpp
Layout read_slurm(const EnvLookup& lookup);      // slurm_source.cpp
Layout read_openmpi(const EnvLookup& lookup);    // openmpi_source.cpp
Layout read_tf_config(const EnvLookup& lookup);  // tf_config.cpp

}  // namespace lockstep::env::detail
