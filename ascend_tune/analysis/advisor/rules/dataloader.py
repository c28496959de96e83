"""Rule ``slow-dataloader``: the DataLoader's ``__next__`` takes a large part of every step."""

from __future__ import annotations

from ...traces.model import Trace
from ...traces.vocabulary import is_dataloader
from ..findings import Finding, median, step_label, step_windows

DATALOADER_MS = 10.0  # msprof-analyze's dataloader_duration_threshold
DATALOADER_SHARE = 0.10
DATALOADER_FLOOR_MS = 1.0  # below this a loader is not worth a finding, whatever its share of a tiny step


def slow_dataloader(trace: Trace) -> list:
    """``enumerate(DataLoader)#...__next__`` over 10 ms, or over 10% of the step, per step."""
    records = []
    names = set()
    for step, window in step_windows(trace):
        total = 0.0
        for index in window:
            event = trace.events[index]
            if event.role == "host" and is_dataloader(event.name):
                if not any(is_dataloader(trace.events[p].name) for p in trace.host_ancestors(index)):
                    total += event.dur
                    names.add(event.name)
        records.append((step, total))
    loader_ms = median(r[1] for r in records) / 1e3
    step_ms = median(r[0].dur for r in records) / 1e3
    if not names or loader_ms < DATALOADER_FLOOR_MS:
        return []
    if loader_ms < DATALOADER_MS and loader_ms < DATALOADER_SHARE * step_ms:
        return []
    step, worst = max(records, key=lambda r: r[1])
    single = any("SingleProcess" in name for name in names)
    return [Finding(
        rule="slow-dataloader",
        severity="warning",
        title=f"Slow DataLoader: {loader_ms:.1f} ms per step",
        evidence=(
            f"{sorted(names)[0]} took {loader_ms:.1f} ms per step (median over {len(records)} steps), "
            f"{loader_ms / step_ms:.0%} of a {step_ms:.1f} ms step; worst {worst / 1e3:.1f} ms in "
            f"{step_label(step.number)}. Threshold: {DATALOADER_MS:.0f} ms or {DATALOADER_SHARE:.0%} of the step."
            + (" The loader runs in the training process (num_workers=0)." if single else "")
        ),
        fix=(
            "loader = DataLoader(dataset, batch_size=batch_size, shuffle=True,\n"
            "                    num_workers=4,            # load batches in parallel worker processes\n"
            "                    pin_memory=True,          # faster, asynchronous host-to-device copies\n"
            "                    persistent_workers=True,  # no worker start-up at every epoch\n"
            "                    prefetch_factor=4)        # batches each worker keeps ready\n"
            "# slow __getitem__ / collate_fn (decoding, augmentation)? move it offline or into the workers"
        ),
        trace=trace.name,
        step=step.number,
    )]
