#include "export_flags.h"

#include "cli_parse.h"

#include <iostream>

#include <CLI/CLI.hpp>

namespace lockstep::cli {
namespace {

constexpr const char* kExportDescription =
    "Write the model weights of a checkpoint of `lockstep fit` (DIR/last.ckpt, a --save-top-k file) or of\n"
    "its final weights (DIR/final.pt, any LibTorch module archive) as safetensors, readable from Python\n"
    "with json + numpy or the safetensors package. The model's class is not needed: the tensors are read\n"
    "as stored, with the names and order of final.safetensors (PyTorch's state_dict()).";

constexpr const char* kExportFooter =
    "Examples:\n"
    "  lockstep export ck/last.ckpt                       # -> ck/last.safetensors\n"
    "  lockstep export ck/epoch=3-val_loss=0.2514.ckpt -o best.safetensors\n"
    "  lockstep export ck/final.pt -o /models/mlp.safetensors\n"
    "The file is written atomically (temporary file, fsync, rename). See docs/export.md.\n"
    "Exit status: 0 on success, 1 when the input cannot be exported, 2 for bad arguments.";

}  // namespace

int parse_export_flags(int argc, char** argv, ExportFlags& flags) {
  CLI::App app(kExportDescription, "lockstep export");
  app.footer(kExportFooter);
  app.get_formatter()->column_width(30);
  app.add_option("checkpoint", flags.input, "The checkpoint (.ckpt) or final weights (.pt) to export")
      ->type_name("CHECKPOINT")
      ->required();
  app.add_option("-o,--output", flags.output,
                 "Where to write the safetensors file. Default: CHECKPOINT with\n"
                 ".safetensors instead of its extension")
      ->type_name("OUT.safetensors");
  const int status = parse_or_status(app, argc, argv, [](const std::string& message) {
    std::cerr << "lockstep export: " << message << "\nRun 'lockstep export --help' for the arguments.\n";
    return 2;
  });
  if (status >= 0) return status;
  if (flags.input.empty()) {
    std::cerr
        << "lockstep export: the checkpoint path is empty\nRun 'lockstep export --help' for the arguments.\n";
    return 2;
  }
  return -1;
}

}  // namespace lockstep::cli
