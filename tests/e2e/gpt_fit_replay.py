#!/usr/bin/env python3
"""An independent reference for `lockstep fit --model gpt --data text`: the same training replayed in one
process with PyTorch alone (no lockstep code), as fit_replay.py does for the MLP.

  gpt_fit_replay.py TEXT OUT.safetensors --devices W --batch-size B --epochs E --batches N --seed S --lr LR

What `lockstep fit --model gpt --data text --text-file TEXT --optimizer sgd --lr LR --lr-schedule constant
--devices W --batch-size B --max-epochs E --limit-train-batches N --seed S` trains (SGD, momentum 0.9),
written as OUT.safetensors (float32, the model's names and order) for compare_safetensors.py:
  - the text as bytes; windows of 65 bytes, window w starting at byte 64 w; the first floor(0.9 windows)
    train (lockstep's split_text);
  - GPT-2's model with lockstep's tiny sizes (2 layers, 2 heads, width 64, context 64, vocabulary 256, no
    dropout), written here from nanoGPT's description: modules created in the order wte, wpe, then per
    block ln_1, attn (c_attn, c_proj), ln_2, mlp (c_fc, c_proj), then ln_f, right after
    torch.manual_seed(S), so that torch's default initialisers draw what LibTorch's draw; then GPT-2's
    initialisation over the modules in that order (Linear and Embedding weights normal(0, 0.02), the
    c_proj weights normal(0, 0.02 / sqrt(2 layers)), biases 0), the head tied to wte;
  - rank r's windows those of DistributedSampler(num_replicas=W, rank=r, shuffle=True, seed=S) after
    set_epoch(e), the first N batches of B; a step averages the ranks' mean losses over every position.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit_replay import write_safetensors  # noqa: E402

VOCAB, CONTEXT, LAYERS, HEADS, WIDTH = 256, 64, 2, 2, 64


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (part.view(b, t, HEADS, WIDTH // HEADS).transpose(1, 2) for part in self.c_attn(x).split(WIDTH, 2))
        scores = q @ k.transpose(-2, -1) / math.sqrt(WIDTH // HEADS)
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return self.c_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, WIDTH))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(WIDTH)
        self.mlp = Mlp()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)
        with torch.no_grad():
            for name, module in self.named_modules():
                if isinstance(module, nn.Linear):
                    std = 0.02 / math.sqrt(2 * LAYERS) if name.endswith("c_proj") else 0.02
                    module.weight.normal_(0.0, std)
                    module.bias.zero_()
                elif isinstance(module, nn.Embedding):
                    module.weight.normal_(0.0, 0.02)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.size(1)))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("text")
    p.add_argument("out")
    for flag in ("--devices", "--batch-size", "--epochs", "--batches", "--seed"):
        p.add_argument(flag, type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    data = torch.frombuffer(bytearray(open(args.text, "rb").read()), dtype=torch.uint8).long()
    train = math.floor((data.numel() - 1) // CONTEXT * (1.0 - 0.1))
    windows = data[: train * CONTEXT + 1].unfold(0, CONTEXT + 1, CONTEXT)
    torch.manual_seed(args.seed)
    model = Gpt()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    world, batch = args.devices, args.batch_size
    samplers = [DistributedSampler(range(train), num_replicas=world, rank=r, shuffle=True, seed=args.seed)
                for r in range(world)]
    assert len(samplers[0]) >= args.batches * batch, "the replay models whole batches only"
    for epoch in range(args.epochs):
        for sampler in samplers:
            sampler.set_epoch(epoch)
        shares = [torch.tensor(list(sampler), dtype=torch.long) for sampler in samplers]
        for b in range(args.batches):
            optimizer.zero_grad()
            loss = 0.0
            for share in shares:
                rows = windows[share[b * batch:(b + 1) * batch]]
                logits = model(rows[:, :-1])
                loss = loss + F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten()) / world
            loss.backward()
            optimizer.step()
    write_safetensors(args.out, dict(model.named_parameters()))
    print(f"replayed {args.epochs} x {args.batches} steps of {world} rank(s) x {batch} windows: {args.out}")


if __name__ == "__main__":
    main()
