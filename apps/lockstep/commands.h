#pragma once

// Subcommands of the `lockstep` CLI. Each takes the arguments after its own name
// (argv[0] is the subcommand name) and returns the process exit status.
namespace lockstep::cli {

int run_main(int argc, char** argv);     // lockstep run    (cmd_run.cpp; the flags: torchrun_flags.cpp)
int launch_main(int argc, char** argv);  // lockstep launch (cmd_launch.cpp; the flags: accelerate_flags.cpp)
int env_main(int argc, char** argv);     // lockstep env    (cmd_env.cpp)
int fit_main(int argc, char** argv);     // lockstep fit    (cmd_fit.cpp)
int bench_main(int argc, char** argv);   // lockstep bench  (cmd_bench.cpp; one file per benchmark)
int export_main(int argc, char** argv);  // lockstep export (cmd_export.cpp; execs lockstep-export)
int slurm_main(int argc, char** argv);   // lockstep slurm  (cmd_slurm.cpp; the script: slurm_script.cpp)
int report_main(int argc, char** argv);  // lockstep report (cmd_report.cpp; the page: report_page.cpp)

}  // namespace lockstep::cli
