"""The instrumented demo: a MobileNetV1-style CNN on synthetic images, AdamW, under TrainingMonitor, run twice, a
float32 reference and a bfloat16 target, and one alignment page for the pair."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.utils.data import DataLoader

from ..analysis.report.alignment import verdict_lines
from ..analysis.report.build import build_report
from ..analysis.report.render import write_report
from ..formats import run_dir as run_files
from ..formats.run_dir import RunDir
from ..runtime.monitor import TrainingMonitor
from ..testing.models import MobileNetV1, synthetic_images

# Five traced steps after the first few (steps 7-11), so the demo shows a trace and compare-trace has enough steps
# for a noise well below the bfloat16 target's gap (3 steps left it at the size of the gap), in seconds. Both runs
# are profiled alike; the target's traces are also advised on.
DEMO_PROFILE = {"skip_first": 5, "wait": 1, "warmup": 1, "active": 5, "repeat": 1, "advise": True}


# The precision dump of the first step in both runs: the alignment page compares them op by op.
DEMO_DUMP = {"task": "statistics", "level": "mix", "steps": [0]}
# At most this many synthetic images (12 kB each): one pass at the default steps and batch size.
DEMO_IMAGES = 3200
# The target also replays that step: each of its torch calls recomputed on the CPU in float64, the wrong ones named.
DEMO_REPLAY = {"task": "replay", "steps": [0]}
# AdamW's step size: the bfloat16 target's loss stays within 5% of the reference's, as a correct port's does (at
# SGD's 0.05 with momentum the two runs' trajectories part within 50 steps: 64% apart, every op still right)
DEMO_LR = 5e-4


@dataclass(frozen=True)
class DemoResult:
    """What the demo wrote (paths by name) and its verdict (loss gap, first diverging op, speed ratio)."""

    written: dict
    verdict: tuple
    page: str


def run_demo(
    out: str = "exp/demo",
    steps: int = 100,
    batch_size: int = 32,
    seed: int = 0,
    quiet: bool = False,
    profile: Any = DEMO_PROFILE,
) -> DemoResult:
    """The alignment story on one machine: a float32 reference run, then a target run that computes in bfloat16
    (autocast on the CPU, as a lower-precision device would), both with the two lines added and step 0 dumped, the
    target also replaying step 0 on the CPU in float64;
    then one alignment page for the pair (``<out>/alignment.html`` and ``.md``).

    Parameters:
        out: the demo's folder: ``reference/`` and ``target/`` run folders and the page.
        steps: optimizer steps of each run.
        batch_size, seed: the data; both runs see the same batches from the same initial weights.
        quiet: no log lines on the console.
        profile: both runs' ``profile=`` option (default: steps 7 to 11 traced, the target's advised on; None /
            False: no trace); the page's "Where the time goes" compares the two runs' traces.
    """
    reference = os.path.join(out, "reference")
    target = os.path.join(out, "target")
    reference_profile = {**profile, "advise": False} if isinstance(profile, dict) else profile
    if profile:
        _warm_profiler()  # else the reference, profiled first in the process, pays for the profiler's start
    _train(reference, steps, batch_size, seed, quiet, profile=reference_profile or False, dtype=None,
           precision=DEMO_DUMP)
    _train(target, steps, batch_size, seed, quiet, profile=profile or False, dtype=torch.bfloat16,
           precision=[DEMO_DUMP, DEMO_REPLAY])

    written = {}
    for label, log_dir in (("reference", reference), ("target", target)):
        run = RunDir(log_dir)
        names = (run_files.LOG_TXT, run_files.METRICS_JSONL, run_files.SUMMARY_JSON, run_files.TUNING_JSON,
                 run_files.DUMP_DIR, run_files.PROFILE_DIR)
        written.update({f"{label} {name}": run.path(name) for name in names if os.path.exists(run.path(name))})
    advice = RunDir(target).path(run_files.PROFILE_DIR, run_files.rank_dir_name(0), run_files.ADVICE_HTML)
    if os.path.exists(advice):
        written[f"target {run_files.ADVICE_HTML}"] = advice
    # the demo ends as a porting session would: one page that says whether the target is as accurate and as fast
    report = build_report(target, baseline=reference)
    page = os.path.join(out, "alignment.html")
    for path in write_report(report, page):
        written[os.path.basename(path)] = path
    return DemoResult(written, verdict_lines(report.comparison, report.alignment), page)


def _warm_profiler() -> None:
    """One short profiled block before the runs: the first torch.profiler session of a process starts its tracers
    (seconds of one-off cost at the first traced steps), which would make the reference's traced steps, profiled
    first, slower than its steady steps and than the target's."""
    with torch.profiler.profile(with_stack=True, with_modules=True, record_shapes=True):
        torch.nn.functional.relu(torch.ones(8)).sum()


def _train(log_dir: str, steps: int, batch_size: int, seed: int, quiet: bool, profile: Any,
           dtype: Optional[torch.dtype], precision: Any) -> None:
    """One training run of the demo CNN; ``dtype``: compute the forward in it (CPU autocast), else float32."""
    torch.manual_seed(seed)
    model = MobileNetV1(num_classes=10, width=0.25)
    optimizer = torch.optim.AdamW(model.parameters(), lr=DEMO_LR)
    # noisy enough that the loss stays well above 0 (a memorised set drives it to ~0, where any relative gap is
    # huge), and about one pass over the data in the default 100 steps
    dataset = synthetic_images(n=min(max(batch_size * steps, 256), DEMO_IMAGES), noise=1.0, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(seed))
    criterion = torch.nn.CrossEntropyLoss()

    # The user's loop, unchanged; only the `with` line is added.
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=quiet, profile=profile,
                         precision=precision):
        step = 0
        while step < steps:
            for images, labels in loader:
                with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                    loss = criterion(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                if step >= steps:
                    break
