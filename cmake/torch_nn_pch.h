// The full precompiled header: the core one and the C++ frontend's modules and optimizers
// (lockstep_use_torch(TARGET NN)), for targets that build or train models.
#pragma once
#include "torch_pch.h"  // first: the core one

#include <torch/nn.h>
#include <torch/optim.h>
