"""Cost of ``health=`` on a small GPT step: the gradient norm every step, and module statistics at a recorded step.

A GPT in nanoGPT's layout (``TinyGPT``: 4 blocks, width 128, context 64, vocab 256, batch 8, AdamW; one CPU thread,
or CUDA when present: ``--device``) is trained in interleaved runs of the same loop: bare (no monitor), monitored
without health, monitored with ``health=True`` (the step's gradient norm and non-finite count on the device, read
back with the loss), and monitored with ``health=dict(modules=True, every=1)`` (every step a module-statistics step:
activation statistics of every module with parameters, gradient / parameter norms, the parameters cloned for the
update ratio, one read per step). Each run's figure is its mean step time past its first 3 steps; each ratio is
against the monitored-without-health run of the same repeat (the feature's own cost; the monitor's is
``benchmarks/monitor_overhead.py``'s), the median over repeats.
Goals: ``health=True`` <= 1.01x, a module-statistics step <= 1.10x.
Usage: python benchmarks/health_overhead.py [--steps 40] [--repeats 5] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, ".")
from ascend_tune import TrainingMonitor  # noqa: E402
from ascend_tune.testing.models import TinyGPT  # noqa: E402

VARIANTS = {
    "bare": None,
    "monitor": "off",
    "health": True,
    "modules": {"modules": True, "every": 1},
}


def run(variant: str, steps: int, folder: str, device: str = "cpu") -> float:
    """The mean step time (seconds) of one run of ``variant`` past its first 3 steps (one device sync at each end:
    the monitor's own lagged read-back keeps its place in the timing)."""
    torch.manual_seed(0)
    model = TinyGPT(vocab=256, block=64, dim=128, heads=4, layers=4).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (8, 65), generator=gen).to(device) for _ in range(steps)]
    times = []

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def loop() -> None:
        for i, ids in enumerate(batches):
            if i == 3:
                sync()
                start = time.perf_counter()
            loss = model(ids[:, :-1].contiguous(), ids[:, 1:].contiguous())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        sync()
        times.append((time.perf_counter() - start) / (len(batches) - 3))

    option = VARIANTS[variant]
    if option is None:
        loop()
    else:
        health = None if option == "off" else option
        with TrainingMonitor(model, optimizer, log_dir=folder, quiet=True, tune=False, health=health):
            loop()
    return times[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ratios: dict = {v: [] for v in VARIANTS}
    medians: dict = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            order = list(VARIANTS) if repeat % 2 == 0 else list(reversed(VARIANTS))
            got = {v: run(v, args.steps, f"{tmp}/{v}{repeat}", args.device) for v in order}
            for v in VARIANTS:
                medians[v].append(got[v])
                ratios[v].append(got[v] / got["monitor"])
    print(f"small GPT (TinyGPT 4x128, context 64, batch 8, AdamW, {args.device}), {args.steps} steps x {args.repeats} "
          "interleaved repeats; ratio = median over repeats of (variant / monitor without health, same repeat)")
    goals = {"health": 1.01, "modules": 1.10}
    for v in VARIANTS:
        ratio = statistics.median(ratios[v])
        goal = f"  (goal <= {goals[v]:.2f}x: {'met' if ratio <= goals[v] else 'NOT met'})" if v in goals else ""
        print(f"  {v:<8} {statistics.median(medians[v]) * 1e3:8.2f} ms/step  {ratio:6.3f}x{goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
