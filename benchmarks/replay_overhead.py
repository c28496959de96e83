"""Cost of precision=dict(task="replay"): a replayed step's time as a ratio to a plain step, and the bytes it writes
against the tensor dump an offline replay (msprobe's run_ut / acc_check route) needs.

Model: the tiny GPT of tests/test_precision_replay.py (ascend_tune.testing.models.TinyGPT in nanoGPT's layout:
embeddings, a block attending through F.softmax and one through SDPA, LayerNorm, GELU MLP, residual dropout,
cross-entropy), vocabulary 64, with AdamW, one thread.
Modes are interleaved over repeats; the figure is the best repeat's median step time (the first steps warm up) as
a ratio to the plain loop's, measured in the same process. On the CPU a step's time is the process's CPU time
(user + system, file writes included), which other processes on a shared machine do not inflate as they inflate
wall time; on CUDA it is wall time with the device synchronized. "replay" replays every step (steps=[]);
"statistics" is the builtin statistics dump of the same steps, for scale; "statistics + replay" both at every step
(precision=[...], the demo target's pair); "float64 step" the same step unmonitored with the model in float64 on
the CPU: replay recomputes the step's calls there in float64 beside the plain step, so 1 + its ratio is a replayed
step's floor before anything is measured. Sizes: one replayed step's replay.csv + replay.json against one step
dumped with task="tensor", data_mode=["input"] (every API's inputs: what an offline
replay loads) and with every tensor (data_mode all).
Two sizes of it: the tests' (dim 32, 8 tokens: ~700 API calls of ~4 us each, where per-call costs rule) and a
small GPT (dim 128, 64 tokens: compute rules, as on a real model).
Goal: replayed step <= 5x a plain step; replay's files < 1 MB for this model.
Usage: python benchmarks/replay_overhead.py [--steps 12] [--warmup 3] [--repeats 3] [--config tests|small|both]
       [--dim D --block T] [--batch 8] [--layers 2] [--foreach] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

from ascend_tune import TrainingMonitor
from ascend_tune.contract import native
from ascend_tune.precision import measure_kernel
from ascend_tune.testing.models import TinyGPT, synthetic_tokens


def make(args: argparse.Namespace, dtype: torch.dtype = torch.float32) -> tuple:
    torch.manual_seed(0)
    model = TinyGPT(vocab=64, block=args.block, dim=args.dim, layers=args.layers, softmax_blocks=1,
                    dropout=0.1).to(args.device, dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=args.foreach or None)
    x, y = (t.to(args.device) for t in synthetic_tokens(n=args.batch, block=args.block, vocab=64).tensors)
    return model, optimizer, x, y


def timed_steps(args: argparse.Namespace, precision: object = None, log_dir: str = "",
                dtype: torch.dtype = torch.float32) -> list:
    model, optimizer, x, y = make(args, dtype)
    cuda = args.device.startswith("cuda")
    clock = time.perf_counter if cuda else time.process_time
    times = []
    monitor = TrainingMonitor(model, optimizer, log_dir=log_dir, quiet=True, warmup_steps=0, tune=False,
                              precision=precision) if log_dir else None
    if monitor is not None:
        monitor.__enter__()
    try:
        for _ in range(args.steps):
            if cuda:
                torch.cuda.synchronize()
            start = clock()
            loss = model(x, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if cuda:
                torch.cuda.synchronize()
            times.append(clock() - start)
    finally:
        if monitor is not None:
            monitor.__exit__(None, None, None)
    return times


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


CONFIGS = {"tests": dict(dim=32, block=8), "small": dict(dim=128, block=64)}
FLOAT64 = "float64 step"  # the same step in float64 on the CPU, unmonitored: what recomputing it costs


def run(args: argparse.Namespace) -> None:
    statistics_dump = dict(task="statistics", steps=[], backend="builtin")
    modes = {"plain": None, "statistics": statistics_dump, "replay": dict(task="replay", steps=[]),
             "statistics + replay": [statistics_dump, dict(task="replay", steps=[])], FLOAT64: None}
    best = {name: float("inf") for name in modes}
    with tempfile.TemporaryDirectory() as tmp:
        timed_steps(args)  # warm the allocator and kernels once
        for rep in range(args.repeats):
            for name in (modes if rep % 2 == 0 else list(reversed(modes))):  # machine noise hits all alike
                log_dir = os.path.join(tmp, f"{name}{rep}") if modes[name] is not None else ""
                if name == FLOAT64:  # where replay recomputes: the CPU, whatever the device
                    times = timed_steps(argparse.Namespace(**dict(args.__dict__, device="cpu")), dtype=torch.float64)
                else:
                    times = timed_steps(args, modes[name], log_dir)
                best[name] = min(best[name], statistics.median(times[args.warmup:]))
        one = argparse.Namespace(**dict(args.__dict__, steps=1))
        sizes = {}
        for name, precision in (("replay", dict(task="replay", steps=[0])),
                                ("tensor inputs", dict(task="tensor", steps=[0], data_mode=["input"])),
                                ("tensor all", dict(task="tensor", steps=[0]))):
            log_dir = os.path.join(tmp, "size-" + name.replace(" ", "-"))
            timed_steps(one, precision, log_dir)
            sizes[name] = folder_bytes(os.path.join(log_dir, "dump"))
    params = sum(p.numel() for p in make(args)[0].parameters())
    plain = best["plain"]
    print(f"  TinyGPT dim {args.dim}, block {args.block}, batch {args.batch}, {args.layers} layers ({params} "
          f"parameters): plain step {plain * 1e3:.2f} ms")
    for name in ("statistics", "replay", "statistics + replay"):
        print(f"    {name + ' step':<25} {best[name] / plain:6.2f}x plain   ({best[name] * 1e3:.1f} ms)")
    floor = 1 + best[FLOAT64] / plain
    print(f"    {FLOAT64:<25} {best[FLOAT64] / plain:6.2f}x plain   ({best[FLOAT64] * 1e3:.1f} ms): a replayed "
          f"step's floor (the plain step and its float64 recompute) {floor:.2f}x, replay "
          f"{best['replay'] / plain / floor:.2f}x that floor")
    extras = best["statistics"] + best["replay"] - 2 * plain  # what each adds to a plain step, summed
    print(f"    both in one step add {(best['statistics + replay'] - plain) / extras:.2f}x what the two add apart")
    print(f"    replay files      {sizes['replay'] / 1e3:9.1f} kB per step (replay.csv + replay.json)")
    for name in ("tensor inputs", "tensor all"):
        print(f"    {name + ' dump':<18}{sizes[name] / 1e3:9.1f} kB per step   "
              f"({sizes[name] / max(sizes['replay'], 1):.0f}x replay's)")


def main(argv: list = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--config", choices=(*CONFIGS, "both"), default="both",
                        help="the tests' GPT (dim 32, block 8), a small GPT (dim 128, block 64) or both")
    parser.add_argument("--dim", type=int, help="model width (instead of --config)")
    parser.add_argument("--block", type=int, default=8, help="sequence length with --dim")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--foreach", action="store_true", help="AdamW(foreach=True), the default on CUDA / NPU")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"replay_overhead: AdamW{' foreach' if args.foreach else ''}, {args.device}, {args.steps} steps "
          f"({args.warmup} warm-up) x {args.repeats} repeats, 1 thread; best median step, as a ratio to the plain "
          "step")
    compiled = measure_kernel.available()  # built here, before any timing, when it is not in the cache yet
    print("  large results measured " + (f"in compiled C ({native.cache_folder()})" if compiled else
                                         "in torch passes (no C compiler, or ASCEND_TUNE_NO_COMPILE=1)"))
    if args.dim is not None:
        configs = [dict(dim=args.dim, block=args.block)]
    else:
        configs = list(CONFIGS.values()) if args.config == "both" else [CONFIGS[args.config]]
    for config in configs:
        run(argparse.Namespace(**dict(args.__dict__, **config)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
