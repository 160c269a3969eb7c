// `lockstep-export`: the LibTorch side of `lockstep export` (the CLI execs it); see
// lockstep/train/checkpoint_export.h.
#include <cstdio>
#include <exception>

#include "export_flags.h"
#include "lockstep/train/checkpoint_export.h"
#include "lockstep/train/error_message.h"

int main(int argc, char** argv) {
  lockstep::cli::ExportFlags flags;
  if (const int status = lockstep::cli::parse_export_flags(argc, argv, flags); status >= 0) return status;
  try {
    const lockstep::train::ExportResult result =
        lockstep::train::export_safetensors(flags.input, flags.output);
    std::string what = result.kind == "checkpoint" ? "checkpoint" : "module archive";
    if (const auto model = result.metadata.find("model"); model != result.metadata.end()) {
      what += " of model '" + model->second + "'";
    }
    std::printf("exported %zu tensors (%lld values) of %s '%s' to %s\n", result.tensors,
                static_cast<long long>(result.values), what.c_str(), result.input.c_str(),
                result.output.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep export: %s\n", lockstep::train::error_message(e).c_str());
    return 1;
  }
}
