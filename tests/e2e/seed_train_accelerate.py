# Seed 000's Accelerate training script (part 3, "Hugging Face Accelerate": src/train_accelerate.py),
# transcribed for the tests of `lockstep launch`. The seed launches it with
#   accelerate launch --num_processes=4 --mixed_precision=fp16 src/train_accelerate.py
# and tests/e2e/accelerate_launch.sh runs that line with `lockstep launch` in place of `accelerate launch`.
# Unchanged but for: the data folder is an argument (the seed's is a cluster path), --epochs,
# --limit-batches and --save keep a CI run short and its files in a temporary folder, and the main process
# prints one line saying what the Accelerator made of its launch. torchvision's MNIST reads
# DATA/MNIST/raw/*-ubyte (the test unpacks Fashion-MNIST there).
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torchvision import datasets, transforms
from accelerate import Accelerator


class SimpleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(28 * 28, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.flatten(x)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data", help="the folder holding MNIST/raw/*-ubyte")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--limit-batches", type=int, default=0, help="batches per epoch and process (0: all)")
    parser.add_argument("--save", default="model.pt")
    args = parser.parse_args()

    # Initialize accelerator
    accelerator = Accelerator(mixed_precision='fp16')
    if accelerator.is_main_process:
        print(f'accelerator: {accelerator.num_processes} process(es), {accelerator.distributed_type}, '
              f'mixed_precision {accelerator.mixed_precision}, device {accelerator.device}, '
              f'autocast {accelerator.native_amp}')

    # Data
    transform = transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize((0.1307,), (0.3081,))
    ])
    train_dataset = datasets.MNIST(
        args.data,
        train=True, download=False, transform=transform
    )
    train_loader = DataLoader(
        train_dataset,
        batch_size=64,
        shuffle=True,
        num_workers=4
    )

    # Model and optimizer
    model = SimpleNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    # Prepare for distributed training
    model, optimizer, train_loader = accelerator.prepare(
        model, optimizer, train_loader
    )

    # Training loop
    batches = len(train_loader) if args.limit_batches == 0 else min(args.limit_batches, len(train_loader))
    for epoch in range(args.epochs):
        model.train()
        total_loss = 0
        for batch_idx, (data, target) in enumerate(train_loader):
            if batch_idx == batches:
                break
            optimizer.zero_grad()
            output = model(data)
            loss = F.cross_entropy(output, target)
            accelerator.backward(loss)
            optimizer.step()
            total_loss += loss.item()

        # Print from main process only
        if accelerator.is_main_process:
            print(f'Epoch {epoch+1}: loss={total_loss/batches:.4f}')

    # Save model
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        unwrapped_model = accelerator.unwrap_model(model)
        torch.save(unwrapped_model.state_dict(), args.save)


if __name__ == '__main__':
    main()
