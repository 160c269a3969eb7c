"""Prints torch.utils.data.DistributedSampler's indices for the cases given as JSON on stdin.

Input: a JSON list of [size, replicas, rank, shuffle, seed, epoch, drop_last].
Output: a JSON list with one index list per case. Used by tests/data/test_distributed_sampler.cpp to
check lockstep's sampler against PyTorch itself (Debian's python3-torch) at test time.
"""
import json
import sys

from torch.utils.data import DistributedSampler


def main() -> None:
    cases = json.load(sys.stdin)
    out = []
    for size, replicas, rank, shuffle, seed, epoch, drop_last in cases:
        sampler = DistributedSampler(range(size), num_replicas=replicas, rank=rank, shuffle=bool(shuffle),
                                     seed=seed, drop_last=bool(drop_last))
        sampler.set_epoch(epoch)
        out.append(list(iter(sampler)))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
