"""compare-trace against HTA's TraceDiff on the same large trace pair: wall time and peak memory of each.

Makes the pair here: a TinyGPT profiled by torch.profiler (CPU, shapes recorded, plain .json so HTA reads it too)
for ``--steps`` steps, a base and a target whose attention block runs extra tanh. Then, each in a fresh process,
interleaved (``--repeats`` rounds): ``ascend-tune compare-trace BASE TARGET`` (the whole command: read both
traces, attribute, compare, print) and HTA's ``TraceDiff.compare_traces(base_dir, target_dir)`` (parse both
traces, op counts and durations by name). Prints each one's median time, its peak RSS (the process's ru_maxrss),
the ratio of times, and peak memory over the larger file's size, and which JSON decoder compare-trace used (orjson
where the ``orjson`` extra is installed). Goals (issues #24, #34): >= 3x faster than HTA, memory within 2x the
larger file.

    python benchmarks/trace_compare.py [--steps 40] [--layers 4] [--repeats 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MAKE_TRACE = r"""
import sys, torch, torch.profiler as tp
from ascend_tune.testing.models import TinyGPT, synthetic_tokens
out, steps, layers, slow = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
torch.manual_seed(0); torch.set_num_threads(1)
net = TinyGPT(vocab=128, block=32, dim=64, heads=4, layers=layers)
if slow:
    attn = net.h[0].attn; original = attn.forward
    def forward(x):
        y = original(x)
        for _ in range(20):
            y = torch.tanh(y)
        return y
    attn.forward = forward
opt = torch.optim.AdamW(net.parameters(), lr=1e-3, foreach=True)
x, y = synthetic_tokens(n=8, block=32, vocab=128).tensors
with tp.profile(activities=[tp.ProfilerActivity.CPU], record_shapes=True, with_modules=False,
                schedule=tp.schedule(wait=0, warmup=1, active=steps, repeat=1),
                on_trace_ready=tp.tensorboard_trace_handler(out)) as prof:
    for _ in range(steps + 1):
        net(x, y).backward(); opt.step(); opt.zero_grad(); prof.step()
"""

OURS = r"""
import resource, sys, time, io, contextlib
from ascend_tune.cli import main
start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["compare-trace", sys.argv[1], sys.argv[2]])
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, code)
"""

HTA = r"""
import logging, resource, sys, time
logging.disable(logging.CRITICAL)
start = time.perf_counter()
from hta.trace_diff import TraceDiff
diff = TraceDiff.compare_traces(sys.argv[1], sys.argv[2])
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, len(diff))
"""


def _run(script: str, *args: str) -> tuple:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    seconds, rss, _ = done.stdout.strip().splitlines()[-1].split()
    return float(seconds), int(rss)


def _trace_file(folder: str) -> str:
    return next(os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".pt.trace.json"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", help="make the traces here and keep them (default: a temporary folder)")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="trace_compare_bench_")
    try:
        folders = [os.path.join(root, name) for name in ("base", "target")]
        for folder, slow in zip(folders, ("0", "1")):
            if not os.path.isdir(folder):
                env = {**os.environ, "PYTHONPATH": ROOT}
                subprocess.run([sys.executable, "-c", MAKE_TRACE, folder, str(args.steps), str(args.layers), slow],
                               check=True, capture_output=True, env=env)
        largest = max(os.path.getsize(_trace_file(f)) for f in folders)
        decoder = "orjson" if importlib.util.find_spec("orjson") else "the standard library's json (no orjson extra)"
        print(f"trace pair: {args.steps} steps of a {args.layers}-layer TinyGPT, largest file "
              f"{largest / 2**20:.1f} MB; compare-trace decodes with {decoder}")
        try:
            import hta  # noqa: F401
            have_hta = True
        except ImportError:
            have_hta = False
            print("HTA (holistictraceanalysis) is not installed: `make install` with the hta extra; "
                  "compare-trace measured alone")
        ours, theirs = [], []
        for _ in range(args.repeats):  # interleaved, so load on the machine hits both alike
            ours.append(_run(OURS, *folders))
            if have_hta:
                theirs.append(_run(HTA, *folders))
        t_ours, m_ours = statistics.median(t for t, _ in ours), max(m for _, m in ours)
        print(f"compare-trace : {t_ours:7.2f} s, peak RSS {m_ours / 2**20:7.1f} MB "
              f"({m_ours / largest:.2f}x the larger file)")
        if theirs:
            t_hta, m_hta = statistics.median(t for t, _ in theirs), max(m for _, m in theirs)
            print(f"HTA TraceDiff : {t_hta:7.2f} s, peak RSS {m_hta / 2**20:7.1f} MB "
                  f"({m_hta / largest:.2f}x the larger file)")
            print(f"ratio: compare-trace is {t_hta / t_ours:.2f}x faster than HTA's TraceDiff (goal >= 3x); "
                  f"memory {m_ours / largest:.2f}x the larger file (goal <= 2x)")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
