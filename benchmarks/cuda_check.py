"""The GPU check: the monitor on a CUDA device, each promise measured, in about a minute (skips without CUDA).

1. **zero syncs between log steps**: a run under ``torch.cuda.set_sync_debug_mode("error")`` with ``log_every``
   past the run's end, so any host-device sync of ours inside the loop raises; then a run at ``log_every=10``
   under ``"warn"`` that counts the syncs and names the steps they came in (only at and right after log steps);
2. **the lagged read-back**: the losses in metrics.jsonl (a non-blocking copy read one step late) equal the
   losses the loop kept on the device and read after the block;
3. **the fused-optimizer choice**: by default tuning.json reports what would run faster, with the gain timed on
   clones, and changes nothing (bitwise the bare run); ``tune=True`` swaps and trains as ``fused=True`` does;
4. **a profiler trace with CUDA activity**: kernels in the trace, and the advisor reports none of the monitor's
   read-backs as a host sync;
5. **a statistics dump** of one step on the device (mix level): every float tensor has its four statistics;
6. **the overhead ratio**: monitored steps/sec over the bare loop's, same process, interleaved repeats (the block's
   start and end, once a run, timed apart);
7. **config.json on the device**: autocast per device and the weights' statistics recorded (with no sync: check 1
   runs with the recording on), and a run with TF32 matmuls named by compare-config.

Deterministic algorithms are on (cuDNN's included), so two runs of the same loop are bitwise equal and "changes
nothing" can be checked bitwise. Prints one line per check and exits 1 when one fails.
Usage: python benchmarks/cuda_check.py [--steps 60]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS determinism, before CUDA starts

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from ascend_tune import TrainingMonitor  # noqa: E402
from ascend_tune.cli import main as cli  # noqa: E402
from ascend_tune.testing.models import synthetic_images  # noqa: E402


class SmallCNN(nn.Module):
    """Conv-BN-ReLU blocks and a mean pool: ops with deterministic CUDA kernels (no adaptive pooling)."""

    def __init__(self, width: int = 64, classes: int = 10):
        super().__init__()
        layers, cin = [], 3
        for cout, stride in ((width, 1), (width * 2, 2), (width * 2, 1), (width * 4, 2)):
            layers += [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean(dim=(2, 3)))


def make(seed: int = 0, batches: int = 60, batch_size: int = 64, **flags):
    torch.manual_seed(seed)
    model = SmallCNN().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **flags)
    data = synthetic_images(n=batches * batch_size, size=32, seed=seed)
    loader = DataLoader(data, batch_size=batch_size, pin_memory=True)
    return model, optimizer, loader


def loop(model, optimizer, loader, kept=None) -> None:
    for images, labels in loader:
        images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if kept is not None:
            kept.append(loss.detach().clone())  # stays on the device: no sync


def steps_of(log_dir: str) -> list:
    with open(os.path.join(log_dir, "metrics.jsonl"), encoding="utf-8") as fh:
        return [r for r in map(json.loads, fh) if "event" not in r]


def check_no_sync_inside_the_loop(out: str, steps: int) -> tuple:
    model, optimizer, loader = make(batches=steps)
    loop(model, optimizer, loader)  # warm-up: cuDNN autotuning and allocations sync, the monitor is not there yet
    torch.cuda.synchronize()
    try:
        with TrainingMonitor(model, optimizer, loader, log_dir=out, quiet=True, log_every=10 ** 6, tune=False):
            torch.cuda.set_sync_debug_mode("error")
            try:
                loop(model, optimizer, loader)
            finally:
                torch.cuda.set_sync_debug_mode("default")  # the block's end reads the losses back: allowed
    except RuntimeError as exc:
        return False, f"a sync inside the loop: {str(exc).splitlines()[0]}"
    return True, f"{steps} steps under set_sync_debug_mode('error'), no log step: no sync"


def check_syncs_only_at_log_steps(out: str, steps: int) -> tuple:
    model, optimizer, loader = make(batches=steps)
    loop(model, optimizer, loader)
    torch.cuda.synchronize()
    at: list = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with TrainingMonitor(model, optimizer, loader, log_dir=out, quiet=True, log_every=10, tune=False):
            torch.cuda.set_sync_debug_mode("warn")
            counted = len(seen)
            try:
                for step, (images, labels) in enumerate(loader):  # the batch event is this iteration's
                    images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
                    loss = F.cross_entropy(model(images), labels)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    at.extend(step for w in seen[counted:] if "synchroniz" in str(w.message))
                    counted = len(seen)
            finally:
                torch.cuda.set_sync_debug_mode("default")
    # a log line's window closes at step 10k+9; its read starts at the next batch (step 10k+10) and is picked up,
    # at the latest, at the batch after (10k+11)
    allowed = {s for s in range(10, steps) if s % 10 in (0, 1)}
    stray = sorted({s for s in at if s not in allowed})
    ok = not stray
    return ok, (f"log_every=10: {len(at)} syncs in {steps} steps, at steps {sorted(set(at))}"
                + ("" if ok else f"; between log steps at {stray}"))


def check_lagged_read_back(out: str, steps: int) -> tuple:
    model, optimizer, loader = make(batches=steps)
    kept: list = []
    with TrainingMonitor(model, optimizer, loader, log_dir=out, quiet=True, log_every=1, tune=False):
        loop(model, optimizer, loader, kept)
    logged = [r["loss"] for r in steps_of(out)]
    truth = torch.stack(kept).float().cpu().tolist()
    ok = logged == truth
    return ok, f"{len(logged)} logged losses {'equal' if ok else 'DIFFER from'} the device's own"


def check_fused_choice(out: str, steps: int) -> tuple:
    model, optimizer, loader = make(batches=steps)
    with TrainingMonitor(model, optimizer, loader, log_dir=os.path.join(out, "default"), quiet=True):
        flags = (optimizer.param_groups[0]["foreach"], optimizer.param_groups[0]["fused"])
        loop(model, optimizer, loader)
    with open(os.path.join(out, "default", "tuning.json"), encoding="utf-8") as fh:
        report = json.load(fh)["optimizer"]
    ref_model, ref_opt, ref_loader = make(batches=steps)
    loop(ref_model, ref_opt, ref_loader)
    same = all(torch.equal(a, b) for a, b in zip(model.parameters(), ref_model.parameters()))
    model, optimizer, loader = make(batches=steps)
    with TrainingMonitor(model, optimizer, loader, log_dir=os.path.join(out, "swap"), quiet=True, tune=True):
        swapped = optimizer.param_groups[0]["fused"]
        loop(model, optimizer, loader)
    # fused and foreach round differently and training amplifies it: the swap must train as fused=True does
    fused_model, fused_opt, fused_loader = make(batches=steps, fused=True)
    loop(fused_model, fused_opt, fused_loader)
    as_fused = all(torch.equal(a, b) for a, b in zip(model.parameters(), fused_model.parameters()))
    ok = report["action"] == "reported" and flags == (None, None) and same and swapped is True and as_fused
    return ok, (f"default: {report['action']} {report['would_run']} (gain {report['gain']}, measured "
                f"{report.get('measured_ms')}), flags untouched {flags == (None, None)}, numbers bitwise {same}; "
                f"tune=True: fused={swapped}, bitwise a fused=True run {as_fused}")


def check_profile_and_dump(out: str, steps: int) -> tuple:
    model, optimizer, loader = make(batches=max(steps, 12))
    profile = dict(skip_first=2, wait=1, warmup=1, active=2, repeat=1)
    precision = dict(task="statistics", level="mix", steps=[3])
    with TrainingMonitor(model, optimizer, loader, log_dir=out, quiet=True, tune=False, profile=profile,
                         precision=precision):
        loop(model, optimizer, loader)
    traces = glob.glob(os.path.join(out, "profile", "rank0", "*.pt.trace.json*"))
    kernels = 0
    if traces:
        import gzip

        opener = gzip.open if traces[0].endswith(".gz") else open
        with opener(traces[0], "rt", encoding="utf-8") as fh:
            kernels = sum(1 for e in json.load(fh).get("traceEvents", []) if e.get("cat") == "kernel")
    from ascend_tune.analysis.advisor.analyse import advise_traces

    syncs = [f for f in advise_traces(traces).findings if f.rule == "host-sync"] if traces else []
    with open(os.path.join(out, "dump", "step3", "rank0", "dump.json"), encoding="utf-8") as fh:
        data = json.load(fh)["data"]
    tensors = [t for entry in data.values() for t in _tensors(entry)]
    floats = [t for t in tensors if t["dtype"] in ("torch.float32", "torch.float16", "torch.bfloat16")]
    missing = [t for t in floats if any(t.get(k) is None for k in ("Max", "Min", "Mean", "Norm"))]
    ok = bool(traces) and kernels > 0 and not syncs and bool(floats) and not missing
    return ok, (f"trace {os.path.basename(traces[0]) if traces else 'MISSING'} with {kernels} CUDA kernels, "
                f"host syncs the advisor reports: {[f.title for f in syncs]}; dump step 3: {len(data)} entries, "
                f"{len(floats)} float tensors, {len(missing)} without statistics")


def check_overhead(out: str, steps: int, repeats: int = 3) -> tuple:
    """Steps/sec: the loop inside the block against the bare loop (best of ``repeats``); the block's start and end
    (once a run, not a step) are timed apart."""
    times: dict = {"bare": [], "monitor": [], "start_end": []}
    for rep in range(repeats):
        for mode in ("bare", "monitor"):
            model, optimizer, loader = make(batches=steps)
            loop(model, optimizer, loader)  # warm-up
            torch.cuda.synchronize()
            start = time.perf_counter()
            if mode == "bare":
                loop(model, optimizer, loader)
                torch.cuda.synchronize()
                times[mode].append(time.perf_counter() - start)
                continue
            with TrainingMonitor(model, optimizer, loader, log_dir=os.path.join(out, str(rep)), quiet=True,
                                 log_every=10, tune=False):
                inside = time.perf_counter()
                loop(model, optimizer, loader)
                torch.cuda.synchronize()
                done = time.perf_counter()
            times[mode].append(done - inside)
            times["start_end"].append((inside - start) + (time.perf_counter() - done))
    ratio = min(times["monitor"]) / min(times["bare"])
    per_step = min(times["bare"]) / steps * 1e3
    return ratio <= 1.05, (f"monitored / bare loop time {ratio:.3f}x (bare step {per_step:.2f} ms, best of "
                           f"{repeats}); the block's start and end {1e3 * min(times['start_end']):.1f} ms once a run")


def check_config(out: str, steps: int) -> tuple:
    """config.json on the device: autocast and the weights recorded with no sync (check 1 runs with it on), and a
    TF32 run named by compare-config."""
    def run(name: str, tf32: bool) -> str:
        model, optimizer, loader = make(batches=12)
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            with TrainingMonitor(model, optimizer, loader, log_dir=os.path.join(out, name), quiet=True, tune=False):
                for images, labels in loader:
                    images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = F.cross_entropy(model(images), labels)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before
        return os.path.join(out, name)

    base, tf32 = run("base", False), run("tf32", True)
    with open(os.path.join(base, "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = cli(["compare-config", base, tf32, "--json"])
    errors = [d["key"] for d in json.loads(printed.getvalue())["differences"] if d["severity"] == "error"]
    autocast = config["precision"]["autocast"]["cuda"]
    weights = len(config["weights"].get("per_parameter", {}))
    # allow_tf32 and float32_matmul_precision are one switch in torch: setting one sets the other
    ok = autocast == {"enabled": True, "dtype": "bfloat16"} and weights > 0 and code == 1 and set(errors) == {
        "precision.cuda_matmul_allow_tf32", "precision.float32_matmul_precision"}
    return ok, (f"autocast cuda {autocast}, {weights} parameters' statistics, first forwards "
                f"{len(config['data'].get('first_forwards', []))}; compare-config against allow_tf32: exit {code}, "
                f"errors {errors}")


def _tensors(value):
    if isinstance(value, dict):
        if value.get("type") == "torch.Tensor":
            return [value]
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, list):
        return [t for v in value for t in _tensors(v)]
    return []


CHECKS = {
    "no sync inside the loop": check_no_sync_inside_the_loop,
    "syncs only at log steps": check_syncs_only_at_log_steps,
    "lagged read-back": check_lagged_read_back,
    "fused-optimizer choice": check_fused_choice,
    "profile trace and dump": check_profile_and_dump,
    "overhead": check_overhead,
    "config.json": check_config,
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("cuda_check: skipped: no CUDA device here (torch.cuda.is_available() is False)")
        return 0
    print(f"cuda_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, {args.steps} steps per run")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for index, (name, check) in enumerate(CHECKS.items()):
            started = time.perf_counter()
            try:
                ok, detail = check(os.path.join(tmp, str(index)), args.steps)
            except Exception as exc:  # a check that crashes is a failed check, the others still run
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            failed += not ok
            print(f"  {'ok  ' if ok else 'FAIL'} {name}: {detail} ({time.perf_counter() - started:.1f} s)",
                  flush=True)
    print(f"cuda_check: {len(CHECKS) - failed}/{len(CHECKS)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
