#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <c10/core/Device.h>

namespace lockstep::train {

/// One training step captured in a CUDA graph and replayed (TrainerOptions::cuda_graphs).
///
/// At W1's batch 64 a step is about thirty small kernels, and the host's time to launch them is the step
/// time. A graph holds the whole step (forward, backward, DDP's all-reduce, the optimizer) as one launch:
/// the kernels' arguments, including every tensor's address, are fixed when the step is captured, so the
/// inputs are static buffers each batch is copied into, and what the step computes (the loss, the
/// gradients) lands at the same addresses at every replay. Capturing runs no kernel: the captured step is
/// replayed once right after.
///
/// Capture needs a stream other than the device's default one: a StepGraph makes one of LibTorch's pool
/// streams current for its lifetime, so every step, eager or replayed, and everything between them run
/// on it in order. Built from cuda_graph_cuda.cpp where LibTorch has CUDA, else from cuda_graph_cpu.cpp,
/// which captures nothing.
class StepGraph {
 public:
  /// Why this build cannot capture a step on `device` ("" when it can): a LibTorch without CUDA or older
  /// than 2.4 (whose _fused_adam_ reads no learning rate from device memory), or not a GPU.
  static std::string unavailable(const c10::Device& device);

  /// Waits for `device`, then makes a side stream of it current in this thread until destroyed (which
  /// waits for that stream, unless an exception is unwinding: a stream stuck in a collective would hold
  /// the process).
  explicit StepGraph(const c10::Device& device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  /// Captures the kernels `step` launches (running none of them). Throws std::runtime_error with CUDA's
  /// reason when the step cannot be captured (it read a value on the host, e.g. .item(), or called what a
  /// graph cannot hold); the graph is then left uncaptured.
  void capture(const std::function<void()>& step);
  /// Runs the captured step once more.
  void replay();
  bool captured() const;
  /// Waits until the device has run everything queued on the stream so far, at most `timeout`; false
  /// when it has not by then. A replayed step's all-reduce is NCCL's, but NCCL's watchdog and lockstep's
  /// progress records never see it (it was issued once, at capture): this is how a rank finds that a peer
  /// stopped.
  bool wait_for(std::chrono::milliseconds timeout) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::train
