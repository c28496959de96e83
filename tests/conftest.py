"""Shared helpers for the suite: a tiny training setup and log readers."""

from __future__ import annotations

import inspect
import json
import os
import re
from typing import Optional

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


def fused_on_cpu(optimizer_class: type) -> Optional[str]:
    """Why torch's ``fused=True`` form of ``optimizer_class`` does not step CPU tensors here; None when it does.

    Detected as the tuning does, by one step on a tiny tensor: ``SGD(fused=...)`` is first in torch 2.3 and
    ``Adagrad(fused=...)`` in 2.4, and the CPU kernels of all of them arrived in torch 2.4 (before, ``fused=True``
    runs on CUDA and torch_npu's devices only).
    """
    if "fused" not in inspect.signature(optimizer_class).parameters:
        first = {"SGD": "2.3", "Adagrad": "2.4"}.get(optimizer_class.__name__)
        since = f" (first in torch {first})" if first else ""
        return f"torch {torch.__version__}'s {optimizer_class.__name__} has no fused= argument{since}"
    param = torch.zeros(2, requires_grad=True)
    param.grad = torch.ones(2)
    try:
        optimizer_class([param], lr=0.1, fused=True).step()
    except Exception as exc:  # torch raises RuntimeError for a device its fused kernel does not run on
        return (f"torch {torch.__version__} has no fused {optimizer_class.__name__} kernel for CPU tensors (torch 2.4 "
                f"is the first with one): {type(exc).__name__}: {str(exc).splitlines()[0]}")
    return None
