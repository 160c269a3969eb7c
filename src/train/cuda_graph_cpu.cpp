// StepGraph where LibTorch has no CUDA (Debian's LibTorch 1.13): nothing to capture (cuda_graph.h).
#include <stdexcept>

#include <torch/version.h>

#include "lockstep/train/cuda_graph.h"

namespace lockstep::train {

struct StepGraph::Impl {};

std::string StepGraph::unavailable(const c10::Device& /*device*/) {
  return "lockstep was built against LibTorch " TORCH_VERSION " without CUDA";
}

StepGraph::StepGraph(const c10::Device& device) {
  throw std::logic_error("StepGraph on " + device.str() + ": " + unavailable(device));
}

StepGraph::~StepGraph() = default;

void StepGraph::capture(const std::function<void()>& /*step*/) {}

void StepGraph::replay() {}

bool StepGraph::captured() const {
  return false;
}

}  // namespace lockstep::train
