"""How far apart the two engines' statistics of one run are, and whether compare-dump keeps them apart from a drift.

One training step of a TinyGPT (nanoGPT's layout; by default 2 layers, dim 128, 4 heads, block 64, vocabulary 512,
batch 8: the logits and their gradient hold 262144 elements) is dumped at statistics / L1 by the builtin engine
(here) and by msprobe (in a process of its own: it patches torch for good), then again by the builtin engine with
the last block's c_fc weight scaled (1.001 and 1.5 by default). Printed: for the float32 tensors both dumps hold,
the largest Max/Min, Mean and Norm differences between the engines, measured as compare-dump measures them and in
units of ``2**-24 * sqrt(n)`` (n the tensor's elements); compare-dump's verdict on the identical runs both ways and
on each scaled run against msprobe's reference, with the rows msprobe's rules pass, warn and fail.
Usage: python benchmarks/engine_agreement.py [--layers 2] [--dim 128] [--vocab 512] [--block 64] [--batch 8]
       [--scales 1.001,1.5]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import TrainingMonitor
from ascend_tune.analysis.dumps import differences
from ascend_tune.analysis.dumps.compare import compare_dumps
from ascend_tune.analysis.dumps.pairing import arguments, match_ops
from ascend_tune.precision import read_dump
from ascend_tune.testing.models import TinyGPT, synthetic_tokens


def dump(log_dir: str, backend: str, args: argparse.Namespace, scale: float = 1.0) -> str:
    """One step dumped into ``log_dir``; returns its step folder."""
    torch.manual_seed(0)
    model = TinyGPT(vocab=args.vocab, block=args.block, dim=args.dim, heads=4, layers=args.layers)
    with torch.no_grad():
        model.h[-1].mlp[0].weight.mul_(scale)
    loader = DataLoader(TensorDataset(*synthetic_tokens(n=args.batch, block=args.block, vocab=args.vocab)[:]),
                        batch_size=args.batch)
    with TrainingMonitor(model, train_loader=loader, log_dir=log_dir, quiet=True, tune=False,
                         precision=dict(backend=backend, task="statistics", level="L1", steps=[0])):
        for x, y in loader:
            model(x, y).backward()
    return os.path.join(log_dir, "dump", "step0")


def spread(base, target) -> dict:
    """Per statistic, the largest cross-engine error over the float32 tensors, plain and in 2**-24 * sqrt(n)."""
    worst = {"Max/Min": (0.0, 0.0, 0), "Mean": (0.0, 0.0, 0), "Norm": (0.0, 0.0, 0)}
    for pair in match_ops(base, target):
        if not pair.matched:
            continue
        for arg in arguments(pair):
            t, b = arg.target, arg.base
            if t is None or b is None or t.kind != "tensor" or t.dtype != "torch.float32" or not t.has_stats \
                    or t.shape != b.shape:
                continue
            errors = differences.statistics_error(np.array([t.stats]), np.array([b.stats]))[0]
            numel = math.prod(t.shape)
            unit = 2.0 ** -24 * math.sqrt(numel)
            for name, error in (("Max/Min", max(errors[0], errors[1])), ("Mean", errors[2]), ("Norm", errors[3])):
                if error > worst[name][0]:
                    worst[name] = (float(error), float(error / unit), numel)
    return worst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("layers", 2), ("dim", 128), ("vocab", 512), ("block", 64), ("batch", 8)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--scales", default="1.001,1.5", help="comma-separated weight scales of the drifted runs")
    parser.add_argument("--msprobe-worker", metavar="LOG_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.msprobe_worker:
        dump(args.msprobe_worker, "msprobe", args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        ours = dump(os.path.join(tmp, "builtin"), "builtin", args)
        scales = [float(v) for v in args.scales.split(",") if v]
        drifts = [dump(os.path.join(tmp, f"drift{i}"), "builtin", args, scale=v) for i, v in enumerate(scales)]
        worker = [sys.executable, os.path.abspath(__file__), "--msprobe-worker", os.path.join(tmp, "msprobe")]
        worker += [f"--{k}={getattr(args, k)}" for k in ("layers", "dim", "vocab", "block", "batch")]
        subprocess.run(worker, check=True, capture_output=True)
        theirs = os.path.join(tmp, "msprobe", "dump", "step0")
        builtin, msprobe = read_dump(ours), read_dump(theirs)
        print(f"engine_agreement: TinyGPT {args.layers} layers, dim {args.dim}, vocabulary {args.vocab}, "
              f"block {args.block}, batch {args.batch}; one step, statistics / L1")
        print("  largest builtin-vs-msprobe difference over the float32 tensors both dumps hold:")
        for name, (error, units, numel) in spread(builtin, msprobe).items():
            where = f"  ({units:.2f} x 2**-24 x sqrt(n), n={numel})" if error else " (identical)"
            print(f"    {name:<8} {error:.3g} of the tensor's magnitude{where}")
        cases = [("builtin -> msprobe", builtin, msprobe), ("msprobe -> builtin", msprobe, builtin)]
        cases += [(f"msprobe -> builtin, a weight x{v:g}", msprobe, read_dump(d)) for v, d in zip(scales, drifts)]
        for label, base, target in cases:
            result = compare_dumps(base, target)
            first = result.first.op if result.first else "none"
            print(f"  compare-dump {label:<36} {'PASS' if result.passed else 'DIVERGED':<8} rows "
                  f"{result.count('pass')} pass / {result.count('warning')} warning / {result.count('error')} error"
                  f"  first divergence: {first}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
