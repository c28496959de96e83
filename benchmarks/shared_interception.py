"""Cost of several recording subscribers at once: one shared function mode (the recording layer's Interception)
against one mode per subscriber, stacked (what precision/ and the shape detector each pushed before issue #22).

Two measures, each in one process, modes interleaved over repeats, CPU time per step (best repeat's median):
- "pass-through": 1-3 subscribers that record nothing (``call_api`` runs the call) on a plain loop, subscribed
  directly through ``ascend_tune.recording.subscribe``: the interception's own cost per step, over a plain step;
- "features": ``precision=[statistics, replay]`` plus ``shapes=`` on every step through TrainingMonitor (the three
  subscribers of the demo target plus the detector), shared against stacked.
Model: the tests' tiny GPT (dim 32, 8 tokens: ~700 API calls a step of a few us each, where per-call costs rule) and
the small GPT of benchmarks/replay_overhead.py (dim 128, 64 tokens), AdamW, one thread.
Usage: python benchmarks/shared_interception.py [--steps 12] [--warmup 3] [--repeats 3] [--config tests|small|both]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

import torch

from ascend_tune import TrainingMonitor
from ascend_tune.recording import subscribe as recording
from ascend_tune.testing.models import TinyGPT, synthetic_tokens

CONFIGS = {"tests": dict(dim=32, block=8), "small": dict(dim=128, block=64)}


class PassThrough:
    """A subscriber that records nothing: what seeing a call costs by itself."""

    recording = True

    def call_api(self, func, api, args, kwargs, caller, run):  # noqa: ANN001, ANN201 - the Subscriber protocol
        return run(*args, **kwargs)


def make(config: dict) -> tuple:
    torch.manual_seed(0)
    model = TinyGPT(vocab=64, block=config["block"], dim=config["dim"], softmax_blocks=1, dropout=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = synthetic_tokens(n=8, block=config["block"], vocab=64).tensors
    return model, optimizer, x, y


def timed_steps(args: argparse.Namespace, config: dict, shared: bool, subscribers: int = 0,
                features: bool = False, log_dir: str = "") -> list:
    model, optimizer, x, y = make(config)
    recording.SHARED = shared
    times = []
    with contextlib.ExitStack() as undo:
        for _ in range(subscribers):
            recording.subscribe(undo, PassThrough())
        if features:
            pair = [dict(task="statistics", steps=[], backend="builtin"), dict(task="replay", steps=[])]
            undo.enter_context(TrainingMonitor(model, optimizer, log_dir=log_dir, quiet=True, warmup_steps=0,
                                               tune=False, precision=pair, shapes=dict(steps=args.steps)))
        for _ in range(args.steps):
            start = time.process_time()
            loss = model(x, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            times.append(time.process_time() - start)
    recording.SHARED = True
    return times


def run(args: argparse.Namespace, config: dict) -> None:
    cases = {"plain": dict()}
    for n in (1, 2, 3):
        for shared in (True, False):
            if n > 1 or shared:
                cases[f"{n} pass-through, {'shared' if shared else 'stacked'}"] = dict(subscribers=n, shared=shared)
    for shared in (True, False):
        cases[f"dump + replay + shapes, {'shared' if shared else 'stacked'}"] = dict(features=True, shared=shared)
    best = {name: float("inf") for name in cases}
    with tempfile.TemporaryDirectory() as tmp:
        timed_steps(args, config, True)  # warm up
        for rep in range(args.repeats):
            for name in (cases if rep % 2 == 0 else list(reversed(cases))):
                case = {"shared": True, **cases[name]}
                times = timed_steps(args, config, log_dir=os.path.join(tmp, f"{len(best)}-{rep}-{hash(name)}"),
                                    **case)
                best[name] = min(best[name], statistics.median(times[args.warmup:]))
    plain = best["plain"]
    print(f"  TinyGPT dim {config['dim']}, block {config['block']}: plain step {plain * 1e3:.2f} ms")
    for name in cases:
        if name != "plain":
            print(f"    {name:<34} {best[name] / plain:6.2f}x plain   (+{(best[name] - plain) * 1e3:.2f} ms)")
    for what in ("2 pass-through", "3 pass-through", "dump + replay + shapes"):
        shared, stacked = best[f"{what}, shared"], best[f"{what}, stacked"]
        print(f"    {what}: stacked / shared = {stacked / shared:.2f}x the step; the interception's extra over "
              f"plain, stacked / shared = {(stacked - plain) / max(shared - plain, 1e-9):.2f}x")


def main(argv: list = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--config", choices=(*CONFIGS, "both"), default="both")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"shared_interception: AdamW, cpu, {args.steps} steps ({args.warmup} warm-up) x {args.repeats} repeats, "
          "1 thread; best median step (CPU time) as a ratio to the plain step")
    for name in (CONFIGS if args.config == "both" else [args.config]):
        run(args, CONFIGS[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
