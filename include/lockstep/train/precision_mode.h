#pragma once

#include <string>

namespace lockstep::train {

/// The numeric precision of training (Lightning's `precision`, Accelerate's `mixed_precision`). What each
/// one does to a step: precision.h (autocast, the GradScaler). Free of LibTorch, like TrainerOptions.
enum class Precision {
  k32,         ///< float32 throughout
  kBf16Mixed,  ///< forward under autocast to bfloat16 (CPU and CUDA); weights, gradients and optimizer in
               ///< float32
  k16Mixed,    ///< forward under autocast to float16 with a GradScaler (CUDA; the CPU with LibTorch >= 2.5,
               ///< whose CPU autocast has float16: precision.h)
};

/// Parses Lightning's spellings "32" (also "32-true"), "bf16-mixed", "16-mixed" and Accelerate's "no",
/// "bf16", "fp16". Throws std::invalid_argument naming the value and the accepted ones.
Precision parse_precision(const std::string& text);
/// Lightning's spelling: "32", "bf16-mixed", "16-mixed".
const char* to_string(Precision precision);

}  // namespace lockstep::train
