#pragma once

// Waiting in tests for something another thread or process does: polled, bounded only against a hang.

#include <chrono>
#include <thread>

namespace lockstep::testing {

/// Polls `done` every 10 ms until it holds or `timeout` passes; returns its last value. The timeout only
/// bounds a hang: make it generous, and never the thing a test asserts.
template <class Predicate>
bool wait_until(Predicate done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace lockstep::testing
