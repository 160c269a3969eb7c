// StepGraph where LibTorch has CUDA: at::cuda::CUDAGraph on a pool stream (cuda_graph.h).
#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <thread>

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include "lockstep/detail/torch_version.h"
#include "lockstep/train/cuda_graph.h"

namespace lockstep::train {

struct StepGraph::Impl {
  explicit Impl(const c10::Device& device) : stream(c10::cuda::getStreamFromPool(false, device.index())) {}
  c10::cuda::CUDAStream stream;
  c10::cuda::CUDAStreamGuard current{stream};
  at::cuda::CUDAGraph graph;
  bool captured = false;
};

std::string StepGraph::unavailable(const c10::Device& device) {
  if (!device.is_cuda()) return "the step runs on " + device.str() + ", not on a GPU";
#if LOCKSTEP_TORCH_AT_LEAST(2, 4)
  return "";
#else
  return "LibTorch " TORCH_VERSION " is older than 2.4";
#endif
}

StepGraph::StepGraph(const c10::Device& device) {
  const std::string why = unavailable(device);
  if (!why.empty()) throw std::logic_error("StepGraph on " + device.str() + ": " + why);
  c10::cuda::device_synchronize();  // what the default stream queued comes first
  impl_ = std::make_unique<Impl>(device);
}

StepGraph::~StepGraph() {
  if (impl_ && std::uncaught_exceptions() == 0) impl_->stream.synchronize();
}

// Thread-local capture mode: other threads of the process (the rank's progress thread, NCCL's watchdog,
// the loader's workers) may go on calling CUDA while this thread captures; autograd's device thread
// launches backward's kernels on this stream, which is what is captured.
void StepGraph::capture(const std::function<void()>& step) {
  TORCH_CHECK(!impl_->captured, "StepGraph::capture: already captured");
  impl_->stream.synchronize();
  impl_->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  try {
    step();
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (const auto* error = dynamic_cast<const c10::Error*>(&e)) what = error->what_without_backtrace();
    try {
      impl_->graph.capture_end();
    } catch (const std::exception&) {
      // The capture was already invalidated by what failed; ending it is all that matters.
    }
    impl_->graph.reset();
    throw std::runtime_error(what);
  }
  impl_->graph.capture_end();
  impl_->captured = true;
}

void StepGraph::replay() {
  TORCH_CHECK(impl_->captured, "StepGraph::replay before capture");
  impl_->graph.replay();
}

bool StepGraph::captured() const {
  return impl_->captured;
}

bool StepGraph::wait_for(std::chrono::milliseconds timeout) const {
  at::cuda::CUDAEvent done;
  done.record(impl_->stream);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(50);
  while (!done.query()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace lockstep::train
