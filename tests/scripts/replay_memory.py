"""Run by tests/test_precision_replay.py in a fresh process (malloc's thresholds are those of a new process): twelve
steps of a small GPT (dim 128, 64 tokens: float64 copies and recomputes of ~1 MB) replayed from the second on,
under TrainingMonitor. Prints one JSON line: the minor page faults of each step (``"met"``: the fresh pages it met;
the first few replayed steps grow the heap and Python's arenas to a step's needs), and the losses.

Usage: python replay_memory.py keep|drop. ``drop`` replaces ``heap.keep_freed_memory`` by a function that does
nothing, before the monitor starts: the replay as it would be without it.

A fault is counted a page at a time only where no transparent huge page of any size serves the process: a kernel
with 64 kB folios for anonymous memory read ~130 faults over six steps for what is ~20,000 pages, and ~40 with the
memory kept. So the process opts out of them first (``PR_SET_THP_DISABLE``), and prints beside its counts the
faults that 256 fresh pages of its own cost it (``"pages"``): the kernel's count, checked.
"""

import ctypes
import json
import mmap
import resource
import sys
import tempfile

import torch

from ascend_tune import TrainingMonitor
from ascend_tune.precision import heap
from ascend_tune.testing.models import TinyGPT, synthetic_tokens

PR_SET_THP_DISABLE = 41
PAGES = 256
STEPS = 12


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def pages_counted() -> int:
    """The faults that :data:`PAGES` fresh pages of an anonymous mapping cost, each touched once."""
    size = PAGES * mmap.PAGESIZE
    with mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as fresh:
        before = faults()
        for offset in range(0, size, mmap.PAGESIZE):
            fresh[offset] = 1
        return faults() - before


def main(how: str) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)  # where it fails, "pages" says so
    pages = pages_counted()
    if how == "drop":
        heap.keep_freed_memory = lambda: None
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyGPT(vocab=64, block=64, dim=128, layers=2, softmax_blocks=1, dropout=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = synthetic_tokens(n=8, block=64, vocab=64).tensors
    losses, met = [], []
    with tempfile.TemporaryDirectory() as log_dir:
        with TrainingMonitor(model, optimizer, log_dir=log_dir, quiet=True, tune=False, warmup_steps=0,
                             precision=dict(task="replay", steps=list(range(1, STEPS)))):
            for _ in range(STEPS):
                before = faults()
                loss = model(x, y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                met.append(faults() - before)
                losses.append(loss.item())
    print(json.dumps({"met": met, "losses": losses, "pages": pages}))


if __name__ == "__main__":
    main(sys.argv[1])
