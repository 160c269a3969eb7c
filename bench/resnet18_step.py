"""ResNet18 step time in PyTorch (Python), the baseline of the GPU issue's ResNet18 target.

The model is lockstep's own shape (lockstep/models/resnet18.h: the CIFAR form, a 3x3 stem without
max-pool, 11.2M parameters) written here with torch.nn, so that both sides run the same model on
3x32x32 inputs: SGD 0.01, cross-entropy, 16 distinct random batches cycled, as bench/ddp_bench.cpp's
bare mode does. torchvision's resnet18 (an ImageNet stem) is another model and not used.

    python3 bench/resnet18_step.py [--device cuda|cpu] [--batch 32[,256...]] [--steps 200] [--warmup 30]

Prints one line per batch size: "python model=resnet18 device=... batch=... step_ms=..." (several batch
sizes share one process: Python's start-up is paid once).
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, in_channels=3, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        planes = [64, 128, 256, 512]
        layers, in_planes = [], 64
        for i, p in enumerate(planes):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(in_planes, p, stride), BasicBlock(p, p, 1)))
            in_planes = p
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def measure(args, device, batch):
    torch.manual_seed(0)
    model = ResNet18().to(device)
    print_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    xs = torch.randn(16, batch, 3, 32, 32, device=device)
    ys = torch.randint(0, 10, (16, batch), device=device)

    def step(i):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xs[i % 16]), ys[i % 16])
        loss.backward()
        optimizer.step()
        return loss

    for i in range(args.warmup):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(args.steps):
        loss = step(i)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(f"python model=resnet18 device={device} batch={batch} params={print_params} "
          f"step_ms={1000 * seconds / args.steps:.3f} last_loss={loss.item():.6f}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", default="32", help="one batch size, or several separated by commas")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    device = torch.device(args.device)
    for batch in args.batch.split(","):
        measure(args, device, int(batch))


if __name__ == "__main__":
    main()
