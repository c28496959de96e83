"""Overhead of profiling on a ~5 ms CPU training step, as ratios to the bare loop run in the same process.

Modes, interleaved over repeats so machine noise hits them alike:
- bare loop;
- profiling off: the loop inside ``step_profiler(None)`` (the null context) calling ``prof.step()`` every step,
  what the guide's ``get_profiler_context`` turned into;
- a typical on-config in a hand-written loop: ``step_profiler(True)`` (skip 10, wait 1, warm-up 1, 2 traced steps,
  record_shapes, gzip), trace export included;
- the monitor with ``profile=False`` and with ``profile=True``: the monitor's own cost is in monitor_overhead.py;
  the difference between the two is what profiling adds under the monitor.
Then, less exposed to a shared machine's noise: the time one traced cycle adds to a run, and the null context's
``step()`` alone, timed a million times, as a fraction of a bare step.
Goal: profiling off <= 1.005x bare.
Usage: python benchmarks/profile_overhead.py [--steps 300] [--repeats 9]
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

from ascend_tune import TrainingMonitor
from ascend_tune.profiling import ProfileConfig, step_profiler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from monitor_overhead import loop as run_loop  # noqa: E402  (the same workload as the monitor's benchmark)
from monitor_overhead import make_setup  # noqa: E402


def loop(model, optimizer, loader, prof=None) -> None:
    """The monitor benchmark's loop, with ``prof.step()`` after each step when a profiler is given."""
    run_loop(model, optimizer, loader, per_step=None if prof is None else (lambda loss: prof.step()))


def run_bare(setup, out):
    loop(*setup)


def run_step_profiler(value):
    def run(setup, out):
        with step_profiler(value, out_dir=os.path.join(out, "profile")) as prof:
            loop(*setup, prof=prof)

    return run


def run_monitored(profile):
    def run(setup, out):
        model, optimizer, loader = setup
        with TrainingMonitor(model, optimizer, loader, log_dir=out, log_every=10, quiet=True, profile=profile):
            loop(model, optimizer, loader)

    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    logging.getLogger("ascend_tune").setLevel(logging.WARNING)  # no per-trace INFO lines in the figures
    modes = {
        "bare": run_bare,
        "profiling off (null context)": run_step_profiler(None),
        "step_profiler(True)": run_step_profiler(True),
        "monitor profile=False": run_monitored(False),
        "monitor profile=True": run_monitored(True),
    }
    times = {name: [] for name in modes}
    with tempfile.TemporaryDirectory() as tmp:
        run_step_profiler(True)(make_setup(20), os.path.join(tmp, "warm"))  # load kineto and warm the kernels once
        for rep in range(args.repeats):
            order = list(modes) if rep % 2 == 0 else list(reversed(modes))
            for name in order:
                setup = make_setup(args.steps)
                out = os.path.join(tmp, f"{rep}-{list(modes).index(name)}")
                os.makedirs(out)
                start = time.perf_counter()
                modes[name](setup, out)
                times[name].append(time.perf_counter() - start)
    print(f"profile_overhead: {args.steps} steps x {args.repeats} repeats, "
          f"bare step {1000 * min(times['bare']) / args.steps:.2f} ms (1 thread)")
    # Two estimates that a shared machine disturbs differently: the median of each repeat's ratio to the bare run
    # beside it (slow drifts cancel), and fastest over fastest (bursts of other work only ever add time).
    print(f"  {'':<30} {'median':>8} {'best':>8}")
    for name, values in times.items():
        paired = statistics.median(v / b for v, b in zip(values, times["bare"]))
        print(f"  {name:<30} {paired:>7.3f}x {min(values) / min(times['bare']):>7.3f}x bare")
    on, off = times["monitor profile=True"], times["monitor profile=False"]
    paired = statistics.median(a / b for a, b in zip(on, off))
    print(f"  {'profiling under the monitor':<30} {paired:>7.3f}x {min(on) / min(off):>7.3f}x the monitor without it")
    # What one traced cycle costs (profiler start, the recorded steps, the export), as time added to a run of just
    # the steps the default schedule needs: a large difference, so noise matters less than in the ratios above.
    config = ProfileConfig()
    steps = config.skip_first + config.cycle + 1
    added = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            pair = {}
            for value in (None, True) if rep % 2 == 0 else (True, None):
                setup = make_setup(steps)
                start = time.perf_counter()
                run_step_profiler(value)(setup, os.path.join(tmp, f"{rep}-{value}"))
                pair[value] = time.perf_counter() - start
            added.append(pair[True] - pair[None])
    print(f"  one traced cycle ({config.active} steps recorded, exported, gzip) adds "
          f"{1000 * statistics.median(added):.0f} ms to a run")
    # What profiling off adds per step, timed alone: a bound that machine noise cannot hide or inflate.
    null = step_profiler(None)
    calls = 1_000_000
    start = time.perf_counter()
    for _ in range(calls):
        null.step()
    per_call = (time.perf_counter() - start) / calls
    bare_step = min(times["bare"]) / args.steps
    print(f"  profiling off adds {per_call * 1e9:.0f} ns per step: {1 + per_call / bare_step:.5f}x a bare step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
