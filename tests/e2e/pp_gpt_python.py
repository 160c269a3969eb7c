#!/usr/bin/env python3
"""The same pipeline-parallel GPT training in PyTorch, for tests/e2e/pp_python_parity.sh.

  pp_gpt_python.py DIR [--tolerance TOL]

Reads DIR/init.safetensors (written by tests/pipeline/pp_gpt_worker.cpp: the float64 models::Gpt's weights,
the token batches "tokens" [steps, rows, length + 1], the shape, lr and micro-batches as metadata), trains
the same GPT on 2 CPU processes (Gloo) with torch.distributed.pipelining's Schedule1F1B, split as lockstep
splits it (stage 0: the embeddings and block 0; stage 1: block 1, ln_f and the head), plain SGD, one batch
a step, and writes each step's loss (the mean of its micro-batches' losses) to DIR/python_losses.txt. Then
compares with DIR/cpp_losses.txt: every step within TOL (default 1e-9; both run in float64).

The model is tests/e2e/tp_gpt_python.py's (written from nanoGPT's description). Its head is tied to the
token embedding, which now lives on both stages: the last stage holds a copy of it and, after each step's
backward, the two stages sum their gradients of it (dist.all_reduce), as Megatron-LM keeps its embeddings
tied across pipeline stages; the copies then stay equal.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_safetensors import read_safetensors  # noqa: E402
from tp_gpt_python import Gpt, compare_losses, load  # noqa: E402


class FirstStage(nn.Module):
    """The embeddings and the first `blocks` blocks (bench/pp_gpt_torch.py cuts elsewhere than after 1)."""

    def __init__(self, full, blocks=1):
        super().__init__()
        self.wte, self.wpe, self.blocks = full.wte, full.wpe, nn.Sequential(*full.blocks[:blocks])

    def forward(self, ids):
        return self.blocks(self.wte(ids) + self.wpe(torch.arange(ids.shape[1])))


class LastStage(nn.Module):
    """The blocks after the first `first_blocks`, ln_f and the head, whose weight is a copy of the token
    embedding."""

    def __init__(self, full, first_blocks=1):
        super().__init__()
        self.blocks, self.ln_f = nn.Sequential(*full.blocks[first_blocks:]), full.ln_f
        self.head = nn.Parameter(full.wte.weight.detach().clone())

    def forward(self, x):
        return F.linear(self.ln_f(self.blocks(x)), self.head)


def rank_main(rank, directory):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    dist.init_process_group("gloo", rank=rank, world_size=2,
                            init_method=f"file://{os.path.join(directory, 'torch_file_store')}")
    arrays, _, metadata = read_safetensors(os.path.join(directory, "init.safetensors"))
    size = {key: int(metadata[key]) for key in ("vocab_size", "context", "layers", "heads", "embedding")}
    if size["layers"] != 2:
        sys.exit(f"pp_gpt_python: the split is written for 2 layers, the file has {size['layers']}")
    full = Gpt(size["vocab_size"], size["context"], size["layers"], size["heads"], size["embedding"]).double()
    load(full, arrays, size["embedding"])
    module = FirstStage(full) if rank == 0 else LastStage(full)
    stage = PipelineStage(module, rank, 2, torch.device("cpu"))
    vocab = size["vocab_size"]

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1))

    # scale_grads: the gradients divided by the micro-batches, i.e. those of the batch's mean loss (the
    # default since PyTorch 2.7; said here so that it is not left to the default).
    schedule = Schedule1F1B(stage, int(metadata["micro_batches"]), loss_fn=loss_fn, scale_grads=True)
    optimizer = torch.optim.SGD(module.parameters(), lr=float(metadata["lr"]))
    tokens = torch.from_numpy(np.array(arrays["tokens"]))
    losses = []
    for batch in tokens:
        optimizer.zero_grad()
        if rank == 0:
            schedule.step(batch[:, :-1].contiguous())
            tied = module.wte.weight.grad
        else:
            micro_losses = []
            schedule.step(target=batch[:, 1:].contiguous(), losses=micro_losses)
            losses.append(torch.stack(micro_losses).mean().item())
            tied = module.head.grad
        dist.all_reduce(tied)
        optimizer.step()
    if rank == 1:
        with open(os.path.join(directory, "python_losses.txt"), "w") as f:
            f.write("".join(f"{x!r}\n" for x in losses))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--tolerance", type=float, default=1e-9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    mp.spawn(rank_main, args=(args.directory,), nprocs=2)
    steps, worst = compare_losses(args.directory, args.tolerance)
    print(f"pp_python_parity: ok, {steps} steps of 1F1B on 2 stages, largest loss difference {worst:.3g}")


if __name__ == "__main__":
    main()
