"""``ascend-tune run`` adds no cost per step beyond the monitor's own.

One small CNN script (~5 ms a step on one thread, a DataLoader, SGD) times each of its own steps with
``perf_counter`` and writes them out; it runs in three ways, interleaved, each in a fresh process:

- **bare**: the script as it is;
- **two lines**: the same script with ``with TrainingMonitor(model):`` around its loop (no optimizer, no loader
  passed: what the launcher knows, learned by watching);
- **launcher**: the bare script under ``python -m ascend_tune run -- python script.py``.

Printed: the median step of each way (median over repeats of each run's median step), and the ratios
launcher / two lines (the goal: 1.00 within the run-to-run noise, a few percent on a shared machine) and
two lines / bare (the monitor's own cost). Start-up (importing torch, the bootstrap) is outside the steps timed.
Usage: python benchmarks/launch_overhead.py [--steps 300] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = '''
import json, os, sys, time
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
torch.manual_seed(0)
steps = int(sys.argv[2])
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(4),
    nn.Flatten(), nn.Linear(32 * 16, 10),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loader = DataLoader(TensorDataset(torch.randn(steps * 12, 3, 32, 32), torch.randint(0, 10, (steps * 12,))),
                    batch_size=12)
times = []


def loop():
    last = time.perf_counter()
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        now = time.perf_counter()
        times.append(now - last)
        last = now


if os.environ.get("BENCH_TWO_LINES"):
    from ascend_tune import TrainingMonitor
    with TrainingMonitor(model, log_dir=os.environ["BENCH_TWO_LINES"], quiet=True):
        loop()
else:
    loop()
with open(sys.argv[1], "w") as fh:
    json.dump(times[10:], fh)  # the first steps warm the allocator and the caches up
'''


def run_once(way: str, folder: str, steps: int, index: int) -> float:
    """One run of ``way``; its median step in milliseconds."""
    script = os.path.join(folder, "bench_train.py")
    out = os.path.join(folder, f"{way}{index}.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_TUNE_")}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p), OMP_NUM_THREADS="1")
    command = [sys.executable, script, out, str(steps)]
    if way == "two lines":
        env["BENCH_TWO_LINES"] = os.path.join(folder, f"two{index}")
    if way == "launcher":
        command = [sys.executable, "-m", "ascend_tune", "run", "--quiet", "--log-dir",
                   os.path.join(folder, f"run{index}"), "--", *command]
    subprocess.run(command, env=env, check=True, capture_output=True)
    with open(out) as fh:
        return statistics.median(json.load(fh)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    ways = ("bare", "two lines", "launcher")
    medians: dict = {way: [] for way in ways}
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "bench_train.py"), "w") as fh:
            fh.write(SCRIPT)
        for index in range(args.repeats):
            for way in ways:
                medians[way].append(run_once(way, folder, args.steps, index))
    step = {way: statistics.median(values) for way, values in medians.items()}
    for way in ways:
        print(f"{way:<10} median step {step[way]:.3f} ms  (runs: {', '.join(f'{v:.3f}' for v in medians[way])})")
    print(f"launcher / two lines: {step['launcher'] / step['two lines']:.3f}x  (goal: 1.00 within the noise)")
    print(f"two lines / bare:     {step['two lines'] / step['bare']:.3f}x  (the monitor's own cost)")


if __name__ == "__main__":
    main()
