#pragma once

namespace lockstep::train {

/// Keeps the large blocks that every training step allocates and frees (activations, gradients) in
/// glibc's heap instead of fresh mmaps, and keeps the freed heap instead of returning it to the kernel
/// after every step.
///
/// With glibc's defaults, a block above the mmap threshold (128 KiB, rising to at most 32 MiB as blocks
/// are freed) is a new mapping whose pages all fault again on every step: about 40% of a ResNet18 step on
/// a CPU (docs/benchmarks.md). This sets M_MMAP_THRESHOLD to 32 MiB (glibc's largest) and
/// M_TRIM_THRESHOLD to 256 MiB. It changes process-wide allocator settings, so the library never calls it
/// by itself: a program calls it once, first thing in main (`lockstep-fit` does).
///
/// Returns false and changes nothing when the user set any `glibc.malloc.*` tunable in GLIBC_TUNABLES or
/// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ (their settings win). Returns true when both settings
/// were applied, false if glibc refused one (the other may then be in force). Not thread-safe against
/// concurrent calls.
///
/// Example:
///   int main() { lockstep::train::keep_step_memory_in_heap(); ... }
bool keep_step_memory_in_heap();

}  // namespace lockstep::train
