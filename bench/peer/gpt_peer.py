#!/usr/bin/env python3
"""PyTorch's side of bench/tp_gpt.sh and bench/gpt_fit.sh: the same GPT training as bench/tp_gpt_bench.cpp
(and, --size tiny, as `lockstep fit --model gpt`), in Python.

  gpt_peer.py --mode ddp|tp [--ranks N] [--size tiny|bench|small] [--batch B] [--steps S] [--warmup W]

ddp: torch.nn.parallel.DistributedDataParallel; tp: torch.distributed.tensor.parallel over all N ranks
(tests/e2e/tp_gpt_python.py's model and plan). N CPU processes over Gloo, float32, Adam (lr 3e-4), one
thread each, sequences that count up by one from a random start. Prints rank 0's line in tp_gpt_bench's
format: tokens_per_s over the timed steps, step_ms, peak_rss_mb.
"""
import argparse
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "e2e"))
from tp_gpt_python import Gpt, free_port, tensor_parallel_plan  # noqa: E402

SIZES = {"tiny": dict(vocab=256, context=64, layers=2, heads=2, width=64),  # GptOptions::tiny(), lockstep fit's
         "bench": dict(vocab=256, context=128, layers=4, heads=8, width=256),
         "small": dict(vocab=50304, context=1024, layers=12, heads=12, width=768)}


def rank_main(rank, args, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks, init_method=f"tcp://127.0.0.1:{port}")
    size = SIZES[args.size]
    torch.manual_seed(1234)
    model = Gpt(**size)
    dp_rank = rank
    if args.mode == "ddp":
        model.lm_head.weight = model.wte.weight
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module
        parallelize_module(model, init_device_mesh("cpu", (args.ranks,)), tensor_parallel_plan(size["layers"]))
        model.lm_head.weight = model.wte.weight
        dp_rank = 0
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    generator = torch.Generator().manual_seed(5678 + dp_rank)
    length = size["context"]

    def step():
        starts = torch.randint(size["vocab"], (args.batch, 1), generator=generator)
        tokens = (starts + torch.arange(length + 1)) % size["vocab"]
        optimizer.zero_grad()
        logits = model(tokens[:, :-1])
        if args.mode == "ddp":
            loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
            loss.backward()
        else:
            from torch.distributed.tensor.parallel import loss_parallel
            with loss_parallel():
                loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
                loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - start
    data_parallel = args.ranks if args.mode == "ddp" else 1
    tokens = args.steps * args.batch * length * data_parallel
    if rank == 0:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print(f"rank=0 mode=python-{args.mode} tokens_per_s={tokens / seconds:.1f} "
              f"step_ms={1000 * seconds / args.steps:.1f} peak_rss_mb={peak:.1f}", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["ddp", "tp"], default="ddp")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--size", choices=sorted(SIZES), default="bench")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    mp.spawn(rank_main, args=(args, free_port()), nprocs=args.ranks)


if __name__ == "__main__":
    main()
