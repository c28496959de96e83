"""Shared helpers for the suite: a tiny training setup and log readers."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ascend_tune.testing.models import TinyMLP, synthetic_classification

pytest_plugins = ("pytester",)

SEED_LINE = re.compile(r"\(step=(\d+)\) Train Loss: ([\d\.]+), Train Steps/Sec: ([\d\.]+)")


@pytest.fixture(autouse=True)
def _no_device_override(monkeypatch):
    for name in ("ASCEND_TUNE_DEVICE", "RANK", "WORLD_SIZE", "ASCEND_TUNE_FAKE_NPU_FAIL", "ASCEND_TUNE_FAKE_NPU_COUNT"):
        monkeypatch.delenv(name, raising=False)
    from ascend_tune import device

    device.reset_detection()
    yield
    device.reset_detection()


@pytest.fixture
def setup():
    """A model, an SGD optimizer and a DataLoader of 8 batches of 8."""
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(synthetic_classification(n=64), batch_size=8)
    return model, optimizer, loader


def read_jsonl(path: str) -> list:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def read_log(log_dir: str) -> list:
    with open(os.path.join(log_dir, "log.txt"), encoding="utf-8") as fh:
        return fh.read().splitlines()


def train(model, optimizer, loader, epochs=1):
    """A plain training loop, as a user writes it; returns the losses it saw."""
    seen = []
    for _ in range(epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen.append(loss.detach().clone())
    return seen

