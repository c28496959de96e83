"""Loss-curve compare of two 1 M-line logs: ascend_tune's compare-loss against the guide's per-line regex script.

Both read the same two seed-format log.txt files (no metrics.jsonl beside them) and compute the mean absolute and
mean relative gap line by line; the numbers must agree. Timings are interleaved over repeats, median reported; CPU
seconds are printed beside wall seconds, since they move less when other work shares the machine.
Goal: ours >= 10x faster than the guide's script.
Usage: python benchmarks/log_compare.py [--lines 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import tempfile
import time

import numpy as np

from ascend_tune.analysis.logs.compare import compare_loss
from ascend_tune.analysis.logs.read import read_log


def write_log(path: str, lines: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for start in range(0, lines, 100_000):
            chunk = []
            for step in range(start, min(lines, start + 100_000)):
                loss = 0.5 + 2.5 * 0.99999**step + rng.random() * 0.01
                rate = 10 + rng.random()
                chunk.append(f"[2026-11-30 12:00:00] (step={step:07d}) Train Loss: {loss:.4f}, "
                             f"Train Steps/Sec: {rate:.2f}\n")
            fh.write("".join(chunk))


def seed_script(base: str, target: str) -> tuple:
    """The guide's offline compare, as it was written: a regex per line, then numpy over the floats."""
    pattern = r"\(step=(\d+)\) Train Loss: ([\d\.]+), Train Steps/Sec: ([\d\.]+)"

    def read(path):
        losses = []
        with open(path) as f:
            for line in f:
                m = re.search(pattern, line)
                if m:
                    losses.append(float(m.group(2)))
        return losses

    a, b = read(base), read(target)
    n = min(len(a), len(b))
    a, b = np.array(a[:n]), np.array(b[:n])
    return float(np.mean(np.abs(a - b))), float(np.mean(np.abs(a - b) / np.abs(a)))


def ours(base: str, target: str, align: str) -> tuple:
    result = compare_loss(read_log(base, "text"), read_log(target, "text"), align=align)  # as compare-loss does
    return result.mean_abs_gap, result.mean_rel_gap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base, target = os.path.join(tmp, "base.txt"), os.path.join(tmp, "target.txt")
        write_log(base, args.lines, 1)
        write_log(target, args.lines, 2)
        mb = os.path.getsize(base) / 2**20
        times: dict = {"seed": [], "index": [], "step": [], "read": []}
        cpu_times: dict = {"seed": [], "index": [], "step": [], "read": []}
        numbers: dict = {}
        for _ in range(args.repeats):
            for name, run in (("seed", lambda: seed_script(base, target)),
                              ("index", lambda: ours(base, target, "index")),
                              ("step", lambda: ours(base, target, "step")),
                              ("read", lambda: read_log(base, "text"))):
                start, cpu = time.perf_counter(), time.process_time()
                numbers[name] = run()
                times[name].append(time.perf_counter() - start)
                cpu_times[name].append(time.process_time() - cpu)
    if not np.allclose(numbers["seed"], numbers["index"], rtol=1e-12, atol=0):
        print(f"MISMATCH: seed {numbers['seed']} vs ours {numbers['index']}", file=sys.stderr)
        return 1
    seed, index, step = (statistics.median(times[k]) for k in ("seed", "index", "step"))
    cpu_seed, cpu_index = statistics.median(cpu_times["seed"]), statistics.median(cpu_times["index"])
    print(f"two logs of {args.lines} lines ({mb:.0f} MiB each), median of {args.repeats} (wall / CPU seconds):")
    print(f"  seed script (regex per line)      {seed:7.3f} s  {cpu_seed:7.3f} s")
    print(f"  compare-loss --align index        {index:7.3f} s  {cpu_index:7.3f} s   {seed / index:5.1f}x faster "
          f"({cpu_seed / cpu_index:.1f}x in CPU time)")
    print(f"  compare-loss --align step         {step:7.3f} s   {seed / step:14.1f}x faster")
    print(f"  read one log (read_log)           {statistics.median(times['read']):7.3f} s  "
          f"{statistics.median(cpu_times['read']):7.3f} s")
    print(f"  same numbers: mean abs gap {numbers['index'][0]:.6g}, mean rel gap {numbers['index'][1]:.6g}")
    print(f"log_compare ratio: {seed / index:.1f}x (goal >= 10x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
