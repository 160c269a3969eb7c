// Built against an installed lockstep by tests/install: proves the package config and headers work.
#include <cstdio>

#include "lockstep/env/environment.h"
#include "lockstep/launch/launch_options.h"

int main() {
  const auto e = lockstep::env::from_env(lockstep::env::EnvOptions().rank(1).world_size(3));
  std::printf("consumer: rank %d of %d\n", e.rank, e.world_size);
  return e.rank == 1 && e.world_size == 3 ? 0 : 1;
}
