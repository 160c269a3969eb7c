#!/usr/bin/python3
"""The Python peer for lockstep's benchmarks: PyTorch DDP on Fashion-MNIST with the seeds' model and recipe.

One rank per process, started by any torchrun-compatible launcher (init via env://, gloo backend):

    build/lockstep run --nproc-per-node 2 --standalone -- /usr/bin/python3 bench/peer/ddp_peer.py --epochs 10

Recipe (the seeds'): MLP 784-256-128-10 with ReLU and Dropout(0.2), Adam lr 1e-3, batch 64 per rank,
DistributedSampler(shuffle=True, seed=0) with set_epoch(epoch), Normalize(0.2860, 0.3530), CrossEntropyLoss.

The data set is read straight from the IDX .gz files (gzip + torch.frombuffer, no torchvision) and kept in
memory as tensors. Batches still go through torch.utils.data.DataLoader(TensorDataset, sampler=
DistributedSampler, num_workers=0), as in the seeds, so the per-batch Python/collate cost of the usual
PyTorch loop is part of the measurement (that is what lockstep is compared against).

Rank 0 prints one JSON line per epoch (epoch is 0-based, as set_epoch and Lightning count):
  {"epoch", "train_loss", "val_loss", "val_acc", "epoch_s", "val_s", "samples_per_s"}
train_loss: the mean over ranks of each rank's mean batch loss; epoch_s: wall time of the training part
(the slowest rank); val_*: over exactly the 10,000 test images, each rank evaluating its own unpadded
shard; samples_per_s: training samples of all ranks per second of epoch_s.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FMNIST_MEAN = 0.2860
FMNIST_STD = 0.3530


def read_idx(path):
    """An IDX file (optionally .gz) as a uint8 tensor shaped by its header."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    payload = bytearray(data[4 + 4 * ndim:])
    expected = 1
    for d in dims:
        expected *= d
    if len(payload) != expected:
        raise ValueError(f"{path}: header says {dims} ({expected} bytes), file holds {len(payload)}")
    return torch.frombuffer(payload, dtype=torch.uint8).reshape(dims)


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{stem}[.gz] not found in {data_dir} (--data-dir)")


def load_split(data_dir, prefix, normalize):
    images = read_idx(find(data_dir, f"{prefix}-images-idx3-ubyte")).float().div_(255.0).unsqueeze(1)
    labels = read_idx(find(data_dir, f"{prefix}-labels-idx1-ubyte")).long()
    if normalize:
        images = images.sub_(FMNIST_MEAN).div_(FMNIST_STD)
    return images, labels


class Mlp(nn.Module):
    """The seeds' MLP; parameter names match lockstep::models::Mlp (fc1, fc2, fc3)."""

    def __init__(self, in_features=784, hidden=(256, 128), num_classes=10, dropout=0.2):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden[0])
        self.dropout1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden[0], hidden[1])
        self.dropout2 = nn.Dropout(dropout)
        self.fc3 = nn.Linear(hidden[1], num_classes)

    def forward(self, x):
        x = x.flatten(1)
        x = self.dropout1(F.relu(self.fc1(x)))
        x = self.dropout2(F.relu(self.fc2(x)))
        return self.fc3(x)


class SmallCnn(nn.Module):
    """The same network as lockstep::models::SmallCnn (85,162 parameters), to check its accuracy target."""

    def __init__(self, in_channels=1, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.dropout = nn.Dropout(0.2)
        self.fc1 = nn.Linear(64 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.adaptive_avg_pool2d(x, 4).flatten(1)
        x = self.dropout(F.relu(self.fc1(x)))
        return self.fc2(x)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    p.add_argument("--seed", type=int, default=0, help="model init and DistributedSampler seed")
    p.add_argument("--limit-train-batches", type=int, default=0, help="at most N batches per epoch (0: all)")
    p.add_argument("--normalize", choices=["fmnist", "none"], default="fmnist",
                   help="fmnist: (x - 0.2860) / 0.3530 after scaling to [0, 1]; none: [0, 1] only")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp",
                   help="mlp: the seeds' model (the peer); cnn: lockstep's SmallCnn, for its accuracy check")
    p.add_argument("--val-batch-size", type=int, default=1000)
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "threads", "val_batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.limit_train_batches < 0:
        p.error(f"--limit-train-batches must be >= 0, got {args.limit_train_batches}")
    return args


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    dist.init_process_group(backend="gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()

    normalize = args.normalize == "fmnist"
    train_x, train_y = load_split(args.data_dir, "train", normalize)
    test_x, test_y = load_split(args.data_dir, "t10k", normalize)

    torch.manual_seed(args.seed)
    module = Mlp() if args.model == "mlp" else SmallCnn()
    model = DistributedDataParallel(module)  # broadcasts rank 0's weights
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    # In-memory tensors, iterated the seeds' way: DataLoader + DistributedSampler, no worker processes.
    train_set = TensorDataset(train_x, train_y)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, num_workers=0)

    # Validation: this rank's unpadded shard (rank, rank + world, ...) so the 10,000 images count once.
    val_x, val_y = test_x[rank::world], test_y[rank::world]

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        loss_sum, batches, samples = 0.0, 0, 0
        start = time.perf_counter()
        for x, y in loader:
            if args.limit_train_batches and batches >= args.limit_train_batches:
                break
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
            batches += 1
            samples += x.size(0)
        epoch_s = time.perf_counter() - start

        start = time.perf_counter()
        module.eval()
        correct, val_loss = 0, 0.0
        with torch.no_grad():
            for i in range(0, val_x.size(0), args.val_batch_size):
                out = module(val_x[i:i + args.val_batch_size])
                target = val_y[i:i + args.val_batch_size]
                val_loss += F.cross_entropy(out, target, reduction="sum").item()
                correct += (out.argmax(1) == target).sum().item()
        sums = torch.tensor([loss_sum / max(batches, 1), float(samples), val_loss, float(correct),
                             float(val_x.size(0))], dtype=torch.float64)
        dist.all_reduce(sums)
        val_s = time.perf_counter() - start
        slowest = torch.tensor([epoch_s], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        epoch_s = slowest.item()

        if rank == 0:
            total_samples, val_count = sums[1].item(), sums[4].item()
            print(json.dumps({
                "epoch": epoch,
                "train_loss": round(sums[0].item() / world, 6),
                "val_loss": round(sums[2].item() / val_count, 6),
                "val_acc": round(sums[3].item() / val_count, 6),
                "epoch_s": round(epoch_s, 4),
                "val_s": round(val_s, 4),
                "samples_per_s": round(total_samples / epoch_s, 1),
            }), flush=True)

    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
