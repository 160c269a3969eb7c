#pragma once

// lockstep::launch — torchrun's launcher as a library: start this node's workers with torchrun's
// environment, forward their output with rank prefixes, stop everyone when one fails.
#include "lockstep/launch/launch_config.h"
#include "lockstep/launch/launch_error.h"
#include "lockstep/launch/launch_options.h"
#include "lockstep/launch/launch_result.h"
#include "lockstep/launch/launcher.h"
#include "lockstep/launch/nproc_per_node.h"
#include "lockstep/launch/rank_start.h"
#include "lockstep/launch/worker_env.h"
#include "lockstep/launch/worker_exit.h"
