"""Overhead of TrainingMonitor on a ~5 ms CPU training step, as ratios to the bare loop.

Modes, interleaved over repeats so machine noise hits them alike: bare loop; monitored with log_every=10 and 1;
a seed-style logger (`loss.item()` + `logging.info` every step, as the migration guides paste it).
Time is this process's CPU time (one torch thread), so other jobs on a shared machine do not count; each mode's
figure is its fastest repeat, since noise only ever adds time.
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
from ascend_tune.steps import StepTracker


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
        # tune=False: the fused-optimizer swap is a speed-up of its own, measured in optimizer_swap.py
        with TrainingMonitor(model, optimizer, loader, log_dir=out, log_every=log_every, quiet=True, tune=False):
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


HOOKS = ("_on_batch", "_on_backward", "_on_scale", "_on_scaler_step")  # the monitor's, called by the capture
TRACKER_HOOKS = ("backward_done", "optimizer_pre", "optimizer_post")  # the capture calls the StepTracker's directly


def per_step_cost(log_every: int, steps: int = 2000, repeats: int = 5) -> float:
    """Seconds the monitor spends in its own hooks per step (best repeat), timed inside the hooks themselves, so
    the training step's own noise does not enter the figure."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(steps * 2, 4), torch.randint(0, 2, (steps * 2,))), batch_size=2)
    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(repeats):
            spent = [0.0]
            mon = TrainingMonitor(model, optimizer, loader, log_dir=os.path.join(tmp, str(rep)), log_every=log_every,
                                  quiet=True, tune=False)
            for name in HOOKS:
                setattr(mon, name, _timed(getattr(mon, name), spent))
            originals = {name: getattr(StepTracker, name) for name in TRACKER_HOOKS}
            for name, method in originals.items():
                setattr(StepTracker, name, _timed(method, spent))
            try:
                with mon:
                    loop(model, optimizer, loader)
            finally:
                for name, method in originals.items():
                    setattr(StepTracker, name, method)
            best = min(best, spent[0] / steps)
    return best


def _timed(hook, spent):
    def timed(*args, **kwargs):
        # perf_counter, not process_time: the CPU-time clock is a system call here, slower than the hooks it times
        start = time.perf_counter()
        try:
            return hook(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    return timed


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
                start = time.process_time()
                modes[name](setup, out)
                times[name].append(time.process_time() - start)
    bare = min(times["bare"])
    print(f"monitor_overhead: {args.steps} steps x {args.repeats} repeats, "
          f"bare step {1000 * bare / args.steps:.2f} ms (1 thread)")
    for name, values in times.items():
        print(f"  {name:<28} {min(values) / bare:.3f}x bare  (median {statistics.median(values) / bare:.3f}x)")
    # whole-run ratios carry several percent of machine noise; the monitor's own cost, timed inside its hooks,
    # shows what it adds to the step above
    bare_step = bare / args.steps
    for log_every in (10, 1):
        cost = per_step_cost(log_every)
        print(f"  monitor's own cost, log_every={log_every:<2}  {cost * 1e6:6.1f} us/step = "
              f"{(bare_step + cost) / bare_step:.4f}x the {bare_step * 1000:.2f} ms step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
