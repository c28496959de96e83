"""The instrumented demo: a MobileNetV1-style CNN on synthetic images, SGD + momentum, under TrainingMonitor."""

from __future__ import annotations

import os

import torch
from torch.utils.data import DataLoader

from .monitor import TrainingMonitor
from .testing.models import MobileNetV1, synthetic_images


def run_demo(out: str = "exp/demo", steps: int = 100, batch_size: int = 32, seed: int = 0, quiet: bool = False) -> dict:
    """Train for ``steps`` optimizer steps with the two lines added; returns the paths written, by name."""
    torch.manual_seed(seed)
    model = MobileNetV1(num_classes=10, width=0.25)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dataset = synthetic_images(n=max(batch_size * 8, 256), seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True)
    criterion = torch.nn.CrossEntropyLoss()
    log_dir = os.path.join(out, "train")

    # The user's loop, unchanged; only the `with` line is added.
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=quiet):
        step = 0
        while step < steps:
            for images, labels in loader:
                loss = criterion(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                if step >= steps:
                    break

    names = ("log.txt", "metrics.jsonl", "summary.json")
    return {name: os.path.join(log_dir, name) for name in names if os.path.exists(os.path.join(log_dir, name))}
