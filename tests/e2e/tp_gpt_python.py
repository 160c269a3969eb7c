#!/usr/bin/env python3
"""The same tensor-parallel GPT training in PyTorch, for tests/e2e/tp_python_parity.sh.

  tp_gpt_python.py DIR [--ranks N] [--tolerance TOL]

Reads DIR/init.safetensors (written by tests/models/tp_gpt_worker.cpp: the float64 models::Gpt's weights
under its parameter names, the token batches "tokens" [steps, rows, length + 1], the shape and lr as
metadata), trains the same GPT-2 shape on N CPU processes (Gloo) with torch.distributed.tensor.parallel,
tensor parallel only (mesh of N), plain SGD, one batch a step, and writes each step's loss to
DIR/python_losses.txt and its trained parameters (gathered whole) to DIR/python_final.npz. Then compares
with DIR/cpp_losses.txt and DIR/cpp_final.safetensors: every step's loss and every final parameter within
TOL (default 1e-9: both run in float64; the two sides add the ranks' partial sums in different orders,
nothing more).

The Python model is written here from nanoGPT's description, not from lockstep's code: pre-LayerNorm
blocks, GELU (tanh), causal attention, the head tied to the token embedding. Queries, keys and values are
three Linear layers (ColwiseParallel needs each head's q, k and v on the same rank: the fused c_attn of
the file is cut into its three row blocks). The plan, as PyTorch's tensor-parallel tutorial writes it:
token embedding RowwiseParallel (split by vocabulary), q, k, v and the MLP's c_fc ColwiseParallel, both
c_proj RowwiseParallel, the head ColwiseParallel with its logits kept split by vocabulary and the loss
under loss_parallel(); position embedding and LayerNorms replicated.
"""
import argparse
import math
import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_safetensors import read_safetensors  # noqa: E402


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)
        self.c_proj = nn.Linear(width, width)
        self.head_width = width // heads

    def forward(self, x):
        b, t, _ = x.shape
        # Under tensor parallelism each rank sees its own heads: -1 is the local number of heads.
        q, k, v = (f(x).view(b, t, -1, self.head_width).transpose(1, 2) for f in (self.q, self.k, self.v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_width)
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        y = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(width), Attention(width, heads)
        self.ln_2, self.mlp = nn.LayerNorm(width), Mlp(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, vocab, context, layers, heads, width):
        """The head is not tied here: tie it (lm_head.weight = wte.weight) after any parallelize_module."""
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def load(model, arrays, width):
    """The file's tensors into the full model; c_attn cut into q, k, v."""
    state = {}
    for name, array in arrays.items():
        if name == "tokens":
            continue
        tensor = torch.from_numpy(np.array(array))
        if ".attn.c_attn." in name:
            prefix, kind = name.split(".c_attn.")
            for part, rows in zip("qkv", tensor.split(width, dim=0)):
                state[f"{prefix}.{part}.{kind}"] = rows
        else:
            state[name] = tensor
    state["lm_head.weight"] = state["wte.weight"]
    model.load_state_dict(state, strict=True)


def tensor_parallel_plan(layers):
    """parallelize_module's plan for Gpt (see the module's docstring)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {
        "wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
    }
    for i in range(layers):
        for name in ("attn.q", "attn.k", "attn.v", "mlp.c_fc"):
            plan[f"blocks.{i}.{name}"] = ColwiseParallel()
        for name in ("attn.c_proj", "mlp.c_proj"):
            plan[f"blocks.{i}.{name}"] = RowwiseParallel()
    return plan


def rank_main(rank, ranks, directory):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module

    # A file store in the run's own directory: no port to race for with the tests running beside this one.
    # (A CI run once saw a rank here abort with SIGABRT, before any comparison; a port taken between picking
    # a free one and rank 0 binding it is the likely cause.)
    store = os.path.join(directory, "torch_file_store")
    dist.init_process_group("gloo", rank=rank, world_size=ranks, init_method=f"file://{store}")
    arrays, _, metadata = read_safetensors(os.path.join(directory, "init.safetensors"))
    size = {key: int(metadata[key]) for key in ("vocab_size", "context", "layers", "heads", "embedding")}
    lr = float(metadata["lr"])
    model = Gpt(size["vocab_size"], size["context"], size["layers"], size["heads"], size["embedding"]).double()
    load(model, arrays, size["embedding"])
    parallelize_module(model, init_device_mesh("cpu", (ranks,)), tensor_parallel_plan(size["layers"]))
    model.lm_head.weight = model.wte.weight  # tied again: both are the vocabulary-split [V, C] table
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    tokens = torch.from_numpy(np.array(arrays["tokens"]))
    losses = []
    for batch in tokens:
        optimizer.zero_grad()
        logits = model(batch[:, :-1])
        with loss_parallel():
            loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
            loss.backward()
        optimizer.step()
        value = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        losses.append(value.item())
    # The trained parameters whole, under the file's names (q, k, v fused into c_attn again).
    whole = {}
    for name, value in model.state_dict().items():
        whole[name] = value.full_tensor() if hasattr(value, "full_tensor") else value
    for name in [n for n in whole if ".attn.q." in n]:
        prefix, kind = name.split(".attn.q.")
        parts = [whole.pop(f"{prefix}.attn.{p}.{kind}") for p in "qkv"]
        whole[f"{prefix}.attn.c_attn.{kind}"] = torch.cat(parts, 0)
    whole.pop("lm_head.weight")  # the tied wte.weight
    if rank == 0:
        with open(os.path.join(directory, "python_losses.txt"), "w") as f:
            f.write("".join(f"{x!r}\n" for x in losses))
        np.savez(os.path.join(directory, "python_final.npz"), **{k: v.detach().numpy() for k, v in whole.items()})
    dist.destroy_process_group()




def compare_losses(directory, tolerance):
    """DIR/cpp_losses.txt against DIR/python_losses.txt, step by step, printed; exits with FAIL unless the
    lockstep loss fell and every step is within `tolerance`. Returns (steps, largest difference)."""
    with open(os.path.join(directory, "cpp_losses.txt")) as f:
        cpp = [float(line) for line in f]
    with open(os.path.join(directory, "python_losses.txt")) as f:
        python = [float(line) for line in f]
    if len(cpp) != len(python) or not cpp:
        sys.exit(f"FAIL: {len(cpp)} lockstep losses, {len(python)} PyTorch losses")
    print("step  lockstep               pytorch                difference")
    worst = 0.0
    for step, (a, b) in enumerate(zip(cpp, python)):
        worst = max(worst, abs(a - b))
        print(f"{step:4d}  {a:.17g}  {b:.17g}  {abs(a - b):.3g}")
    if not cpp[-1] < cpp[0]:
        sys.exit(f"FAIL: the loss did not fall ({cpp[0]} -> {cpp[-1]}): the comparison would show nothing")
    if worst > tolerance:
        sys.exit(f"FAIL: the losses differ by up to {worst:.3g} (tolerance {tolerance:g})")
    return len(cpp), worst


def free_port():
    """A free TCP port (bench/peer/gpt_peer.py's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=1e-9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    mp.spawn(rank_main, args=(args.ranks, args.directory), nprocs=args.ranks)
    steps, worst = compare_losses(args.directory, args.tolerance)
    cpp_final, _, _ = read_safetensors(os.path.join(args.directory, "cpp_final.safetensors"))
    python_final = np.load(os.path.join(args.directory, "python_final.npz"))
    if sorted(cpp_final) != sorted(python_final.files):
        sys.exit(f"FAIL: the final parameters differ in names: {sorted(cpp_final)} vs {sorted(python_final.files)}")
    weights = max(float(np.abs(cpp_final[n] - python_final[n]).max()) for n in cpp_final)
    if weights > args.tolerance:
        sys.exit(f"FAIL: the final parameters differ by up to {weights:.3g} (tolerance {args.tolerance:g})")
    print(f"tp_python_parity: ok, {steps} steps, largest loss difference {worst:.3g}, "
          f"largest final parameter difference {weights:.3g} over {len(cpp_final)} tensors")


if __name__ == "__main__":
    main()
