"""Cost of recording config.json (``experiment=``, on by default): the monitor with it against the monitor with
``experiment=False``, in the same process, interleaved.

Two figures per workload, each the median over the repeats of (on - off), the repeats alternating the order:
- the steady steps (every step after the recording window: the first ``steps`` steps, 3 by default) as a ratio of
  the CPU time a step takes with the recording to without it: the 10th percentile of every steady step of every
  repeat, pooled (whole runs move by tens of percent on a shared machine, a step's quick end holds still), with the
  pooled medians' ratio beside it (goal: 1.00 within the noise);
- the window itself, once a run: the extra milliseconds of its steps (the optimizer's settings at its first step,
  the initial weights' statistics, the first batches' fingerprint, the backwards counted, config.json written);
- the block's start, once a run, outside every step: the extra milliseconds of ``__enter__`` (the schedulers found
  through the collector, the loader, the model, the switches, the versions).
Beside them, the deterministic figure: the Python calls a steady step makes, with the recording and without.
Workloads: the ``Linear(4, 2)`` loop of monitor_overhead.py (the monitor's own work is most of a step) and its
~5 ms MLP step, each with a cosine LR schedule so the scheduler search runs. One thread, CPU time.
Usage: python benchmarks/config_overhead.py [--steps 600] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

from ascend_tune import TrainingMonitor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from monitor_overhead import make_setup, make_tiny_setup  # noqa: E402

WINDOW = 3  # ExperimentConfig.steps: the steps config.json is gathered over
SETTLED = WINDOW + 2  # steps left out of the steady figure (the window, and a step of margin either side)


def run(setup, out: str, experiment: bool) -> list:
    """The CPU time of the block's start, then of each step (process time between consecutive optimizer steps)."""
    model, optimizer, loader = setup
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(loader))
    start = time.process_time()
    with TrainingMonitor(model, optimizer, loader, log_dir=out, log_every=10, quiet=True, tune=False,
                         experiment=experiment):
        marks = [time.process_time()]
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            marks.append(time.process_time())
    return [marks[0] - start] + [b - a for a, b in zip(marks, marks[1:])]


def calls_per_step(experiment: bool, steps: int = 40) -> float:
    """Python calls (``sys.setprofile`` "call" and "c_call" events) of a steady step of the Linear(4, 2) loop."""
    model, optimizer, loader = make_tiny_setup(SETTLED + 10 + steps)
    seen = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            seen[0] += 1

    with tempfile.TemporaryDirectory() as tmp, TrainingMonitor(model, optimizer, loader, log_dir=tmp, log_every=1000,
                                                               quiet=True, tune=False, experiment=experiment):
        for i, (x, y) in enumerate(loader):
            if i == SETTLED + 10:
                sys.setprofile(profile)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        sys.setprofile(None)
    return seen[0] / steps


def measure(make, steps: int, repeats: int) -> dict:
    """``{"steady": p10 ratio on/off, "median": pooled medians' ratio, "window_ms": extra ms of the window,
    "enter_ms": of the start, "step_ms"}``."""
    steady: dict = {True: [], False: []}
    window, enter = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for flag in (True, False):  # warm the kernels and the lazy imports once
            run(make(20), os.path.join(tmp, f"warm-{flag}"), flag)
        for rep in range(repeats):
            times = {}
            for flag in ((True, False) if rep % 2 == 0 else (False, True)):
                times[flag] = run(make(steps), os.path.join(tmp, f"{rep}-{flag}"), flag)
            enter.append(times[True].pop(0) - times[False].pop(0))
            for flag in (True, False):
                steady[flag] += times[flag][SETTLED:]
            window.append(sum(times[True][:SETTLED]) - sum(times[False][:SETTLED]))
    p10 = {f: statistics.quantiles(steady[f], n=10)[0] for f in steady}
    return {"steady": p10[True] / p10[False],
            "median": statistics.median(steady[True]) / statistics.median(steady[False]),
            "window_ms": 1e3 * statistics.median(window), "enter_ms": 1e3 * statistics.median(enter),
            "step_ms": 1e3 * p10[False]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"config_overhead: {args.steps} steps x {args.repeats} interleaved repeats, the monitor with "
          "experiment= on against off (1 thread, CPU time)")
    for name, make in (("Linear(4, 2) step", make_tiny_setup), ("~5 ms MLP step", make_setup)):
        found = measure(make, args.steps, args.repeats)
        print(f"  {name:18s} steady step {found['steady']:.3f}x off (pooled medians {found['median']:.3f}x; a step "
              f"{found['step_ms']:.3f} ms); once a run: its first {SETTLED} steps {found['window_ms']:+.1f} ms, the "
              f"block's start {found['enter_ms']:+.1f} ms")
    on, off = calls_per_step(True), calls_per_step(False)
    print(f"  Python calls a steady step of the Linear(4, 2) loop: {on:.1f} with the recording, {off:.1f} without")
    print("  goal: the steady step 1.00x within the noise (recording stops after its window)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
