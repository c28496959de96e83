"""The instrumented demo: a MobileNetV1-style CNN on synthetic images, SGD + momentum, under TrainingMonitor."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader

from .analysis.report.build import build_report
from .analysis.report.render import write_report
from .formats import run_dir as run_files
from .formats.run_dir import RunDir
from .monitor import TrainingMonitor
from .testing.models import MobileNetV1, synthetic_images

# Two traced steps after the first few, so the demo shows a trace and still runs in seconds.
DEMO_PROFILE = {"skip_first": 5, "wait": 1, "warmup": 1, "active": 2, "repeat": 1, "advise": True}


def run_demo(
    out: str = "exp/demo",
    steps: int = 100,
    batch_size: int = 32,
    seed: int = 0,
    quiet: bool = False,
    profile: Any = DEMO_PROFILE,
) -> dict:
    """Train for ``steps`` optimizer steps with the two lines added; returns the paths written, by name.

    ``profile``: the monitor's ``profile=`` option (default: steps 7 and 8 traced and advised on; None / False:
    no trace). The run ends with its report (``report.html``, ``report.md``), written over an earlier demo's.
    """
    torch.manual_seed(seed)
    model = MobileNetV1(num_classes=10, width=0.25)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dataset = synthetic_images(n=max(batch_size * 8, 256), seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True)
    criterion = torch.nn.CrossEntropyLoss()
    log_dir = os.path.join(out, "train")

    # The user's loop, unchanged; only the `with` line is added.
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=quiet, profile=profile or False):
        step = 0
        while step < steps:
            for images, labels in loader:
                loss = criterion(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                if step >= steps:
                    break

    run = RunDir(log_dir)
    names = (run_files.LOG_TXT, run_files.METRICS_JSONL, run_files.SUMMARY_JSON, run_files.TUNING_JSON,
             run_files.PROFILE_DIR)
    written = {name: run.path(name) for name in names if os.path.exists(run.path(name))}
    advice = run.path(run_files.PROFILE_DIR, run_files.rank_dir_name(0), run_files.ADVICE_HTML)
    if os.path.exists(advice):
        written[run_files.ADVICE_HTML] = advice
    # the demo ends as a user's session would: one page with the curve, the throughput and the advice
    report = build_report(log_dir)
    written["report.html"], written["report.md"] = write_report(report, run.path(run_files.REPORT_HTML))
    return written
