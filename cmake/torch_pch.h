// Precompiled header shared by every lockstep target that uses LibTorch.
// Keep it to headers that change rarely and are included by most torch translation units.
#pragma once
#include <ATen/ATen.h>
#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
