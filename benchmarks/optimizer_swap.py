"""Optimizer step time on a MobileNetV1-sized parameter list: for-loop vs foreach vs fused, and what tuning picks.

For SGD with momentum and for AdamW over MobileNetV1's 83 parameter tensors: each variant's step time as a ratio to
the for-loop (torch's CPU default), the best of its step times over repeats that run the variants in turns (each
for a block of back-to-back steps, as training runs them); then the variant `TrainingMonitor(tune=True)` picks for
the same optimizer built with torch's defaults.
Goals: the picked variant is the fastest measured here; for AdamW it is >= 2x faster than the for-loop.
Usage: python benchmarks/optimizer_swap.py [--width 0.25] [--steps 20] [--repeats 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import MobileNetV1

VARIANTS = {
    "for-loop": {"foreach": False, "fused": False},
    "foreach": {"foreach": True, "fused": False},
    "fused": {"foreach": False, "fused": True},
}
OPTIMIZERS = {
    "SGD momentum": lambda params, **flags: torch.optim.SGD(params, lr=0.01, momentum=0.9, **flags),
    "AdamW": lambda params, **flags: torch.optim.AdamW(params, lr=1e-3, **flags),
}


def parameters(width: float) -> list:
    """MobileNetV1's parameters with gradients set, as after a backward."""
    torch.manual_seed(0)
    params = [p.detach().clone().requires_grad_() for p in MobileNetV1(width=width).parameters()]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    return params


def time_variants(make, width: float, steps: int, repeats: int) -> dict:
    """Seconds per step of each variant: per repeat, the median of a block of steps; then the best repeat."""
    runs = {}
    for name, flags in VARIANTS.items():
        optimizer = make(parameters(width), **flags)
        optimizer.step()  # state allocation, first-call costs
        runs[name] = optimizer
    per_repeat = {name: [] for name in runs}
    for rep in range(repeats):
        order = list(runs) if rep % 2 == 0 else list(reversed(runs))
        for name in order:
            step_times = []
            for _ in range(steps):
                start = time.perf_counter()
                runs[name].step()
                step_times.append(time.perf_counter() - start)
            per_repeat[name].append(statistics.median(step_times))
    return {name: min(values) for name, values in per_repeat.items()}


def picked(make, width: float) -> dict:
    """What TrainingMonitor's tuning chose for this optimizer built with torch's defaults (its tuning.json entry)."""
    params = parameters(width)
    optimizer = make(params)
    with tempfile.TemporaryDirectory() as out:
        with TrainingMonitor(None, optimizer, log_dir=out, quiet=True, tune=True):
            pass
        with open(os.path.join(out, "tuning.json"), encoding="utf-8") as fh:
            return json.load(fh)["optimizer"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    params = parameters(args.width)
    print(f"optimizer_swap: MobileNetV1 width {args.width}: {len(params)} tensors, "
          f"{sum(p.numel() for p in params)} elements; {args.steps} steps x {args.repeats} repeats, "
          f"{args.threads} thread(s), torch {torch.__version__}")
    ok = True
    for name, make in OPTIMIZERS.items():
        times = time_variants(make, args.width, args.steps, args.repeats)
        base = times["for-loop"]
        fastest = min(times, key=times.get)
        choice = picked(make, args.width)
        variant = choice["variant"] or "for-loop"
        cells = ", ".join(f"{v} {t / base:.2f}x" for v, t in times.items() if v != "for-loop")
        print(f"  {name:<13} step time / for-loop's ({base * 1e3:.3f} ms): {cells}")
        print(f"  {'':<13} tuning picked {variant} ({choice['action']}), {base / times[variant]:.1f}x faster than "
              f"the for-loop; fastest here: {fastest}")
        ok &= variant == fastest
        if name == "AdamW":
            ok &= base / times[variant] >= 2.0
    print(f"  goals (picked = fastest; AdamW picked >= 2x for-loop): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
