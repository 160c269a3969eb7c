#!/usr/bin/env python3
"""PyTorch's pipelining on bench/pp_gpt_bench.cpp's GPT, for bench/pp_gpt.sh's comparison.

  pp_gpt_torch.py --schedule gpipe|1f1b --micro-batches M --first-blocks K [--batch B] [--steps N] [--warmup W]

Two CPU processes (Gloo), one thread each, torch.distributed.pipelining's ScheduleGPipe or Schedule1F1B over
the GPT of bench/pp_gpt_bench.cpp (vocabulary 256, context 128, 4 layers of 8 heads, width 256, float32,
Adam lr 3e-4) cut where lockstep's balanced cut puts it (stage 0: the embeddings and the first K blocks;
stage 1: the rest, ln_f and the head, a copy of the token embedding whose gradient the two stages sum, as in
tests/e2e/pp_gpt_python.py), B sequences a step that count up by one from a random start. Prints one line
as pp_gpt_bench does: tokens_per_s (B x context tokens a step over the timed steps' wall time) and step_ms.
"""
import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from pp_gpt_python import FirstStage, LastStage  # noqa: E402
from tp_gpt_python import Gpt  # noqa: E402

VOCAB, CONTEXT, LAYERS, HEADS, WIDTH = 256, 128, 4, 8, 256


def rank_main(rank, args, store):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"file://{store}")
    torch.manual_seed(1234)
    full = Gpt(VOCAB, CONTEXT, LAYERS, HEADS, WIDTH)
    module = FirstStage(full, args.first_blocks) if rank == 0 else LastStage(full, args.first_blocks)
    stage = PipelineStage(module, rank, 2, torch.device("cpu"))

    def loss_fn(logits, target):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    kind = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
    schedule = kind(stage, args.micro_batches, loss_fn=loss_fn)
    adam = torch.optim.Adam(module.parameters(), lr=3e-4)
    torch.manual_seed(5678)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        tokens = (torch.randint(VOCAB, (args.batch, 1)) + torch.arange(CONTEXT + 1)) % VOCAB
        adam.zero_grad()
        if rank == 0:
            schedule.step(tokens[:, :-1].contiguous())
            tied = module.wte.weight.grad
        else:
            schedule.step(target=tokens[:, 1:].contiguous())
            tied = module.head.grad
        dist.all_reduce(tied)
        adam.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"torch schedule={args.schedule} M={args.micro_batches} "
              f"tokens_per_s={args.batch * CONTEXT * args.steps / seconds:.1f} "
              f"step_ms={1000 * seconds / args.steps:.1f}", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=["gpipe", "1f1b"], required=True)
    parser.add_argument("--micro-batches", type=int, required=True)
    parser.add_argument("--first-blocks", type=int, required=True)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        mp.spawn(rank_main, args=(args, os.path.join(directory, "store")), nprocs=2)


if __name__ == "__main__":
    main()
