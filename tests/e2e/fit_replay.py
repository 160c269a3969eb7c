#!/usr/bin/env python3
"""An independent reference for `lockstep fit`'s weights: the same training replayed in one process with
PyTorch alone (torch.nn, torch.optim.Adam, torch.utils.data.DistributedSampler, clip_grad_norm_), no
lockstep code. The e2e tests compare a strategy with ddp, and N ranks with one; this anchors them to what
the training should give, so that a mistake common to every lockstep run cannot pass.

  fit_replay.py write-idx DIR TRAIN TEST SEED
      Writes MNIST-format IDX files (train-*, t10k-*) into DIR: TRAIN and TEST 28x28 images, 10 classes, each
      image its class's random prototype plus noise (learnable), labels balanced in a random order.
  fit_replay.py replay DIR OUT.safetensors --devices W --batch-size B --epochs E --seed S
                [--accumulate A] [--clip C] [--lr LR]
      What `lockstep fit --data mnist --data-dir DIR --model mlp --dropout 0 --lr-schedule constant
      --devices W --batch-size B --max-epochs E --seed S --accumulate-grad-batches A --gradient-clip-val C`
      trains (Adam, lr 1e-3 unscaled), written as OUT.safetensors (float32, the model's names and order) for
      compare_safetensors.py. The data as torchvision's ToTensor + Normalize(0.1307, 0.3081); the model the
      seeds' MLP (bench/peer/ddp_peer.py's Mlp, dropout 0) built right after torch.manual_seed(S); rank r's
      samples those of DistributedSampler(num_replicas=W, rank=r, shuffle=True, seed=S) after set_epoch(e).
      One optimizer step takes A batches of every rank and averages their mean losses (DDP averages the
      ranks' gradients, accumulation divides each batch's loss by A), then clips the gradients' global
      2-norm to C. Each rank's share must be whole batches and whole steps (the replay models nothing else).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peer"))
from ddp_peer import Mlp, find, read_idx  # noqa: E402

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def write_idx(path, array):
    """A uint8 array as an IDX file (magic 0x0000 08 NDIM, big-endian dimensions, the bytes)."""
    with open(path, "wb") as f:
        f.write(struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape))
        f.write(np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def write_data(directory, train, test, seed):
    rng = np.random.default_rng(seed)
    prototypes = rng.integers(0, 256, size=(10, 28, 28))
    os.makedirs(directory, exist_ok=True)
    for prefix, n in (("train", train), ("t10k", test)):
        labels = rng.permutation(n) % 10
        images = np.clip(np.rint(prototypes[labels] + rng.normal(0, 48, size=(n, 28, 28))), 0, 255)
        write_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte"), images.astype(np.uint8))
        write_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte"), labels.astype(np.uint8))


def write_safetensors(path, named):
    """{name: float32 tensor} as safetensors, in the given order (what check_safetensors.py reads)."""
    header, blobs, offset = {}, [], 0
    for name, tensor in named.items():
        data = tensor.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def replay(args):
    torch.set_num_threads(1)
    images = read_idx(find(args.dir, "train-images-idx3-ubyte")).float().div(255.0).unsqueeze(1)
    images = images.sub(MNIST_MEAN).div(MNIST_STD)
    labels = read_idx(find(args.dir, "train-labels-idx1-ubyte")).long()
    n, world, batch, accumulate = images.size(0), args.devices, args.batch_size, args.accumulate

    torch.manual_seed(args.seed)
    model = Mlp(in_features=28 * 28, dropout=0.0)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    samplers = [DistributedSampler(range(n), num_replicas=world, rank=r, shuffle=True, seed=args.seed)
                for r in range(world)]
    per_rank = len(samplers[0])
    assert per_rank % (batch * accumulate) == 0, \
        f"{per_rank} samples a rank are not whole steps of {accumulate} x {batch}: the replay does not model that"
    steps = 0
    for epoch in range(args.epochs):
        for sampler in samplers:
            sampler.set_epoch(epoch)
        shares = [torch.tensor(list(sampler), dtype=torch.long) for sampler in samplers]
        for step in range(per_rank // (batch * accumulate)):
            optimizer.zero_grad()
            loss = 0.0
            for share in shares:
                for micro in range(accumulate):
                    index = share[(step * accumulate + micro) * batch:][:batch]
                    loss = loss + F.cross_entropy(model(images[index]), labels[index]) / (accumulate * world)
            loss.backward()
            if args.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            steps += 1
    write_safetensors(args.out, dict(model.named_parameters()))
    print(f"replayed {steps} steps of {world} rank(s) x {batch} x {accumulate} on {n} images: {args.out}")


def main(argv):
    if argv[:1] == ["write-idx"]:
        directory, train, test, seed = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
        write_data(directory, train, test, seed)
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["replay"])
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--devices", type=int, required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-3)
    replay(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
