"""compare-dump of an AMP pair: the tensor-mode compare (each op evaluated again from each run's saved inputs) against
the statistics compare of the same dumps, wall time and peak memory, each in a fresh process.

Makes the pair here: a small GPT (tests/scripts/mixed_dumps.py: 2 layers, dim 32, 16 tokens, AdamW), step 0
dumped at level mix by the builtin engine, an fp32 reference and a bfloat16 autocast target, tensors saved. Then,
interleaved (``--repeats`` rounds): ``ascend-tune compare-dump REF TARGET --mode tensor`` and ``--mode statistics``
(the whole command: read both dumps, pair, compare, walk, print). Prints each one's median time and peak RSS, the
ratio of times (the cost of recomputation), and how many ops each run's own-input check evaluated.

    python benchmarks/mixed_compare.py [--repeats 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "scripts", "mixed_dumps.py")

TIMED = r"""
import resource, sys, time
from ascend_tune.cli import main
start = time.perf_counter()
code = main(["compare-dump", sys.argv[1], sys.argv[2], "--mode", sys.argv[3], "--json"])
seconds = time.perf_counter() - start
print("RESULT", code, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)
"""

COUNT = r"""
import sys
from ascend_tune.analysis.dumps import evaluate
from ascend_tune.analysis.dumps.read import read_dump
dump = read_dump(sys.argv[1])
ops = [op for op in dump.ops if op.name.endswith(".forward") and not op.name.startswith("Module.")]
done = [op for op in ops if evaluate.own_error(dump, op) is not None]
print(len(done), len(ops))
"""


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))


def _timed(base: str, target: str, mode: str) -> tuple:
    done = subprocess.run([sys.executable, "-c", TIMED, base, target, mode], capture_output=True, text=True,
                          env=_env(), timeout=600)
    line = next(line for line in done.stderr.splitlines() if line.startswith("RESULT"))
    _, code, seconds, rss = line.split()
    return int(code), float(seconds), float(rss)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", help="make the dumps in this folder and keep them")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="mixed_compare_bench_")
    try:
        made = os.path.join(root, "builtin_tensor", "scenarios.txt")
        if not os.path.exists(made):
            subprocess.run([sys.executable, SCRIPT, root, "builtin", "tensor"], check=True, env=_env(),
                           stdout=subprocess.DEVNULL, timeout=900)
        scenarios = open(made).read().split()
        dumps = os.path.join(root, "builtin_tensor", "gpt", "dump")
        base, target = (os.path.join(dumps, f"step{scenarios.index(s)}") for s in ("fp32", "bf16"))
        times: dict = {"tensor": [], "statistics": []}
        rss: dict = {"tensor": [], "statistics": []}
        for _ in range(args.repeats):
            for mode in ("statistics", "tensor"):
                code, seconds, peak = _timed(base, target, mode)
                if code != 0:
                    print(f"compare-dump --mode {mode} exited {code} on a correct bfloat16 port")
                    return 1
                times[mode].append(seconds)
                rss[mode].append(peak)
        counted = subprocess.run([sys.executable, "-c", COUNT, target], capture_output=True, text=True, env=_env(),
                                 timeout=600).stdout.split()
        t, s = statistics.median(times["tensor"]), statistics.median(times["statistics"])
        print("compare-dump, fp32 reference vs bfloat16 autocast target (small GPT, step 0, level mix, builtin):")
        print(f"  statistics mode: {s:.2f} s, peak RSS {statistics.median(rss['statistics']):.0f} MiB")
        print(f"  tensor mode, each run's ops evaluated again from their own inputs ({counted[0]} of {counted[1]} "
              f"forward API calls): {t:.2f} s, peak RSS {statistics.median(rss['tensor']):.0f} MiB")
        print(f"  ratio tensor / statistics: {t / s:.2f}x time, "
              f"{statistics.median(rss['tensor']) / statistics.median(rss['statistics']):.2f}x peak memory")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
