"""A worker written for torchrun, unchanged: env:// rendezvous and Gloo from Python's torch.distributed.

`lockstep run` must start it exactly as torchrun would (Debian's own torchrun crashes on Python 3.11).
Checks the environment torchrun promises, then an all-reduce and a broadcast against closed forms.
With --env-out PREFIX each rank also writes its whole environment to PREFIX.rank<R>.json, for the
comparison of the two launchers (tests/e2e/torchrun_parity.sh).
"""
import json
import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--env-out":
        with open(f"{sys.argv[2]}.rank{os.environ.get('RANK', 'unset')}.json", "w") as out:
            json.dump(dict(os.environ), out, indent=1, sort_keys=True)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID"):
        if name not in os.environ:
            print(f"missing {name}", file=sys.stderr)
            return 1
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    t = torch.arange(10, dtype=torch.float32) + rank
    dist.all_reduce(t)
    expected = torch.arange(10, dtype=torch.float32) * world + world * (world - 1) / 2
    if not torch.equal(t, expected):
        print(f"rank {rank}: wrong all_reduce {t}", file=sys.stderr)
        return 1
    b = torch.tensor([float(rank == 0) * 7.0])
    dist.broadcast(b, src=0)
    if b.item() != 7.0:
        print(f"rank {rank}: wrong broadcast {b}", file=sys.stderr)
        return 1
    dist.barrier()
    dist.destroy_process_group()
    print(f"python rank {rank}/{world} ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
