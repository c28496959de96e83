"""Overhead of TrainingMonitor on a ~5 ms CPU training step, as ratios to the bare loop.

Modes, interleaved over repeats so machine noise hits them alike: bare loop; monitored with log_every=10 and 1;
a seed-style logger (`loss.item()` + `logging.info` every step, as the migration guides paste it).
Goal: <= 1.01x bare at log_every=10 and <= 1.03x at log_every=1.
Usage: python benchmarks/monitor_overhead.py [--steps 300] [--repeats 7]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import TrainingMonitor


def make_setup(steps: int):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = TensorDataset(torch.randn(steps * 80, 256), torch.randint(0, 10, (steps * 80,)))
    return model, optimizer, DataLoader(data, batch_size=80)


def loop(model, optimizer, loader, per_step=None) -> None:
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if per_step is not None:
            per_step(loss)


def run_bare(setup, out):
    loop(*setup)


def run_monitored(log_every):
    def run(setup, out):
        model, optimizer, loader = setup
        with TrainingMonitor(model, optimizer, loader, log_dir=out, log_every=log_every, quiet=True):
            loop(model, optimizer, loader)

    return run


def run_seed_logger(setup, out):
    log = logging.getLogger("seed_style")
    log.propagate = False
    handler = logging.FileHandler(os.path.join(out, "seed.log"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    state = {"step": 0, "t": time.time()}

    def per_step(loss):
        now = time.time()
        rate = 1 / (now - state["t"])
        log.info(f"(step={state['step']:07d}) Train Loss: {loss.item():.4f}, Train Steps/Sec: {rate:.2f}")
        state["step"] += 1
        state["t"] = now

    try:
        loop(*setup, per_step=per_step)
    finally:
        log.removeHandler(handler)
        handler.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    modes = {
        "bare": run_bare,
        "monitor log_every=10": run_monitored(10),
        "monitor log_every=1": run_monitored(1),
        "seed-style item()+logging": run_seed_logger,
    }
    times = {name: [] for name in modes}
    with tempfile.TemporaryDirectory() as tmp:
        run_bare(make_setup(20), tmp)  # warm the allocator and the kernels once
        for rep in range(args.repeats):
            order = list(modes) if rep % 2 == 0 else list(reversed(modes))
            for name in order:
                setup = make_setup(args.steps)
                out = os.path.join(tmp, f"{rep}-{name.replace(' ', '_')}")
                os.makedirs(out, exist_ok=True)
                start = time.perf_counter()
                modes[name](setup, out)
                times[name].append(time.perf_counter() - start)
    bare = statistics.median(times["bare"])
    print(f"monitor_overhead: {args.steps} steps x {args.repeats} repeats, "
          f"bare step {1000 * bare / args.steps:.2f} ms (1 thread)")
    for name, values in times.items():
        print(f"  {name:<28} {statistics.median(values) / bare:.3f}x bare")
    return 0


if __name__ == "__main__":
    sys.exit(main())
