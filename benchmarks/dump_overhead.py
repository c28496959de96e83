"""Cost of a dumped step (statistics or tensor task): the built-in engine at L0 / L1 / mix against msprobe, as
ratios to the bare step.

Models: a tiny MLP (3 Linear + ReLU, batch 16 x 32, the model msprobe was measured on in
notes/backends-on-cpu.md), a small CNN (2 conv blocks with BatchNorm and in-place ReLU, then a Linear; batch 32 of
3x32x32) and a transformer (``TinyGPT``, nanoGPT's layout: 4 layers, dim 64, 4 heads, block 64, vocabulary 256,
batch 8), one thread. Each mode trains the same steps; the figure is the median step time over the timed steps (the
first ones warm up), as a ratio to the bare loop's median measured in the same process. Step time is the process's
CPU time (user + system, file writes included), which other processes on a shared machine do not inflate the way
they inflate wall time; modes are interleaved over repeats and the best repeat counts (background load only ever
adds). The built-in modes dump every step (``steps=[]``); "outside" selects only step 0 and times the steps after
it, the cost of having the option on. msprobe runs the same task / level with the same start / stop / step
bracketing in a process of its own (it patches torch for good), with its own bare baseline.
Goal: built-in L1 <= 3x bare, and a dumped step >= 10x cheaper than msprobe's at the same level.
``--as-received`` also times L1 with 0-d arguments kept as aliases (call model 2), pricing the copy that records
an in-place op's 0-d argument as the op received it (goal: <= 3% of the dumped step, on the GPT with AdamW).
Usage: python benchmarks/dump_overhead.py [--steps 30] [--warmup 5] [--repeats 3] [--no-msprobe]
       [--models mlp,cnn,gpt] [--task statistics|tensor] [--optimizer sgd|adamw] [--as-received]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ascend_tune.testing.models import TinyGPT, synthetic_tokens

LEVELS = ("L0", "L1", "mix")
MODELS = ("mlp", "cnn", "gpt")


OPTIMIZER = "sgd"  # --optimizer


def _optimizer(params) -> torch.optim.Optimizer:
    if OPTIMIZER == "adamw":  # the for-loop AdamW: a 0-d step counter per parameter, stepped in place
        return torch.optim.AdamW(params, lr=1e-3, foreach=False)
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def make_model(kind: str) -> tuple:
    torch.manual_seed(0)
    if kind == "gpt":
        model = TinyGPT(vocab=256, block=64, dim=64, heads=4, layers=4)
        x, y = synthetic_tokens(n=8, block=64, vocab=256)[:]
        return model, _optimizer(model.parameters()), x, y
    if kind == "mlp":  # the model of notes/backends-on-cpu.md's msprobe measurement
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
        x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    else:
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(4),
            nn.Flatten(), nn.Linear(32 * 16, 10),
        )
        x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    return model, _optimizer(model.parameters()), x, y


def timed_steps(model, optimizer, x, y, steps: int, around=None) -> list:
    """Per-step CPU times of this process; ``around`` brackets each step (msprobe's start / stop / step)."""
    times = []
    for step in range(steps):
        start = time.process_time()
        if around is not None:
            around.begin(step)
        loss = model(x, y) if isinstance(model, TinyGPT) else F.cross_entropy(model(x), y)  # TinyGPT: its own loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if around is not None:
            around.end(step)
        times.append(time.process_time() - start)
    return times


def run_bare(kind: str, steps: int) -> list:
    return timed_steps(*make_model(kind), steps)


def run_builtin(kind: str, steps: int, level: str, out: str, selected: Any, task: str = "statistics",
                aliased: bool = False) -> list:
    """``aliased``: 0-d arguments kept as aliases, as call model 2 did (the price of recording them as received)."""
    from ascend_tune import TrainingMonitor
    from ascend_tune.precision import stats

    stats._COPY_SCALARS = not aliased

    model, optimizer, x, y = make_model(kind)
    precision = None if selected == "off" else dict(
        task=task, level=level, steps=selected, backend="builtin", dump_path=out
    )
    with TrainingMonitor(model, optimizer, log_dir=out, quiet=True, warmup_steps=0, tune=False, precision=precision):
        return timed_steps(model, optimizer, x, y, steps)


def scalar_copies(kind: str) -> tuple:
    """(0-d tensors a dumped L1 step describes, microseconds a copy adds to one): the cost of recording them as the
    op received them, counted and timed apart from the noise of whole steps."""
    from ascend_tune.precision import stats

    seen = [0]
    compute = stats.StatsBuffer._compute

    def counting(self, t):
        seen[0] += not t.dim()
        return compute(self, t)

    stats.StatsBuffer._compute = counting
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run_builtin(kind, 2, "L1", tmp, [])
    finally:
        stats.StatsBuffer._compute = compute
    scalar, best = torch.tensor(3.0), {}
    for copy in (False, True):
        for _ in range(5):
            start = time.process_time()
            for _ in range(10000):
                scalar.to(torch.float32, copy=copy)
            best[copy] = min(best.get(copy, float("inf")), (time.process_time() - start) / 10000)
    return seen[0] / 2, 1e6 * (best[True] - best[False])


def median_ms(times: list, warmup: int) -> float:
    return 1000 * statistics.median(times[warmup:])


class _MsprobeBracket:
    def __init__(self, debugger, model):
        self.debugger, self.model = debugger, model

    def begin(self, step):
        self.debugger.start(model=self.model)

    def end(self, step):
        self.debugger.stop()
        self.debugger.step()


def msprobe_worker(kind: str, level: str, steps: int, warmup: int, task: str = "statistics") -> None:
    """In its own process: the bare loop first, then the same loop dumped by msprobe; prints JSON."""
    torch.set_num_threads(1)
    bare = median_ms(run_bare(kind, steps), warmup)
    from msprobe.pytorch import PrecisionDebugger

    model, optimizer, x, y = make_model(kind)
    with tempfile.TemporaryDirectory() as out:
        debugger = PrecisionDebugger(task=task, dump_path=out, level=level, step=[])
        dumped = median_ms(timed_steps(model, optimizer, x, y, steps, _MsprobeBracket(debugger, model)), warmup)
    print(json.dumps({"bare_ms": bare, "dump_ms": dumped}))


def msprobe_figures(kind: str, level: str, steps: int, warmup: int, task: str = "statistics") -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--msprobe-worker", kind, level, "--steps", str(steps),
           "--warmup", str(warmup), "--task", task]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"msprobe worker failed: {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-msprobe", action="store_true", help="skip the msprobe rows")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated models (default: all)")
    parser.add_argument("--task", choices=("statistics", "tensor"), default="statistics",
                        help="what each dumped step writes (tensor: every tensor as a .pt file too)")
    parser.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd",
                        help="the step's optimizer (adamw: for-loop, 0-d step counters)")
    parser.add_argument("--as-received", action="store_true",
                        help="also time L1 with 0-d arguments aliased (call model 2): the cost of recording an "
                             "in-place op's arguments as the op received them")
    parser.add_argument("--msprobe-worker", nargs=2, metavar=("MODEL", "LEVEL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global OPTIMIZER
    OPTIMIZER = args.optimizer
    if args.msprobe_worker:
        msprobe_worker(*args.msprobe_worker, args.steps, args.warmup, args.task)
        return 0
    torch.set_num_threads(1)
    from ascend_tune.precision.backends import msprobe_installed

    with_msprobe = not args.no_msprobe and msprobe_installed()
    print(f"dump_overhead: {args.task} task, {args.steps} steps ({args.warmup} warm-up) x {args.repeats} repeats, "
          "1 thread; best median step of the repeats, as a ratio to the bare step")
    for kind in args.models.split(","):
        run_bare(kind, args.warmup)  # warm the allocator and kernels once
        modes = {"bare": None, "monitor": "off", "outside": [0], **{level: [] for level in LEVELS}}
        if args.as_received:
            modes["L1 aliased"] = []
        best = {name: float("inf") for name in modes}
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(args.repeats):
                order = list(modes) if rep % 2 == 0 else list(reversed(modes))  # machine noise hits all alike
                for name in order:
                    if name == "bare":
                        times = run_bare(kind, args.steps)
                    else:
                        level = name if name in LEVELS else "L1" if name == "L1 aliased" else "mix"
                        times = run_builtin(kind, args.steps, level, os.path.join(tmp, f"{rep}{name}"), modes[name],
                                            args.task, aliased=name == "L1 aliased")
                    best[name] = min(best[name], median_ms(times, args.warmup))
        bare = best["bare"]
        print(f"  {kind}: bare step {bare:.2f} ms")
        print(f"    {'monitor, no precision':<42} {best['monitor'] / bare:6.2f}x bare")
        print(f"    {'builtin mix, steps outside the selection':<42} {best['outside'] / bare:6.2f}x bare")
        for level in LEVELS:
            ours = best[level] / bare
            line = f"    {'builtin ' + level:<42} {ours:6.2f}x bare"
            if with_msprobe:
                theirs = min((msprobe_figures(kind, level, args.steps, args.warmup, args.task)
                              for _ in range(args.repeats)),
                             key=lambda f: f["dump_ms"] / f["bare_ms"])
                ratio = theirs["dump_ms"] / theirs["bare_ms"]
                line += f"   msprobe {ratio:6.2f}x bare   builtin {ratio / ours:5.1f}x cheaper"
            print(line)
        if args.as_received:
            print(f"    {'builtin L1, 0-d arguments aliased':<42} {best['L1 aliased'] / bare:6.2f}x bare   "
                  f"recording them as received costs {best['L1'] / best['L1 aliased'] - 1:+.1%} of the dumped step")
            count, us = scalar_copies(kind)
            print(f"    {count:.0f} 0-d tensors per dumped step x {us:.2f} us a copy = {count * us / 1000:.3f} ms: "
                  f"{count * us / 10 / best['L1']:.2f}% of the dumped step, {count * us / 10 / bare:.2f}% of the bare")
    return 0


if __name__ == "__main__":
    sys.exit(main())
