"""Shared helpers for the suite: a tiny training setup and log readers."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import TinyGPT, TinyMLP, synthetic_classification, synthetic_tokens

pytest_plugins = ("pytester",)

if os.environ.get("ASCEND_TUNE_TEST_INSTALLED"):  # make test-wheel: the installed package is the one under test
    import ascend_tune

    _checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.dirname(os.path.abspath(ascend_tune.__file__)) == os.path.join(_checkout, "ascend_tune"):
        raise pytest.UsageError(f"ASCEND_TUNE_TEST_INSTALLED is set but ascend_tune was imported from the checkout "
                                f"({ascend_tune.__file__}): run the venv's pytest, not python -m pytest")

SEED_LINE = re.compile(r"\(step=(\d+)\) Train Loss: ([\d\.]+), Train Steps/Sec: ([\d\.]+)")


@pytest.fixture(autouse=True)
def _no_device_override(monkeypatch):
    for name in ("ASCEND_TUNE_DEVICE", "RANK", "WORLD_SIZE", "ASCEND_TUNE_FAKE_NPU_FAIL", "ASCEND_TUNE_FAKE_NPU_COUNT"):
        monkeypatch.delenv(name, raising=False)
    from ascend_tune import device

    device.reset_detection()
    yield
    device.reset_detection()


def read_by_us(frame) -> bool:
    """Whether a read of a tensor's values that ``frame`` made is ascend_tune's: made by its Python code, or inside
    its own work's mark (``internal()``) with no frame of ours on the stack (the compiled step path's reads); torch's
    own (the loader's seed, an optimizer run by the tuning's measure) are not."""
    from ascend_tune.recording.frames import in_internal

    if frame.f_globals.get("__name__", "").startswith("ascend_tune"):
        return True
    if not in_internal():
        return False
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("ascend_tune"):
            return False  # torch's code run by ours
        frame = frame.f_back
    return True


@pytest.fixture
def host_reads(monkeypatch) -> list:
    """The reads of a tensor's values to the host (``item``, ``cpu``, ``tolist``, ``numpy``, ``float()``,
    ``bool()``) that ascend_tune makes (:func:`read_by_us`), by name, in order (each one a stall on an
    accelerator)."""
    import sys

    calls: list = []
    for name in ("item", "cpu", "tolist", "numpy", "__float__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            if read_by_us(sys._getframe(1)):
                calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return calls


@pytest.fixture
def one_thread():
    """torch on one thread for the test: tiny ops, where a second thread only adds contention on a shared 2-core
    machine (use with ``pytestmark = pytest.mark.usefixtures("one_thread")``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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



GPT = dict(dim=32, softmax_blocks=1, dropout=0.1)  # block 0 attends through F.softmax, block 1 through SDPA


def train_gpt(log_dir, precision=None, steps: int = 1, autocast: bool = False, monitor: bool = True, **gpt) -> list:
    """A few steps of the tiny GPT (operators, Python-level functions such as F.layer_norm, dropout) with AdamW, as
    a user writes them, under ``TrainingMonitor(precision=precision)`` unless ``monitor`` is False; ``autocast``:
    the forward under bf16 CPU autocast. Returns the losses and the parameters."""
    torch.manual_seed(0)
    model = TinyGPT(**{**GPT, **gpt})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(synthetic_tokens(n=4 * steps), batch_size=4)
    losses = []
    block = TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=True, tune=False,
                            precision=precision) if monitor else contextlib.nullcontext()
    with block:
        for x, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(x, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach().clone())
    return losses + [p.detach().clone() for p in model.parameters()]


def built_at_once(code: str, cache, processes: int = 3):
    """Run ``code`` (it prints True once its C is loaded) in ``processes`` processes at once over one empty
    ``cache`` folder, as ranks starting together do; each must print True, and the cache then holds one file
    (no temporary one left): its path."""
    env = {**os.environ, "ASCEND_TUNE_CACHE": str(cache)}
    ranks = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(processes)]
    assert [p.communicate(timeout=300)[0].strip() for p in ranks] == ["True"] * processes
    (library,) = list(cache.iterdir())
    return library
