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

void StepGraph::capture(const std::function<void()>& /*step*/) {
  throw std::logic_error("StepGraph::capture: " + unavailable(c10::Device(c10::kCPU)));
}

void StepGraph::replay() {
  throw std::logic_error("StepGraph::replay: " + unavailable(c10::Device(c10::kCPU)));
}

bool StepGraph::captured() const {
  return false;
}

bool StepGraph::wait_for(std::chrono::milliseconds /*timeout*/) const {
  return true;
}

}  // namespace lockstep::train
