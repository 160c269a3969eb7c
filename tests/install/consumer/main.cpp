// Built against an installed lockstep by tests/install: proves the package config and headers work, and
// that the umbrella header compiles on its own (it is the first and only lockstep include here).
#include <lockstep/lockstep.h>

#include <cstdio>

int main() {
  const auto e = lockstep::env::from_env(lockstep::env::EnvOptions().rank(1).world_size(3));
  const auto trainer_options =
      lockstep::train::TrainerOptions().precision(lockstep::train::Precision::kBf16Mixed);
  const auto ddp_options = lockstep::ddp::DdpOptions().find_unused_parameters(true);
  std::printf("consumer: rank %d of %d, precision %s, find_unused_parameters %d\n", e.rank, e.world_size,
              lockstep::train::to_string(trainer_options.precision()),
              ddp_options.find_unused_parameters() ? 1 : 0);
  return e.rank == 1 && e.world_size == 3 ? 0 : 1;
}
